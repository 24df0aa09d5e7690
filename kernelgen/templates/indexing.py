"""Index maps shared by the templates: how to address a graph input at a coordinate of the iteration space.

A ``Load`` says: the value of graph node ``node`` at iteration coordinate ``(i0, i1, ...)`` is element
``sum(i_d * strides[d])`` of kernel argument ``arg``. Broadcast dimensions have stride 0, so renderers
never reason about broadcasting, transposes or size-1 views themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import Graph

# -- shape-generic kernels ---------------------------------------------------------------------------------
# A graph with ``graph.dynamic == S`` (S >= 2, a size found nowhere else in the graph) has a run-time batch
# size: every node's dim 0 of size S stands for it. Renderers take it as the argument ``n0`` and read it
# from dim 0 of the input ``dynamic_source`` names (the launcher does), so one kernel serves every size.


def dynamic_source(graph: Graph, shape: tuple[int, ...]) -> int | None:
    """Index of the graph input whose dim 0 is the run-time batch size, when iteration ``shape`` has it at
    dim 0; None for a static kernel."""
    if not graph.dynamic or not shape or shape[0] != graph.dynamic:
        return None
    return next((a for a, spec in enumerate(graph.signature) if spec.shape[:1] == (graph.dynamic,)), None)


def dynamic_meta(graph: Graph, source: int | None) -> dict[str, str]:
    """``Source.meta`` entries that tell a backend to pass the batch size (empty for a static kernel)."""
    return {} if source is None else {"dynamic": str(source), "sentinel": str(graph.dynamic)}


@dataclass(frozen=True)
class Load:
    """Where to read graph node ``node`` (an input, or a view of one) over an iteration shape."""

    node: int
    arg: int  # position of the tensor in the kernel's argument list (= graph input index)
    strides: tuple[int, ...]  # element strides over the iteration shape; 0 on broadcast dims
    dtype: str

    @property
    def is_scalar(self) -> bool:
        return all(s == 0 for s in self.strides)


def input_view(graph: Graph, node_id: int) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """``(arg, shape, strides)`` of a graph input seen through reshape/transpose views, or None if
    ``node_id`` is not such a view of an input."""
    node = graph.nodes[node_id]
    if node.op == "input":
        return node.attr("index"), node.spec.shape, node.spec.effective_strides()
    if node.op in ("reshape", "transpose"):
        base = input_view(graph, node.inputs[0])
        if base is None:
            return None
        arg, shape, strides = base
        if node.op == "transpose":
            return arg, node.spec.shape, strides[:-2] + (strides[-1], strides[-2])
        # reshape only adds or drops size-1 dims: keep the strides of the non-trivial dims
        kept = iter([st for sz, st in zip(shape, strides) if sz != 1])
        return arg, node.spec.shape, tuple(0 if size == 1 else next(kept) for size in node.spec.shape)
    return None


def broadcast_strides(shape: tuple[int, ...], strides: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a (shape, strides) view broadcast, numpy-style, to ``out_shape``."""
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise ValueError(f"shape {shape} has more dims than {out_shape}")
    out = [0] * pad
    for size, stride, target in zip(shape, strides, out_shape[pad:]):
        if size == target:
            out.append(stride if size != 1 else 0)
        elif size == 1:
            out.append(0)
        else:
            raise ValueError(f"shape {shape} does not broadcast to {out_shape}")
    return tuple(out)


def load_for(graph: Graph, node_id: int, out_shape: tuple[int, ...]) -> Load | None:
    view = input_view(graph, node_id)
    if view is None:
        return None
    arg, shape, strides = view
    try:
        return Load(node_id, arg, broadcast_strides(shape, strides, out_shape), graph.nodes[node_id].spec.dtype)
    except ValueError:
        return None


def is_input_view(graph: Graph, node_id: int) -> bool:
    return input_view(graph, node_id) is not None


def consumer_loads(graph: Graph, out_shape: tuple[int, ...], skip: frozenset[int] = frozenset()) -> dict[int, Load] | None:
    """Loads for every input view read by a compute node (other than those in ``skip``), keyed by node id.

    None when some such view does not broadcast to ``out_shape``.
    """
    loads: dict[int, Load] = {}
    for i, node in enumerate(graph.nodes):
        if i in skip or is_input_view(graph, i):
            continue
        for j in node.inputs:
            if j not in loads and is_input_view(graph, j):
                load = load_for(graph, j, out_shape)
                if load is None:
                    return None
                loads[j] = load
    return loads


def flat_offset(index: str, sizes: tuple[int, ...], strides: tuple[int, ...], div: str = "/") -> str:
    """Element offset of flat row-major ``index`` over ``sizes`` for a view with ``strides`` (0: broadcast), as
    an expression of the renderer's language (``div`` is its integer division: ``/`` in C++, ``//`` in Triton)."""
    terms = []
    inner = 1
    for d in range(len(sizes) - 1, -1, -1):
        size, stride = sizes[d], strides[d]
        if stride != 0 and size != 1:
            coord = index if inner == 1 else f"({index} {div} {inner})"
            if d > 0:
                coord = f"({coord} % {size})"
            terms.append(coord if stride == 1 else f"{coord} * {stride}")
        inner *= size
    return " + ".join(reversed(terms)) or "0"
