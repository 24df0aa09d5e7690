"""C++/OpenMP renderer of the scan template: rows spread over OpenMP threads, each scanned sequentially along
the scanned dim (strided when it is not the last).

The accumulator is eager's CPU one (``kernelgen.templates.scan.ACCUMULATOR``: double for float32, int64 for
every integer, with two's-complement wraparound), and rows are scanned in eager's order, so a cumsum is
eager's value to the bit. Shape-generic over a run-time dim 0 (``n0``) when that dim is a row dim.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.indexing import dynamic_meta, dynamic_source
from kernelgen.templates.moves import expand, touches_dim0
from kernelgen.templates.pointwise_cpp import COORDS, PARALLEL_MIN, leaf_env
from kernelgen.templates.scan import IDENTITY, ScanProblem, accumulator

ENTRY = "kg_scan"
_INFIX = {"cumsum": "+", "cumprod": "*"}


def space(problem: ScanProblem, target: Target) -> SearchSpace:
    """Only the OpenMP schedule: one row is one task (a row's scan is sequential)."""
    return SearchSpace([Param("schedule", ("static", "dynamic"))], default={"schedule": "static"})


def _update(op: str, dtype: str, x: str) -> str:
    """``acc = acc op x`` in the accumulator; integers wrap as eager's int64 does (unsigned arithmetic, no UB);
    logcumsumexp is eager's ``_log_add_exp_helper(x, acc)``."""
    if op == "logcumsumexp":
        return (f"{{ const acc_t xv = (acc_t)({x}); const bool nan = acc != acc;"
                " const acc_t mn = nan ? acc : (acc < xv ? acc : xv), mx = nan ? acc : (xv < acc ? acc : xv);"
                " acc = (mn != mx || std::isfinite(mn)) ? std::log1p(std::exp(mn - mx)) + mx : xv; }")
    if dtype.startswith("float") or dtype == "bfloat16":
        return f"acc = acc {_INFIX[op]} (acc_t)({x});"
    return f"acc = (int64_t)((uint64_t)acc {_INFIX[op]} (uint64_t)(int64_t)({x}));"


def row_coordinates(row_dims: list[int], shape: tuple) -> list[str]:
    """C++ defining ``i<d>`` for each row dim from the row index ``r`` (outermost first; the outermost needs no
    size, so it may be the run-time ``n0``)."""
    if not row_dims:
        return []
    lines = ["    int64_t rem = r;"]
    for d in reversed(row_dims[1:]):
        lines.append(f"    const int64_t i{d} = rem % {shape[d]}; rem /= {shape[d]};")
    return lines + [f"    const int64_t i{row_dims[0]} = rem;"]


def dynamic_rows(problem: ScanProblem) -> tuple[int | None, str]:
    """The input whose dim 0 is the run-time batch size (None: static) and the C++ row count. A run-time dim 0
    must be a row dim (the outermost): a scan or sort along it renders static."""
    graph = problem.graph
    dyn = dynamic_source(graph, problem.shape) if problem.dim != 0 and not touches_dim0(graph) else None
    return dyn, f"n0 * {problem.rows // graph.dynamic}" if dyn is not None else str(problem.rows)


def render(problem: ScanProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"scan config {dict(config)} is invalid: {'; '.join(problems)}")
    graph, shape = problem.graph, problem.shape
    node = graph.nodes[problem.scan]
    dtype = node.spec.dtype
    row_dims = problem.row_dims()
    dyn, rows_c = dynamic_rows(problem)
    base, along = problem.row_offsets()

    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs),
                       given={problem.scan: "sv"})
    env = leaf_env(expansion)
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    prologue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, [source], env), env)
    step = [_update(node.op, dtype, env[source]),
            f"const {cpp_expr.compute_type(dtype)} sv = ({cpp_expr.compute_type(dtype)})acc;"]
    epilogue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, outputs, env), env)
    stores = [cpp_expr.store(spec.dtype, f"out{j}[base + {along}]", env[o])
              for j, (o, spec) in enumerate(zip(outputs, graph.output_specs))]

    lines = [cpp_expr.PRELUDE, COORDS.prelude, entry_declaration(ENTRY, dyn is not None)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    lines += [f"  typedef {cpp_expr.compute_type(accumulator(dtype))} acc_t;",
              f"  const int64_t rows = {rows_c}, n = {problem.length};",
              f"  #pragma omp parallel for schedule({config['schedule']}) num_threads(num_threads) "
              f"if(rows > 1 && rows * n >= {PARALLEL_MIN})",
              "  for (int64_t r = 0; r < rows; ++r) {"]
    lines += row_coordinates(row_dims, shape)
    start = IDENTITY[node.op] if not isinstance(IDENTITY[node.op], str) else \
        cpp_expr.literal(IDENTITY[node.op], accumulator(dtype))
    lines += [f"    const int64_t base = {base};", f"    acc_t acc = {start};",
              "    for (int64_t k = 0; k < n; ++k) {"]
    lines += ["      " + line for line in (*prologue, *step, *epilogue, *stores)]
    lines += ["    }", "  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="scan",
                                                              **dynamic_meta(graph, dyn)))


__all__ = ["ENTRY", "render", "row_coordinates", "space"]
