"""kernelgen's IR: a small, frozen dataflow ``Graph`` of primitive ``Node``s, traced from plain PyTorch.

``kernelgen.trace(fn, *inputs)`` (``kernelgen.frontend.capture``) runs ``torch.fx.symbolic_trace`` and
lowers every fx node (``kernelgen.lowering``) to the primitive ops in ``OPS``; ``GraphBuilder`` is how the
lowering appends them. Composite ops are decomposed at trace time (mean, var, softmax, log_softmax, logsumexp,
layer_norm, linear, addmm), so templates see few ops and match by structure, not by name.

Conventions every template and renderer relies on:
- Nodes are in topological order; ``Node.inputs`` index earlier nodes. ``input`` nodes come first, in
  argument order. Equal nodes are merged (CSE), so a value used twice is one node.
- Elementwise ops broadcast their inputs numpy-style to ``node.spec.shape``.
- Reductions (``sum``, ``prod``, ``max``, ``min``, ``argmax``, ``argmin``) run over the dims of their ``dims`` attribute
  (sorted; absent: the last dim) and keep them (size 1). ``argmax``/``argmin`` give the int64 flat index, over
  the reduced dims in row-major order, of the first extreme value (NaN counts as the maximum).
- Arithmetic of float16/bfloat16/float32 values is done in float32; only stored outputs and ``cast``
  nodes round to the node's dtype. ``const`` nodes are scalars of shape ``()``.
- The structural hash depends on ops, attributes, specs and wiring only: never on Python names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.errors import TraceError, UnsupportedOpError
from kernelgen.ir.values import TensorSpec, content_hash

UNARY_OPS = frozenset({
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "relu", "silu", "gelu",
    "reciprocal", "cast",
    "expm1", "log1p", "log2", "log10", "exp2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "floor", "ceil", "round", "trunc", "sign", "isnan", "isinf", "isfinite",
    "logical_not", "bitwise_not", "clone",
})
BINARY_OPS = frozenset({
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor", "atan2", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "fmod", "remainder", "floor_divide",
})
"""Elementwise ops past the first line of each set are named after the torch function they compute (with its
semantics: floor_divide and remainder round as Python does, shifts past the width give 0 or the sign; ``clone`` is
its input's value, written to a fresh output: what a region whose result is an input's value computes)."""
PREDICATE_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                           "logical_not", "isnan", "isinf", "isfinite"})
"""Elementwise ops whose result is bool whatever their inputs."""
ELEMENTWISE_OPS = UNARY_OPS | BINARY_OPS | {"where", "const"}
REDUCTION_OPS = frozenset({"sum", "prod", "max", "min", "argmax", "argmin"})
INDEX_REDUCTIONS = frozenset({"argmax", "argmin"})
"""Reductions whose result is the int64 position of the extreme value, not a value."""
VIEW_OPS = frozenset({"reshape", "transpose"})  # reshape only adds/drops size-1 dims; transpose swaps the last two
MOVE_OPS = frozenset({"cat", "pad", "gather", "slice_scatter", "select_scatter", "diagonal", "diagonal_scatter",
                      "take_along", "unfold"})
"""Data movement that a template renders as index arithmetic (``kernelgen.templates.moves``), never a copy:
``cat(a, b, ...; dim)`` of same-rank values along ``dim``; ``pad(x, fill; pads)`` with ``pads`` one
``(before, after)`` pair per dim (negative crops) and ``fill`` outside the window; ``gather(x, index)`` the rows
``x[index]`` (an integer tensor indexing dim 0, as ``embedding`` and ``x[index]``: shape index.shape +
x.shape[1:]; ``wrap``: negative indices count from the end, as ``x[index]``, else they are out of range, as in
``embedding``); an index out of range raises eager's ``IndexError`` before the kernel runs (``kernelgen.runtime.bounds``), and
the kernel itself clamps it to the nearest row, so it never reads out of bounds. ``slice_scatter(x, src; dim, start, end,
step)`` is ``x`` with ``x[.., start:end:step, ..]`` (along ``dim``) replaced by ``src``; ``select_scatter(x, src; dim,
index)`` is ``x`` with ``x.select(dim, index)`` replaced by ``src``; ``diagonal(x; offset, dim1, dim2)`` is
``torch.diagonal(x, offset, dim1, dim2)`` as a new tensor (``diagonal_copy``); ``diagonal_scatter(x, src; offset, dim1,
dim2)`` is ``x`` with that diagonal replaced by ``src`` (the functional forms of writes into views); ``take_along(x, index;
dim)`` is ``torch.gather(x, dim, index)`` (an index out of range raises eager's ``RuntimeError`` before the kernel
runs); ``unfold(x; dim, size, step)`` is ``x.unfold(dim, size, step)`` as a new tensor (``unfold_copy``)."""
SCAN_OPS = frozenset({"cumsum", "cumprod", "logcumsumexp"})
"""Inclusive scans along dim ``dim`` (same shape as their input, which is already in the node's dtype). Eager's
accumulator: int64 for integers, float32 for float16/bfloat16, float64 for float32 on CPU. ``logcumsumexp`` (floats
only) combines as eager's ``log_add_exp``: ``log1p(exp(min - max)) + max``, NaN propagating, equal infinities kept."""
WINDOW_OPS = frozenset({"window", "window_grad"})
"""Reductions over a sliding window of the trailing ``len(kernel)`` dims (pooling: Inductor's and XLA's
reduce-window). ``window(x)`` reduces each output position's window of ``x``: ``reduce`` is ``max`` (NaN wins),
``argmax`` (the int64 flat index, over the input's window dims, of eager's pick: the first maximum, or the last
NaN), or ``avg`` (the sum over the in-bounds taps divided as eager does: ``divisor`` when not 0, else the window
clipped to the padded input when ``count_include_pad``, else to the input). A fixed window has ``kernel``,
``stride``, ``padding``, ``dilation`` (one entry per window dim); an ``adaptive`` one spans
``[floor(o * I / O), ceil((o + 1) * I / O))`` on each dim. The output's window dims are the node's shape.
``window_grad(grad[, index])`` is the gradient of such a window with respect to its input (the node's shape):
each input element sums, over the windows holding it in increasing output order (eager's order), ``grad`` where
``index`` names it (``reduce="max"``) or ``grad`` divided by the window's divisor (``reduce="avg"``)."""
SCATTER_OPS = frozenset({"scatter", "index_put"})
"""Writes at computed positions, out of place: the result is ``x`` (input 0) with the elements of ``src`` (input 2)
combined in at the positions an integer ``index`` (input 1) names along dim ``dim``, in eager's order (row-major
over the index), by ``reduce``: ``none`` (the last write wins), ``sum``, ``prod``, ``amax``, ``amin`` (NaN wins);
with ``include_self`` False a written position starts from the reduction's identity instead of ``x``.
``scatter(x, index, src)`` is ``torch.scatter``'s: element ``p`` of ``index`` (no larger than ``src`` and, but
along ``dim``, than ``x``) goes to ``p`` with its ``dim`` coordinate replaced by ``index[p]``. ``index_put(x, index,
src)`` is ``x[..., index, ...] (+)= src`` along ``dim`` (``index_put``, ``index_add``, the embedding backward): the
whole of ``index`` (any shape ``S``) replaces dim ``dim``, ``src`` has ``x``'s shape with that dim replaced by ``S``.
An index out of range raises ``error`` (eager's type) before the kernel runs (``kernelgen.runtime.bounds``) when
``checked``; ``wrap``: a negative index counts from the end; the kernel clamps whatever remains into range.
``opmath``: float16/bfloat16 values combine in float32, rounded once at the end (eager's scatter reductions and
index_add), else at every step (eager's index_put)."""
SORT_OPS = frozenset({"sort", "argsort"})
"""A stable sort along dim ``dim`` (``descending`` or not) of their one input, same shape: ``sort`` gives the values
(the input's dtype), ``argsort`` the int64 positions along ``dim`` they came from. Eager's order: NaN greater than
everything (last ascending, first descending), -0.0 equal to 0.0, ties (equal keys) in increasing position."""
SEARCH_OPS = frozenset({"bucketize"})
"""``bucketize(x, boundaries; right)``: per element of ``x`` (already in the comparison dtype), eager's binary search
over the 1-d ``boundaries`` (an input of that dtype): the first position whose boundary is not below ``x`` (``right``:
not at or below it), int64 or int32 as the node's dtype; NaN searches to the end as eager's does."""
OPS = ELEMENTWISE_OPS | REDUCTION_OPS | VIEW_OPS | MOVE_OPS | SCAN_OPS | WINDOW_OPS | SCATTER_OPS | SORT_OPS | SEARCH_OPS | {
    "input", "matmul", "conv", "attention", "attention_lse", "attention_grad", "custom_call"}
"""Every op a Graph may hold. Attributes: input(index), const(value), gelu(approximate: "none"|"tanh"),
reduction ops (dims: the reduced dims, absent for the last one; always keepdim), attention(causal, scale) reading
(q, k, v[, mask]), attention_lse (the same inputs and attributes: the row logsumexp of that attention's scores),
attention_grad(part: "q" | "k" | "v", causal, scale) reading (grad_out, q, k, v, out, lse[, mask]): the gradient of that
attention with respect to q, k or v, recomputed from the saved logsumexp as ATen's flash backward does,
custom_call(name), conv(stride, padding, dilation, groups) reading (x, weight[, bias]): ATen's
non-transposed ``convolution`` over the trailing ``len(stride)`` dims (1 to 3), cat(dim), pad(pads), gather(wrap), cumsum/cumprod/logcumsumexp(dim), window/window_grad(reduce, kernel, stride,
padding, dilation, adaptive, count_include_pad, divisor), scatter/index_put(dim, reduce, include_self, checked, wrap,
error, opmath), sort/argsort(dim, descending), bucketize(right). An ``input`` read as an operand of
``CONSTANT_OPERANDS`` (directly or through ``VIEW_OPS``) may carry ``constant=True``: a parameter or buffer of an
inference graph, whose values a kernel may prepare once (a packed weight) and reuse until the tensor changes."""
CONSTANT_OPERANDS: dict[str, tuple[int, ...]] = {"conv": (1,), "matmul": (1,)}
"""Ops whose operands at these positions are marked ``constant`` when the front end knows the input is one (the
convolution's weight, which oneDNN can reorder once; a matmul's B, a Linear's weight seen through its transpose,
which MKL can pack once): only there, so the keys of other regions do not change."""


@dataclass(frozen=True)
class Node:
    """One value: the op that makes it, the nodes it reads, its attributes and its tensor spec."""

    op: str
    inputs: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    spec: TensorSpec

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "inputs": list(self.inputs), "attrs": {k: v for k, v in self.attrs},
                "spec": self.spec.to_json()}


@dataclass(frozen=True)
class Graph:
    """A traced subgraph: nodes in topological order and the indices of its outputs."""

    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    # Shape-generic graphs (``kernelgen.runtime.dynamic``): every node dim 0 of this size is the run-time
    # batch size, passed to the kernel as an argument. 0: a static graph (and no key change for those).
    dynamic: int = 0

    @property
    def input_ids(self) -> tuple[int, ...]:
        return tuple(i for i, n in enumerate(self.nodes) if n.op == "input")

    @property
    def signature(self) -> tuple[TensorSpec, ...]:
        """The inputs' specs, in argument order: the problem signature."""
        return tuple(self.nodes[i].spec for i in self.input_ids)

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(self.nodes[i].spec for i in self.outputs)

    def users(self) -> dict[int, list[int]]:
        users: dict[int, list[int]] = {i: [] for i in range(len(self.nodes))}
        for i, node in enumerate(self.nodes):
            for j in node.inputs:
                users[j].append(i)
        return users

    def ops(self) -> set[str]:
        return {n.op for n in self.nodes}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"nodes": [n.to_json() for n in self.nodes], "outputs": list(self.outputs)}
        if self.dynamic:
            data["dynamic"] = self.dynamic
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Graph":
        # JSON turns tuple attributes (a reduction's dims) into lists: back to tuples, so nodes stay hashable
        nodes = tuple(Node(n["op"], tuple(n["inputs"]),
                           tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in n["attrs"].items())),
                           TensorSpec.from_json(n["spec"])) for n in data["nodes"])
        return cls(nodes, tuple(data["outputs"]), int(data.get("dynamic", 0)))

    @property
    def workload_key(self) -> str:
        """Structural hash of the graph and its problem signature (shapes, dtypes, strides)."""
        return content_hash(self.to_json(), 24)

    @property
    def family_key(self) -> str:
        """Structural hash with shapes abstracted to ranks: graphs that differ only in sizes share it."""
        abstract = self.to_json()
        for node in abstract["nodes"]:
            node["spec"] = {"rank": len(node["spec"]["shape"]), "dtype": node["spec"]["dtype"]}
            if node["op"] in ("const", "attention", "attention_lse", "attention_grad"):
                node["attrs"] = {k: v for k, v in node["attrs"].items() if k not in ("value", "scale")} | (
                    {"value": node["attrs"]["value"]} if node["op"] == "const" else {})
        return content_hash(abstract, 24)

    def __str__(self) -> str:
        lines = []
        for i, n in enumerate(self.nodes):
            attrs = ", ".join(f"{k}={v!r}" for k, v in n.attrs)
            args = ", ".join(f"%{j}" for j in n.inputs)
            lines.append(f"%{i} = {n.op}({args}{', ' if args and attrs else ''}{attrs}) : "
                         f"{n.spec.dtype}{list(n.spec.shape)}")
        lines.append("return " + ", ".join(f"%{i}" for i in self.outputs))
        return "\n".join(lines)


def encode_pads(pairs: Sequence[tuple[int, int]]) -> str:
    """A ``pad`` node's ``pads`` attribute: ``before:after`` per dim, comma separated (a string, so the graph's
    JSON round trip gives back an equal, hashable node)."""
    return ",".join(f"{lo}:{hi}" for lo, hi in pairs)


def pad_pairs(node: Node) -> tuple[tuple[int, int], ...]:
    """The ``(before, after)`` pair of every dim of a ``pad`` node."""
    text = node.attr("pads", "")
    return tuple((int(lo), int(hi)) for lo, hi in (part.split(":") for part in text.split(","))) if text else ()


# ----------------------------------------------------------------------------------------------- shapes

def reduced_dims(node: Node, rank: int) -> tuple[int, ...]:
    """The dims reduction ``node`` runs over, for an input of ``rank``: its ``dims`` attribute or the last."""
    dims = node.attr("dims")
    return tuple(dims) if dims is not None else (rank - 1,)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise TraceError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


_FLOAT_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
               "float16": 5, "bfloat16": 5, "float32": 6, "float64": 7}


def _default_float_dtype() -> str:
    import torch

    return str(torch.get_default_dtype()).removeprefix("torch.")


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


# ---------------------------------------------------------------------------------------------- builder

class GraphBuilder:
    """Appends nodes with common-subexpression elimination, so equal values become one node."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._index: dict[Node, int] = {}

    def add(self, op: str, inputs: Sequence[int], spec: TensorSpec, **attrs: Any) -> int:
        node = Node(op, tuple(inputs), tuple(sorted(attrs.items())), spec)
        if op != "input" and node in self._index:
            return self._index[node]
        self.nodes.append(node)
        self._index[node] = len(self.nodes) - 1
        return len(self.nodes) - 1

    def spec(self, i: int) -> TensorSpec:
        return self.nodes[i].spec

    def mark_constants(self, indices: Sequence[int] | frozenset[int]) -> None:
        """Mark ``constant=True`` on the inputs of argument positions ``indices`` that some node reads as one of its
        ``CONSTANT_OPERANDS``, directly or through view nodes (a Linear's weight reaches its matmul as a transpose
        of the input); call after the last node is added: the marked inputs are new nodes."""
        wanted = set(indices)
        for node in list(self.nodes):
            for position in CONSTANT_OPERANDS.get(node.op, ()):
                j = node.inputs[position] if position < len(node.inputs) else None
                while j is not None and self.nodes[j].op in VIEW_OPS:
                    j = self.nodes[j].inputs[0]
                operand = None if j is None else self.nodes[j]
                if operand is not None and operand.op == "input" and operand.attr("index") in wanted \
                        and not operand.attr("constant"):
                    self.nodes[j] = Node("input", (), tuple(sorted((*operand.attrs, ("constant", True)))), operand.spec)

    def const(self, value: float | int | bool, dtype: str) -> int:
        if isinstance(value, float) and not math.isfinite(value):
            value = "inf" if value > 0 else ("-inf" if value < 0 else "nan")  # JSON has no inf/nan
        return self.add("const", (), TensorSpec((), dtype), value=value)

    def elementwise(self, op: str, inputs: Sequence[int], dtype: str | None = None, **attrs: Any) -> int:
        specs = [self.spec(i) for i in inputs]
        shape = broadcast_shapes(*(s.shape for s in specs))
        if dtype is None:
            if op in PREDICATE_OPS:
                dtype = "bool"
            else:
                dtype = max((s.dtype for s in specs if not (op == "where" and s is specs[0])),
                            key=lambda d: _FLOAT_RANK[d])
        return self.add(op, inputs, TensorSpec(shape, dtype), **attrs)

    def reduce(self, op: str, x: int, dims: Sequence[int] | None = None) -> int:
        """Reduction ``op`` of node ``x`` over ``dims`` (None: the last dim), keeping them as size 1."""
        spec = self.spec(x)
        if spec.rank == 0:
            raise UnsupportedOpError(f"reduction {op} of a scalar; reduce a tensor of rank >= 1")
        reduced = tuple(sorted({d % spec.rank for d in dims})) if dims is not None else (spec.rank - 1,)
        shape = tuple(1 if d in reduced else size for d, size in enumerate(spec.shape))
        dtype = "int64" if op in INDEX_REDUCTIONS else spec.dtype
        # the last dim alone carries no attribute: the graphs (and keys) of row reductions stay as they were
        attrs = {} if reduced == (spec.rank - 1,) else {"dims": reduced}
        return self.add(op, (x,), TensorSpec(shape, dtype), **attrs)

    def scalar_or_node(self, value: Any, like: int) -> int:
        """A Python scalar as a const in the dtype eager gives ``tensor(like) op value`` (torch.result_type:
        a scalar only lifts the tensor's category: an int to a bool tensor gives int64, a float to an integer
        or bool tensor gives the default float dtype)."""
        if isinstance(value, NodeRef):
            return int(value)
        dtype = self.spec(like).dtype
        if isinstance(value, float) and not _is_float(dtype):
            dtype = _default_float_dtype()
        elif isinstance(value, int) and not isinstance(value, bool) and dtype == "bool":
            dtype = "int64"
        return self.const(value, dtype)


class NodeRef(int):
    """An fx value lowered to node index ``int(self)``; distinguishes node ids from Python scalars."""



def prune(graph: Graph) -> Graph:
    """Drop nodes no output depends on (inputs are always kept) and renumber."""
    live = set(graph.outputs) | set(graph.input_ids)
    for i in range(len(graph.nodes) - 1, -1, -1):
        if i in live:
            live.update(graph.nodes[i].inputs)
    remap: dict[int, int] = {}
    nodes = []
    for i, node in enumerate(graph.nodes):
        if i in live:
            remap[i] = len(nodes)
            nodes.append(Node(node.op, tuple(remap[j] for j in node.inputs), node.attrs, node.spec))
    return Graph(tuple(nodes), tuple(remap[i] for i in graph.outputs))


__all__ = ["CONSTANT_OPERANDS", "Graph", "Node", "OPS", "ELEMENTWISE_OPS", "INDEX_REDUCTIONS", "MOVE_OPS", "PREDICATE_OPS", "REDUCTION_OPS",
           "SCAN_OPS", "SCATTER_OPS", "SEARCH_OPS", "SORT_OPS", "WINDOW_OPS", "GraphBuilder", "NodeRef", "broadcast_shapes", "encode_pads", "pad_pairs", "prune", "reduced_dims"]
