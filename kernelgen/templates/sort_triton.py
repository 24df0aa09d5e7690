"""Sort template, Triton renderer: one program per row, the row a power-of-two block of (key, position) pairs put in
order by a bitonic network unrolled at render time. ``tl.sort`` sorts keys alone and is not stable; here every
compare-and-swap orders pairs by key and then by position, a strict total order, so the network's result is the
stable sort (eager's order: NaN the greatest, -0.0 equal to 0.0). Lanes past the row's end hold positions ``>= n``
and order after every real pair whatever their key, so no sentinel key is needed; their stores are masked.

Keys travel through the network as their bits (an integer of the key's width: a pair's two halves are picked out
by a sum over a size-2 axis, exact on integers, where a float sum would turn -0.0 into 0.0). Rows longer than
``MAX_ROW`` elements are left to eager (the network's depth grows as log2(n)^2 rounds of the whole block).
"""

from __future__ import annotations

from kernelgen.codegen.cpp_expr import dag_nodes
from kernelgen.codegen.triton_expr import HEADER, ExprEmitter, to_storage
from kernelgen.codegen.triton_types import to_compute
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_triton import COORDS, leaf_names
from kernelgen.templates.scan_triton import row_meta, row_program, row_stores
from kernelgen.templates.sort import SortProblem

ENTRY = "kg_sort"
MAX_ROW = 4096
_KEY = {"bool": ("tl.int8", "tl.int8"), "uint8": ("tl.uint8", "tl.int8"), "int8": ("tl.int8", "tl.int8"),
        "int16": ("tl.int16", "tl.int16"), "int32": ("tl.int32", "tl.int32"), "int64": ("tl.int64", "tl.int64"),
        "float16": ("tl.float16", "tl.int16"), "bfloat16": ("tl.float32", "tl.int32"),
        "float32": ("tl.float32", "tl.int32"), "float64": ("tl.float64", "tl.int64")}
"""The key's Triton type per dtype (its storage type; bool as int8, bfloat16 widened to float32, exactly, because the
interpreter has no bfloat16 bits to cast) and the integer type of its bits."""


def space(problem: SortProblem, target: Target) -> SearchSpace:
    if target.kind == "cpu":  # interpreter: timings mean nothing
        return SearchSpace([Param("num_warps", (4,))], default={"num_warps": 4})
    return SearchSpace([Param("num_warps", (1, 2, 4, 8, 16))], default={"num_warps": 4})


def _compare_and_swap(dtype: str, descending: bool) -> str:
    """The jit helper of one round: pairs at distance ``B`` in ``A`` groups of ``2B``, swapped where the left one
    goes after the right one (``flip``: where this round orders the other way, as a bitonic merge needs)."""
    kt, it = _KEY[dtype]
    floating = dtype.startswith("float") or dtype == "bfloat16"
    after = "(a > b) | ((a != a) & (b == b))" if floating else "(a > b)"  # a after b ascending: NaN greatest
    before = "(a < b) | ((b != b) & (a == a))" if floating else "(a < b)"
    if descending:
        after, before = before, after
    return f'''@triton.jit
def kg_cas(key, idx, flip, A: tl.constexpr, B: tl.constexpr, N: tl.constexpr):
    side = tl.arange(0, 2)[None, :, None]
    bits = tl.reshape(key.to({it}, bitcast=True), [A, 2, B])
    pos = tl.reshape(idx, [A, 2, B])
    lk = tl.reshape(tl.broadcast_to(tl.sum(bits * (1 - side), 1)[:, None, :], [A, 2, B]), [A * 2 * B]).to({it})
    rk = tl.reshape(tl.broadcast_to(tl.sum(bits * side, 1)[:, None, :], [A, 2, B]), [A * 2 * B]).to({it})
    li = tl.reshape(tl.broadcast_to(tl.sum(pos * (1 - side), 1)[:, None, :], [A, 2, B]), [A * 2 * B])
    ri = tl.reshape(tl.broadcast_to(tl.sum(pos * side, 1)[:, None, :], [A, 2, B]), [A * 2 * B])
    a = lk.to({kt}, bitcast=True)
    b = rk.to({kt}, bitcast=True)
    key_after = {after}
    key_before = {before}
    later = key_after | (~key_after & ~key_before & (li > ri))
    swap = tl.where((li < N) & (ri < N), later, li > ri) != flip  # a lane past the row's end goes last
    out = key.to({it}, bitcast=True) ^ tl.where(swap, lk ^ rk, tl.zeros_like(lk))
    return out.to({kt}, bitcast=True), idx ^ tl.where(swap, li ^ ri, tl.zeros_like(li))


'''


def _network(block: int, n: int) -> list[str]:
    """The bitonic sort of ``block`` lanes as rounds of ``kg_cas`` (stage ``s`` merges runs of ``2**s``, alternate
    runs the other way until the last stage)."""
    dims = block.bit_length() - 1
    lines = []
    for stage in range(1, dims + 1):
        flip = f"((k >> {stage}) & 1) == 1" if stage < dims else "k < 0"
        lines.append(f"    flip = {flip}")
        for j in range(stage):
            i = j + dims - stage
            lines.append(f"    key, idx = kg_cas(key, idx, flip, {2 ** i}, {2 ** (dims - i - 1)}, {n})")
    return lines


def render(problem: SortProblem, config: Config, target: Target) -> Source:
    graph = problem.graph
    dtype = graph.nodes[problem.source].spec.dtype
    interp = target.kind == "cpu"
    lines, block, base, along = row_program(problem, "sort", MAX_ROW, ENTRY)
    expansion = expand(graph, problem.coords(), COORDS, roots=(problem.source, *graph.outputs), given=problem.given())
    names = leaf_names(expansion, lines, interp)
    g2 = expansion.graph
    source, outputs = g2.outputs[0], g2.outputs[1:]
    emitter = ExprEmitter(g2, names, interpreter=interp)
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, [source], names))]
    # the key as eager holds it: stored in its dtype (a float16 product rounded to float16)
    key = to_storage(f"tl.broadcast_to({emitter.names[source]}, [BLOCK])", dtype, dtype, interp)
    lines += [f"    key = ({key}).to({_KEY[dtype][0]})", "    idx = k"]
    lines += _network(block, problem.length)
    value = "key != 0" if dtype == "bool" else "key" if dtype == "bfloat16" else to_compute("key", dtype, interp)
    lines += ["    si = idx.to(tl.int64)", f"    sv = {value}"]
    lines += ["    " + line for line in emitter.emit(dag_nodes(g2, outputs, emitter.names))]
    lines += row_stores(problem, emitter, outputs, base, along, interp)
    meta = row_meta(problem, block, config)
    prelude = COORDS.prelude + _compare_and_swap(dtype, problem.descending)
    return Source("triton", HEADER + prelude + "\n".join(lines) + "\n", ENTRY, meta=meta)


__all__ = ["ENTRY", "MAX_ROW", "render", "space"]
