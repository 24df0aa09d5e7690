"""The C++ row-reduction template against eager PyTorch and the IR reference: softmax-like chains, norms,
row outputs, per-row inputs, one row, very wide rows, half precision, layouts and every tunable path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from typing import Any

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap
from kernelgen.templates import match, reduction_cpp

TOL = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def build(fn: Any, *inputs: Any, template: str, **config: Any):
    """(graph, problem, kernel) for fn on inputs, with the default config overridden by ``config``."""
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None, f"no template matched\n{graph}"
    tpl, problem = found
    assert tpl.name == template
    target = Target.current("cpp")
    cfg = Config({**tpl.default_config(problem, target).to_json(), **config})
    kernel = get_backend("cpp").compile(tpl.render(problem, cfg, target))
    return graph, problem, kernel


def check(fn: Any, *inputs: Any, template: str, **config: Any) -> list[torch.Tensor]:
    """Run the kernel and compare with both the IR reference and the original torch function."""
    graph, _, kernel = build(fn, *inputs, template=template, **config)
    outs = [torch.full(s.shape, float("nan")).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    reference = evaluate(graph, list(inputs))
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, reference, eager):
        tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
        torch.testing.assert_close(got, ref, **tol)
        torch.testing.assert_close(got, want.reshape(got.shape), **tol)
    return outs

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def softmax(x):
    return torch.softmax(x, -1)


def log_softmax(x):
    return torch.log_softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def logsumexp(x):
    return torch.logsumexp(x, -1)


@pytest.mark.parametrize("config", [{}, {"online": True, "cache_row": False, "chunk": 256}, {"cache_row": True},
                                    {"online": True, "cache_row": False, "cache_row": False, "schedule": "static", "rows_per_task": 1}])
def test_softmax_every_path(config):
    x = torch.randn(37, 301, generator=_gen()) * 4
    check(softmax, x, template="reduction", **config)


@pytest.mark.parametrize("fn", [log_softmax, logsumexp])
def test_log_softmax_and_logsumexp(fn):
    x = torch.randn(3, 5, 129, generator=_gen(1)) * 3  # two leading dims
    check(fn, x, template="reduction", online=True, cache_row=False, chunk=256)


def test_layer_norm_with_weight_and_bias_odd_width():
    g = _gen(2)
    x, w, b = torch.randn(19, 77, generator=g) * 2 + 1, torch.randn(77, generator=g), torch.randn(77, generator=g)
    check(layer_norm, x, w, b, template="reduction")
    check(layer_norm, x, w, b, template="reduction", cache_row=True)


def test_rms_norm_large_enough_for_threads():
    g = _gen(3)
    x, w = torch.randn(200, 333, generator=g), torch.randn(333, generator=g)
    check(rms_norm, x, w, template="reduction")


def test_row_outputs_keepdim_and_not_with_per_row_input():
    g = _gen(4)
    x, s = torch.randn(6, 50, generator=g), torch.randn(6, 1, generator=g)

    def stats(x, s):
        y = x * s
        return y.mean(-1), y.var(-1, keepdim=True), y.amax(-1), y.amin(-1, keepdim=True)

    check(stats, x, s, template="reduction")


def test_one_row_and_a_very_wide_row():
    g = _gen(5)
    check(softmax, torch.randn(1, 7, generator=g), template="reduction")
    check(softmax, torch.randn(1, 100003, generator=g) * 5, template="reduction")
    check(softmax, torch.randn(1, 100003, generator=g) * 5, template="reduction", online=True, cache_row=False, chunk=4096,
          split=False)  # online fusion runs its chunks over a whole row: one thread's


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    g = _gen(6)
    x = (torch.randn(9, 130, generator=g) * 3).to(dtype)
    w, b = torch.randn(130, generator=g).to(dtype), torch.randn(130, generator=g).to(dtype)
    assert check(softmax, x, template="reduction", cache_row=True)[0].dtype == dtype
    check(layer_norm, x, w, b, template="reduction")


def test_transposed_input_and_float64():
    g = _gen(7)
    check(softmax, torch.randn(65, 24, generator=g).t(), template="reduction")
    check(log_softmax, torch.randn(8, 40, generator=g, dtype=torch.float64), template="reduction", online=True, cache_row=False)


def test_softmax_plus_its_row_statistic_in_one_kernel():
    x = torch.randn(10, 99, generator=_gen(8))

    def both(x):
        return torch.softmax(x, -1), torch.logsumexp(x, -1)

    check(both, x, template="reduction", online=True, cache_row=False, chunk=256)


def test_online_fusion_is_only_offered_for_softmax_like_chains():
    target = Target.current("cpp")
    x = torch.randn(4, 32)
    for fn, offered in ((softmax, True), (logsumexp, True), (rms_norm, False)):
        args = (x, torch.randn(32)) if fn is rms_norm else (x,)
        _, problem = match(kernelgen.trace(fn, *args))
        assert (True in reduction_cpp.space(problem, target).param("online").choices) == offered
        assert bool(reduction_cpp.online_pairs(problem)) == offered


def test_malformed_config_and_row_cache_limit():
    x = torch.randn(4, 100000)
    _, problem = match(kernelgen.trace(softmax, x))
    target = Target.current("cpp")
    small = Target(**{**target.__dict__, "caches": FrozenMap({"l1d": 32768, "l2": 262144, "l3": 0})})
    space = reduction_cpp.space(problem, small)
    default = space.default().to_json()
    assert not space.is_valid(Config({**default, "cache_row": True}))  # 400 KB row > L2 / 2
    with pytest.raises(ValueError):
        reduction_cpp.render(problem, Config({**default, "cache_row": True}), small)
    with pytest.raises(ValueError):
        reduction_cpp.render(problem, Config({**default, "rows_per_task": 3}), target)
    with pytest.raises(ValueError):
        reduction_cpp.render(problem, Config({"rows_per_task": 1}), target)


@pytest.mark.parametrize("fn", [softmax, log_softmax])
@pytest.mark.parametrize("shape", [(5, 3, 700), (1, 1000), (9, 4096)])
def test_prefetching_and_in_place_row_cache(fn, shape):
    """Rows not a multiple of the prefetch block, 3-d leading dims and one row, both passes prefetching."""
    x = torch.randn(*shape, generator=_gen()) * 3
    graph, problem, kernel = build(fn, x, template="reduction", cache_row=True, online=False, prefetch=True)
    assert ("__builtin_prefetch" in kernel.source.text) == (problem.rows > 1)  # one row has no next row
    assert "aligned_alloc" not in kernel.source.text  # the cached exp lives in the output row
    check(fn, x, template="reduction", cache_row=True, online=False, prefetch=True)
    check(fn, x, template="reduction", online=True, cache_row=False, chunk=256, prefetch=True)


def x_times_softmax(x):
    return x * torch.softmax(x, -1)


@pytest.mark.parametrize("fn", [softmax, log_softmax, x_times_softmax])
def test_out_aliasing_the_input_still_reads_each_element_before_overwriting_it(fn):
    x = torch.randn(16, 3000, generator=_gen(3)) * 3
    want = fn(x)
    _, _, kernel = build(fn, x, template="reduction", cache_row=True, online=False, prefetch=True)
    # the output pass of x * softmax(x) reads x again: its exp must not be kept in the output row
    assert ("aligned_alloc" in kernel.source.text) == (fn is x_times_softmax)
    kernel(x, x)
    torch.testing.assert_close(x, want, **TOL[torch.float32])


def test_half_outputs_keep_a_separate_float_row_cache():
    x = (torch.randn(6, 2500, generator=_gen(4)) * 3).to(torch.float16)
    _, _, kernel = build(softmax, x, template="reduction", cache_row=True, online=False)
    assert "aligned_alloc" in kernel.source.text  # float values cannot live in a float16 output row
    check(softmax, x, template="reduction", cache_row=True, online=False)


def test_default_prefetches_long_rows_only():
    target = Target.current("cpp")
    for shape, want in (((64, 4096), True), ((64, 64), False), ((4096,), False)):
        problem = match(kernelgen.trace(softmax, torch.randn(*shape)))[1]
        assert reduction_cpp.space(problem, target).default()["prefetch"] is want, shape


def test_a_sum_beside_a_float_max_in_a_pass_that_stores_a_row_cache():
    """The pass stores exp(x) for the output pass, so its sum takes no partial lanes while the max does: the
    sum must still fold the elements of the laned loop (it lost them, 100% mismatch, before issue 16)."""
    def fn(x):
        e = torch.exp(x)
        return e.amax(-1, keepdim=True), e / e.sum(-1, keepdim=True)

    check(fn, torch.randn(4, 300, generator=_gen()), template="reduction", cache_row=True)
