"""C++/OpenMP renderer of the scatter template: tasks are tiles of columns (the last kept dim tiled, the others
one task each), spread over OpenMP threads; each task copies ``x`` into its columns, then walks the index in
eager's order with the tile as the inner, vectorisable loop. Values combine in the output's dtype as eager's
kernels do (a float16 sum rounds at every add, integers wrap).
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand, fit
from kernelgen.templates.pointwise_cpp import COORDS, PARALLEL_MIN, leaf_env
from kernelgen.templates.scatter import ScatterProblem, buffered, identity, offset

ENTRY = "kg_scatter"
_TILES = (16, 64, 256, 1024)
_HELPERS = """template <typename T> static inline T kg_smax(T a, T b) { return b != b ? b : (a < b ? b : a); }
template <typename T> static inline T kg_smin(T a, T b) { return b != b ? b : (b < a ? b : a); }"""


def space(problem: ScatterProblem, target: Target) -> SearchSpace:
    """The tile of columns a task owns (the last kept dim) and the OpenMP schedule."""
    return SearchSpace([Param("tile", _TILES), Param("schedule", ("static", "dynamic"))],
                       default={"tile": 64, "schedule": "static"})


def _values(problem: ScatterProblem, coords: tuple[str, ...], root: int, prefix: str) -> tuple[list[str], str]:
    """Statements computing node ``root`` at ``coords`` (of its own shape), and the name of its value."""
    expansion = expand(problem.graph, coords, COORDS, roots=(root,))
    env = leaf_env(expansion)
    g2 = expansion.graph
    return cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, g2.outputs, env), env, prefix=prefix), env[g2.outputs[0]]


def combine(reduce: str, old: str, new: str) -> str:
    """``old`` combined with ``new`` by ``reduce`` (eager's rules: amax/amin propagate NaN either way)."""
    return {"none": new, "sum": f"({old} + {new})", "prod": f"({old} * {new})", "amax": f"kg_smax({old}, {new})",
            "amin": f"kg_smin({old}, {new})"}[reduce]


def literal_identity(reduce: str, dtype: str) -> str:
    return cpp_expr.literal(identity(reduce, dtype), dtype)


def _position(problem: ScatterProblem, raw: str) -> list[str]:
    """``k``: the index value ``raw`` as a position along ``dim`` (negatives wrapped when the op wraps; the rest
    clamped: eager's range error was raised before the kernel, or the op clamps, as the unchecked ones do)."""
    node = problem.graph.nodes[problem.node]
    size = problem.shape[problem.dim]
    lines = [f"int64_t k = (int64_t)({raw});"]
    if node.attr("wrap", False):
        lines.append(f"k = k < 0 ? k + {size} : k;")
    return lines + [f"k = k < 0 ? 0 : (k > {size - 1} ? {size - 1} : k);"]


def render(problem: ScatterProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"scatter config {dict(config)} is invalid: {'; '.join(problems)}")
    graph, shape, d = problem.graph, problem.shape, problem.dim
    dtype = graph.nodes[problem.node].spec.dtype
    columns = problem.columns
    inner = columns[-1] if columns else None
    tile = min(int(config["tile"]), shape[inner]) if inner is not None else 1
    outer = columns[:-1]
    tiles = -(-shape[inner] // tile) if inner is not None else 1
    tasks = tiles
    for e in outer:
        tasks *= shape[e]
    coords = {e: f"c{e}" for e in range(len(shape))}
    names = tuple(coords[e] if shape[e] != 1 else "0" for e in range(len(shape)))
    lines = [cpp_expr.PRELUDE, COORDS.prelude, _HELPERS, entry_declaration(ENTRY, False)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    work = problem.graph.nodes[problem.index].spec.numel + tasks * shape[d] * tile
    lines += [f"  #pragma omp parallel for schedule({config['schedule']}) num_threads(num_threads) "
              f"if({tasks} > 1 && {work} >= {PARALLEL_MIN})",
              f"  for (int64_t task = 0; task < {tasks}; ++task) {{",
              f"    int64_t rem = task;"]
    if inner is not None:
        lines += [f"    const int64_t t0 = (rem % {tiles}) * {tile}; rem /= {tiles};",
                  f"    const int64_t t1 = t0 + {tile} < {shape[inner]} ? t0 + {tile} : {shape[inner]};"]
    for e in reversed(outer):
        lines.append(f"    const int64_t c{e} = rem % {shape[e]}; rem /= {shape[e]};")
    tile_loop = (f"for (int64_t c{inner} = t0; c{inner} < t1; ++c{inner}) {{", "}") if inner is not None else ("{", "}")
    in_float = buffered(problem)
    slot = _Slot(problem, in_float, inner, tile)
    if in_float:
        lines.append(f"    float* acc = new float[{shape[d] * tile}];")
    # pass 1: the columns hold x
    x_lines, x_value = _values(problem, names, problem.x, "p")
    lines += [f"    for (int64_t c{d} = 0; c{d} < {shape[d]}; ++c{d}) {{", f"      {tile_loop[0]}",
              *["        " + line for line in x_lines],
              "        " + slot.store(f"c{d}", x_value),
              f"      {tile_loop[1]}", "    }"]
    # pass 2 (include_self=False): every written position restarts from the reduction's identity
    passes = [("reset", None)] if not problem.include_self and problem.reduce != "none" else []
    passes.append(("write", None))
    for kind, _ in passes:
        lines += ["    " + line for line in _walk(problem, coords, names, tile_loop, slot, kind)]
    if in_float:  # the float32 sums, rounded once to the output's dtype
        lines += [f"    for (int64_t c{d} = 0; c{d} < {shape[d]}; ++c{d}) {{", f"      {tile_loop[0]}",
                  "        " + cpp_expr.store(dtype, f"out0[{offset(problem, coords)}]", slot.load(f"c{d}")),
                  f"      {tile_loop[1]}", "    }", "    delete[] acc;"]
    lines += ["  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="scatter"))


class _Slot:
    """Where the value at a position along ``dim`` of the current column lives: the output itself, or (buffered)
    the task's float32 buffer of its columns."""

    def __init__(self, problem: ScatterProblem, buffered: bool, inner: int | None, tile: int) -> None:
        self.problem, self.buffered, self.inner, self.tile = problem, buffered, inner, tile
        self.dtype = problem.graph.nodes[problem.node].spec.dtype

    def _ref(self, position: str) -> str:
        if self.buffered:
            column = f" + (c{self.inner} - t0)" if self.inner is not None else ""
            return f"acc[({position}) * {self.tile}{column}]"
        coords = {e: f"c{e}" for e in range(len(self.problem.shape))}
        coords[self.problem.dim] = position
        return f"out0[{offset(self.problem, coords)}]"

    def load(self, position: str) -> str:
        return self._ref(position) if self.buffered else cpp_expr.load(self.dtype, self._ref(position))

    def store(self, position: str, value: str) -> str:
        return f"{self._ref(position)} = {value};" if self.buffered else cpp_expr.store(self.dtype, self._ref(position), value)


def _walk(problem: ScatterProblem, coords: dict[int, str], names: tuple[str, ...], tile_loop: tuple[str, str],
          slot: _Slot, kind: str) -> list[str]:
    """The walk over the index in eager's order: write (combine each value in) or reset (the identity)."""
    shape, d, ishape = problem.shape, problem.dim, problem.index_shape
    columns = problem.columns
    if problem.op == "scatter":
        # index position p: the column's coordinates, with i along dim (only columns the index reaches)
        where = tuple("i" if e == d else names[e] for e in range(len(shape)))
        guard = " && ".join(f"c{e} < {ishape[e]}" for e in columns[:-1] if ishape[e] < shape[e]) or "true"
        inner = columns[-1] if columns else None
        bound = f"c{inner} < {ishape[inner]}" if inner is not None and ishape[inner] < shape[inner] else None
        body = _write(problem, where, where, slot, kind, "q", "s")
        loop = [f"if ({guard}) {{", f"  for (int64_t i = 0; i < {ishape[d]}; ++i) {{", f"    {tile_loop[0]}"]
        if bound:
            loop.append(f"      if (!({bound})) break;")
        return loop + ["      " + line for line in body] + [f"    {tile_loop[1]}", "  }", "}"]
    # index_put: the whole index replaces dim ``dim``; its value is the same for every column of the tile
    count = problem.graph.nodes[problem.index].spec.numel
    at = tuple("0" if size == 1 else f"u{j}" for j, size in enumerate(ishape))
    lines = [f"for (int64_t s = 0; s < {count}; ++s) {{", "  int64_t srem = s;"]
    for j in range(len(ishape) - 1, -1, -1):
        if ishape[j] != 1:
            lines.append(f"  const int64_t u{j} = srem % {ishape[j]}; srem /= {ishape[j]};")
    index_lines, raw = _values(problem, at, problem.index, "q")
    lines += ["  " + line for line in index_lines] + ["  " + line for line in _position(problem, raw)]
    where = problem.src_at({e: names[e] for e in range(len(shape))}, at)
    body = _write(problem, None, where, slot, kind, None, "s")
    return lines + [f"  {tile_loop[0]}"] + ["    " + line for line in body] + [f"  {tile_loop[1]}", "}"]


def _write(problem: ScatterProblem, index_at: tuple | None, src_at: tuple, slot: _Slot, kind: str,
           index_prefix: str | None, src_prefix: str) -> list[str]:
    lines: list[str] = []
    if index_at is not None:
        index_lines, raw = _values(problem, index_at, problem.index, index_prefix)
        lines += index_lines + _position(problem, raw)
    if kind == "reset":
        return lines + [slot.store("k", literal_identity(problem.reduce, slot.dtype))]
    src_shape = problem.graph.nodes[problem.src].spec.shape
    full = problem.index_shape if problem.op == "scatter" else \
        problem.shape[:problem.dim] + problem.index_shape + problem.shape[problem.dim + 1:]
    value_lines, value = _values(problem, fit(tuple(src_at), full, src_shape) if src_shape else (), problem.src,
                                 src_prefix)
    return lines + value_lines + [slot.store("k", combine(problem.reduce, slot.load("k"), value))]


__all__ = ["ENTRY", "combine", "literal_identity", "render", "space"]
