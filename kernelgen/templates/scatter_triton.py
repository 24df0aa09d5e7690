"""Scatter template, Triton renderer: one program per task (a tile of ``BLOCK`` columns along the last kept dim, one
position of the other kept dims), its lanes the tile's columns. A program copies ``x`` into its columns, then
walks the index in eager's order, each lane reading, combining and writing its own column: no two lanes or
programs ever touch one element, so there are no atomics and the result does not depend on scheduling.
"""

from __future__ import annotations

import json

from kernelgen.codegen.cpp_expr import dag_nodes
from kernelgen.codegen.triton_expr import (HEADER, TL_DTYPE, ExprEmitter, compute_dtype, kernel_params, signature_json,
                                           to_compute, to_storage)
from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand, fit
from kernelgen.templates.pointwise_triton import COORDS, leaf_names
from kernelgen.templates.scatter import ScatterProblem, buffered, identity, offset

ENTRY = "kg_scatter"


def space(problem: ScatterProblem, target: Target) -> SearchSpace:
    if target.kind == "cpu":  # interpreter: timings mean nothing
        return SearchSpace([Param("BLOCK", (64,)), Param("num_warps", (4,))], default={"BLOCK": 64, "num_warps": 4})
    return SearchSpace([Param("BLOCK", (32, 64, 128, 256)), Param("num_warps", (1, 2, 4))],
                       default={"BLOCK": 128, "num_warps": 4})


def _values(problem: ScatterProblem, coords: tuple[str, ...], root: int, lines: list[str], indent: str,
            interp: bool) -> str:
    expansion = expand(problem.graph, coords, COORDS, roots=(root,))
    local: list[str] = []
    names = leaf_names(expansion, local, interp)
    emitter = ExprEmitter(expansion.graph, names, interpreter=interp)
    local += ["    " + line for line in emitter.emit(dag_nodes(expansion.graph, expansion.graph.outputs, names))]
    lines += [indent + line[4:] for line in local]
    return emitter.names[expansion.graph.outputs[0]]


def _combine(reduce: str, old: str, new: str) -> str:
    return {"none": new, "sum": f"({old} + {new})", "prod": f"({old} * {new})",
            "amax": f"tl.where({new} != {new}, {new}, tl.where({old} < {new}, {new}, {old}))",
            "amin": f"tl.where({new} != {new}, {new}, tl.where({new} < {old}, {new}, {old}))"}[reduce]


def render(problem: ScatterProblem, config: Config, target: Target) -> Source:
    graph, shape, d = problem.graph, problem.shape, problem.dim
    interp = target.kind == "cpu"
    if buffered(problem) and interp:  # eager's CPU kernel sums float16 in float32 over the whole walk
        raise UnsupportedOpError("a float16/bfloat16 scatter reduction sums in float32 in eager's CPU kernel, which "
                                 "the Triton kernel's per-step rounding would not match; eager PyTorch runs it")
    node = graph.nodes[problem.node]
    dtype = node.spec.dtype
    block = int(config["BLOCK"])
    columns = problem.columns
    inner = columns[-1] if columns else None
    outer = columns[:-1]
    tiles = -(-shape[inner] // block) if inner is not None else 1
    tasks = tiles
    for e in outer:
        tasks *= shape[e]
    coords = {e: f"c{e}" for e in range(len(shape))}
    names = tuple(coords[e] if shape[e] != 1 else "0" for e in range(len(shape)))
    lines = ["@triton.jit", f"def {ENTRY}({', '.join(kernel_params(graph))}, BLOCK: tl.constexpr):",
             "    rem = tl.program_id(0).to(tl.int64)"]
    if inner is not None:
        lines += [f"    c{inner} = (rem % {tiles}) * BLOCK + tl.arange(0, BLOCK)", f"    rem = rem // {tiles}",
                  f"    lanes = c{inner} < {shape[inner]}"]
    else:
        lines.append("    lanes = tl.arange(0, BLOCK) < 1  # one column: one lane")
    for e in reversed(outer):
        lines += [f"    c{e} = rem % {shape[e]}", f"    rem = rem // {shape[e]}"]
    lines.append("    mask = lanes")
    # pass 1: the columns hold x
    lines.append(f"    for c{d} in range({shape[d]}):")
    value = _values(problem, names, problem.x, lines, "        ", interp)
    lines.append(f"        tl.store(out0 + {offset(problem, coords)}, "
                 f"{to_storage(f'tl.broadcast_to({value}, [BLOCK])', dtype, dtype, interp)}, mask=lanes)")
    target_coords = dict(coords)
    target_coords[d] = "k"
    out = f"out0 + {offset(problem, target_coords)}"
    kinds = (["reset"] if not problem.include_self and problem.reduce != "none" else []) + ["write"]
    for kind in kinds:
        lines += _walk(problem, names, out, dtype, kind, interp)
    meta = FrozenMap({"signature": signature_json(graph), "grid": json.dumps([tasks]),
                      "constexprs": json.dumps({"BLOCK": block}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1})
    return Source("triton", HEADER + COORDS.prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


def _position(problem: ScatterProblem, raw: str, lines: list[str], indent: str) -> None:
    node = problem.graph.nodes[problem.node]
    size = problem.shape[problem.dim]
    lines.append(f"{indent}k = ({raw}).to(tl.int64)")
    if node.attr("wrap", False):
        lines.append(f"{indent}k = tl.where(k < 0, k + {size}, k)")
    lines.append(f"{indent}k = tl.minimum(tl.maximum(k, 0), {size - 1})")


def _walk(problem: ScatterProblem, names: tuple[str, ...], out: str, dtype: str, kind: str, interp: bool) -> list[str]:
    shape, d, ishape = problem.shape, problem.dim, problem.index_shape
    columns = problem.columns
    lines: list[str] = []
    if problem.op == "scatter":
        reach = [f"(c{e} < {ishape[e]})" for e in columns if ishape[e] < shape[e]]
        lines.append(f"    mask = lanes{''.join(' & ' + r for r in reach)}")
        lines.append(f"    for i in range({ishape[d]}):")
        where = tuple("i" if e == d else names[e] for e in range(len(shape)))
        indent = "        "
        _position(problem, _values(problem, where, problem.index, lines, indent, interp), lines, indent)
        src_at = where
        full = ishape
    else:
        count = problem.graph.nodes[problem.index].spec.numel
        at = tuple("0" if size == 1 else f"u{j}" for j, size in enumerate(ishape))
        lines += ["    mask = lanes", f"    for s in range({count}):", "        srem = s"]
        for j in range(len(ishape) - 1, -1, -1):
            if ishape[j] != 1:
                lines += [f"        u{j} = srem % {ishape[j]}", f"        srem = srem // {ishape[j]}"]
        indent = "        "
        _position(problem, _values(problem, at, problem.index, lines, indent, interp), lines, indent)
        src_at = problem.src_at({e: names[e] for e in range(len(shape))}, at)
        full = shape[:d] + ishape + shape[d + 1:]
    if kind == "reset":
        value = identity(problem.reduce, dtype)
        value = f'float("{value}")' if isinstance(value, str) else value
        start = f"tl.full([BLOCK], {value}, {TL_DTYPE[compute_dtype(dtype)]})"
        lines.append(f"{indent}tl.store({out}, {to_storage(start, dtype, dtype, interp)}, mask=mask)")
        return lines
    src_shape = problem.graph.nodes[problem.src].spec.shape
    value = _values(problem, fit(tuple(src_at), full, src_shape), problem.src, lines, indent, interp)
    old = to_compute(f"tl.load({out}, mask=mask, other=0)", dtype, interp)
    lines.append(f"{indent}old = {old}")
    combined = f"tl.broadcast_to({_combine(problem.reduce, 'old', value)}, [BLOCK])"
    lines.append(f"{indent}tl.store({out}, {to_storage(combined, dtype, dtype, interp)}, mask=mask)")
    return lines


__all__ = ["ENTRY", "render", "space"]
