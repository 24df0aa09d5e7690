"""Sort and bucketize through the partitioner and ``torch.compile(backend="kernelgen")``: a stable sort with the
pointwise ops around it is one sort region; an unstable sort's positions stay ATen (eager's tie order is its own)."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import kernelgen  # noqa: E402,F401  (registers the "kernelgen" Dynamo backend)
from kernelgen.frontend.decompositions import decompositions  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.frontend.dynamo_backend import compile_graph  # noqa: E402
from kernelgen.frontend.partition import partition  # noqa: E402

aten = torch.ops.aten
NAN = float("nan")


def regions_of(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    found = partition(gm)
    return gm, [(r.template, [n.target for n in r.nodes if n.target is not operator.getitem]) for r in found.regions]


def _rows():
    x = torch.randint(-3, 4, (6, 40)).float()
    x[:, ::9], x[1, 3], x[2, ::5] = NAN, -0.0, float("inf")
    return x


def test_stable_descending_sort_and_its_epilogue_are_one_sort_region():
    fn = lambda x: (lambda s: (s.values * 2 + 1, s.indices + 1))(x.sort(dim=-1, descending=True, stable=True))  # noqa: E731
    x = _rows()
    gm, regions = regions_of(fn, x)
    (template, ops), = regions
    assert template == "sort" and ops[0] == aten.sort.stable and aten.mul.Tensor in ops
    want = gm(x)
    record = compile_graph(gm, "test")
    for got, ref in zip(gm(x), want):
        torch.testing.assert_close(got, ref, equal_nan=True, rtol=0, atol=0)
    assert record.runs.get("kernel", 0) == record.regions == 1 and not record.runs.get("eager")


def test_torch_compile_runs_the_sort_inside_a_kernelgen_region():
    def fn(x, b):
        values, indices = torch.sort(x * b, dim=-1, descending=True, stable=True)
        return values.relu() - 1, indices * 2, torch.bucketize(x, b[0, :5].sort().values)

    x, b = _rows(), torch.rand(1, 40) + 0.5
    torch._dynamo.reset()
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(x, b)
    for g, want in zip(got, fn(x, b)):
        assert g.dtype == want.dtype
        torch.testing.assert_close(g, want, equal_nan=True, rtol=0, atol=0)
    (stats,) = graphs
    assert stats.runs.get("kernel", 0) == stats.regions and not stats.runs.get("eager")
    _, regions = regions_of(fn, x, b)  # the regions of the same ATen graph
    assert "sort" in [t for t, _ in regions] and "search" in [t for t, _ in regions]


def test_an_unstable_sorts_positions_stay_aten_and_its_values_join_a_region():
    fn = lambda x: (lambda s: (s.values.exp(), s.indices))(torch.sort(x, dim=-1))  # noqa: E731
    x = torch.randint(-3, 4, (4, 40)).float()
    gm, regions = regions_of(fn, x)
    assert not any(t == "sort" for t, _ in regions)  # the sort node's second output has no lowering
    want = gm(x)
    compile_graph(gm, "test")
    got = gm(x)
    torch.testing.assert_close(got[0], want[0])  # (exp: the pointwise kernel's, within float32 tolerance)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)  # ATen's own positions
