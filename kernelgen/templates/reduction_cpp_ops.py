"""The C++ of one reduction's accumulator, shared by the row and the column structures of the C++ reduction
template: the dtype it accumulates in, its initial value, how a value folds into it, and where a row's
element lies in a load."""

from __future__ import annotations

from kernelgen.codegen import cpp_expr
from kernelgen.ir.graph import INDEX_REDUCTIONS, Graph
from kernelgen.templates.indexing import Load, flat_offset
from kernelgen.templates.reduction import ReductionProblem


def row_offset(problem: ReductionProblem, ld: Load, index: str) -> str:
    """Offset of element ``index`` of a row from the row's start in load ``ld`` (group by group when the
    reduced dims do not merge into one stride)."""
    if not problem.grouped:
        return index if ld.strides[-1] == 1 else f"{index} * {ld.strides[-1]}"
    return flat_offset(index, problem.row_shape, problem.row_strides[problem.loads.index(ld)])


def reduction_dtype(graph: Graph, r: int) -> str:
    """The dtype reduction ``r`` compares or adds in: its input's for argmax/argmin (their result is int64)."""
    node = graph.nodes[r]
    return graph.nodes[node.inputs[0]].spec.dtype if node.op in INDEX_REDUCTIONS else node.spec.dtype


# Where one accumulator folds many values in sequence (the column structure: every row of a column; nested
# group loops: one vector partial per group, the groups in a row), float32 sums accumulate in double. In
# float, batch norm's channel sums over N*H*W lost 7x more than eager's cascade summation and, through ReLU
# masks and pool ties downstream, moved a CNN's gradients (run region by region against float64). The result
# is still rounded to float32, as the graph says. Rows of the plain structure keep float: their partial lanes
# already sum short runs, and double cost 7-20% there (softmax, layer_norm, logsumexp [8192, 4096]).
WIDE_SUMS = {"float32": "double"}


def accumulator_type(graph: Graph, r: int, wide: bool = False) -> str:
    """The C++ type reduction ``r`` accumulates in: with ``wide``, ``WIDE_SUMS`` for sums; else its compute type."""
    node = graph.nodes[r]
    dtype = reduction_dtype(graph, r)
    if wide and node.op == "sum" and dtype in WIDE_SUMS:
        return WIDE_SUMS[dtype]
    return cpp_expr.compute_type(dtype)


def initial_value(op: str, dtype: str) -> str:
    """The C++ expression an accumulator of reduction ``op`` over ``dtype`` starts from (0, 1, or the limit)."""
    if op in ("sum", "prod"):
        return cpp_expr.literal(int(op == "prod"), dtype)
    if not cpp_expr.is_float(dtype):
        limit = "max" if op == "min" else "min"
        return f"std::numeric_limits<{cpp_expr.compute_type(dtype)}>::{limit}()"
    return cpp_expr.literal("-inf" if op == "max" else "inf", dtype)


def fold(op: str, dtype: str, acc: str, value: str, accv: str | None = None, wide: bool = False) -> str:
    """Statement folding ``value`` into accumulator ``acc`` (argmax/argmin: the index, with the extreme value in
    ``accv``, default ``acc`` + "v", and ``j`` the element's index in the row); ``wide`` as ``accumulator_type``."""
    ctype = cpp_expr.compute_type(dtype)
    if op in INDEX_REDUCTIONS:  # j rises, so ties keep the first index
        accv = accv or f"{acc}v"
        cmp = ">" if op == "argmax" else "<"
        nan = f" || (xv != xv && {accv} == {accv})" if cpp_expr.is_float(dtype) else ""  # the first NaN wins
        return f"{{ const {ctype} xv = {value}; if (xv {cmp} {accv}{nan}) {{ {accv} = xv; {acc} = j; }} }}"
    if op == "sum":
        return f"{acc} += ({WIDE_SUMS.get(dtype, ctype) if wide else ctype}){value};"
    if op == "prod":  # integers wrap around as eager's (-fwrapv)
        return f"{acc} *= ({ctype}){value};"
    cmp = ">" if op == "max" else "<"
    if cpp_expr.is_float(dtype):  # nan-propagating, as amax/amin: see kg_maxf in cpp_expr.PRELUDE
        fn = {"float": "f", "double": ""}[ctype]
        return f"{acc} = kg_{op}{fn}({acc}, {value});"
    return f"{acc} = {value} {cmp} {acc} ? ({ctype}){value} : {acc};"


__all__ = ["WIDE_SUMS", "accumulator_type", "fold", "initial_value", "reduction_dtype", "row_offset"]
