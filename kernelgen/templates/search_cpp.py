"""C++/OpenMP renderer of the search template: a flat loop over the elements, spread over OpenMP threads, each
running eager's binary search (``kernelgen.templates.search``) over the boundaries."""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_cpp import COORDS, PARALLEL_MIN, leaf_env
from kernelgen.templates.search import SearchProblem

ENTRY = "kg_search"


def space(problem: SearchProblem, target: Target) -> SearchSpace:
    return SearchSpace([Param("schedule", ("static", "dynamic"))], default={"schedule": "static"})


def render(problem: SearchProblem, config: Config, target: Target) -> Source:
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"search config {dict(config)} is invalid: {'; '.join(problems)}")
    graph, shape = problem.graph, problem.shape
    dtype = graph.nodes[problem.source].spec.dtype
    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs),
                       given={problem.search: "bv"})
    env = leaf_env(expansion)
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    prologue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, [source], env), env)
    epilogue = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, outputs, env), env)
    ct = cpp_expr.compute_type(dtype)
    test = "m > x" if problem.right else "m >= x"
    boundary = cpp_expr.load(dtype, f"in{problem.arg}[mid * {problem.stride}]")
    body = [*prologue, f"const {ct} x = {cpp_expr.load(dtype, cpp_expr.convert(dtype, env[source]))};",
            f"int64_t lo = 0, hi = {problem.count};",
            "while (lo < hi) {",
            "  const int64_t mid = lo + (hi - lo) / 2;",
            f"  const {ct} m = {boundary};",
            f"  if (!({test})) lo = mid + 1; else hi = mid;  // eager's tests: NaN goes right",
            "}",
            f"const {cpp_expr.compute_type(graph.nodes[problem.search].spec.dtype)} bv = lo;",
            *epilogue,
            *(cpp_expr.store(spec.dtype, f"out{j}[i]", env[o]) for j, (o, spec) in enumerate(zip(outputs, graph.output_specs)))]
    lines = [cpp_expr.PRELUDE, COORDS.prelude, entry_declaration(ENTRY, False)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    lines += [f"  const int64_t total = {problem.numel};",
              f"  #pragma omp parallel for schedule({config['schedule']}) num_threads(num_threads) "
              f"if(total >= {PARALLEL_MIN})",
              "  for (int64_t i = 0; i < total; ++i) {"]
    inner = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1:
            lines.append(f"    const int64_t c{d} = (i / {inner}) % {shape[d]};")
        inner *= shape[d]
    lines += ["    " + line for line in body] + ["  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="search"))


__all__ = ["ENTRY", "render", "space"]
