"""C++/OpenMP renderer of the sort template: rows spread over OpenMP threads (each thread owns one key row and one
position row, allocated once), each row's positions sorted by ``std::stable_sort`` with eager's comparator.

``std::stable_sort`` on positions gives eager's stable order directly (ties keep increasing positions) and is
O(n log n) whatever the row length; rows are short next to the thread count's work, so a hand-written merge sort
would buy nothing measured. NaN is greater than every number (a strict weak order: NaNs are equivalent), and
-0.0 == 0.0 by IEEE comparison, as eager. Shape-generic over a run-time dim 0 when that dim is a row dim.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.indexing import dynamic_meta
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_cpp import COORDS, PARALLEL_MIN, leaf_env
from kernelgen.templates.scan_cpp import dynamic_rows, row_coordinates
from kernelgen.templates.sort import SortProblem

ENTRY = "kg_sort"


def space(problem: SortProblem, target: Target) -> SearchSpace:
    """Only the OpenMP schedule: one row is one task."""
    return SearchSpace([Param("schedule", ("static", "dynamic"))], default={"schedule": "static"})


def _before(dtype: str, descending: bool) -> str:
    """``a`` goes before ``b`` (strictly): eager's order, NaN the greatest value."""
    floating = dtype.startswith("float") or dtype == "bfloat16"
    if descending:
        return "a > b || (a != a && b == b)" if floating else "a > b"
    return "a < b || (b != b && a == a)" if floating else "a < b"


def render(problem: SortProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"sort config {dict(config)} is invalid: {'; '.join(problems)}")
    graph, shape = problem.graph, problem.shape
    dtype = graph.nodes[problem.source].spec.dtype
    row_dims = problem.row_dims()
    dyn, rows_c = dynamic_rows(problem)
    base, along = problem.row_offsets()

    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs), given=problem.given())
    env = leaf_env(expansion)
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    prologue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, [source], env), env)
    # the key as eager holds it: rounded to its dtype (a float16 product is a float16 tensor there)
    key = cpp_expr.load(dtype, cpp_expr.convert(dtype, env[source]))
    epilogue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, outputs, env), env)
    stores = [cpp_expr.store(spec.dtype, f"out{j}[base + {along}]", env[o])
              for j, (o, spec) in enumerate(zip(outputs, graph.output_specs))]

    lines = [cpp_expr.PRELUDE, "#include <algorithm>", "#include <vector>", COORDS.prelude,
             entry_declaration(ENTRY, dyn is not None)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    lines += [f"  typedef {cpp_expr.compute_type(dtype)} key_t;",
              f"  const int64_t rows = {rows_c}, n = {problem.length};",
              f"  #pragma omp parallel num_threads(num_threads) if(rows > 1 && rows * n >= {PARALLEL_MIN})",
              "  {",
              "  std::vector<key_t> keys(n);",
              "  std::vector<int64_t> order(n);",
              f"  #pragma omp for schedule({config['schedule']})",
              "  for (int64_t r = 0; r < rows; ++r) {"]
    lines += row_coordinates(row_dims, shape)
    lines += [f"    const int64_t base = {base};", "    for (int64_t k = 0; k < n; ++k) {"]
    lines += ["      " + line for line in prologue]
    lines += [f"      keys[k] = {key};", "      order[k] = k;", "    }",
              "    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {",
              f"      const key_t a = keys[p], b = keys[q]; return {_before(dtype, problem.descending)}; }});",
              "    for (int64_t k = 0; k < n; ++k) {",
              "      const int64_t si = order[k];",
              "      const key_t sv = keys[si];"]
    lines += ["      " + line for line in (*epilogue, *stores)]
    lines += ["    }", "  }", "  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="sort",
                                                              **dynamic_meta(graph, dyn)))


__all__ = ["ENTRY", "render", "space"]
