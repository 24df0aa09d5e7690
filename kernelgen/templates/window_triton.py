"""Window template, Triton renderer: a 1-D grid of ``BLOCK``-element programs over the iteration space (the
pooled output, or the input of a pooling gradient); each lane walks its window's taps (unrolled with
``tl.static_range``, the taps outside the input masked) in eager's order, as the C++ renderer does: a max keeps
eager's test (the first maximum, the last NaN), an argmax the flat index of that pick, an average eager's
divisor, a gradient the windows holding the element in increasing output order.
"""

from __future__ import annotations

import json

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.cpp_expr import dag_nodes
from kernelgen.codegen.triton_expr import (HEADER, TL_DTYPE, ExprEmitter, bf16_round, compute_dtype, kernel_params,
                                           signature_json, to_storage)
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_triton import COORDS, leaf_names
from kernelgen.templates.window import (LOWEST, WindowProblem, adaptive_bounds, adaptive_candidates, avg_divisor,
                                        rounds_each_sum)

ENTRY = "kg_window"


def space(problem: WindowProblem, target: Target) -> SearchSpace:
    if target.kind == "cpu":  # interpreter: timings mean nothing, fewer programs run faster
        return SearchSpace([Param("BLOCK", (256, 1024)), Param("num_warps", (4,))], default={"BLOCK": 1024, "num_warps": 4})
    limits = gpu_limits(target)
    warp, max_threads = limits["warp_size"], limits["max_threads"]
    params = [Param("BLOCK", (64, 128, 256, 512, 1024)), Param("num_warps", (1, 2, 4, 8))]
    constraints = [Constraint(f"num_warps * {warp} threads <= {max_threads} threads per block",
                              lambda c: c["num_warps"] * warp <= max_threads),
                   Constraint("every thread owns 1..8 elements", lambda c: 1 <= c["BLOCK"] // (c["num_warps"] * warp) <= 8)]
    candidates = [{"BLOCK": 256, "num_warps": 4}, {"BLOCK": 128, "num_warps": 2}, {"BLOCK": 256, "num_warps": 2}]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def _values(problem: WindowProblem, coords: tuple[str, ...], roots: tuple[int, ...], lines: list[str],
            interp: bool, indent: str) -> list[str]:
    """Statements (appended to ``lines`` at ``indent``) computing ``roots`` at ``coords``; their names."""
    expansion = expand(problem.graph, coords, COORDS, roots=roots)
    local: list[str] = []
    names = leaf_names(expansion, local, interp)
    emitter = ExprEmitter(expansion.graph, names, interpreter=interp)
    local += ["    " + line for line in emitter.emit(dag_nodes(expansion.graph, expansion.graph.outputs, names))]
    lines += [indent + line[4:] for line in local]
    return [emitter.names[o] for o in expansion.graph.outputs]


def _divisor(problem: WindowProblem, starts: list[str], tl_type: str) -> str:
    """Eager's divisor of the average window at ``starts``, as a ``tl_type`` value (a literal when constant)."""
    text = avg_divisor(problem.window(), problem.geometry, starts, lambda a, b: f"tl.minimum({a}, {b})",
                       lambda a, b: f"tl.maximum({a}, {b})")
    return f"{text}.0" if text.isdigit() else f"({text}).to({tl_type})"


def _forward(problem: WindowProblem, lines: list[str], interp: bool) -> dict[int, str]:
    graph, geo, lead = problem.graph, problem.geometry, problem.lead
    coords = problem.coords()
    dtype = graph.nodes[problem.source].spec.dtype
    tl_type = TL_DTYPE[compute_dtype(dtype)]
    low = str(LOWEST[dtype]) if dtype in LOWEST else 'float("-inf")'
    for w in problem.windows:
        reduce = graph.nodes[w].attr("reduce")
        if reduce == "max":
            lines.append(f"    m{w} = tl.full([BLOCK], {low}, {tl_type})")
        elif reduce == "argmax":
            lines += [f"    am{w} = tl.full([BLOCK], {low}, {tl_type})", f"    ai{w} = tl.full([BLOCK], -1, tl.int64)"]
        else:
            lines.append(f"    a{w} = tl.zeros([BLOCK], {tl_type})")
    indent = "    "
    for d in range(geo.rank):
        o, size, out = coords[lead + d], geo.inputs[d], geo.outputs[d]
        if geo.adaptive:
            lo, hi = adaptive_bounds(o, size, out)
            lines += [f"{indent}s{d} = {lo}", f"{indent}e{d} = {hi}",
                      f"{indent}for k{d} in tl.static_range({geo.taps(d)}):",
                      f"{indent}    t{d} = s{d} + k{d}", f"{indent}    ok{d} = t{d} < e{d}"]
        else:
            lines += [f"{indent}s{d} = {o} * {geo.stride[d]} - {geo.padding[d]}",
                      f"{indent}for k{d} in tl.static_range({geo.kernel[d]}):",
                      f"{indent}    t{d} = s{d} + k{d} * {geo.dilation[d]}",
                      f"{indent}    ok{d} = (t{d} >= 0) & (t{d} < {size})"]
        indent += "    "
    lines.append(f"{indent}mask = lanes & {' & '.join(f'ok{d}' for d in range(geo.rank))}")
    (value,) = _values(problem, tuple(coords[:lead]) + tuple(f"t{d}" for d in range(geo.rank)), (problem.source,),
                       lines, interp, indent)
    lines.append(f"{indent}x = tl.broadcast_to({value}, [BLOCK])")
    flat = " + ".join(f"t{d} * {st}" for d, st in enumerate(geo.flat_strides()))
    for w in problem.windows:
        reduce = graph.nodes[w].attr("reduce")
        if reduce == "max":
            lines += [f"{indent}m{w} = tl.where(mask & ((x > m{w}) | (x != x)), x, m{w})"]
        elif reduce == "argmax":
            lines += [f"{indent}take{w} = mask & ((ai{w} < 0) | (x > am{w}) | (x != x))",
                      f"{indent}am{w} = tl.where(take{w}, x, am{w})",
                      f"{indent}ai{w} = tl.where(take{w}, ({flat}).to(tl.int64), ai{w})"]
        elif rounds_each_sum(problem) and interp:  # CPU tensors: eager's CPU kernel; a GPU's sums in float32
            summed = f"tl.where(mask, a{w} + x, a{w})"  # (the interpreter truncates to bfloat16: round explicitly)
            lines.append(f"{indent}a{w} = {bf16_round(summed) if dtype == 'bfloat16' else f'{summed}.to(tl.float16).to(tl.float32)'}")
        else:
            lines.append(f"{indent}a{w} += tl.where(mask, x, 0)")
    lines.append("    mask = lanes")
    given = {}
    for w in problem.windows:
        reduce = graph.nodes[w].attr("reduce")
        if reduce == "avg":
            div = _divisor(problem, [coords[lead + d] for d in range(geo.rank)], tl_type)
            lines.append(f"    w{w} = a{w} / {div}")
        else:
            lines.append(f"    w{w} = {'m' if reduce == 'max' else 'ai'}{w}")
        given[w] = f"w{w}"
    return given


def _backward(problem: WindowProblem, lines: list[str], interp: bool) -> dict[int, str]:
    graph, geo, lead = problem.graph, problem.geometry, problem.lead
    coords = problem.coords()
    w = problem.windows[0]
    tl_type = TL_DTYPE[compute_dtype(graph.nodes[w].spec.dtype)]
    lines.append(f"    g = tl.zeros([BLOCK], {tl_type})")
    indent = "    "
    for d in range(geo.rank):
        x, size, out = coords[lead + d], geo.inputs[d], geo.outputs[d]
        if geo.adaptive:  # the windows holding x are among [x O / I - 1, (x + 1) O / I + 1]
            lo, hi = adaptive_bounds(f"o{d}", size, out)
            lines += [f"{indent}ol{d} = tl.maximum(({x} * {out}) // {size} - 1, 0)",
                      f"{indent}for j{d} in tl.static_range({adaptive_candidates(geo, d)}):",
                      f"{indent}    o{d} = ol{d} + j{d}",
                      f"{indent}    ok{d} = (o{d} < {out}) & ({x} >= {lo}) & ({x} < {hi})"]
        else:  # taps from the last to the first: the windows in increasing order
            k, s, p, dil = geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
            lines += [f"{indent}for j{d} in tl.static_range({k}):",
                      f"{indent}    q{d} = {x} + {p} - ({k - 1} - j{d}) * {dil}",
                      f"{indent}    o{d} = q{d} // {s}",
                      f"{indent}    ok{d} = (q{d} >= 0) & (q{d} % {s} == 0) & (o{d} < {out})"]
        indent += "    "
    lines.append(f"{indent}mask = lanes & {' & '.join(f'ok{d}' for d in range(geo.rank))}")
    spatial = [f"o{d}" for d in range(geo.rank)]
    roots = (problem.source,) if problem.index is None else (problem.source, problem.index)
    values = _values(problem, tuple(coords[:lead]) + tuple(spatial), roots, lines, interp, indent)
    if problem.index is not None:
        here = " + ".join(f"({coords[lead + d]}) * {st}" for d, st in enumerate(geo.flat_strides()))
        lines.append(f"{indent}g += tl.where(mask & ({values[1]} == ({here})), {values[0]}, 0).to({tl_type})")
    else:
        lines.append(f"{indent}g += tl.where(mask, {values[0]} / {_divisor(problem, spatial, tl_type)}, 0)")
    lines += ["    mask = lanes", f"    w{w} = g"]
    return {w: f"w{w}"}


def render(problem: WindowProblem, config: Config, target: Target) -> Source:
    graph, shape = problem.graph, problem.shape
    block = int(config["BLOCK"])
    interp = target.kind == "cpu"
    extents = [sum((s - 1) * st for s, st in zip(spec.shape, spec.effective_strides())) + 1 for spec in graph.signature]
    index_64 = max([problem.numel, *extents]) >= 2**31
    lines = ["@triton.jit", f"def {ENTRY}({', '.join(kernel_params(graph))}, BLOCK: tl.constexpr):",
             "    pid = tl.program_id(0)" + (".to(tl.int64)" if index_64 else ""),
             "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
             f"    lanes = offs < {problem.numel}",
             "    mask = lanes"]
    inner = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1:
            coord = "offs" if inner == 1 else f"(offs // {inner})"
            lines.append(f"    c{d} = {coord if d == 0 else f'({coord} % {shape[d]})'}")
        inner *= shape[d]
    given = _backward(problem, lines, interp) if problem.backward else _forward(problem, lines, interp)
    expansion = expand(graph, problem.coords(), COORDS, given=given)
    names = leaf_names(expansion, lines, interp)
    emitter = ExprEmitter(expansion.graph, names, interpreter=interp)
    lines += ["    " + line for line in emitter.emit(dag_nodes(expansion.graph, expansion.graph.outputs, names))]
    for j, (out, spec) in enumerate(zip(expansion.graph.outputs, graph.output_specs)):
        value = to_storage(f"tl.broadcast_to({emitter.names[out]}, [BLOCK])", graph.nodes[graph.outputs[j]].spec.dtype,
                           spec.dtype, interp)
        lines.append(f"    tl.store(out{j} + offs, {value}, mask=lanes)")
    meta = FrozenMap({"signature": signature_json(graph), "grid": json.dumps([-(-problem.numel // block)]),
                      "constexprs": json.dumps({"BLOCK": block}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1})
    return Source("triton", HEADER + COORDS.prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


__all__ = ["ENTRY", "render", "space"]
