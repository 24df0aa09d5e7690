"""Reduction template, matching: reductions over any set of dims with elementwise prologue and epilogue
(softmax, log_softmax, layer_norm, rms norm, logsumexp, var, bias gradients, batch-norm statistics, argmax...).

The iteration space is (kept dims) x (reduced dims). ``match`` puts it in a canonical form the renderers share:
``shape = (*kept, row_len)`` with the kept dims in their order and the reduced dims flattened into one row, so
a permutation that moves reduced dims last is index arithmetic on the loads, never a copy. Reduced dims that
are adjacent in every input's memory merge into one group; the row is read group by group (``row_shape``,
``row_strides``: most often a single group, a plain stride).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import ELEMENTWISE_OPS, REDUCTION_OPS, Graph, broadcast_shapes, reduced_dims
from kernelgen.ir.values import TensorSpec
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, consumer_loads, flat_offset, is_input_view, load_for


@dataclass(frozen=True)
class ReductionProblem(Problem):
    """Iteration space ``shape = (*kept, row_len)``, seen as ``rows`` rows of ``row_len`` elements.

    ``kinds[i]`` is ``"row"`` when node i is constant along a row (reductions, what is computed from
    them and from per-row inputs, constants) and ``"element"`` otherwise. Row outputs are stored one
    value per row; element outputs one value per element.
    """

    shape: tuple[int, ...]
    loads: tuple[Load, ...]  # strides over ``shape``; the last one is the innermost row group's
    kinds: tuple[str, ...]
    reductions: tuple[int, ...]  # reduction node ids, topological order
    # The row as groups of reduced dims, outermost first (product ``row_len``), and each load's stride per
    # group (parallel to ``loads``). The row index ``j`` is the flat row-major index over the reduced dims in
    # their original order, which is what argmax/argmin return.
    row_shape: tuple[int, ...] = ()
    row_strides: tuple[tuple[int, ...], ...] = ()

    # Where element outputs (contiguous, of the full shape) go: strides over ``shape`` and per row group.
    out_strides: tuple[int, ...] = ()
    out_row: tuple[int, ...] = ()

    @property
    def rows_contiguous(self) -> bool:
        """Element outputs are stored row after row (``r * row_len + j``): the reduced dims are the trailing ones."""
        return self.out_strides == TensorSpec(self.shape, "float32").contiguous_strides()

    def out_offset(self, index: str, div: str = "/") -> str:
        """Offset of row element ``index`` from the row's start in an element output."""
        return flat_offset(index, self.row_shape, self.out_row, div)

    @property
    def outer(self) -> bool:
        """An "outer" reduction: every streamed load is contiguous along the innermost kept dim and strided
        along the row (``sum(0)`` of a contiguous [N, C]), so neighbouring rows, not row elements, are adjacent."""
        streamed = [ld for ld in self.loads if self.kinds[ld.node] == "element"]
        return len(self.shape) >= 2 and bool(streamed) and \
            all(ld.strides[-2] == 1 and ld.strides[-1] != 1 for ld in streamed)

    @property
    def grouped(self) -> bool:
        """The row spans several groups of reduced dims (index arithmetic per group, not one stride)."""
        return len(self.row_shape) > 1

    @property
    def rows(self) -> int:
        n = 1
        for s in self.shape[:-1]:
            n *= s
        return n

    @property
    def row_len(self) -> int:
        return self.shape[-1]


def _groups(full: tuple[int, ...], dims: tuple[int, ...], strides: list[tuple[int, ...]]) -> list[list[int]]:
    """The reduced dims (size 1 dropped) as runs that are adjacent in every load's memory, outermost first."""
    groups: list[list[int]] = []
    for d in (d for d in dims if full[d] != 1):
        prev = groups[-1][-1] if groups else None
        if prev is not None and all(st[prev] == st[d] * full[d] for st in strides):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


class ReductionTemplate(Template):
    name = "reduction"

    def match(self, graph: Graph) -> ReductionProblem | None:
        reductions = tuple(i for i, n in enumerate(graph.nodes) if n.op in REDUCTION_OPS)
        if not reductions:
            return None
        full = graph.nodes[graph.nodes[reductions[0]].inputs[0]].spec.shape
        if len(full) == 0 or 0 in full:
            return None
        dims = reduced_dims(graph.nodes[reductions[0]], len(full))
        if any(reduced_dims(graph.nodes[r], len(full)) != dims for r in reductions):
            return None  # one iteration space per kernel
        kept = tuple(d for d in range(len(full)) if d not in dims)
        # a keepdim=False result broadcasts against the full shape as its keepdim form when the kept dims are
        # the trailing ones (x - x.mean(0), x - x.mean()); otherwise it is per-row math only ("dropped")
        aligned = kept == tuple(range(len(full) - len(kept), len(full)))
        found = _loads(graph, full, kept, aligned)
        if found is None:
            return None
        # element outputs (full shape, written contiguous) are addressed by the same row groups as the loads
        out_full = TensorSpec(full, "float32").contiguous_strides()
        stores = any(graph.nodes[o].spec.shape == full for o in graph.outputs)
        groups = _groups(full, dims, [ld.strides for ld in found.values()] + ([out_full] if stores else []))
        row_shape = tuple(_prod(full[d] for d in g) for g in groups) or (1,)
        row_len = _prod(row_shape)
        shape = tuple(full[d] for d in kept) + (row_len,)

        def canonical(ld: Load) -> tuple[Load, tuple[int, ...]]:
            per_group = tuple(ld.strides[g[-1]] for g in groups) or (0,)
            return Load(ld.node, ld.arg, tuple(ld.strides[d] for d in kept) + per_group[-1:], ld.dtype), per_group

        pairs = sorted((canonical(ld) for ld in found.values()), key=lambda p: p[0].node)
        loads = [ld for ld, _ in pairs]
        by_node = {ld.node: st for ld, st in pairs}
        keep_shape = tuple(1 if d in dims else s for d, s in enumerate(full))
        kinds: list[str] = []
        dropped: set[int] = set()  # row values in the kept shape (reduced dims dropped)
        for i, node in enumerate(graph.nodes):
            if is_input_view(graph, i):
                kinds.append("row" if i in by_node and not any(by_node[i]) else "element")
            elif node.op in REDUCTION_OPS:
                if graph.nodes[node.inputs[0]].spec.shape != full:
                    return None
                kinds.append("row")
            elif node.op == "reshape":
                # only a row value dropping its reduced 1s (keepdim=False), then read by row math and outputs
                if kinds[node.inputs[0]] != "row" or node.spec.shape not in (shape[:-1], keep_shape):
                    return None
                kinds.append("row")
                if node.spec.shape == shape[:-1] and not aligned:
                    dropped.add(i)
            elif node.op in ELEMENTWISE_OPS:
                if node.op == "const":
                    kinds.append("row")
                    continue
                kinds.append("element" if any(kinds[j] == "element" for j in node.inputs) else "row")
                if any(j in dropped for j in node.inputs):  # epilogue of a keepdim=False result: per row only
                    if node.spec.shape != shape[:-1] or any(
                            j not in dropped and graph.nodes[j].spec.shape != () and kinds[j] != "row"
                            for j in node.inputs):
                        return None
                    dropped.add(i)
                    continue
                try:
                    if broadcast_shapes(node.spec.shape, full) != full:
                        return None
                except KernelgenError:
                    return None
            else:
                return None
        for out in graph.outputs:
            spec = graph.nodes[out].spec
            if kinds[out] == "element" and spec.shape != full:
                return None
            if kinds[out] == "row" and spec.shape not in (keep_shape, shape[:-1]):
                return None
            if is_input_view(graph, out):
                return None
        if len(set(graph.outputs)) != len(graph.outputs):
            return None
        _, out_row = canonical(Load(-1, -1, out_full, "float32"))
        return ReductionProblem(graph=graph, shape=shape, loads=tuple(loads), kinds=tuple(kinds),
                                reductions=reductions, row_shape=row_shape,
                                row_strides=tuple(by_node[ld.node] for ld in loads),
                                out_strides=canonical(Load(-1, -1, out_full, "float32"))[0].strides, out_row=out_row)


def _dropped_users(graph: Graph) -> set[int]:
    """Nodes computed from a reduction's keepdim=False result (reshape to the kept shape): per-row epilogue."""
    dropped: set[int] = set()
    for i, node in enumerate(graph.nodes):
        if node.op == "reshape" and not is_input_view(graph, i) \
                and len(node.spec.shape) < len(graph.nodes[node.inputs[0]].spec.shape):
            dropped.add(i)
        elif node.op in ELEMENTWISE_OPS and any(j in dropped for j in node.inputs):
            dropped.add(i)
    return dropped


def _loads(graph: Graph, full: tuple[int, ...], kept: tuple[int, ...], aligned: bool) -> dict[int, Load] | None:
    """Loads over ``full`` of every input view: those read by the per-row epilogue of a keepdim=False result
    broadcast against the kept shape (``var(x, 0) * weight``), so their strides go to the kept dims."""
    dropped = set() if aligned else _dropped_users(graph)
    found = consumer_loads(graph, full, skip=frozenset(dropped))
    if found is None:
        return None
    kept_shape = tuple(full[d] for d in kept)
    for i in dropped:
        for j in graph.nodes[i].inputs:
            if not is_input_view(graph, j):
                continue
            load = load_for(graph, j, kept_shape)
            if load is None:
                return None
            strides = [0] * len(full)
            for d, st in zip(kept, load.strides):
                strides[d] = st
            load = Load(load.node, load.arg, tuple(strides), load.dtype)
            if found.setdefault(j, load) != load:  # read both per element and per row: two layouts
                return None
    return found


def _prod(sizes) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


TEMPLATE = ReductionTemplate()
