"""Scan template, Triton renderer: one program per row (strided along the scanned dim when it is not the last),
the row a power-of-two block scanned by ``tl.cumsum`` /
``tl.cumprod`` / ``tl.associative_scan`` (logcumsumexp) in eager's accumulator type for the tensors' device (``_accumulator``). Rows longer than ``MAX_ROW`` elements are left to eager.
"""

from __future__ import annotations

import json

from kernelgen.codegen.cpp_expr import dag_nodes
from kernelgen.codegen.triton_expr import (HEADER, TL_DTYPE, ExprEmitter, compute_dtype, kernel_params,
                                           pow2_at_least, signature_json, to_storage)
from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_triton import COORDS, leaf_names
from kernelgen.templates.scan import IDENTITY, ScanProblem

ENTRY = "kg_scan"
MAX_ROW = 16384  # one block holds a row: past this a block no longer fits a program's registers


def space(problem: ScanProblem, target: Target) -> SearchSpace:
    if target.kind == "cpu":  # interpreter: timings mean nothing
        return SearchSpace([Param("num_warps", (4,))], default={"num_warps": 4})
    return SearchSpace([Param("num_warps", (1, 2, 4, 8, 16))], default={"num_warps": 4})


def _accumulator(dtype: str, interpreter: bool) -> str:
    """Eager's accumulator on the tensors' device. CPU tensors (the interpreter): ``acc_type<T, false>``, float64
    for float32 (a float32 scan of 1e5 elements drifts 20-80x further from the exact sums than eager's), float32 for
    the halves. GPUs: float32 for float32 and for the halves too, where eager's CUDA scan combines in the half type
    itself; kernelgen keeps float32 partial sums there, closer to the exact result than eager (measured on an
    H100: tests/templates/test_scan_triton.py asserts no larger error than eager's)."""
    if dtype == "float64" or (dtype == "float32" and interpreter):
        return "tl.float64"
    return "tl.float32" if dtype.startswith("float") or dtype == "bfloat16" else "tl.int64"


def row_program(problem: ScanProblem, what: str, max_row: int, entry: str) -> tuple[list[str], int, str, str]:
    """The head of a one-program-per-row kernel over ``problem``'s rows (a scan's or a sort's: both have ``rows``,
    ``length``, ``dim``, ``row_dims()`` and ``row_offsets()``): its signature, the row's coordinates and mask.
    ``(lines, block, base, along)``: the row's power-of-two block, and the offsets of the row's start and of lane
    ``k`` along the row in the outputs. ``UnsupportedOpError`` for a row past ``max_row`` elements (eager runs)."""
    graph, shape = problem.graph, problem.shape
    block = pow2_at_least(problem.length)
    if block > max_row:
        raise UnsupportedOpError(f"{what} rows of {problem.length} elements exceed the Triton {what}'s {max_row}; "
                                 "eager PyTorch runs this graph")
    extents = [sum((s - 1) * st for s, st in zip(spec.shape, spec.effective_strides())) + 1 for spec in graph.signature]
    index_64 = max([problem.rows * problem.length, *extents]) >= 2**31
    lines = ["@triton.jit", f"def {entry}({', '.join(kernel_params(graph))}, BLOCK: tl.constexpr):",
             "    r = tl.program_id(0)" + (".to(tl.int64)" if index_64 else ""),
             "    k = tl.arange(0, BLOCK)",
             f"    mask = k < {problem.length}"]
    row_dims = problem.row_dims()
    if row_dims:
        lines.append("    rem = r")
        for d in reversed(row_dims[1:]):
            lines.append(f"    i{d} = rem % {shape[d]}")
            lines.append(f"    rem = rem // {shape[d]}")
        lines.append(f"    i{row_dims[0]} = rem")
    return (lines, block, *problem.row_offsets())


def row_stores(problem: ScanProblem, emitter: ExprEmitter, outputs: list[int], base: str, along: str,
               interp: bool) -> list[str]:
    """Lines storing each output value ``outputs`` (named by ``emitter``) along the row, in its dtype."""
    lines = []
    for j, (out, spec) in enumerate(zip(outputs, problem.graph.output_specs)):
        value = to_storage(f"tl.broadcast_to({emitter.names[out]}, [BLOCK])", spec.dtype, spec.dtype, interp)
        lines.append(f"    tl.store(out{j} + {base} + {along}, {value}, mask=mask)")
    return lines


def row_meta(problem: ScanProblem, block: int, config: Config) -> FrozenMap:
    """The launch of a one-program-per-row kernel: a program per row, ``BLOCK`` lanes."""
    return FrozenMap({"signature": signature_json(problem.graph), "grid": json.dumps([problem.rows]),
                      "constexprs": json.dumps({"BLOCK": block}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1})


def render(problem: ScanProblem, config: Config, target: Target) -> Source:
    graph = problem.graph
    node = graph.nodes[problem.scan]
    dtype = node.spec.dtype
    interp = target.kind == "cpu"
    lines, block, base, along = row_program(problem, "scan", MAX_ROW, ENTRY)
    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs),
                       given={problem.scan: "sv"})
    names = leaf_names(expansion, lines, interp)  # a load whose offset has no ``k`` is one element of the row
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    emitter = ExprEmitter(g2, names, interpreter=interp)
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, [source], names))]
    acc = _accumulator(dtype, interp)
    identity = 'float("-inf")' if IDENTITY[node.op] == "-inf" else IDENTITY[node.op]
    scan = "tl.associative_scan(x, 0, kg_log_add_exp)" if node.op == "logcumsumexp" else f"tl.{node.op}(x, 0)"
    lines += [f"    x = tl.where(mask, tl.broadcast_to({emitter.names[source]}, [BLOCK]).to({acc}), {identity})",
              f"    acc = {scan}",
              f"    sv = acc.to({TL_DTYPE[compute_dtype(dtype)]})"]
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, outputs, emitter.names))]
    lines += row_stores(problem, emitter, outputs, base, along, interp)
    meta = row_meta(problem, block, config)
    prelude = COORDS.prelude + (_LOG_ADD_EXP if node.op == "logcumsumexp" else "")
    return Source("triton", HEADER + prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


# eager's _log_add_exp_helper as a scan's combine (applied in a tree, not left to right: float tolerance)
_LOG_ADD_EXP = """@triton.jit
def kg_log_add_exp(a, b):
    nan = (a != a) | (b != b)  # NaN on either side stays (the tree meets it on either side)
    mn = tl.minimum(a, b)
    mx = tl.maximum(a, b)
    keep = (mn != mx) | (tl.abs(mn) < float("inf"))
    out = tl.where(keep, tl.log(1.0 + tl.exp(tl.where(keep, mn - mx, 0.0))) + mx, a)
    return tl.where(nan, a + b, out)


"""


__all__ = ["ENTRY", "MAX_ROW", "render", "space"]
