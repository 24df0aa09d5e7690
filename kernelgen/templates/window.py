"""Window template, matching: pooling as a reduction over a sliding window (Inductor's and XLA's reduce-window),
with an elementwise prologue computing the pooled value (batch norm + ReLU before a max pool, in eval mode: one
kernel) and an elementwise epilogue reading the pooled values; or a pooling gradient (``window_grad``), each
input element pulling, in eager's order, the output gradients of the windows that hold it, with an epilogue
at the input's coordinates (ReLU's backward after the pool's).

Every element-by-element part is evaluated through ``kernelgen.templates.moves.expand``: the prologue at each
window tap's coordinate, the epilogue at the output's with the window values as named leaves; so the
renderers only write the loops, the bounds and the accumulators. ``Geometry`` is where a window's taps are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kernelgen.codegen.renderer import INT_LIMITS
from kernelgen.ir.graph import ELEMENTWISE_OPS, MOVE_OPS, WINDOW_OPS, Graph, Node
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import is_input_view
from kernelgen.templates.moves import renderable

LOWEST = {dtype: low for dtype, (low, _) in INT_LIMITS.items()}
"""The identity of an integer max (a float max starts at -inf)."""
_SHARED = ("spatial", "kernel", "stride", "padding", "dilation", "adaptive", "count_include_pad", "divisor",
           "ceil_mode")


@dataclass(frozen=True)
class Geometry:
    """The window over the trailing ``len(inputs)`` dims: input and output sizes per dim and either a fixed
    window (``kernel``, ``stride``, ``padding``, ``dilation``) or an ``adaptive`` one."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    adaptive: bool = False

    @classmethod
    def of(cls, node: Node, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> "Geometry":
        if node.attr("adaptive", False):
            return cls(inputs, outputs, adaptive=True)
        return cls(inputs, outputs, *(tuple(node.attr(a)) for a in ("kernel", "stride", "padding", "dilation")))

    @property
    def rank(self) -> int:
        return len(self.inputs)

    def taps(self, d: int) -> int:
        """The most taps a window has along dim ``d`` (an adaptive window's longest span)."""
        if not self.adaptive:
            return self.kernel[d]
        size, out = self.inputs[d], self.outputs[d]
        return max(-(-(o + 1) * size // out) - o * size // out for o in range(out))

    def flat_strides(self) -> tuple[int, ...]:
        """Row-major strides of the input's window dims: an argmax's flat index is ``sum(h[d] * strides[d])``."""
        strides, acc = [], 1
        for size in reversed(self.inputs):
            strides.append(acc)
            acc *= size
        return tuple(reversed(strides))


@dataclass(frozen=True)
class WindowProblem(Problem):
    """``shape`` is the iteration space: the window's output (``backward`` False) or, for a pooling gradient,
    its input. ``windows`` are the window nodes (one ``window_grad`` when ``backward``), all over ``source``
    (the pooled value; the output gradient when ``backward``) with one ``geometry``; ``index`` is the node
    holding the argmax a max pool's gradient reads (None otherwise); ``lead`` counts the dims before the
    window dims."""

    shape: tuple[int, ...]
    windows: tuple[int, ...]
    source: int
    geometry: Geometry
    backward: bool = False
    index: int | None = None

    @property
    def lead(self) -> int:
        return len(self.shape) - self.geometry.rank

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def window(self, i: int = 0) -> Node:
        return self.graph.nodes[self.windows[i]]

    def coords(self) -> tuple[str, ...]:
        """The iteration coordinate of each dim: ``c<d>`` ("0" on a size-1 dim)."""
        return tuple("0" if size == 1 else f"c{d}" for d, size in enumerate(self.shape))


class WindowTemplate(Template):
    name = "window"

    def match(self, graph: Graph) -> WindowProblem | None:
        windows = tuple(i for i, n in enumerate(graph.nodes) if n.op in WINDOW_OPS)
        if not windows or not graph.outputs:
            return None
        first = graph.nodes[windows[0]]
        backward = first.op == "window_grad"
        if backward and len(windows) > 1:
            return None
        source = first.inputs[0]
        if any(graph.nodes[w].inputs[0] != source or graph.nodes[w].op != first.op
               or any(graph.nodes[w].attr(a) != first.attr(a) for a in _SHARED) for w in windows):
            return None  # one window, one pooled value per kernel
        shape = first.spec.shape
        if any(spec.shape != shape for spec in graph.output_specs) or 0 in shape:
            return None
        allowed = ELEMENTWISE_OPS | MOVE_OPS
        if any(i not in windows and not is_input_view(graph, i) and n.op not in allowed
               for i, n in enumerate(graph.nodes)) or not renderable(graph):
            return None
        below = set(windows)  # window values exist at the output coordinate only: no move may shift them
        for i, node in enumerate(graph.nodes):
            if i not in windows and any(j in below for j in node.inputs):
                if node.op in MOVE_OPS:
                    return None
                below.add(i)
        if any(is_input_view(graph, o) for o in graph.outputs) or len(set(graph.outputs)) != len(graph.outputs):
            return None  # returning an input (or the same value twice) is a copy, not a kernel
        k = int(first.attr("spatial"))
        pooled = graph.nodes[source].spec.shape
        if len(pooled) != len(shape) or len(shape) <= k or pooled[:-k] != shape[:-k]:
            return None  # the window runs over the trailing dims of a value of the same leading shape
        inputs, outputs = (shape[-k:], pooled[-k:]) if backward else (pooled[-k:], shape[-k:])
        index = first.inputs[1] if backward and len(first.inputs) > 1 else None
        if index is not None and graph.nodes[index].spec.shape != pooled:
            return None
        return WindowProblem(graph=graph, shape=shape, windows=windows, source=source,
                             geometry=Geometry.of(first, inputs, outputs), backward=backward, index=index)


def adaptive_bounds(o: str, size: int, out: int) -> tuple[str, str]:
    """The ``[start, end)`` of adaptive window ``o`` over a dim of ``size`` pooled to ``out`` (non-negative
    integer expressions: the same text in C++ and Triton)."""
    return f"(({o}) * {size}) // {out}", f"((({o}) + 1) * {size} + {out - 1}) // {out}"


def avg_divisor(node: Node, geo: Geometry, starts: list[str], minimum: Callable[[str, str], str],
                maximum: Callable[[str, str], str]) -> str:
    """Eager's divisor of the average window at output coordinates ``starts`` (ATen's ``cpu_avg_pool``:
    ``divisor_override``, else the window clipped to the padded input when ``count_include_pad``, else to
    the input; an adaptive window's length), written with the language's integer ``minimum``/``maximum``."""
    if node.attr("divisor", 0):
        return str(int(node.attr("divisor")))
    terms = []
    for d, o in enumerate(starts):
        size = geo.inputs[d]
        if geo.adaptive:
            lo, hi = adaptive_bounds(o, size, geo.outputs[d])
            terms.append(f"({hi} - {lo})")
            continue
        start = f"(({o}) * {geo.stride[d]} - {geo.padding[d]})"
        end = minimum(f"{start} + {geo.kernel[d]}", str(size + geo.padding[d]))
        terms.append(f"({end} - {start})" if node.attr("count_include_pad", True) else
                     f"({minimum(end, str(size))} - {maximum(start, '0')})")
    return " * ".join(terms) or "1"


def rounds_each_sum(problem: "WindowProblem") -> bool:
    """Whether eager's CPU kernel rounds an average's running sum to the dtype after every tap: its 3-d adaptive
    average pool sums float16/bfloat16 in the dtype itself (measured on torch 2.13: summed in float32, 11 of 1890
    float16 outputs of an OpInfo sample differed; rounded after each add, none), where the other pools sum in
    float32. (ATen's CUDA kernel sums in float32.)"""
    node = problem.window()
    return (node.attr("reduce") == "avg" and problem.geometry.adaptive and problem.geometry.rank == 3
            and not problem.backward and problem.graph.nodes[problem.source].spec.dtype in ("float16", "bfloat16"))


def adaptive_candidates(geo: Geometry, d: int) -> int:
    """How many output windows along dim ``d`` a backward visits per input element (``[x O / I - 1,
    (x + 1) O / I + 1]``, clipped): every adaptive window holding it is among them."""
    size, out = geo.inputs[d], geo.outputs[d]
    return max(min((x + 1) * out // size + 1, out - 1) - max(x * out // size - 1, 0) + 1 for x in range(size))


TEMPLATE = WindowTemplate()
