"""C++/OpenMP renderer of the pointwise template: collapsed loops over blocks, one plain vectorisable inner loop.

Dimensions are collapsed wherever every array (loads and the contiguous outputs) is contiguous across
them, so a same-shape chain is one flat loop and a row-broadcast bias is rows × an inner loop over the
last dim. Work items (blocks of about ``block`` elements) are spread over OpenMP threads. Shape-generic: a run-time
batch size ``n0`` (dim 0) only changes the collapsed outermost extent, so the tunables keep their meaning.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source, TensorSpec
from kernelgen.templates.indexing import dynamic_meta, dynamic_source
from kernelgen.templates.moves import CoordSyntax, Expansion, LoadLeaf, TestLeaf, expand, touches_dim0
from kernelgen.templates.pointwise import PointwiseProblem

ENTRY = "kg_pointwise"
PARALLEL_MIN = 32768  # below this many elements, waking threads costs more than it saves
_BLOCKS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _bytes_per_element(problem: PointwiseProblem) -> int:
    graph = problem.graph
    total = sum(TensorSpec((), ld.dtype).itemsize for ld in problem.loads if not ld.is_scalar)
    return total + sum(spec.itemsize for spec in graph.output_specs)


def space(problem: PointwiseProblem, target: Target) -> SearchSpace:
    """Block size (elements per work item), OpenMP schedule, and whether to force ``omp simd``.

    A block's working set (every streamed array) must fit in half the per-core L2, when it is known.
    """
    l2 = int(target.caches.get("l2", 0) or 0)
    per_element = max(1, _bytes_per_element(problem))
    params = [Param("block", _BLOCKS), Param("schedule", ("static", "dynamic")), Param("simd", (True, False))]
    constraints = []
    if l2:
        constraints.append(Constraint(f"block working set fits in half the L2 ({l2 // 2} bytes)",
                                      lambda c, l2=l2, pe=per_element: c["block"] * pe <= l2 // 2 or c["block"] == _BLOCKS[0]))
    default_block = 16384
    while l2 and default_block > _BLOCKS[0] and default_block * per_element > l2 // 2:
        default_block //= 2
    return SearchSpace(params, constraints, default={"block": default_block, "schedule": "dynamic", "simd": True})


def collapse(shape: tuple[int, ...], arrays: list[tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every array (its strides) walks contiguously."""
    dims = [d for d, size in enumerate(shape) if size != 1]
    sizes = [shape[d] for d in dims]
    strides = [[s[d] for d in dims] for s in arrays]
    d = len(sizes) - 2
    while d >= 0:
        if all(st[d] == st[d + 1] * sizes[d + 1] for st in strides):
            sizes[d] *= sizes[d + 1]
            for st in strides:
                st[d] = st[d + 1]
                del st[d + 1]
            del sizes[d + 1]
        d -= 1
    if not sizes:  # a single element
        sizes, strides = [1], [[0] for _ in arrays]
    return sizes, strides


def _validate(problem: PointwiseProblem, config: Config, target: Target) -> None:
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"pointwise config {dict(config)} is invalid: {'; '.join(problems)}")


def render(problem: PointwiseProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    _validate(problem, config, target)
    graph = problem.graph
    out_specs = graph.output_specs
    contiguous = tuple(out_specs[0].contiguous_strides()) if problem.shape else ()
    if problem.moves:  # every coordinate is named (moves shift them): no dims collapsed
        sizes, strides = list(problem.shape) or [1], [list(contiguous) or [0]]
    else:
        sizes, strides = collapse(problem.shape, [ld.strides for ld in problem.loads] + [contiguous])
    load_strides, out_strides = strides[:-1], strides[-1]
    outer, inner = sizes[:-1], sizes[-1]
    rows = 1
    for s in outer:
        rows *= s
    empty = rows * inner == 0  # nothing to compute; keep the entry point so callers need no special case
    inner = max(inner, 1)

    # a move along dim 0 needs its static size: such a kernel renders static (families then specialise it)
    dyn = None if problem.moves and touches_dim0(graph) else dynamic_source(graph, problem.shape)
    lines = [cpp_expr.PRELUDE, *([COORDS.prelude] if problem.moves else []), entry_declaration(ENTRY, dyn is not None)]
    lines += cpp_expr.argument_pointers(graph.signature, out_specs)
    # Loads that are scalars over the whole iteration space are read once, outside every loop.
    env: dict[int, str] = {}
    for ld in problem.loads:
        if ld.is_scalar:
            lines.append(f"  const {cpp_expr.compute_type(ld.dtype)} s{ld.node} = {cpp_expr.load(ld.dtype, f'in{ld.arg}[0]')};")
            env[ld.node] = f"s{ld.node}"

    block = int(config["block"])
    # Sizes are C++ values, so a shape-generic kernel (dim 0 of run-time size ``n0``) and a static one share
    # this code; for a static kernel they are literals the compiler folds.
    rows_c, inner_c = str(rows), str(inner)
    if dyn is not None:  # collapsing only merges dims into their outer neighbour, so n0 is a factor of sizes[0]
        factor = graph.dynamic
        rows_c, inner_c = (f"n0 * {rows // factor}", inner_c) if outer else ("1", f"n0 * {inner // factor}")
    lines += [f"  const int64_t rows = {rows_c}, inner = {inner_c};",
              f"  const int64_t rows_per_item = {block} / inner > 1 ? {block} / inner : 1;",
              f"  const int64_t cols_per_item = inner < {block} ? inner : {block};",
              "  const int64_t col_items = (inner + cols_per_item - 1) / cols_per_item;",
              f"  const int64_t items = {0 if empty else '(rows + rows_per_item - 1) / rows_per_item * col_items'};",
              f"  #pragma omp parallel for schedule({config['schedule']}) num_threads(num_threads) if(items > 1 && rows * inner >= {PARALLEL_MIN})",
              "  for (int64_t t = 0; t < items; ++t) {",
              "    const int64_t r0 = (t / col_items) * rows_per_item;",
              "    const int64_t r1 = r0 + rows_per_item < rows ? r0 + rows_per_item : rows;",
              "    const int64_t j0 = (t % col_items) * cols_per_item;",
              "    const int64_t j1 = j0 + cols_per_item < inner ? j0 + cols_per_item : inner;",
              "    for (int64_t r = r0; r < r1; ++r) {"]
    # Per-row base pointers: decompose r over the collapsed outer dims.
    arrays = [(f"in{ld.arg}", ld, st) for ld, st in zip(problem.loads, load_strides) if not ld.is_scalar]
    body_env = dict(env)
    row_lines = []
    if outer:
        row_lines.append("      int64_t rem = r;")
        for d in range(len(outer) - 1, 0, -1):
            row_lines.append(f"      const int64_t i{d} = rem % {outer[d]}; rem /= {outer[d]};")
        row_lines.append("      const int64_t i0 = rem;")  # the outermost index needs no size (it may be n0)
    for name, ld, st in arrays:
        offset = " + ".join(f"i{d} * {st[d]}" for d in range(len(outer)) if st[d]) or "0"
        ptr_t = cpp_expr.storage_type(ld.dtype)
        row_lines.append(f"      const {ptr_t}* __restrict p{ld.node} = {name} + {offset};")
        if st[-1] == 0:  # constant along the inner loop: one read per row
            row_lines.append(f"      const {cpp_expr.compute_type(ld.dtype)} c{ld.node} = {cpp_expr.load(ld.dtype, f'p{ld.node}[0]')};")
            body_env[ld.node] = f"c{ld.node}"
        else:
            index = "j" if st[-1] == 1 else f"j * {st[-1]}"
            body_env[ld.node] = cpp_expr.load(ld.dtype, f"p{ld.node}[{index}]")
    out_offset = " + ".join(f"i{d} * {out_strides[d]}" for d in range(len(outer)) if out_strides[d]) or "0"
    for k, spec in enumerate(out_specs):
        t = cpp_expr.storage_type(spec.dtype)
        row_lines.append(f"      {t}* __restrict q{k} = out{k} + {out_offset};")
    if problem.moves:
        coords = tuple("0" if size == 1 else f"i{d}" for d, size in enumerate(problem.shape[:-1])) + \
            (("0" if problem.shape[-1] == 1 else "j"),)
        body = _moved_body(problem, coords)
    else:
        body = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, graph.outputs, body_env), body_env)
        body += [cpp_expr.store(spec.dtype, f"q{k}[j]", body_env[o])
                 for k, (o, spec) in enumerate(zip(graph.outputs, out_specs))]
    lines += row_lines
    if config["simd"]:
        lines.append("      #pragma omp simd")
    lines.append("      for (int64_t j = j0; j < j1; ++j) {")
    lines += ["        " + b for b in body]
    lines += ["      }", "    }", "  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *out_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="pointwise",
                                                              **dynamic_meta(graph, dyn)))


# Index arithmetic for cat/pad (kernelgen.templates.moves): the clamp is defined in the moved kernels only, so
# the shared prelude (and with it every other kernel's source hash) stays as it is.
COORDS = CoordSyntax(clamp=lambda x, hi: f"kg_iclamp({x}, {hi})", both=lambda a, b: f"({a} && {b})",
                     index=lambda arg, offset, n: f"kg_iclamp(kg_iwrap((int64_t)in{arg}[{offset}], {n}), {n - 1})",
                     prelude="static inline int64_t kg_iclamp(int64_t x, int64_t hi) "
                             "{ return x < 0 ? 0 : (x > hi ? hi : x); }\n"
                             "static inline int64_t kg_iwrap(int64_t x, int64_t n) { return x < 0 ? x + n : x; }")


def leaf_env(expansion: Expansion) -> dict[int, str]:
    """C++ expressions of an expansion's leaves: loads of ``in<arg>``, coordinate tests, named values."""
    env: dict[int, str] = {}
    for i, leaf in expansion.leaves.items():
        if isinstance(leaf, LoadLeaf):
            env[i] = cpp_expr.load(leaf.dtype, f"in{leaf.arg}[{leaf.offset}]")
        else:
            env[i] = leaf.expr if isinstance(leaf, TestLeaf) else leaf.name
    return env


def _moved_body(problem: PointwiseProblem, coords: tuple[str, ...]) -> list[str]:
    """The inner loop's statements for a graph with moves: each leaf is a load at its (shifted) offset or a
    coordinate test; the rest is the op table's C++ over the expanded graph."""
    expansion = expand(problem.graph, coords, COORDS)
    env = leaf_env(expansion)
    graph = expansion.graph
    body = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, graph.outputs, env), env)
    return body + [cpp_expr.store(spec.dtype, f"q{k}[j]", env[o])
                   for k, (o, spec) in enumerate(zip(graph.outputs, problem.graph.output_specs))]


__all__ = ["COORDS", "ENTRY", "collapse", "leaf_env", "render", "space"]
