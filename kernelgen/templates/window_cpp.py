"""C++/OpenMP renderer of the window template: rows of the iteration space spread over OpenMP threads; each row's
elements reduce their windows' taps in eager's order (row-major over the window), so ties, NaN and sums come out
as ATen's CPU pooling kernels make them.

A fixed window is computed a row tile at a time, taps outermost: for each tap, one plain loop over the tile's
outputs (accumulators in arrays) that gcc vectorises, instead of ATen's scalar loop over each output's taps. An
adaptive window (rare past global pooling, which is a mean) loops over each element's own taps. Forward: a max
keeps eager's test (``v > m || isnan(v)``: the first maximum, the last NaN), an argmax the flat index of that
pick (the first tap always taken, as eager's initial index), an average its sum divided by eager's divisor.
Backward: each input element takes the windows holding it in increasing output order (the order eager's
scatter adds in), so a float32 gradient is eager's to the bit; a max pool's gradient by default adds each output's
gradient at its recorded index instead, a plane at a time in output order (eager's order too, one index read per
output instead of one per window holding each input element: ``_backward_planes``).
"""

from __future__ import annotations

import json
import math

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.moves import expand
from kernelgen.templates.pointwise_cpp import COORDS, PARALLEL_MIN, leaf_env
from kernelgen.templates.window import LOWEST, WindowProblem, adaptive_bounds, avg_divisor, rounds_each_sum

ENTRY = "kg_window"
EXACT_SUMS = ("-fno-unsafe-math-optimizations",)
"""What of ``-ffast-math`` a window kernel undoes: sums are added in eager's order (gcc split a window's taps into
vector lanes and the average of a 3x3 window differed from eager's in the last bit) and divided, not multiplied
by a reciprocal (``-fno-reciprocal-math`` alone still let g++ 12 turn ``sum / 9`` into ``sum * (1 / 9)``)."""
SIMD = "#pragma omp simd"
"""Before each epilogue loop (the outputs stored along the row): with more than one output gcc 12 left the loop
scalar ("no vectype for stmt" on the gradient buffer's read), and a max pool's gradient fused with batch norm's
backward (three outputs, [4, 64, 64, 64] fp32, ResNet-18's stem) took 5.4 ms on one thread, 0.9 ms with the
pragma (2-core AMD EPYC, one process, medians of 30). Safe: each iteration stores its own elements and reads
buffers no iteration writes."""
_TILES = (64, 256, 1024)
_HELPERS = """static inline int64_t kg_imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kg_imax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t kg_fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }  // floor, b > 0
static inline int64_t kg_cdiv(int64_t a, int64_t b) { return -kg_fdiv(-a, b); }  // ceiling, b > 0"""


def space(problem: WindowProblem, target: Target) -> SearchSpace:
    """The OpenMP schedule and, for a fixed window, the row tile (outputs whose accumulators live in arrays);
    a max pool's gradient may also add each output's gradient at its recorded index, a plane at a time."""
    if problem.geometry.adaptive:
        return SearchSpace([Param("schedule", ("static", "dynamic"))], default={"schedule": "static"})
    params = [Param("schedule", ("static", "dynamic")), Param("tile", _TILES)]
    default: dict = {"schedule": "static", "tile": 256}
    if _scatters(problem):
        # Measured on a 2-core AMD EPYC (benchmarks/bench_ops.py, max_pool2d bwd [32,64,56,56] 3x3/2): reading
        # every window holding an input element (about 9 index reads per output) took 3.3 ms against ATen's 1.5
        # ms; one index read and one add per output, a plane at a time, is the default.
        params.append(Param("scatter", (True, False)))
        default["scatter"] = True
    return SearchSpace(params, default=default)


PLANE_MAX = 1 << 16  # a plane's gradient buffer lives on the thread's stack: 256 KiB of float at most


def _scatters(problem: WindowProblem) -> bool:
    """Can the gradient be added at each output's recorded index (a max pool's gradient of a plane that fits)?"""
    geo = problem.geometry
    plane = math.prod(geo.inputs)
    return problem.backward and problem.index is not None and not geo.adaptive and plane <= PLANE_MAX


def lowest(dtype: str) -> str:
    """The literal a max over ``dtype`` starts from."""
    return cpp_expr.literal(LOWEST[dtype] if dtype in LOWEST else "-inf", dtype)


def _nest(levels: list[tuple[list[str], str]], body: list[str]) -> list[str]:
    """Loops opened by each level's lines (outermost first) around ``body``, closed by their closers."""
    lines: list[str] = []
    for depth, (opening, _) in enumerate(levels):
        lines += ["  " * depth + line for line in opening]
    lines += ["  " * len(levels) + line for line in body]
    for depth in range(len(levels) - 1, -1, -1):
        lines.append("  " * depth + levels[depth][1])
    return lines


def _values(problem: WindowProblem, coords: tuple[str, ...], roots: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """Statements computing ``roots`` (values of the pooled value's shape) at ``coords``, and their names."""
    expansion = expand(problem.graph, coords, COORDS, roots=roots)
    env = leaf_env(expansion)
    g2 = expansion.graph
    lines = cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, g2.outputs, env), env, prefix="p")
    return lines, [env[o] for o in g2.outputs]


def _divisor(problem: WindowProblem, starts: list[str]) -> str:
    """Eager's divisor of an average window at output coordinates ``starts``, in C++ (``//`` is ``/`` there:
    every operand is non-negative)."""
    text = avg_divisor(problem.window(), problem.geometry, starts, lambda a, b: f"kg_imin({a}, {b})",
                       lambda a, b: f"kg_imax({a}, {b})")
    return text.replace("//", "/")


def _adaptive(o: str, size: int, out: int) -> tuple[str, str]:
    lo, hi = adaptive_bounds(o, size, out)
    return lo.replace("//", "/"), hi.replace("//", "/")


def _tap_level(problem: WindowProblem, d: int) -> tuple[list[str], str]:
    """A loop binding ``t<d>``, the input coordinate of each in-bounds tap of output coordinate ``c<lead+d>``
    along window dim ``d``, in increasing order."""
    geo = problem.geometry
    o = problem.coords()[problem.lead + d]
    size, out = geo.inputs[d], geo.outputs[d]
    if geo.adaptive:
        lo, hi = _adaptive(o, size, out)
        return [f"for (int64_t t{d} = {lo}; t{d} < {hi}; ++t{d}) {{"], "}"
    k, s, p, dil = geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
    return [f"const int64_t s{d} = {o} * {s} - {p};",
            f"for (int64_t k{d} = kg_imax(kg_cdiv(-s{d}, {dil}), 0), e{d} = kg_imin(kg_cdiv({size} - s{d}, {dil}), {k});"
            f" k{d} < e{d}; ++k{d}) {{",
            f"  const int64_t t{d} = s{d} + k{d} * {dil};"], "}"


def _window_level(problem: WindowProblem, d: int) -> tuple[list[str], str]:
    """A loop binding ``o<d>``, each output coordinate along window dim ``d`` whose window holds input
    coordinate ``c<lead+d>``, in increasing order."""
    geo = problem.geometry
    x = problem.coords()[problem.lead + d]
    size, out = geo.inputs[d], geo.outputs[d]
    if geo.adaptive:  # windows [floor(o I / O), ceil((o + 1) I / O)) holding x: a few around x O / I
        lo, hi = _adaptive(f"o{d}", size, out)
        return [f"for (int64_t o{d} = kg_imax(({x} * {out}) / {size} - 1, 0), "
                f"f{d} = kg_imin((({x} + 1) * {out}) / {size} + 1, {out - 1}); o{d} <= f{d}; ++o{d}) {{",
                f"  if (({x}) < {lo} || ({x}) >= {hi}) continue;"], "}"
    k, s, p, dil = geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
    lines = [f"for (int64_t o{d} = kg_imax(kg_cdiv({x} + {p - (k - 1) * dil}, {s}), 0), "
             f"f{d} = kg_imin(kg_fdiv({x} + {p}, {s}), {out - 1}); o{d} <= f{d}; ++o{d}) {{"]
    if dil > 1:
        lines.append(f"  if (({x} + {p} - o{d} * {s}) % {dil} != 0) continue;")
    return lines, "}"


class _Accumulators:
    """The C++ of each window node's accumulator: declaration, update by ``x``, final value."""

    def __init__(self, problem: WindowProblem, slot: str) -> None:
        self.problem, self.slot = problem, slot  # slot: "" (a scalar) or "[j]" (an array element)

    def declare(self, size: str = "") -> list[str]:
        graph, source = self.problem.graph, self.problem.source
        dtype = graph.nodes[source].spec.dtype
        ctype = cpp_expr.compute_type(dtype)
        lines = []
        for w in self.problem.windows:
            reduce = graph.nodes[w].attr("reduce")
            if reduce == "max":
                lines.append(f"{ctype} m{w}{size};")
            elif reduce == "argmax":
                lines += [f"{ctype} am{w}{size};", f"int64_t ai{w}{size};"]
            else:
                lines.append(f"{ctype} a{w}{size};")
        return lines

    def reset(self) -> list[str]:
        graph, s = self.problem.graph, self.slot
        low = lowest(graph.nodes[self.problem.source].spec.dtype)
        lines = []
        for w in self.problem.windows:
            reduce = graph.nodes[w].attr("reduce")
            lines += [f"m{w}{s} = {low};"] if reduce == "max" else \
                [f"am{w}{s} = {low};", f"ai{w}{s} = -1;"] if reduce == "argmax" else [f"a{w}{s} = 0;"]
        return lines

    def update(self, flat: str) -> list[str]:
        graph, s = self.problem.graph, self.slot
        lines = []
        for w in self.problem.windows:
            reduce = graph.nodes[w].attr("reduce")
            if reduce == "max":
                lines.append(f"m{w}{s} = (x > m{w}{s} || x != x) ? x : m{w}{s};")
            elif reduce == "argmax":
                lines += [f"const bool take{w} = ai{w}{s} < 0 || x > am{w}{s} || x != x;",
                          f"am{w}{s} = take{w} ? x : am{w}{s};", f"ai{w}{s} = take{w} ? (int64_t)({flat}) : ai{w}{s};"]
            elif rounds_each_sum(self.problem):
                dtype = graph.nodes[self.problem.source].spec.dtype
                lines.append(f"a{w}{s} = {cpp_expr.load(dtype, cpp_expr.convert(dtype, f'a{w}{s} + x'))};")
            else:
                lines.append(f"a{w}{s} += x;")
        return lines

    def finish(self) -> tuple[list[str], dict[int, str]]:
        problem, s = self.problem, self.slot
        graph, geo, coords = problem.graph, problem.geometry, problem.coords()
        ctype = cpp_expr.compute_type(graph.nodes[problem.source].spec.dtype)
        lines, given = [], {}
        for w in problem.windows:
            reduce = graph.nodes[w].attr("reduce")
            out_type = cpp_expr.compute_type(graph.nodes[w].spec.dtype)
            if reduce == "avg":
                div = _divisor(problem, [coords[problem.lead + d] for d in range(geo.rank)])
                lines.append(f"const {out_type} w{w} = a{w}{s} / ({ctype})({div});")
            else:
                lines.append(f"const {out_type} w{w} = {'m' if reduce == 'max' else 'ai'}{w}{s};")
            given[w] = f"w{w}"
        return lines, given


def _epilogue(problem: WindowProblem, given: dict[int, str], extra: list[str]) -> list[str]:
    """The outputs at the iteration coordinate (``extra``: the window values, named by ``given``), stored."""
    graph = problem.graph
    expansion = expand(graph, problem.coords(), COORDS, given=given)
    env = leaf_env(expansion)
    g2 = expansion.graph
    lines = extra + cpp_expr.emit(g2, cpp_expr.dag_nodes(g2, g2.outputs, env), env, prefix="e")
    last = f"c{len(problem.shape) - 1}"
    return lines + [cpp_expr.store(spec.dtype, f"out{j}[r * {problem.shape[-1]} + {last}]", env[o])
                    for j, (o, spec) in enumerate(zip(g2.outputs, graph.output_specs))]


def _pooled_at(problem: WindowProblem, spatial: list[str]) -> tuple[str, ...]:
    return tuple(problem.coords()[:problem.lead]) + tuple(spatial)


def _forward_elements(problem: WindowProblem) -> list[str]:
    """Each element of the row loops over its own taps (an adaptive window)."""
    geo, last = problem.geometry, f"c{len(problem.shape) - 1}"
    acc = _Accumulators(problem, "")
    flat = " + ".join(f"t{d} * {st}" for d, st in enumerate(geo.flat_strides()))
    value_lines, (value,) = _values(problem, _pooled_at(problem, [f"t{d}" for d in range(geo.rank)]),
                                    (problem.source,))
    ctype = cpp_expr.compute_type(problem.graph.nodes[problem.source].spec.dtype)
    body = [*acc.declare(), *acc.reset()]
    body += _nest([_tap_level(problem, d) for d in range(geo.rank)],
                  [*value_lines, f"const {ctype} x = {value};", *acc.update(flat)])
    finish, given = acc.finish()
    body = _epilogue(problem, given, body + finish)
    return [f"for (int64_t {last} = 0; {last} < {problem.shape[-1]}; ++{last}) {{", *["  " + b for b in body], "}"]


def _forward_rows(problem: WindowProblem, tile: int) -> list[str]:
    """A fixed window, a tile of the row's outputs at a time: taps outermost, then a plain loop over the
    tile's outputs that the tap falls inside the input for, updating array accumulators."""
    geo, rank = problem.geometry, len(problem.shape)
    last, d = f"c{rank - 1}", geo.rank - 1
    out, size, k, s, p, dil = geo.outputs[d], geo.inputs[d], geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
    width = min(tile, out)
    acc = _Accumulators(problem, f"[{last} - ta]")
    flat = " + ".join(f"t{d} * {st}" for d, st in enumerate(geo.flat_strides()))
    value_lines, (value,) = _values(problem, _pooled_at(problem, [f"t{i}" for i in range(geo.rank)]),
                                    (problem.source,))
    ctype = cpp_expr.compute_type(problem.graph.nodes[problem.source].spec.dtype)
    taps = [_tap_level(problem, i) for i in range(d)]
    inner = [f"for (int64_t k{d} = 0; k{d} < {k}; ++k{d}) {{",
             f"  const int64_t lo = kg_imax(kg_cdiv({p} - k{d} * {dil}, {s}), ta);",
             f"  const int64_t hi = kg_imin(kg_fdiv({size - 1 + p} - k{d} * {dil}, {s}) + 1, tb);",
             f"  for (int64_t {last} = lo; {last} < hi; ++{last}) {{",
             f"    const int64_t t{d} = {last} * {s} - {p} + k{d} * {dil};",
             *["    " + v for v in value_lines], f"    const {ctype} x = {value};",
             *["    " + u for u in acc.update(flat)], "  }", "}"]
    finish, given = acc.finish()
    return [*acc.declare(f"[{width}]"),
            f"for (int64_t ta = 0; ta < {out}; ta += {width}) {{",
            f"  const int64_t tb = kg_imin(ta + {width}, {out});",
            f"  for (int64_t {last} = ta; {last} < tb; ++{last}) {{", *["    " + line for line in acc.reset()], "  }",
            *["  " + line for line in _nest(taps, inner)],
            f"  {SIMD}", f"  for (int64_t {last} = ta; {last} < tb; ++{last}) {{",
            *["    " + line for line in _epilogue(problem, given, finish)], "  }", "}"]


def _grad_step(problem: WindowProblem, spatial: list[str], here: str) -> list[str]:
    """``g`` (the slot ``acc``) plus the output gradient of the window at ``spatial`` that holds input element
    ``here`` (its flat index over the window dims)."""
    geo = problem.geometry
    ctype = cpp_expr.compute_type(problem.window().spec.dtype)
    roots = (problem.source,) if problem.index is None else (problem.source, problem.index)
    value_lines, values = _values(problem, _pooled_at(problem, spatial), roots)
    if problem.index is not None:
        step = f"(int64_t)({values[1]}) == ({here}) ? ({ctype})({values[0]}) : ({ctype})0"
    else:
        step = f"({ctype})({values[0]}) / ({ctype})({_divisor(problem, spatial)})"
    return value_lines + [f"const {ctype} x = {step};"]


def _backward_elements(problem: WindowProblem) -> list[str]:
    geo, lead, last = problem.geometry, problem.lead, f"c{len(problem.shape) - 1}"
    coords = problem.coords()
    ctype = cpp_expr.compute_type(problem.window().spec.dtype)
    here = " + ".join(f"({coords[lead + d]}) * {st}" for d, st in enumerate(geo.flat_strides()))
    step = _grad_step(problem, [f"o{d}" for d in range(geo.rank)], here)
    w = problem.windows[0]
    body = [f"{ctype} g = 0;", *_nest([_window_level(problem, d) for d in range(geo.rank)], [*step, "g += x;"])]
    body = _epilogue(problem, {w: f"w{w}"}, body + [f"const {ctype} w{w} = g;"])
    return [f"for (int64_t {last} = 0; {last} < {problem.shape[-1]}; ++{last}) {{", *["  " + b for b in body], "}"]


def _backward_rows(problem: WindowProblem, tile: int) -> list[str]:
    """A fixed window's gradient, a tile of the row's input elements at a time: the windows holding the row
    (outer window dims) in increasing order, then the last dim's taps from the last to the first (so its
    windows come in increasing order too), each a loop over the windows whose tap falls in the tile."""
    geo, lead, rank = problem.geometry, problem.lead, len(problem.shape)
    coords = problem.coords()
    last, d = f"c{rank - 1}", geo.rank - 1
    out, size, k, s, p, dil = geo.outputs[d], geo.inputs[d], geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
    width = min(tile, size)
    ctype = cpp_expr.compute_type(problem.window().spec.dtype)
    at = [coords[lead + i] for i in range(d)] + [f"x{d}"]
    here = " + ".join(f"({c}) * {st}" for c, st in zip(at, geo.flat_strides()))
    step = _grad_step(problem, [f"o{i}" for i in range(geo.rank)], here)
    inner = [f"for (int64_t k{d} = {k - 1}; k{d} >= 0; --k{d}) {{",
             f"  const int64_t lo = kg_imax(kg_cdiv(xa + {p} - k{d} * {dil}, {s}), 0);",
             f"  const int64_t hi = kg_imin(kg_fdiv(xb - 1 + {p} - k{d} * {dil}, {s}) + 1, {out});",
             f"  for (int64_t o{d} = lo; o{d} < hi; ++o{d}) {{",
             f"    const int64_t x{d} = o{d} * {s} - {p} + k{d} * {dil};",
             *["    " + line for line in step], f"    g[x{d} - xa] += x;", "  }", "}"]
    w = problem.windows[0]
    return [f"{ctype} g[{width}];",
            f"for (int64_t xa = 0; xa < {size}; xa += {width}) {{",
            f"  const int64_t xb = kg_imin(xa + {width}, {size});",
            f"  for (int64_t {last} = xa; {last} < xb; ++{last}) g[{last} - xa] = 0;",
            *["  " + line for line in _nest([_window_level(problem, i) for i in range(d)], inner)],
            f"  {SIMD}", f"  for (int64_t {last} = xa; {last} < xb; ++{last}) {{",
            *["    " + line for line in _epilogue(problem, {w: f"w{w}"}, [f"const {ctype} w{w} = g[{last} - xa];"])],
            "  }", "}"]


def _backward_planes(problem: WindowProblem) -> list[str]:
    """A max pool's gradient, one plane (the window dims at fixed leading coordinates) at a time: zero the
    plane's buffer, add each output's gradient at its recorded index in increasing output order (eager's order,
    so float sums are eager's to the bit), then the epilogue over the plane's input elements. An index outside
    the output's window (only the checker's random inputs have them; a call's real ones are the forward's) adds
    nothing, as in the windows' reading, where no window picks it."""
    geo, lead, rank = problem.geometry, problem.lead, len(problem.shape)
    coords = problem.coords()
    ctype = cpp_expr.compute_type(problem.window().spec.dtype)
    plane = math.prod(geo.inputs)
    value_lines, values = _values(problem, _pooled_at(problem, [f"o{d}" for d in range(geo.rank)]),
                                  (problem.source, problem.index))
    # an index names one of its window's taps (the reference's rule too; integer tests, no reads)
    tests = ["i >= 0", f"i < {plane}"]
    for d, st in enumerate(geo.flat_strides()):
        k, s, p, dil = geo.kernel[d], geo.stride[d], geo.padding[d], geo.dilation[d]
        at = f"(i / {st}) % {geo.inputs[d]}" if st != 1 else f"i % {geo.inputs[d]}"
        offset = f"({at}) - (o{d} * {s} - {p})"
        tests.append(f"({offset}) >= 0 && ({offset}) <= {(k - 1) * dil}" + (f" && ({offset}) % {dil} == 0" if dil > 1 else ""))
    add = [*value_lines, f"const int64_t i = (int64_t)({values[1]});",
           f"if ({' && '.join(tests)}) g[i] += ({ctype})({values[0]});"]
    outputs = [([f"for (int64_t o{d} = 0; o{d} < {geo.outputs[d]}; ++o{d}) {{"], "}") for d in range(geo.rank)]
    inputs = [([f"for (int64_t {c} = 0; {c} < {geo.inputs[d]}; ++{c}) {{"], "}")
              for d, c in enumerate(coords[lead:]) if c != "0"]  # (a size-1 dim's coordinate is the literal 0)
    if inputs:
        inputs[-1] = ([SIMD, *inputs[-1][0]], inputs[-1][1])
    # the row index the epilogue's stores use: this plane's rows, then the window dims but the last
    rows_per_plane = plane // geo.inputs[-1]
    row = " + ".join([f"q * {rows_per_plane}"] + [f"{coords[lead + d]} * {math.prod(geo.inputs[d + 1:-1])}"
                                                   for d in range(geo.rank - 1)])
    flat = " + ".join(f"{coords[lead + d]} * {st}" for d, st in enumerate(geo.flat_strides()))
    w = problem.windows[0]
    store = [f"const int64_t r = {row};", f"const {ctype} w{w} = g[{flat}];"]
    return [f"{ctype} g[{plane}];", f"for (int64_t i = 0; i < {plane}; ++i) g[i] = 0;",
            *_nest(outputs, add), *_nest(inputs, _epilogue(problem, {w: f"w{w}"}, store))]


def render(problem: WindowProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"window config {dict(config)} is invalid: {'; '.join(problems)}")
    graph, shape, geo = problem.graph, problem.shape, problem.geometry
    rank = len(shape)
    rows = problem.numel // shape[-1]
    taps = 1
    for d in range(geo.rank):
        taps *= geo.taps(d)
    planes = bool(config.get("scatter")) and _scatters(problem)
    if planes:
        body = _backward_planes(problem)
        rows, decoded, index = math.prod(shape[:problem.lead]), problem.lead, "q"
    else:
        if geo.adaptive:
            body = _backward_elements(problem) if problem.backward else _forward_elements(problem)
        else:
            tile = int(config["tile"])
            body = _backward_rows(problem, tile) if problem.backward else _forward_rows(problem, tile)
        decoded, index = rank - 1, "r"
    lines = [cpp_expr.PRELUDE, COORDS.prelude, _HELPERS, entry_declaration(ENTRY, False)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    lines += [f"  #pragma omp parallel for schedule({config['schedule']}) num_threads(num_threads) "
              f"if({rows} > 1 && {problem.numel * taps} >= {PARALLEL_MIN})",
              f"  for (int64_t {index} = 0; {index} < {rows}; ++{index}) {{"]
    named = [d for d in range(decoded) if shape[d] != 1]
    if named:
        lines.append(f"    int64_t rem = {index};")
        for d in reversed(named[1:]):
            lines.append(f"    const int64_t c{d} = rem % {shape[d]}; rem /= {shape[d]};")
        lines.append(f"    const int64_t c{named[0]} = rem;")
    lines += ["    " + line for line in body]
    lines += ["  }", "}", ""]
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, options=EXACT_SUMS,
                  meta=FrozenMap(signature=signature, template="window"))


__all__ = ["ENTRY", "EXACT_SUMS", "lowest", "render", "space"]
