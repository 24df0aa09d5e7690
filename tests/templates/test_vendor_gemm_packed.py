"""aten_gemm's packed constant weight (issue 33 item 3): a matmul's B that the front end marked constant may be
packed once for the vendor's linear (MKL's in float32, oneDNN's in bfloat16) as a measured config choice.

Every config (bias in addmm or not, packed or not) against eager; packing offered only for a marked constant 2-d
B and not with ``KERNELGEN_PACK_WEIGHTS=0``; never the default; an in-place update, another tensor or a new view of
the weight gives eager's new answer, an unchanged weight is packed once over repeated calls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.ir.graph import Graph, Node  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.ir.values import Config  # noqa: E402
from kernelgen.runtime.implementations import implementations_for  # noqa: E402
from kernelgen.templates.vendor_gemm import ADDMM, NAME, PACK, PACK_ENV, PACKED_LINEARS, PackedLinear  # noqa: E402

TARGET = Target.current("cpp")
MKL = PACKED_LINEARS["float32"].available()
BF16 = PACKED_LINEARS["bfloat16"].available()

# (function, input shapes, the input that is B's weight)
CASES = {
    "linear_bias": (lambda x, w, b: F.linear(x, w, b), [(16, 32), (24, 32), (24,)], 1),
    "linear_3d_bias_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [(4, 16, 32), (24, 32), (24,)], 1),
    "linear_scaled": (lambda x, w: F.linear(x, w) * 0.5 + 1.0, [(16, 32), (24, 32)], 1),
    "linear_alone": (lambda x, w: F.linear(x, w), [(2, 8, 32), (24, 32)], 1),
    "matmul_b_as_held": (lambda x, w, b: torch.addmm(b, x, w), [(16, 32), (32, 24), (24,)], 1),  # GPT-2's Conv1D
}


def _inputs(shapes, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


def _constant(graph: Graph, index: int) -> Graph:
    """``graph`` with input ``index`` marked constant, as the backend marks an inference graph's parameters."""
    nodes = tuple(Node(n.op, n.inputs, tuple(sorted((*n.attrs, ("constant", True)))), n.spec)
                  if n.op == "input" and n.attr("index") == index else n for n in graph.nodes)
    return Graph(nodes, graph.outputs, graph.dynamic)


def _vendor(graph):
    return next(i for i in implementations_for(graph, "cpp") if i.name == NAME)


def _choices(impl) -> list[Config]:
    """One config per distinct (bias in addmm, packed) choice of the space: the epilogue at its default."""
    seen, found = set(), []
    for cfg in impl.space(TARGET):
        key = (cfg.get(ADDMM), cfg.get(PACK))
        if key not in seen:
            seen.add(key)
            found.append(cfg)
    return found


def _run(launch, xs, like):
    out = torch.empty_like(like)
    launch(*xs, out)
    return out


@pytest.fixture
def counted(monkeypatch):
    """The float32 packing, counted: each pack appends the weight it packed."""
    if not MKL:
        pytest.skip("no MKL linear in this torch")
    packs = []
    real = PACKED_LINEARS["float32"]

    def pack(w, m):
        packs.append(w)
        return real.pack(w, m)

    monkeypatch.setitem(PACKED_LINEARS, "float32", PackedLinear(real.available, pack, real.run))
    return packs


@pytest.mark.parametrize("case", list(CASES))
def test_every_choice_matches_eager(case):
    fn, shapes, weight = CASES[case]
    xs = _inputs(shapes)
    impl = _vendor(_constant(kernelgen.trace(fn, *xs), weight))
    want = fn(*xs)
    choices = _choices(impl)
    assert any(c.get(PACK) for c in choices) == MKL
    for config in choices:
        got = _run(impl.build(config, TARGET), xs, want)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, c=config: f"{dict(c)}: {m}")


@pytest.mark.parametrize("case", ["linear_bias", "linear_3d_bias_gelu"])
def test_onednns_packed_linear_matches_eager(case, monkeypatch):
    """oneDNN's entry (bfloat16's) run in float32 here, so its call is checked on a CPU without a bf16 path."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch")
    onednn = PACKED_LINEARS["bfloat16"]
    monkeypatch.setitem(PACKED_LINEARS, "float32", PackedLinear(lambda: True, onednn.pack, onednn.run))
    fn, shapes, weight = CASES[case]
    xs = _inputs(shapes)
    impl = _vendor(_constant(kernelgen.trace(fn, *xs), weight))
    want = fn(*xs)
    for config in (c for c in _choices(impl) if c.get(PACK)):
        torch.testing.assert_close(_run(impl.build(config, TARGET), xs, want), want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not BF16, reason="no oneDNN bf16 path on this CPU")
def test_bfloat16_packed_matches_eager():
    fn, shapes, weight = CASES["linear_3d_bias_gelu"]
    xs = _inputs(shapes, torch.bfloat16)
    impl = _vendor(_constant(kernelgen.trace(fn, *xs), weight))
    want = fn(*xs)
    packed = [c for c in _choices(impl) if c.get(PACK)]
    assert packed
    for config in packed:
        torch.testing.assert_close(_run(impl.build(config, TARGET), xs, want), want, rtol=2e-2, atol=2e-2)


def test_packing_is_offered_only_for_a_constant_2d_weight(monkeypatch):
    if not MKL:
        pytest.skip("no MKL linear in this torch")
    fn, shapes, weight = CASES["linear_bias"]
    xs = _inputs(shapes)
    graph = kernelgen.trace(fn, *xs)
    assert PACK not in _vendor(graph).space(TARGET).names  # a training graph's weight changes every step
    assert PACK not in _vendor(_constant(graph, 0)).space(TARGET).names  # A constant, B not: nothing to pack
    marked = _constant(graph, weight)
    assert PACK in _vendor(marked).space(TARGET).names
    assert not _vendor(marked).default_config(TARGET)[PACK]  # a measured choice, never assumed faster
    assert marked.workload_key != graph.workload_key  # records of the two never cross
    bmm = lambda a, b: torch.bmm(a, b) * 2.0  # noqa: E731
    ys = _inputs([(3, 8, 16), (3, 16, 8)])
    assert PACK not in _vendor(_constant(kernelgen.trace(bmm, *ys), 1)).space(TARGET).names  # a batched B
    halves = [x.half() for x in xs]  # no packed call for float16
    assert PACK not in _vendor(_constant(kernelgen.trace(fn, *halves), weight)).space(TARGET).names
    monkeypatch.setenv(PACK_ENV, "0")
    assert PACK not in _vendor(marked).space(TARGET).names


def _packed_launcher(case):
    fn, shapes, weight = CASES[case]
    xs = _inputs(shapes)
    impl = _vendor(_constant(kernelgen.trace(fn, *xs), weight))
    config = next(c for c in _choices(impl) if c.get(PACK))
    return fn, xs, impl.build(config, TARGET)


@pytest.mark.parametrize("case", ["linear_bias", "linear_3d_bias_gelu", "matmul_b_as_held"])
def test_packed_once_and_repacked_after_an_update(case, counted):
    fn, xs, launch = _packed_launcher(case)
    for _ in range(4):
        torch.testing.assert_close(_run(launch, xs, fn(*xs)), fn(*xs))
    assert len(counted) == 1  # unchanged weight: packed once, not per call
    weight = xs[1]
    with torch.no_grad():
        weight.mul_(-0.5)  # an optimizer step: the same tensor, a new version
    torch.testing.assert_close(_run(launch, xs, fn(*xs)), fn(*xs))
    assert len(counted) == 2
    weight.copy_(torch.randn(weight.shape))  # load_state_dict copies into the parameter
    torch.testing.assert_close(_run(launch, xs, fn(*xs)), fn(*xs))
    other = [*xs]
    other[1] = weight.clone() * 3  # another tensor
    torch.testing.assert_close(_run(launch, other, fn(*other)), fn(*other))
    assert len(counted) == 4


def test_a_fresh_transposed_view_per_call_is_packed_once(counted):
    """A Linear's weight reaches its region as ``t(weight)``, a new view object each call (the backend's graph)."""
    fn = lambda x, wt, b: torch.addmm(b, x, wt)  # noqa: E731
    x, w, b = _inputs([(16, 32), (24, 32), (24,)])
    impl = _vendor(_constant(kernelgen.trace(fn, x, w.t(), b), 1))
    launch = impl.build(next(c for c in _choices(impl) if c.get(PACK)), TARGET)
    for _ in range(3):
        torch.testing.assert_close(_run(launch, (x, w.t(), b), fn(x, w.t(), b)), fn(x, w.t(), b))
    assert len(counted) == 1
    with torch.no_grad():
        w.t().add_(1.0)  # written through a view: the version its base shares
    torch.testing.assert_close(_run(launch, (x, w.t(), b), fn(x, w.t(), b)), fn(x, w.t(), b))
    assert len(counted) == 2


def test_mkl_linear_is_addmm():
    """The semantics the float32 entry relies on: ``x @ w.T + bias`` with w as the Linear holds it, also for a row
    count other than the packing's."""
    if not MKL:
        pytest.skip("no MKL linear in this torch")
    x, w, b = _inputs([(64, 48), (40, 48), (40,)])
    linear = PACKED_LINEARS["float32"]
    packed = linear.pack(w, 64)
    torch.testing.assert_close(linear.run(x, packed, w, 64, b), torch.addmm(b, x, w.t()))
    torch.testing.assert_close(linear.run(x[:7], packed, w, 64, None), x[:7] @ w.t())

