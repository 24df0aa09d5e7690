"""cat and constant pad inside a C++ pointwise kernel (index arithmetic, no copy) against eager and the IR reference."""

from __future__ import annotations

import pytest
import torch

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.graph import MOVE_OPS
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.templates import match
from tests.templates import moves_cases

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _run(fn, inputs):
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == "pointwise", f"not one pointwise kernel:\n{graph}"
    template, problem = found
    assert problem.moves and graph.ops() & MOVE_OPS
    target = Target.current("cpp")
    kernel = get_backend("cpp").compile(template.render(problem, template.default_config(problem, target), target))
    outs = [torch.full(s.shape, 123).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    return graph, outs


@pytest.mark.parametrize("index", range(len(moves_cases.cases())),
                         ids=[f"{fn.__name__}-{args[0].dtype}".replace("torch.", "") for fn, args in moves_cases.cases()])
def test_moves_match_eager(index):
    torch.manual_seed(index)
    fn, inputs = moves_cases.cases()[index]
    graph, outs = _run(fn, inputs)
    moves_cases.assert_matches_eager_and_reference(fn, inputs, graph, outs)


def test_cat_operand_that_is_a_slice_of_a_larger_buffer():
    """A cat operand that is a column slice of a larger buffer is read through its strides; the columns beyond
    it (NaN here) never reach the result."""
    buffer = torch.full((3, 10), float("nan"))
    buffer[:, :4] = torch.randn(3, 4)
    view = buffer[:, :4]
    b = torch.randn(3, 2)
    graph, outs = _run(lambda a, c: torch.cat([c, a], dim=1) * 2, (view, b))
    torch.testing.assert_close(outs[0], torch.cat([b, view], 1) * 2)


def test_compiled_function_runs_the_kernel_for_a_pad():
    x = torch.randn(4, 6)
    fn = kernelgen.compile(lambda t: torch.nn.functional.pad(t.tanh(), (2, 2), value=0.5), backend="cpp")
    torch.testing.assert_close(fn(x), torch.nn.functional.pad(x.tanh(), (2, 2), value=0.5))
    assert fn.explain(x)["implementation"] == "pointwise"


def test_an_out_of_range_index_reads_the_nearest_row_never_out_of_bounds():
    # eager raises IndexError; a kernel cannot, so it must not read outside the table: the IR (its reference)
    # defines the row read as the index wrapped once from the end and clamped into range
    table, index = torch.randn(5, 3), torch.tensor([0, 7, -2, -9, 4])
    graph, outs = _run(lambda t, i: torch.nn.functional.embedding(i, t) + 1, (table, index))
    rows = torch.tensor([0, 4, 3, 0, 4])
    torch.testing.assert_close(outs[0], table[rows] + 1, rtol=0, atol=0)
    torch.testing.assert_close(outs[0], evaluate(graph, [table, index])[0], rtol=0, atol=0)


def test_a_computed_index_is_not_rendered():
    # the index's value is a coordinate: it must be read from an input, not computed in the kernel
    graph = kernelgen.trace(lambda t, i: torch.nn.functional.embedding(i + 1, t), torch.randn(5, 3),
                            torch.tensor([0, 1]))
    assert match(graph) is None


@pytest.mark.parametrize("index", [[0, 7, 1], [0, -1, 2]], ids=["past-the-end", "negative"])
def test_compiled_embedding_raises_eagers_index_error(index):
    table, good = torch.randn(5, 3), torch.tensor([0, 4, 2])
    fn = kernelgen.compile(lambda t, i: torch.nn.functional.embedding(i, t) * 2, backend="cpp", partition=False)
    torch.testing.assert_close(fn(table, good), torch.nn.functional.embedding(good, table) * 2)
    assert fn.explain(table, good)["implementation"] == "pointwise"  # the gather kernel, with its check
    bad = torch.tensor(index)
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(bad, table)
    with pytest.raises(IndexError):
        fn(table, bad)


def test_indexing_wraps_negative_rows_as_eager_and_raises_past_them():
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    torch._dynamo.reset()
    table = torch.randn(5, 3)
    fn = torch.compile(lambda t, i: t[i] + 1, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        wrapped = torch.tensor([-1, -5, 4])
        torch.testing.assert_close(fn(table, wrapped), table[wrapped] + 1)
    assert graphs[0].runs == {"kernel": 1}
    with pytest.raises(IndexError):
        fn(table, torch.tensor([0, -6]))


def test_gather_reads_indices_out_of_range_as_the_reference_does():
    """The dispatch check runs kernels on random indices, negative and too large among them (eager raises for
    those; a call's real indices are checked before a launch): kernel and IR reference must agree on them, or
    every gather region (BERT's token type ids) fails its check and runs eagerly."""
    x = torch.arange(12, dtype=torch.int64).reshape(2, 6) - 1
    index = torch.tensor([[-1, -6, -7, 0], [5, 6, 9, -3]])
    graph, outs = _run(lambda a, i: torch.gather(a, 1, i) + 0, (x, index))
    assert torch.equal(outs[0], evaluate(graph, [x, index])[0])
    assert torch.equal(outs[0], torch.tensor([[4, -1, -1, -1], [10, 10, 10, 8]]))


def test_indexing_by_several_index_tensors_is_one_gather_kernel_as_eager():
    """``x[i, j]`` with index tensors on the leading dims, broadcast together (Mistral's sliding-window mask reads
    position ids by [batch, query] indices): one gather region, eager's values, negative indices wrapped, eager's
    IndexError for one past the end of either dim; a full slice before an index stays eager's."""
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    torch._dynamo.reset()
    x = torch.randn(3, 5, 4)
    fn = torch.compile(lambda x, i, j: x[i, j] * 2, backend="kernelgen")
    i, j = torch.tensor([[0], [2], [-1]]), torch.tensor([[1, -5, 4, 0]])  # broadcast to [3, 4]
    with dynamo_backend.collect() as graphs:
        torch.testing.assert_close(fn(x, i, j), x[i, j] * 2)
    assert graphs[0].runs == {"kernel": 1} and not graphs[0].left, graphs[0].as_dict()
    with pytest.raises(IndexError):
        x[torch.tensor([[0], [3], [1]]), j]
    with pytest.raises(IndexError):
        fn(x, torch.tensor([[0], [3], [1]]), j)
    with pytest.raises(IndexError):
        fn(x, i, torch.tensor([[1, 5, 0, 0]]))
    ints = torch.arange(10).reshape(2, 5).expand(2, 5)  # int64 positions, as the mask's: a broadcast view
    b, q = torch.arange(2).view(2, 1, 1, 1), torch.arange(5).view(1, 1, 5, 1)
    g = torch.compile(lambda p, b, q: p[b, q] > 3, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        torch.testing.assert_close(g(ints, b, q), ints[b, q] > 3)
    assert graphs[0].runs == {"kernel": 1}, graphs[0].as_dict()
    torch._dynamo.reset()
    h = torch.compile(lambda x, j: x[:, j] + 1, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        torch.testing.assert_close(h(x, j), x[:, j] + 1)
    assert any("index" in op for op in graphs[0].left), graphs[0].as_dict()
