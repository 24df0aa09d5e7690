"""aten_gemm: ATen's matmul plus a kernelgen pointwise epilogue, a candidate beside the generated GEMM.

Against eager on matmul/addmm/linear+gelu/bmm in float32 and bfloat16, in ``implementations_for`` first (so it
is the untuned default for float16/bfloat16 on C++ and on GPUs), tuned and declared beside the generated GEMM, in a torch.compile'd MLP, on Triton
under the interpreter, and with a derived implementation hash."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen import code_hash  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.check.compare import tolerance  # noqa: E402
from kernelgen.db import open_db  # noqa: E402
from kernelgen.ir.values import Config, Measurement, Status, TimeStats  # noqa: E402
from kernelgen.runtime.implementations import implementations_for  # noqa: E402
from kernelgen.templates.vendor_gemm import ADDMM, NAME, VendorGemmImplementation  # noqa: E402

CASES = {
    "matmul": (lambda a, b: a @ b, [(16, 32), (32, 24)]),
    "addmm": (lambda bias, x, w: torch.addmm(bias, x, w), [(24,), (16, 32), (32, 24)]),
    "linear_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [(4, 16, 32), (24, 32), (24,)]),
    "bmm_scaled": (lambda a, b: torch.bmm(a, b) * 0.5 + 1.0, [(3, 16, 32), (3, 32, 24)]),
}


def _inputs(shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


def _vendor(fn, xs, backend="cpp"):
    impls = implementations_for(kernelgen.trace(fn, *xs), backend)
    assert sorted(i.name for i in impls[:2]) == sorted([NAME, "gemm"])
    return next(i for i in impls if i.name == NAME)


def _run(impl, config, target, xs, like):
    out = torch.empty_like(like)
    impl.build(config, target)(*xs, out)
    return out


def _configs(impl, target):
    """The default, and the same with the bias moved out of addmm when the space offers that."""
    default = impl.default_config(target)
    return [default] + ([Config({**default, ADDMM: False})] if ADDMM in default else [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_eager(case, dtype):
    fn, shapes = CASES[case]
    xs = _inputs(shapes, dtype)
    impl = _vendor(fn, xs)
    target = get_backend("cpp").target()
    want = fn(*xs)
    rtol, atol = tolerance(str(dtype).removeprefix("torch."))
    for config in _configs(impl, target):
        got = _run(impl, config, target, xs, want)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{dict(config)}: {m}")


def test_bias_in_addmm_rounds_as_eager_linear_and_the_epilogue_as_eager_matmul_then_add():
    # bfloat16: eager's linear adds the bias in addmm's accumulator (one rounding); eager's `x @ w + b` rounds
    # the product to bfloat16 first. The two configs reproduce each of them bit for bit.
    x, w, b = _inputs([(16, 64), (64, 32), (32,)], torch.bfloat16, seed=3)
    impl = _vendor(lambda x, w, b: x @ w + b, [x, w, b])
    target = get_backend("cpp").target()
    fused, split = _configs(impl, target)
    assert fused[ADDMM] is True and split[ADDMM] is False
    assert torch.equal(_run(impl, fused, target, [x, w, b], x @ w), torch.addmm(b, x, w))
    assert torch.equal(_run(impl, split, target, [x, w, b], x @ w), x @ w + b)


def test_only_matmul_like_graphs_get_it_and_pure_matmuls_have_no_epilogue_to_tune():
    x = torch.randn(8, 16)
    assert NAME not in [i.name for i in implementations_for(kernelgen.trace(lambda x: F.gelu(x) + 1, x), "cpp")]
    impl = _vendor(lambda a, b: a @ b, [x, torch.randn(16, 4)])
    space = impl.space(get_backend("cpp").target())
    assert space.names == () and list(space) == [Config({})]
    bias = _vendor(lambda b, x, w: torch.addmm(b, x, w), [torch.randn(4), x, torch.randn(16, 4)])
    # the bias in addmm leaves no epilogue: one config for it, not one per (unused) epilogue block size
    assert sum(1 for c in bias.space(get_backend("cpp").target()) if c[ADDMM]) == 1


@pytest.mark.parametrize(("dtype", "untuned"), [(torch.bfloat16, NAME), (torch.float32, "gemm")], ids=str)
def test_untuned_dispatch_runs_the_vendor_path_for_low_precision_and_the_generated_gemm_for_float32(tmp_path, dtype,
                                                                                                   untuned):
    fn = CASES["linear_gelu"][0]
    xs = _inputs(CASES["linear_gelu"][1], dtype)
    compiled = kernelgen.compile(fn, backend="cpp", db=f"sqlite:///{tmp_path / 'empty.sqlite'}")
    rtol, atol = tolerance(str(dtype).removeprefix("torch."))
    torch.testing.assert_close(compiled(*xs), fn(*xs), rtol=rtol, atol=atol)
    explained = compiled.explain(*xs)
    assert explained["implementation"] == untuned and explained["source"] == "default"
    if untuned == NAME:
        assert explained["config"][ADDMM] is True


class _FakeTimes:
    """``measure(impl, config)``: aten_gemm takes 1 ms; the graph's own ATen ops ``aten`` ms; the generated GEMM
    5 ms at its default and ``gemm_best`` ms elsewhere (so tuning finds it faster, or not)."""

    def __init__(self, gemm_best: float, aten: float = 7.0) -> None:
        self.gemm_best, self.aten = gemm_best, aten
        self.measured: set[str] = set()

    def __call__(self, impl, config):
        self.measured.add(impl.name)
        if impl.name == "aten":
            t = self.aten * 1e-3
        elif impl.name == NAME:
            t = 1e-3
        else:
            t = 5e-3 if config == impl.default_config(get_backend("cpp").target()) else self.gemm_best * 1e-3
        return Measurement(config, Status.OK, TimeStats(median=t, min=t, spread=0.0, repeats=5), threads=1)


@pytest.mark.parametrize(("gemm_best", "aten", "winner"), [(0.4, 7.0, "gemm"), (3.0, 7.0, NAME), (3.0, 0.5, "aten")])
def test_tuned_beside_the_generated_gemm_and_dispatch_runs_the_verdict(tmp_path, gemm_best, aten, winner):
    from kernelgen.tune.tuner import is_confirmation, tune_graph
    from kernelgen.ir.values import Evidence

    fn = CASES["addmm"][0]
    xs = _inputs(CASES["addmm"][1], torch.float32)
    graph = kernelgen.trace(fn, *xs)
    url = f"sqlite:///{tmp_path / 'tune.sqlite'}"
    measure = _FakeTimes(gemm_best, aten)
    with open_db(url) as db:
        result = tune_graph(graph, db=db, measure=measure, seed=1, trials=4)
        assert measure.measured == {NAME, "gemm", "aten"}  # the graph's own ATen ops compete too
        showdown = {r.implementation for r in result.trials
                    if is_confirmation(r) and "implementations" in r.measurement.message}
        assert showdown == {NAME, "gemm", "aten"}  # every winner re-measured side by side
        assert result.best.implementation == winner and result.best.evidence is Evidence.DECLARED
        compiled = kernelgen.compile(fn, backend="cpp", db=db)
        torch.testing.assert_close(compiled(*xs), fn(*xs))
        explained = compiled.explain(*xs)
        assert explained["implementation"] == winner and explained["source"] == "db"


def test_the_hash_follows_the_epilogue_renderer_and_torch(monkeypatch):
    impl = _vendor(lambda x, w, b: F.gelu(F.linear(x, w, b)), _inputs([(4, 8), (16, 8), (16,)], torch.float32))
    code_hash.forget()
    before = impl.source_hash()
    real = code_hash._read_source
    monkeypatch.setattr(code_hash, "_read_source",
                        lambda name: (real(name) or "") + "\n# edited\n" if name == "kernelgen.templates.pointwise_cpp"
                        else real(name))
    code_hash.forget()
    assert impl.source_hash() != before
    monkeypatch.setattr(code_hash, "_read_source", real)
    code_hash.forget()
    assert impl.source_hash() == before
    monkeypatch.setattr(torch, "__version__", "0.0.0+imaginary")
    assert impl.source_hash() != before
    code_hash.forget()


class _MLP(nn.Module):
    def __init__(self, d: int = 16, h: int = 32) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def test_a_compiled_bf16_mlp_runs_its_matmuls_on_the_vendor_path_untuned(tmp_path):
    from kernelgen.frontend import dynamo_backend
    from kernelgen.frontend.region_op import _REGIONS

    dynamo_backend.register()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, x = _MLP().eval().to(torch.bfloat16), torch.randn(2, 8, 16, dtype=torch.bfloat16)
    try:
        with dynamo_backend.collect() as graphs, torch.no_grad():
            got = torch.compile(model, backend="kernelgen",
                                options={"db": f"sqlite:///{tmp_path / 'empty.sqlite'}"})(x)
            want = model(x)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        kernels = [k for k in _REGIONS.values() if any(k.counters is g.runs for g in graphs)]
        ran = {k.impl for k in kernels if k.template == "gemm"}
        assert ran == {NAME}, {k.template: k.impl for k in kernels}
    finally:
        torch._dynamo.reset()


def test_triton_epilogue_under_the_interpreter():
    backend = get_backend("triton")
    if not backend.is_available():
        pytest.skip(backend.unavailable_reason())
    if backend.has_gpu():
        pytest.skip("Triton runs on the GPU here; tests/test_dynamic_triton.py covers the epilogue there")
    fn = CASES["linear_gelu"][0]
    for dtype in (torch.float32, torch.bfloat16):
        xs = _inputs([(2, 4, 8), (16, 8), (16,)], dtype)
        impl = _vendor(fn, xs, backend="triton")
        assert isinstance(impl, VendorGemmImplementation)
        target = backend.target()
        want = fn(*xs)
        rtol, atol = tolerance(str(dtype).removeprefix("torch."))
        for config in _configs(impl, target):
            got = _run(impl, config, target, xs, want)
            assert got.device == xs[0].device
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def test_a_pure_matmul_with_nothing_to_tune_still_competes(tmp_path):
    from kernelgen.tune.tuner import tune_graph

    graph = kernelgen.trace(lambda a, b: a @ b, torch.randn(16, 32), torch.randn(32, 24))
    with open_db(f"sqlite:///{tmp_path / 'tune.sqlite'}") as db:
        result = tune_graph(graph, db=db, measure=_FakeTimes(gemm_best=3.0), seed=1, trials=4)
    assert result.stop_reasons[NAME] == "exhausted"  # its one config measured, the search ends
    assert result.best.implementation == NAME and result.best.config == Config({})
