"""Search template, Triton renderer: ``BLOCK`` elements per program, each lane running eager's binary search
(``kernelgen.templates.search``) as a fixed number of masked bisection steps (``count.bit_length()``: the most a
search over ``count`` boundaries takes; a lane whose interval is empty keeps it)."""

from __future__ import annotations

import json

from kernelgen.codegen.cpp_expr import dag_nodes
from kernelgen.codegen.triton_expr import HEADER, ExprEmitter, kernel_params, signature_json, to_storage
from kernelgen.codegen.triton_types import to_compute
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_triton import COORDS, leaf_names
from kernelgen.templates.search import SearchProblem

ENTRY = "kg_search"


def space(problem: SearchProblem, target: Target) -> SearchSpace:
    if target.kind == "cpu":  # interpreter: timings mean nothing
        return SearchSpace([Param("BLOCK", (256,)), Param("num_warps", (4,))], default={"BLOCK": 256, "num_warps": 4})
    return SearchSpace([Param("BLOCK", (128, 256, 512, 1024)), Param("num_warps", (2, 4, 8))],
                       default={"BLOCK": 256, "num_warps": 4})


def render(problem: SearchProblem, config: Config, target: Target) -> Source:
    graph, shape = problem.graph, problem.shape
    dtype = graph.nodes[problem.source].spec.dtype
    interp = target.kind == "cpu"
    block = int(config["BLOCK"])
    lines = ["@triton.jit", f"def {ENTRY}({', '.join(kernel_params(graph))}, BLOCK: tl.constexpr):",
             "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             f"    mask = offs < {problem.numel}"]
    inner = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1:
            lines.append(f"    c{d} = (offs // {inner}) % {shape[d]}")
        inner *= shape[d]
    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs),
                       given={problem.search: "bv"})
    names = leaf_names(expansion, lines, interp)
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    emitter = ExprEmitter(g2, names, interpreter=interp)
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, [source], names))]
    x = to_compute(to_storage(f"tl.broadcast_to({emitter.names[source]}, [BLOCK])", dtype, dtype, interp), dtype, interp)
    test = "m > x" if problem.right else "m >= x"
    lines += [f"    x = {x}", "    lo = tl.zeros([BLOCK], tl.int64)", f"    hi = tl.full([BLOCK], {problem.count}, tl.int64)"]
    for _ in range(problem.count.bit_length()):
        boundary = to_compute(f"tl.load(in{problem.arg} + tl.minimum(mid, {problem.count - 1}) * {problem.stride}, "
                              "mask=mask & open_, other=0)", dtype, interp)
        lines += ["    open_ = lo < hi", "    mid = lo + (hi - lo) // 2", f"    m = {boundary}",
                  f"    right = ({test}) == 0",  # eager's !(test): NaN goes right
                  "    lo = tl.where(open_ & right, mid + 1, lo)", "    hi = tl.where(open_ & (right == 0), mid, hi)"]
    bucket = graph.nodes[problem.search].spec.dtype
    lines.append(f"    bv = lo.to(tl.{bucket})")
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, outputs, emitter.names))]
    for j, (out, spec) in enumerate(zip(outputs, graph.output_specs)):
        stored = to_storage(f"tl.broadcast_to({emitter.names[out]}, [BLOCK])", spec.dtype, spec.dtype, interp)
        lines.append(f"    tl.store(out{j} + offs, {stored}, mask=mask)")
    grid = (problem.numel + block - 1) // block
    meta = FrozenMap({"signature": signature_json(graph), "grid": json.dumps([grid]),
                      "constexprs": json.dumps({"BLOCK": block}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1})
    return Source("triton", HEADER + COORDS.prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


__all__ = ["ENTRY", "render", "space"]
