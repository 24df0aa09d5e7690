"""Concatenation and constant padding inside a pointwise region, as index arithmetic instead of a copy.

A pointwise kernel computes every node at the output coordinate. ``expand`` rewrites a graph holding ``cat``,
``pad``, ``gather`` or the scatters into views (``slice_scatter``, ``select_scatter``, ``diagonal_scatter``) nodes (``kernelgen.ir.graph.MOVE_OPS``) so that each node is computed at the coordinate its consumer
reads it at: the k-th operand of a ``cat`` along ``d`` at ``c[d] - offset_k``, a padded value at
``c[d] - before``; the move itself becomes a ``where`` over a coordinate test. The expanded graph's leaves are
loads of a kernel argument at an element offset and those tests, both written by the language's
``CoordSyntax`` (and values the kernel names itself, such as a scan's running value); every other node is an
elementwise IR op that the language's op table renders as usual. Templates other than pointwise (the scan)
evaluate their element-by-element parts through it too, so a cat or pad joins them for free.
Shifted coordinates are clamped into the operand, so a value the select discards never reads out of bounds.

How each move maps coordinates is one row of ``MOVES`` (the table a new move joins); the languages only
supply the three primitives of ``CoordSyntax``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.ir.graph import Graph, Node, GraphBuilder, pad_pairs
from kernelgen.ir.values import TensorSpec
from kernelgen.templates.indexing import input_view

Coords = tuple[str, ...]  # one integer expression per dim of a node's shape


@dataclass(frozen=True)
class CoordSyntax:
    """How a language writes index arithmetic: ``clamp(x, hi)`` puts integer ``x`` into ``[0, hi]``, ``both(a,
    b)`` is the conjunction of two tests, ``index(arg, offset, n)`` reads the integer at element ``offset`` of
    argument ``arg`` as a row of ``n`` rows (negative counts from the end, the rest clamped into range),
    ``floordiv(x, n)`` divides a non-negative integer by a positive constant, and ``prelude`` defines what they
    call (prepended to the kernel)."""

    clamp: Callable[[str, int], str]
    both: Callable[[str, str], str]
    index: Callable[[int, str, int], str]
    prelude: str = ""
    floordiv: Callable[[str, int], str] = lambda x, n: f"(({x}) / {n})"  # of a non-negative integer x


@dataclass(frozen=True)
class LoadLeaf:
    """Kernel argument ``arg`` read at element ``offset`` (an integer expression), held as ``dtype``;
    ``scalar`` when the offset is the constant 0 for every coordinate."""

    arg: int
    offset: str
    dtype: str

    @property
    def scalar(self) -> bool:
        return self.offset == "0"


@dataclass(frozen=True)
class TestLeaf:
    """A boolean expression of the coordinates (which operand of a move the coordinate falls in)."""

    expr: str


@dataclass(frozen=True)
class NamedLeaf:
    """A value the kernel computes itself (a scan's running value), named ``name``."""

    name: str


@dataclass(frozen=True)
class Expansion:
    """The expanded graph (outputs: the original outputs at the output coordinate) and its leaves by node id."""

    graph: Graph
    leaves: dict[int, LoadLeaf | TestLeaf | NamedLeaf]


def renderable(graph: Graph) -> bool:
    """Whether ``expand`` can render every move: a gather's indices must be read from inputs (their values are
    coordinates, so they cannot be expressions of the IR's ops)."""
    return all(input_view(graph, i) is not None for n in graph.nodes if n.op in ("gather", "take_along")
               for i in n.inputs[1:])


def touches_dim0(graph: Graph) -> bool:
    """Whether some move needs the static size of a dim 0 (then a run-time batch size cannot be dim 0)."""
    for node in graph.nodes:
        if node.op == "cat" and node.attr("dim") == 0:
            return True
        if node.op == "pad" and pad_pairs(node)[0] != (0, 0):
            return True
        if node.op == "gather" and graph.dynamic and graph.nodes[node.inputs[0]].spec.shape[0] == graph.dynamic:
            return True  # the rows' count is the clamp's bound
        if node.op in ("slice_scatter", "select_scatter") and node.attr("dim") == 0:
            return True
        if node.op in ("diagonal", "diagonal_scatter") and 0 in (node.attr("dim1"), node.attr("dim2")):
            return True
        if node.op in ("take_along", "unfold") and node.attr("dim") == 0:
            return True
    return False


def fit(coords: Coords, shape: tuple[int, ...], to: tuple[int, ...]) -> Coords:
    """Coordinates in a value of shape ``to`` that a consumer of shape ``shape`` reads at ``coords`` (numpy
    broadcasting: ``to`` is right-aligned and its size-1 dims are read at 0)."""
    lead = len(shape) - len(to)
    return tuple("0" if size == 1 else coords[lead + k] for k, size in enumerate(to))


class _Expander:
    def __init__(self, graph: Graph, syntax: CoordSyntax, given: Mapping[int, str]) -> None:
        self.graph, self.syntax, self.given = graph, syntax, given
        self.builder = GraphBuilder()
        self.leaves: dict[int, LoadLeaf | TestLeaf | NamedLeaf] = {}
        self.done: dict[tuple[int, Coords], int] = {}
        self.leaf_ids: dict[Any, int] = {}

    def leaf(self, leaf: LoadLeaf | TestLeaf | NamedLeaf, dtype: str) -> int:
        if leaf not in self.leaf_ids:
            i = self.builder.add("input", (), TensorSpec((), dtype), index=len(self.leaves))
            self.leaves[i] = leaf
            self.leaf_ids[leaf] = i
        return self.leaf_ids[leaf]

    def test(self, tests: list[str]) -> int | None:
        if not tests:
            return None
        expr = tests[0]
        for t in tests[1:]:
            expr = self.syntax.both(expr, t)
        return self.leaf(TestLeaf(expr), "bool")

    def select(self, spec: TensorSpec, test: int | None, then: int, other: int) -> int:
        return then if test is None else self.builder.add("where", (test, then, other), spec)

    def value(self, i: int, coords: Coords) -> int:
        key = (i, coords)
        if key not in self.done:
            self.done[key] = self._value(i, coords)
        return self.done[key]

    def _value(self, i: int, coords: Coords) -> int:
        node = self.graph.nodes[i]
        if i in self.given:  # the same value at every coordinate the kernel asks for it
            return self.leaf(NamedLeaf(self.given[i]), node.spec.dtype)
        view = input_view(self.graph, i)
        if view is not None:
            arg, shape, strides = view
            terms = [c if st == 1 else f"{c} * {st}" for c, st, size in zip(coords, strides, shape)
                     if size != 1 and st != 0 and c != "0"]
            return self.leaf(LoadLeaf(arg, " + ".join(terms) or "0", node.spec.dtype), node.spec.dtype)
        if node.op in MOVES:
            return MOVES[node.op](self, node, coords)
        if node.op == "reshape":  # of a computed value: it only adds or drops size-1 dims, each read at 0
            kept = iter(c for c, size in zip(coords, node.spec.shape) if size != 1)
            source = self.graph.nodes[node.inputs[0]].spec.shape
            return self.value(node.inputs[0], tuple("0" if size == 1 else next(kept) for size in source))
        inputs = tuple(self.value(j, fit(coords, node.spec.shape, self.graph.nodes[j].spec.shape))
                       for j in node.inputs)
        return self.builder.add(node.op, inputs, node.spec, **dict(node.attrs))

    def shifted(self, coord: str, before: int, size: int, clamp: bool) -> str:
        """The coordinate ``coord - before`` of an operand of ``size`` along the dim, clamped when it may leave it."""
        if size == 1:
            return "0"
        x = coord if before == 0 else f"({coord} - {before})" if before > 0 else f"({coord} + {-before})"
        return self.syntax.clamp(x, size - 1) if clamp else x


def _cat(ex: _Expander, node: Node, coords: Coords) -> int:
    """``cat`` along ``d``: operand k where ``c[d] < end_k`` (the first such), read at ``c[d] - start_k``."""
    d = node.attr("dim")
    c = coords[d]
    parts, start = [], 0
    for k, j in enumerate(node.inputs):
        size = ex.graph.nodes[j].spec.shape[d]
        last = k == len(node.inputs) - 1
        at = list(coords)
        at[d] = ex.shifted(c, start, size, clamp=start > 0 or not last)
        parts.append((ex.value(j, tuple(at)), None if last else f"({c} < {start + size})"))
        start += size
    result = parts[-1][0]
    for value, test in reversed(parts[:-1]):
        result = ex.select(node.spec, ex.test([test]), value, result)
    return result


def _pad(ex: _Expander, node: Node, coords: Coords) -> int:
    """``pad``: the value at ``c - before`` inside the window ``0 <= c - before < size`` on every dim, else the
    fill value (input 1); a negative ``before``/``after`` crops, and needs no test on that side."""
    x, fill = node.inputs
    shape = ex.graph.nodes[x].spec.shape
    at, tests = [], []
    for c, (before, after), size in zip(coords, pad_pairs(node), shape):
        at.append(ex.shifted(c, before, size, clamp=before > 0 or after > 0) if (before, after) != (0, 0) else c)
        if before > 0:
            tests.append(f"({c} >= {before})")
        if after > 0:
            tests.append(f"({c} < {before + size})")
    return ex.select(node.spec, ex.test(tests), ex.value(x, tuple(at)), ex.value(fill, ()))


def _gather(ex: _Expander, node: Node, coords: Coords) -> int:
    """``gather``: ``x`` at the leading coordinates the indices (inputs, broadcast together, each read at the
    result's leading coordinates) name, and at the result's other coordinates for its other dims."""
    x, *indices = node.inputs
    x_shape = ex.graph.nodes[x].spec.shape
    rank = node.spec.rank - (len(x_shape) - len(indices))  # the indices' broadcast rank
    at_x = []
    for dim, index in enumerate(indices):
        arg, shape, strides = input_view(ex.graph, index)
        at = fit(coords[:rank], node.spec.shape[:rank], shape)
        offset = " + ".join(c if st == 1 else f"{c} * {st}" for c, st, size in zip(at, strides, shape)
                            if size != 1 and st != 0 and c != "0") or "0"
        at_x.append(ex.syntax.index(arg, offset, x_shape[dim]))
    return ex.value(x, (*at_x, *coords[rank:]))


def _slice_scatter(ex: _Expander, node: Node, coords: Coords) -> int:
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src``: ``src`` at ``(c - start) / step`` where
    ``c`` is one of the slice's positions, else ``x``."""
    x, src = node.inputs
    d, start, step = node.attr("dim"), node.attr("start"), node.attr("step")
    size = ex.graph.nodes[src].spec.shape[d]
    c = coords[d]
    tests = [f"({c} >= {start})", f"({c} < {start + (size - 1) * step + 1})"]
    if step == 1:
        at = ex.shifted(c, start, size, clamp=True)
    else:
        shifted = ex.syntax.clamp(f"({c} - {start})", (size - 1) * step)
        tests.append(f"({shifted} % {step} == 0)")
        at = ex.syntax.floordiv(shifted, step)
    inside = list(coords)
    inside[d] = at
    src_shape = ex.graph.nodes[src].spec.shape
    return ex.select(node.spec, ex.test(tests), ex.value(src, fit(tuple(inside), node.spec.shape, src_shape)),
                     ex.value(x, fit(coords, node.spec.shape, ex.graph.nodes[x].spec.shape)))


def _select_scatter(ex: _Expander, node: Node, coords: Coords) -> int:
    """``x`` with ``x.select(dim, index)`` replaced by ``src`` (which lacks ``dim``)."""
    x, src = node.inputs
    d = node.attr("dim")
    rest = coords[:d] + coords[d + 1:]
    shape = node.spec.shape[:d] + node.spec.shape[d + 1:]
    return ex.select(node.spec, ex.test([f"({coords[d]} == {node.attr('index')})"]),
                     ex.value(src, fit(rest, shape, ex.graph.nodes[src].spec.shape)),
                     ex.value(x, fit(coords, node.spec.shape, ex.graph.nodes[x].spec.shape)))


def _diagonal_at(node: Node, rank: int, rest: Coords, i: str) -> Coords:
    """Coordinates in a value of ``rank`` dims of element ``i`` of the diagonal ``node`` names (``rest``: the
    other dims' coordinates, in order)."""
    offset, d1, d2 = node.attr("offset"), node.attr("dim1"), node.attr("dim2")
    others = iter(rest)
    shift = {d1: max(-offset, 0), d2: max(offset, 0)}
    return tuple((i if shift[d] == 0 else f"({i} + {shift[d]})") if d in shift else next(others) for d in range(rank))


def _diagonal(ex: _Expander, node: Node, coords: Coords) -> int:
    """``torch.diagonal(x, offset, dim1, dim2)``: the last coordinate walks the diagonal, the others are ``x``'s
    other dims in order."""
    (x,) = node.inputs
    return ex.value(x, _diagonal_at(node, ex.graph.nodes[x].spec.rank, coords[:-1], coords[-1]))


def _diagonal_scatter(ex: _Expander, node: Node, coords: Coords) -> int:
    """``x`` with its diagonal (``offset``, ``dim1``, ``dim2``) replaced by ``src``."""
    x, src = node.inputs
    offset, d1, d2 = node.attr("offset"), node.attr("dim1"), node.attr("dim2")
    src_shape = ex.graph.nodes[src].spec.shape
    rest = tuple(c for d, c in enumerate(coords) if d not in (d1, d2))
    i = ex.shifted(coords[d1], max(-offset, 0), src_shape[-1], clamp=True)
    test = ex.test([f"(({coords[d2]}) - ({coords[d1]}) == {offset})"])
    return ex.select(node.spec, test, ex.value(src, rest + (i,)),
                     ex.value(x, fit(coords, node.spec.shape, ex.graph.nodes[x].spec.shape)))


def _take_along(ex: _Expander, node: Node, coords: Coords) -> int:
    """``torch.gather(x, dim, index)``: ``x`` at the coordinate with ``dim`` replaced by the index read there."""
    x, index = node.inputs
    d = node.attr("dim")
    arg, shape, strides = input_view(ex.graph, index)
    at = fit(coords, node.spec.shape, shape)
    offset = " + ".join(c if st == 1 else f"{c} * {st}" for c, st, size in zip(at, strides, shape)
                        if size != 1 and st != 0 and c != "0") or "0"
    inside = list(coords)
    inside[d] = ex.syntax.index(arg, offset, ex.graph.nodes[x].spec.shape[d])
    return ex.value(x, tuple(inside))


def _unfold(ex: _Expander, node: Node, coords: Coords) -> int:
    """``x.unfold(dim, size, step)``: window ``w`` (along ``dim``), element ``s`` (the last dim) is ``x`` at
    ``w * step + s`` along ``dim``."""
    (x,) = node.inputs
    d, step = node.attr("dim"), node.attr("step")
    inside = list(coords[:-1])
    w, s = coords[d], coords[-1]
    inside[d] = s if w == "0" else (f"({w} * {step} + {s})" if s != "0" else f"({w} * {step})")
    return ex.value(x, tuple(inside))


MOVES: dict[str, Callable[[_Expander, Node, Coords], int]] = {
    "take_along": _take_along, "unfold": _unfold,
    "cat": _cat, "pad": _pad, "gather": _gather, "slice_scatter": _slice_scatter, "select_scatter": _select_scatter,
    "diagonal": _diagonal, "diagonal_scatter": _diagonal_scatter}
"""How each move op reads its operands: a function of (expander, node, the node's coordinates) -> value id."""


def expand(graph: Graph, coords: Coords, syntax: CoordSyntax, roots: Sequence[int] | None = None,
           given: Mapping[int, str] | None = None) -> Expansion:
    """The values of ``roots`` (default: the graph's outputs), all of one shape, at coordinates ``coords`` (one
    expression per dim; "0" on size-1 dims). Nodes in ``given`` are leaves named by the kernel (``NamedLeaf``)."""
    ex = _Expander(graph, syntax, given or {})
    outputs = tuple(ex.value(o, coords) for o in (graph.outputs if roots is None else roots))
    return Expansion(Graph(tuple(ex.builder.nodes), outputs), ex.leaves)


__all__ = ["Coords", "CoordSyntax", "Expansion", "LoadLeaf", "MOVES", "NamedLeaf", "TestLeaf", "expand", "fit", "renderable",
           "touches_dim0"]
