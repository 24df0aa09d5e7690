"""Pointwise template, Triton renderer: a 1-D grid of ``BLOCK_SIZE``-element programs with a tail mask.

Each program loads its block of every non-broadcast input (broadcast inputs through their strides, scalar
inputs once), computes the elementwise DAG in float32 and stores each output rounded to its dtype.
"""

from __future__ import annotations

import json
import re

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.triton_expr import (HEADER, ExprEmitter, kernel_params, offset_expr, pow2_at_least,
                                           signature_json, to_compute, to_storage)
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.indexing import dynamic_meta, dynamic_source
from kernelgen.templates.moves import CoordSyntax, Expansion, LoadLeaf, NamedLeaf, expand, touches_dim0
from kernelgen.templates.pointwise import PointwiseProblem

ENTRY = "kg_pointwise"


def space(problem: PointwiseProblem, target: Target) -> SearchSpace:
    limits = gpu_limits(target)
    if target.kind == "cpu":  # interpreter: timings mean nothing, fewer programs run faster
        return SearchSpace([Param("BLOCK_SIZE", (256, 1024)), Param("num_warps", (4,))],
                           default={"BLOCK_SIZE": 1024, "num_warps": 4})
    warp, max_threads = limits["warp_size"], limits["max_threads"]
    cap = max(128, pow2_at_least(problem.numel))
    constraints = [
        Constraint(f"num_warps * {warp} threads <= {max_threads} threads per block",
                   lambda c: c["num_warps"] * warp <= max_threads),
        Constraint("every thread owns 1..16 elements (BLOCK_SIZE / threads)",
                   lambda c: 1 <= c["BLOCK_SIZE"] // (c["num_warps"] * warp) <= 16),
        Constraint(f"BLOCK_SIZE <= {cap} (no block larger than the problem)", lambda c: c["BLOCK_SIZE"] <= cap),
    ]
    params = [Param("BLOCK_SIZE", (128, 256, 512, 1024, 2048, 4096)), Param("num_warps", (1, 2, 4, 8, 16))]
    candidates = [{"BLOCK_SIZE": block, "num_warps": warps}
                  for block, warps in ((1024, 4), (512, 4), (256, 2), (128, 1), (128, 2))]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def render(problem: PointwiseProblem, config: Config, target: Target) -> Source:
    graph = problem.graph
    block = int(config["BLOCK_SIZE"])
    numel = problem.numel
    index_64 = max(numel, *(sum((s - 1) * st for s, st in zip(problem.shape, ld.strides)) + 1
                            for ld in problem.loads)) >= 2**31 if problem.loads else numel >= 2**31
    if problem.moves:  # shifted loads address each input over its whole extent
        index_64 = index_64 or any(sum((s - 1) * st for s, st in zip(spec.shape, spec.effective_strides())) + 1
                                   >= 2**31 for spec in graph.signature)
    # Shape-generic: n0 (run-time dim 0) scales the element count; the index is 64-bit as any n0 may come.
    # a move along dim 0 needs its static size: such a kernel renders static (families then specialise it)
    dyn = None if problem.moves and touches_dim0(graph) else dynamic_source(graph, problem.shape)
    per_n0 = numel // graph.dynamic if dyn is not None else 0
    params = [*kernel_params(graph), *(["n0"] if dyn is not None else [])]
    lines = [f"@triton.jit", f"def {ENTRY}({', '.join(params)}, BLOCK_SIZE: tl.constexpr):",
             "    pid = tl.program_id(0)" + (".to(tl.int64)" if index_64 or dyn is not None else ""),
             "    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
             f"    mask = offs < {numel if dyn is None else f'n0 * {per_n0}'}"]
    interp = target.kind == "cpu"
    if problem.moves:
        return _moved_source(problem, config, lines, dyn, per_n0, interp)
    names: dict[int, str] = {}
    block_valued: set[int] = set()
    for ld in problem.loads:
        var = f"x{ld.node}"
        if ld.is_scalar:
            lines.append(f"    {var} = {to_compute(f'tl.load(in{ld.arg})', ld.dtype, interp)}")
        else:
            offset = offset_expr("offs", problem.shape, ld.strides)
            loaded = f"tl.load(in{ld.arg} + {offset}, mask=mask, other=0)"
            lines.append(f"    {var} = {to_compute(loaded, ld.dtype, interp)}")
            block_valued.add(ld.node)
        names[ld.node] = var
    emitter = ExprEmitter(graph, names, interpreter=interp)
    compute = [i for i, n in enumerate(graph.nodes) if i not in names and n.op not in ("input", "reshape", "transpose")]
    lines += ["    " + line for line in emitter.emit(compute)]
    for i in compute:
        if any(j in block_valued for j in graph.nodes[i].inputs):
            block_valued.add(i)
    for j, out in enumerate(graph.outputs):
        node = graph.nodes[out]
        value = emitter.names[out]
        if out not in block_valued:  # computed from scalars only: give it the block's shape
            value = f"tl.broadcast_to({value}, [BLOCK_SIZE])"
        value = to_storage(value, node.spec.dtype, node.spec.dtype, interp)
        lines.append(f"    tl.store(out{j} + offs, {value}, mask=mask)")
    return _source(problem, config, lines, dyn, per_n0)


def _source(problem: PointwiseProblem, config: Config, lines: list[str], dyn: int | None, per_n0: int) -> Source:
    graph, block = problem.graph, int(config["BLOCK_SIZE"])
    grid = [-(-problem.numel // block)]
    meta = FrozenMap({"signature": signature_json(graph), "grid": json.dumps(grid),
                      "constexprs": json.dumps({"BLOCK_SIZE": block}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1, **dynamic_meta(graph, dyn),
                      **({"grid_per_n0": json.dumps([0, per_n0, block, 1])} if dyn is not None else {})})
    prelude = COORDS.prelude if problem.moves else ""
    return Source("triton", HEADER + prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


# the per-lane index variables of the pointwise, scan and window kernels (t<d>, o<d>: a window's tap and output)
_LANE = re.compile(r"\b(c\d+|k|offs|t\d+|o\d+)\b")


def per_lane(offset: str) -> bool:
    """Whether an element offset differs between lanes (then its load is masked: a lane past the end may
    address past the tensor); one that does not is a row's or the kernel's scalar, always in bounds."""
    return _LANE.search(offset) is not None


def _index(arg: int, offset: str, n: int) -> str:
    loaded = f"tl.load(in{arg} + {offset}, mask=mask, other=0)" if per_lane(offset) else f"tl.load(in{arg} + {offset})"
    return f"kg_index({loaded}.to(tl.int64), {n})"


COORDS = CoordSyntax(clamp=lambda x, hi: f"tl.minimum(tl.maximum({x}, 0), {hi})", both=lambda a, b: f"({a} & {b})",
                     index=_index, floordiv=lambda x, n: f"(({x}) // {n})",
                     prelude="@triton.jit\ndef kg_index(i, n):\n    i = tl.where(i < 0, i + n, i)\n"
                             "    return tl.minimum(tl.maximum(i, 0), n - 1)\n\n\n")
"""Index arithmetic for cat/pad/gather in Triton (``kernelgen.templates.moves``)."""


def leaf_names(expansion: Expansion, lines: list[str], interp: bool) -> dict[int, str]:
    """Statements (appended to ``lines``) computing an expansion's leaves into ``x<id>``: loads of ``in<arg>``
    (under ``mask`` when ``per_lane(offset)``, else one in-bounds scalar load), coordinate tests, named values;
    returns the names by leaf id."""
    names: dict[int, str] = {}
    for i, leaf in expansion.leaves.items():
        if isinstance(leaf, NamedLeaf):
            names[i] = leaf.name
            continue
        if isinstance(leaf, LoadLeaf):
            lane = per_lane(leaf.offset)
            ptr = f"in{leaf.arg}" if leaf.scalar else f"in{leaf.arg} + {leaf.offset}"
            loaded = f"tl.load({ptr}, mask=mask, other=0)" if lane else f"tl.load({ptr})"
            lines.append(f"    x{i} = {to_compute(loaded, leaf.dtype, interp)}")
        else:
            lines.append(f"    x{i} = {leaf.expr}")
        names[i] = f"x{i}"
    return names


def _moved_source(problem: PointwiseProblem, config: Config, lines: list[str], dyn: int | None, per_n0: int,
                  interp: bool) -> Source:
    """A graph with moves: every coordinate of the flat index is recovered, loads read at shifted offsets
    (clamped in bounds) and the moves are ``tl.where`` over coordinate tests."""
    graph, shape = problem.graph, problem.shape
    coords = []
    inner = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] == 1:
            coords.append("0")
        else:
            coord = "offs" if inner == 1 else f"(offs // {inner})"
            coords.append(coord if d == 0 else f"({coord} % {shape[d]})")
            lines.append(f"    c{d} = {coords[-1]}")
            coords[-1] = f"c{d}"
        inner *= max(shape[d], 1)
    expansion = expand(graph, tuple(reversed(coords)), COORDS)
    names = leaf_names(expansion, lines, interp)
    emitter = ExprEmitter(expansion.graph, names, interpreter=interp)
    compute = [i for i in range(len(expansion.graph.nodes)) if i not in names]
    lines += ["    " + line for line in emitter.emit(compute)]
    for j, (out, spec) in enumerate(zip(expansion.graph.outputs, graph.output_specs)):
        value = f"tl.broadcast_to({emitter.names[out]}, [BLOCK_SIZE])"  # a value of scalars only gets the block
        lines.append(f"    tl.store(out{j} + offs, {to_storage(value, spec.dtype, spec.dtype, interp)}, mask=mask)")
    return _source(problem, config, lines, dyn, per_n0)
