"""aten_conv: ATen's (or oneDNN's) convolution plus a kernelgen pointwise epilogue, the convolution template's only
implementation (issue 33 item 3).

The template's match (one convolution of inputs, a pointwise epilogue, nothing else); every config choice (ATen's
call, oneDNN's, its fused post-ops, the packed weight) against eager on 1-d/2-d/3-d, strided, padded, dilated and
grouped convolutions; the packed weight offered only for a constant weight and repacked after an in-place update
(eager's new answer, never the stale one); ``KERNELGEN_PACK_WEIGHTS=0``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.ir.graph import Graph, Node  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.ir.values import Config  # noqa: E402
from kernelgen.runtime.implementations import candidates_for  # noqa: E402
from kernelgen.templates import match  # noqa: E402
from kernelgen.templates.packed_weights import PackedWeight  # noqa: E402
from kernelgen.templates.vendor_conv import CALL, NAME, PACK, PACK_ENV, POST, channels_last  # noqa: E402

TARGET = Target.current("cpp")
ONEDNN = torch.backends.mkldnn.is_available()


def _inputs(shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen) for s in shapes]


def _constant(graph: Graph, index: int) -> Graph:
    """``graph`` with input ``index`` marked constant, as the backend marks an inference graph's parameters."""
    nodes = tuple(Node(n.op, n.inputs, tuple(sorted((*n.attrs, ("constant", True)))), n.spec)
                  if n.op == "input" and n.attr("index") == index else n for n in graph.nodes)
    return Graph(nodes, graph.outputs, graph.dynamic)


def _vendor(graph):
    impls = candidates_for(graph, "cpp")
    assert [i.name for i in impls] == [NAME, "aten"], impls  # no generated convolution; ATen's ops compete
    return impls[0]


def _choices(impl) -> list[Config]:
    """One config per distinct (call, post-op, packing) choice of the space: the epilogue at its default."""
    seen, found = set(), []
    for cfg in impl.space(TARGET):
        key = (cfg.get(CALL), cfg.get(POST), cfg.get(PACK))
        if key not in seen:
            seen.add(key)
            found.append(cfg)
    return found


def _run(impl, config, xs, like):
    out = torch.empty_like(like)
    impl.build(config, TARGET)(*xs, out)
    return out


# (function, input shapes): conv + batch-norm-like scale/shift + ReLU, a residual add then ReLU, no epilogue
CASES = {
    "2d_bn_relu": (lambda x, w, b, s, t: F.relu(F.conv2d(x, w, b, padding=1) * s + t),
                   [(2, 8, 9, 9), (16, 8, 3, 3), (16,), (16, 1, 1), (16, 1, 1)]),
    "2d_stride_groups_dilation": (lambda x, w, r: F.relu(F.conv2d(x, w, None, stride=2, padding=2, dilation=2,
                                                                  groups=2) + r),
                                  [(2, 8, 11, 11), (16, 4, 3, 3), (2, 16, 6, 6)]),
    "2d_residual_then_more": (lambda x, w, b, r: F.relu(F.conv2d(x, w, b, padding=1) + r) * 0.5,
                              [(2, 8, 7, 7), (8, 8, 3, 3), (8,), (2, 8, 7, 7)]),
    "2d_alone": (lambda x, w, b: F.conv2d(x, w, b, stride=2), [(2, 3, 10, 10), (6, 3, 3, 3), (6,)]),
    "1d_relu": (lambda x, w, b: F.relu(F.conv1d(x, w, b, padding=1)), [(2, 4, 12), (6, 4, 3), (6,)]),
    "3d_relu": (lambda x, w: F.relu(F.conv3d(x, w, None, padding=1)), [(1, 4, 5, 6, 5), (6, 4, 3, 3, 3)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_choice_matches_eager(case):
    fn, shapes = CASES[case]
    xs = _inputs(shapes)
    graph = _constant(kernelgen.trace(fn, *xs), 1)  # the weight is constant: packing is offered where it can be
    impl = _vendor(graph)
    want = fn(*xs)
    choices = _choices(impl)
    if ONEDNN:
        assert any(c.get(CALL) == "onednn" for c in choices)
        spatial = len(shapes[1]) - 2
        assert any(c.get(PACK) for c in choices) == (spatial in (2, 3))  # oneDNN reorders no 1-d weight
    for config in choices:
        got = _run(impl, config, xs, want)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, c=config: f"{dict(c)}: {m}")


def test_post_ops_are_offered_only_where_the_epilogue_starts_with_them():
    if not ONEDNN:
        pytest.skip("no oneDNN in this torch")
    fn, shapes = CASES["2d_residual_then_more"]
    posts = set(_vendor(kernelgen.trace(fn, *_inputs(shapes))).space(TARGET).param(POST).choices)
    assert posts == {"none", "add", "add_relu"}
    fn, shapes = CASES["2d_bn_relu"]  # a scale comes first: nothing oneDNN fuses
    assert POST not in _vendor(kernelgen.trace(fn, *_inputs(shapes))).space(TARGET).names
    fn, shapes = CASES["1d_relu"]
    assert set(_vendor(kernelgen.trace(fn, *_inputs(shapes))).space(TARGET).param(POST).choices) == {"none", "relu"}


def test_default_is_atens_call_and_packing_needs_a_constant_weight(monkeypatch):
    fn, shapes = CASES["2d_bn_relu"]
    graph = kernelgen.trace(fn, *_inputs(shapes))
    default = _vendor(graph).default_config(TARGET)
    assert default.get(CALL, "aten") == "aten" and not default.get(PACK, False)  # never assumed faster
    assert PACK not in _vendor(graph).space(TARGET).names  # a training graph's weight changes every step
    if ONEDNN:
        assert PACK in _vendor(_constant(graph, 1)).space(TARGET).names
    monkeypatch.setenv(PACK_ENV, "0")
    assert PACK not in _vendor(_constant(graph, 1)).space(TARGET).names
    assert _constant(graph, 1).workload_key != graph.workload_key  # records of the two never cross


def test_a_packed_weight_updated_in_place_gives_eagers_new_answer():
    if not ONEDNN:
        pytest.skip("no oneDNN in this torch")
    fn, shapes = CASES["2d_bn_relu"]
    xs = _inputs(shapes)
    impl = _vendor(_constant(kernelgen.trace(fn, *xs), 1))
    config = next(c for c in _choices(impl) if c.get(PACK))
    launch = impl.build(config, TARGET)
    want = fn(*xs)
    out = torch.empty_like(want)
    launch(*xs, out)
    torch.testing.assert_close(out, want)
    weight = xs[1]
    with torch.no_grad():
        weight.mul_(-0.5)  # an optimizer step or load_state_dict: the same tensor, a new version
    launch(*xs, out)
    torch.testing.assert_close(out, fn(*xs))
    other = [*xs]
    other[1] = weight.clone() * 3  # another tensor
    launch(*other, out)
    torch.testing.assert_close(out, fn(*other))


def test_packed_weight_cache_repacks_on_base_place_or_version_only():
    packs = []

    def pack(w, x):
        packs.append(w)
        return w * 1

    cache = PackedWeight(pack)
    w, x = torch.ones(3, 2), torch.ones(1)
    first = cache(w, x)
    assert cache(w, x) is first and len(packs) == 1  # unchanged: reused
    w.add_(1)
    assert cache(w, x) is not first and len(packs) == 2  # written in place: repacked
    assert cache(w.view(3, 2), x) is cache(w, x) and len(packs) == 2  # a new view object, same place: its values
    cache(w.t(), x)  # another view of the same base (a Linear's t(weight)): repacked
    assert len(packs) == 3
    assert cache(w.t(), x) is cache(w.t(), x) and len(packs) == 3  # t(weight) made anew each call: packed once
    w.t().mul_(2)  # a write through a view bumps the version the base shares
    cache(w.t(), x)
    assert len(packs) == 4
    cache(w.clone(), x)  # another tensor, equal values: repacked, never assumed equal
    assert len(packs) == 5
    cache(w[1:], x)  # another place in the same base
    assert len(packs) == 6


def test_match_takes_one_convolution_of_inputs_and_a_pointwise_epilogue():
    x, w, w2 = _inputs([(2, 4, 8, 8), (4, 4, 3, 3), (4, 4, 3, 3)])

    def template(fn, *xs):
        found = match(kernelgen.trace(fn, *xs))
        return found[0].name if found else None

    assert template(lambda x, w: torch.sigmoid(F.conv2d(x, w) * 2), x, w) == "conv"
    assert template(lambda x, w, w2: F.conv2d(F.conv2d(x, w, padding=1), w2), x, w, w2) is None  # two
    assert template(lambda x, w: F.conv2d(x, w).sum(-1), x, w) is None  # a reduction after it
    assert template(lambda x, w: F.conv2d(x * 2, w), x, w) is None  # an input computed in the region
    channels_last = x.contiguous(memory_format=torch.channels_last)
    assert template(lambda x, w: F.conv2d(x, w), channels_last, w) is None  # eager keeps its layout: ATen's


def test_channels_last_strides():
    assert channels_last((2, 3, 4, 5)) == torch.empty(2, 3, 4, 5).contiguous(memory_format=torch.channels_last).stride()
    assert channels_last((2, 3, 4, 5, 6)) == \
        torch.empty(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d).stride()
