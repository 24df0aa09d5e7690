"""C++/OpenMP renderer of the reduction template: one row per iteration, rows spread over threads.

Three loop structures, a tunable (``layout``, ``split``) with a default per problem: rows (below); the
columns of ``reduction_cpp_columns`` for outer reductions (reduced dims outside the innermost kept dim in
memory: bias gradients, batch-norm statistics), where rows would read strided scalars; and, for one row (a
full reduction), the row split among the threads, partial results meeting in shared accumulators.

Reductions are grouped into passes over the row (a reduction that reads another's result runs in a later
pass); per-row values are hoisted out of the element loops; element outputs are written in a last pass.
Tunables: rows per scheduling chunk, the OpenMP schedule, online max+sum fusion for softmax-like chains
(``sum(exp(a - max(a)))`` computed in the max's pass, chunk by chunk), a per-thread row cache of
values a later pass reuses (softmax's ``exp`` is computed once, not twice; half loads are converted once)
and software prefetch of the next row.

Two memory habits matter more than the math here (2-core AVX-512 Xeon, softmax [8192, 4096] fp32):
- A cached value is kept in the row of an element output when one has its type, and the output pass
  rewrites it in place. A separate buffer left every output line to be fetched (write-allocate) in the
  last, cheapest pass, where nothing hides the wait: 35 ms, against 22 ms in place.
- The hardware prefetcher stops at 4 KiB pages, so a thread starting a row waits for DRAM. The pass
  after the row's first read (the heavy one: softmax's exp) prefetches the next row into L2, in blocks
  interleaved with the work.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.graph import INDEX_REDUCTIONS, Graph
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source, TensorSpec
from kernelgen.templates import reduction_cpp_columns as columns
from kernelgen.templates.indexing import dynamic_meta, dynamic_source, flat_offset
from kernelgen.templates.reduction import ReductionProblem
from kernelgen.templates.reduction_cpp_ops import accumulator_type, fold, initial_value, reduction_dtype, row_offset

ENTRY = "kg_reduction"
_ROWS = (1, 2, 4, 8, 16, 32, 64)
_CHUNKS = (256, 1024, 4096)
_DEFAULT_CHUNK = 1024
PREFETCH_BLOCK = 256  # elements per block of a prefetching loop: one run of prefetches, then the work
# Partial accumulators per reduction in a pass: 4 zmm (8 ymm) of float. With gcc's single vector
# accumulator each max or add waited for the previous one: logsumexp [8192, 4096] fp32 14.5 -> 13.4 ms.
REDUCE_LANES = 64
PREFETCH_MIN_ROW_BYTES = 2048  # shorter rows: the hardware prefetcher keeps up, and blocks cost loop overhead
PARALLEL_MIN = 32768  # below this many elements, waking threads costs more than it saves


def _deps(graph: Graph, reductions: tuple[int, ...]) -> dict[int, set[int]]:
    """For each node, the reductions it depends on (including itself when it is one)."""
    deps: dict[int, set[int]] = {}
    red = set(reductions)
    for i, node in enumerate(graph.nodes):
        found: set[int] = set()
        for j in node.inputs:
            found |= deps[j]
        if i in red:
            deps[i] = found | {i}
        else:
            deps[i] = found
    return deps


def levels(problem: ReductionProblem) -> dict[int, int]:
    """Pass number of each reduction: 0 when it reads no other reduction, else 1 + that reduction's pass."""
    graph = problem.graph
    deps = _deps(graph, problem.reductions)
    level: dict[int, int] = {}
    for r in problem.reductions:
        before = deps[graph.nodes[r].inputs[0]]
        level[r] = 1 + max((level[d] for d in before), default=-1)
    return level


def online_pairs(problem: ReductionProblem) -> dict[int, int]:
    """``{sum_id: max_id}`` for every ``sum(exp(a - max(a)))`` whose sum can join the max's pass."""
    graph = problem.graph
    lv = levels(problem)
    deps = _deps(graph, problem.reductions)
    pairs = {}
    for s in problem.reductions:
        node = graph.nodes[s]
        if node.op != "sum" or not cpp_expr.is_float(node.spec.dtype):
            continue
        e = graph.nodes[node.inputs[0]]
        if e.op != "exp":
            continue
        sub = graph.nodes[e.inputs[0]]
        if sub.op != "sub":
            continue
        a, m = sub.inputs
        if graph.nodes[m].op != "max" or graph.nodes[m].inputs[0] != a or m not in lv:
            continue
        if m in deps[a] or lv[s] != lv[m] + 1:
            continue
        pairs[s] = m
    return pairs


def _element_loads(problem: ReductionProblem) -> list:
    return [ld for ld in problem.loads if problem.kinds[ld.node] == "element"]


def space(problem: ReductionProblem, target: Target) -> SearchSpace:
    """Rows per chunk, schedule, online fusion (only where a softmax-like chain exists), chunk, row cache.

    The cached row values (see ``cache_plan``) must fit in half the per-core L2.
    """
    l2 = int(target.caches.get("l2", 0) or 0)
    plan = cache_plan(problem, _pass_roots(problem, levels(problem)))
    row_bytes = problem.row_len * sum(_itemsize(problem.graph, i) for stores in plan for i in stores)
    has_online = bool(online_pairs(problem)) and not any(problem.graph.nodes[r].op in INDEX_REDUCTIONS
                                                         for r in problem.reductions)
    params = [Param("rows_per_task", _ROWS), Param("schedule", ("static", "dynamic")),
              Param("online", (False, True) if has_online else (False,)), Param("chunk", _CHUNKS),
              Param("cache_row", (False, True)), Param("prefetch", (False, True))]
    constraints = [Constraint("chunk only matters with online fusion", lambda c: c["online"] or c["chunk"] == _DEFAULT_CHUNK),
                   Constraint("online fusion recomputes values per chunk: it cannot use the row cache",
                              lambda c: not (c["online"] and c["cache_row"])),
                   Constraint("the row cache needs values that a later pass reuses",
                              lambda c: not c["cache_row"] or row_bytes > 0),
                   Constraint("prefetch streams rows read with one stride",
                              lambda c: not (c["prefetch"] and problem.grouped))]
    if l2:
        constraints.append(Constraint(f"a cached row ({row_bytes} bytes) fits in half the L2 ({l2 // 2} bytes)",
                                      lambda c: not c["cache_row"] or row_bytes <= l2 // 2))
    # Enough rows per task to amortise scheduling and for the next-row prefetch to land in the core that
    # reads it (with one row per task, threads alternate rows), few enough that every thread gets work.
    # 64 rows of 4096 floats ran 1-6% ahead of 16 for softmax, layer_norm, rmsnorm and logsumexp.
    rows = 1
    while rows < _ROWS[-1] and rows * problem.row_len < 262144 and rows * 2 * max(1, target.cores) <= problem.rows:
        rows *= 2
    # Reusing values (softmax's exp) saves math when they fit near the core. Online fusion saves a pass
    # over the row, which only pays when the row does not stay in L2 for the second pass: two passes with
    # the next row prefetched measured 16.5 ms against 21 ms online (logsumexp [8192, 4096] fp32).
    cache = bool(l2) and 0 < row_bytes <= l2 // 2
    online = has_online and not cache and bool(l2) and _streamed_row_bytes(problem) > l2 // 4
    prefetch = problem.rows > 1 and _streamed_row_bytes(problem) >= PREFETCH_MIN_ROW_BYTES and not problem.grouped
    # The loop structure: rows (a row per iteration) or columns (a tile of the innermost kept dim through the
    # reduced index: reduction_cpp_columns), where the row structure would read strided scalars.
    tile = columns.default_tile(problem, target.cores) if columns.eligible(problem) else columns.TILES[1]
    # one row (a full reduction): split it among the threads, or it runs on one core
    splittable = problem.rows == 1 and dynamic_source(problem.graph, problem.shape) is None
    split = splittable and problem.row_len >= PARALLEL_MIN
    params += [Param("layout", ("rows", "columns") if columns.eligible(problem) else ("rows",)),
               Param("tile", columns.TILES), Param("split", (False, True) if splittable else (False,))]
    constraints.append(Constraint("a split row has no online fusion (its chunks span the whole row)",
                                  lambda c: not (c["split"] and c["online"])))
    # Outside the column structure the tile is pinned to one value that does not depend on the problem, so
    # a record stays valid for every size of a shape family (a size-dependent pin made the bucket's records
    # invalid for the generic kernel).
    constraints += [Constraint("the tile only matters in the column structure",
                               lambda c: c["layout"] == "columns" or c["tile"] == columns.TILES[1]),
                    Constraint("the column structure has no online fusion, row cache, prefetch or split",
                               lambda c: c["layout"] == "rows" or not (c["online"] or c["cache_row"] or c["prefetch"]
                                                                       or c["split"]))]
    if columns.preferred(problem):
        return SearchSpace(params, constraints, default={"rows_per_task": rows, "schedule": "dynamic", "online": False,
                                                         "chunk": _DEFAULT_CHUNK, "cache_row": False,
                                                         "prefetch": False, "layout": "columns", "tile": tile,
                                                         "split": False})
    return SearchSpace(params, constraints, default={"rows_per_task": rows, "schedule": "dynamic",
                                                     "online": online, "chunk": _DEFAULT_CHUNK,
                                                     "cache_row": cache, "prefetch": prefetch and not split,
                                                     "layout": "rows", "tile": columns.TILES[1], "split": split,
                                                     } | ({"online": False} if split else {}))


def _streamed_row_bytes(problem: ReductionProblem) -> int:
    """Bytes of one row read from the element loads that move from row to row (not broadcast weights)."""
    return sum(problem.row_len * TensorSpec((), ld.dtype).itemsize for ld in _next_row_loads(problem))


def _next_row_loads(problem: ReductionProblem) -> list:
    """Element loads whose next row is a fixed stride away: the innermost leading dim's stride, not 0."""
    if len(problem.shape) < 2:
        return []
    return [ld for ld in _element_loads(problem) if ld.strides[-2] != 0]


def _itemsize(graph: Graph, node_id: int) -> int:
    return 8 if cpp_expr.compute_type(graph.nodes[node_id].spec.dtype) in ("double", "int64_t") else 4


def _pass_roots(problem: ReductionProblem, lv: dict[int, int]) -> list[list[int]]:
    """Element roots of each pass over the row: the inputs of each level's reductions, then element outputs."""
    graph = problem.graph
    roots = [[graph.nodes[r].inputs[0] for r in problem.reductions if lv[r] == level]
             for level in range(max(lv.values()) + 1)]
    return roots + [[o for o in graph.outputs if problem.kinds[o] == "element"]]


def cache_plan(problem: ReductionProblem, pass_roots: list[list[int]]) -> list[list[int]]:
    """For each pass, the element values it should store in a per-thread row buffer for later passes.

    A value is cached when a later pass reads it (softmax's exp(x - max) in the output pass), except
    float32/float64 loads read contiguously: reading them again costs what reading a buffer costs.
    """
    graph = problem.graph
    row_nodes = {i for i, kind in enumerate(problem.kinds) if kind == "row"}
    cheap = {ld.node for ld in problem.loads if ld.dtype in ("float32", "float64") and ld.strides[-1] == 1}
    cached: set[int] = set()
    plan = []
    for p, roots in enumerate(pass_roots):
        available = row_nodes | cached
        computed = set(cpp_expr.dag_nodes(graph, roots, available))
        store: set[int] = set()
        for later in pass_roots[p + 1:]:
            dag = cpp_expr.dag_nodes(graph, later, available | computed)
            used = {j for i in dag for j in graph.nodes[i].inputs} | set(later)
            store |= (computed & used) - cheap
        plan.append(sorted(store))
        cached |= store
    return plan


def _in_place(problem: ReductionProblem, pass_roots: list[list[int]], plan: list[list[int]],
              element_outs: list[tuple[int, int]]) -> dict[int, int]:
    """``{cached value: element output}``: values kept in the output's own row (same C type), one each.

    Only when no pass after the first store reads an input row again, so that ``out=`` aliasing an input
    still computes from the input: each element is read before it is overwritten, in the same iteration.
    """
    graph = problem.graph
    stores = [(p, i) for p, values in enumerate(plan) for i in values]
    if not stores or not element_outs:
        return {}
    element_loads = {ld.node for ld in _element_loads(problem)}
    available = {i for i, kind in enumerate(problem.kinds) if kind == "row"} | {i for _, i in stores}
    first = stores[0][0]
    for roots in pass_roots[first + 1:]:
        if element_loads & set(cpp_expr.dag_nodes(graph, roots, available)):
            return {}
    free = [k for k, _ in element_outs]
    chosen: dict[int, int] = {}
    for _, i in stores:
        fits = [k for k in free if cpp_expr.storage_type(graph.output_specs[k].dtype) == _ctype(graph, i)]
        if fits:
            chosen[i] = fits[0]
            free.remove(fits[0])
    return chosen


def _declare(graph: Graph, r: int, indent: str, wide: bool = False) -> list[str]:
    """The accumulator(s) of reduction ``r``: ``acc<id>`` (and the extreme value ``acc<id>v`` of argmax/argmin)."""
    node = graph.nodes[r]
    if node.op in INDEX_REDUCTIONS:
        dtype = reduction_dtype(graph, r)
        init = initial_value("max" if node.op == "argmax" else "min", dtype)
        return [f"{indent}int64_t acc{r} = 0;", f"{indent}{cpp_expr.compute_type(dtype)} acc{r}v = {init};"]
    return [f"{indent}{accumulator_type(graph, r, wide)} acc{r} = {initial_value(node.op, node.spec.dtype)};"]


class _Row:
    """Emits the code of one row: passes, hoisted per-row values, cached values and stores."""

    def __init__(self, problem: ReductionProblem, config: Config) -> None:
        self.p = problem
        self.g = problem.graph
        self.env: dict[int, str] = {}
        self.lines: list[str] = []
        self.n = problem.row_len
        self.cached: set[int] = set()  # element values stored in cache<id>[j] by an earlier pass
        # split: the one row is shared out among the threads ([lo, hi) each); a reduction's partial results
        # meet in a shared accumulator (declared before the parallel region: ``self.shared``)
        self.split = bool(config.get("split", False))
        self.lo, self.hi = ("lo", "hi") if self.split else ("0", str(self.n))
        self.shared: list[str] = []
        # A row of several groups of reduced dims (batch norm's (0, 2, 3) of NCHW) walks them as nested loops,
        # the innermost group contiguous: flat index arithmetic divided per element and kept gcc from
        # vectorising (a BN backward region over [8, 64, 32, 32] took 1.29 ms vs ATen's 0.63 ms).
        self.inner = problem.row_shape[-1] if problem.grouped and not self.split else 0
        # Nested groups fold one vector partial per group into the accumulator, in sequence: sum in double there
        # (reduction_cpp_ops.WIDE_SUMS).
        self.wide = bool(self.inner)

    def nested(self, lo: str, hi: str) -> bool:
        """Whether a loop over ``[lo, hi)`` runs as nested group loops (the whole row of a grouped problem)."""
        return bool(self.inner) and (lo, hi) == ("0", str(self.n))

    def offset(self, strides: tuple[int, ...], nested: bool) -> str:
        """Offset of the current row element (``j``, or ``jo``/``ji`` in nested loops) through row ``strides``."""
        if not nested:
            return flat_offset("j", self.p.row_shape, strides)
        outer = flat_offset("jo", self.p.row_shape[:-1], strides[:-1])
        inner = "ji" if strides[-1] == 1 else ("0" if strides[-1] == 0 else f"ji * {strides[-1]}")
        return " + ".join(t for t in (outer, inner) if t != "0") or "0"

    def elem_env(self, nested: bool = False) -> dict[int, str]:
        """Expressions at index ``j`` of element loads and of values cached by earlier passes."""
        env = dict(self.env)
        for ld in _element_loads(self.p):
            where = self.offset(self.p.row_strides[self.p.loads.index(ld)], True) if nested else \
                row_offset(self.p, ld, "j")
            env[ld.node] = cpp_expr.load(ld.dtype, f"p{ld.node}[{where}]")
        env.update({i: f"cache{i}[j]" for i in self.cached})
        return env

    def hoist(self, roots: list[int]) -> None:
        """Emit (once, outside element loops) the row-kind nodes ``roots`` need."""
        needed = [i for i in cpp_expr.dag_nodes(self.g, roots, self.env) if self.p.kinds[i] == "row"]
        for i in needed:
            if self.g.nodes[i].op == "reshape":  # a row value dropping its trailing 1: same value
                self.env[i] = self.env[self.g.nodes[i].inputs[0]]
            else:
                self.lines += ["      " + line for line in cpp_expr.emit(self.g, [i], self.env, prefix="w")]

    def loop(self, roots: list[int], tail: list[str], lo: str | None = None, hi: str | None = None,
             indent: str = "      ", store: list[int] = (), prefetch: bool = False,
             reductions: list[int] = (), partials: bool = False, tail_sums: list[str] = ()) -> None:
        """A loop over the row computing the element DAG of ``roots``, then ``tail`` (``{n<id>}`` = value),
        folding each of ``reductions`` into ``acc<id>``, then storing the values ``store`` into their row
        buffers. With ``prefetch`` the loop runs in blocks, each first prefetching the same stretch of the
        next row of every streamed load. With ``partials`` the reductions go through REDUCE_LANES partial
        accumulators, so the combine's latency does not serialise the loop (gcc keeps one vector
        accumulator otherwise). Sums folded straight into their accumulator (and ``tail_sums``, accumulators
        ``tail`` adds to) get ``omp simd reduction(+:...)``: IEEE flags (no -fassociative-math, see
        backends/cpp.py) let gcc reorder that sum, and nothing else, into vector partial sums."""
        self.hoist(roots + list(store))
        lo, hi = lo or self.lo, hi or self.hi
        nested = self.nested(lo, hi) and not prefetch
        env = self.elem_env(nested)
        body = cpp_expr.emit(self.g, cpp_expr.dag_nodes(self.g, roots + list(store), env), env)
        body += [line.format(**{f"n{i}": v for i, v in env.items()}) for line in tail]
        stores = [f"cache{i}[j] = {env[i]};" for i in store]
        lanes = REDUCE_LANES
        # the reductions that go through partial accumulators; float max/min always do: their nan-propagating
        # select is not a reduction gcc recognises, but lanes of partials are plain elementwise selects
        laned = list(reductions) if partials else [r for r in reductions if self.g.nodes[r].op != "sum"]
        laned = [r for r in laned if self.g.nodes[r].op not in INDEX_REDUCTIONS]  # sequential: first index wins
        if nested:  # the inner group's loop is the vector loop; partials would need it split again
            laned = []
        for r in laned:
            node = self.g.nodes[r]
            self.lines.append(f"{indent}{accumulator_type(self.g, r, self.wide)} acc{r}_l[{lanes}];")
            self.lines.append(f"{indent}for (int l = 0; l < {lanes}; ++l) acc{r}_l[l] = {initial_value(node.op, node.spec.dtype)};")
        loads = _next_row_loads(self.p) if prefetch else []
        inner = indent
        if loads:
            block = PREFETCH_BLOCK
            self.lines.append(f"{indent}for (int64_t b = {lo}; b < {hi}; b += {block}) {{")
            self.lines.append(f"{indent}  const int64_t be = b + {block} < {hi} ? b + {block} : {hi};")
            for ld in loads:
                nbytes = block * TensorSpec((), ld.dtype).itemsize
                self.lines.append(f"{indent}  for (int64_t l = 0; l < {nbytes}; l += 64) "
                                  f"__builtin_prefetch((const char*)(nx{ld.node} + b) + l, 0, 2);")
            lo, hi, inner = "b", "be", indent + "  "

        def combines(acc: str, reds: list[int]) -> list[str]:
            return [fold(self.g.nodes[r].op, reduction_dtype(self.g, r), acc.format(r=r),
                         env[self.g.nodes[r].inputs[0]], wide=self.wide) for r in reds]

        if laned and not loads:  # a scope of its own for j0
            self.lines.append(f"{indent}{{")
            inner = indent + "  "
        if laned:  # whole groups of lanes into the partials, the rest straight into the accumulators
            self.lines.append(f"{inner}int64_t j0 = {lo};")
            self.lines.append(f"{inner}for (; j0 + {lanes} <= {hi}; j0 += {lanes}) {{")
            self.lines.append(f"{inner}  for (int64_t l = 0; l < {lanes}; ++l) {{")
            self.lines.append(f"{inner}    const int64_t j = j0 + l;")
            # the others (a sum beside stores, argmax: first index) fold straight into their accumulators
            rest = [r for r in reductions if r not in laned]
            self.lines += [inner + "    " + b for b in body + combines("acc{r}_l[l]", laned) + combines("acc{r}", rest)
                           + stores]
            self.lines.append(f"{inner}  }}")
            self.lines.append(f"{inner}}}")
            lo = "j0"
        sums = [f"acc{r}" for r in reductions if r not in laned and self.g.nodes[r].op == "sum"
                and cpp_expr.is_float(reduction_dtype(self.g, r))] + list(tail_sums)
        simd = f"#pragma omp simd reduction(+:{','.join(sums)})" if sums else ""
        if nested:
            groups = self.n // self.inner
            self.lines.append(f"{inner}for (int64_t jo = 0; jo < {groups}; ++jo) {{")
            self.lines += [f"{inner}  {simd}"] if simd else []
            self.lines.append(f"{inner}  for (int64_t ji = 0; ji < {self.inner}; ++ji) {{")
            self.lines.append(f"{inner}    const int64_t j = jo * {self.inner} + ji;")
            self.lines += [inner + "    " + b for b in body + combines("acc{r}", list(reductions)) + stores]
            self.lines.append(f"{inner}  }}")
            self.lines.append(f"{inner}}}")
        else:
            self.lines += [f"{inner}{simd}"] if simd else []
            self.lines.append(f"{inner}for (int64_t j = {lo}; j < {hi}; ++j) {{")
            self.lines += [inner + "  " + b for b in body + combines("acc{r}", list(reductions)) + stores]
            self.lines.append(f"{inner}}}")
        if loads or laned:
            self.lines.append(f"{indent}}}")
        for r in laned:
            combine = fold(self.g.nodes[r].op, self.g.nodes[r].spec.dtype, f"acc{r}", f"acc{r}_l[l]", wide=self.wide)
            self.lines.append(f"{indent}for (int l = 0; l < {lanes}; ++l) {combine}")
        self.cached |= set(store)

    def reduce_pass(self, reds: list[int], store: list[int], prefetch: bool = False) -> None:
        for r in reds:
            self.lines += _declare(self.g, r, "      ", self.wide)
        # Partials only in passes that store nothing: beside softmax's row-cache stores, gcc kept them in
        # memory and the exp pass slowed down (19.0 -> 23.3 ms), where the exp hides the adds' latency anyway.
        self.loop([self.g.nodes[r].inputs[0] for r in reds], [], store=store, prefetch=prefetch, reductions=reds,
                  partials=not store)
        if self.split:
            self.meet(reds)
        for r in reds:
            self.lines.append(f"      const {_ctype(self.g, r)} r{r} = {'sh' if self.split else 'acc'}{r};")
            self.env[r] = f"r{r}"

    def meet(self, reds: list[int]) -> None:
        """Split rows: fold each thread's accumulators into the shared ones, then wait for every thread."""
        self.shared += [line.replace(f"acc{r}", f"sh{r}") for r in reds for line in _declare(self.g, r, "  ", self.wide)]
        self.lines.append("      #pragma omp critical")
        self.lines.append("      {")
        for r in reds:
            op, dtype = self.g.nodes[r].op, reduction_dtype(self.g, r)
            if op in INDEX_REDUCTIONS:  # threads arrive in any order: the first index wins ties and NaNs
                cmp = ">" if op == "argmax" else "<"
                nan = f"(acc{r}v != acc{r}v && (sh{r}v == sh{r}v || acc{r} < sh{r}))" if cpp_expr.is_float(dtype) else "false"
                self.lines.append(f"        if (acc{r}v {cmp} sh{r}v || (acc{r}v == sh{r}v && acc{r} < sh{r}) || {nan}) "
                                  f"{{ sh{r}v = acc{r}v; sh{r} = acc{r}; }}")
            else:
                self.lines.append("        " + fold(op, dtype, f"sh{r}", f"acc{r}", wide=self.wide))
        self.lines.append("      }")
        self.lines.append("      #pragma omp barrier")

    def online_pass(self, reds: list[int], pairs: dict[int, int], chunk: int, prefetch: bool = False) -> None:
        """Max-level reductions chunk by chunk, with each paired sum rescaled to the running max."""
        g = self.g
        sums = [s for s, m in pairs.items() if m in reds]
        maxes = sorted({pairs[s] for s in sums})
        plain = [r for r in reds if r not in sums]
        for r in plain + sums:
            node = g.nodes[r]
            self.lines.append(f"      {accumulator_type(g, r, self.wide)} acc{r} = {initial_value(node.op, node.spec.dtype)};")
        self.lines.append(f"      for (int64_t c0 = 0; c0 < {self.n}; c0 += {chunk}) {{")
        self.lines.append(f"        const int64_t c1 = c0 + {chunk} < {self.n} ? c0 + {chunk} : {self.n};")
        saved = dict(self.env)
        for m in maxes:
            self.lines.append(f"        {_ctype(g, m)} cm{m} = {initial_value('max', g.nodes[m].spec.dtype)};")
        tail = [fold(g.nodes[r].op, g.nodes[r].spec.dtype, f"acc{r}", f"{{n{g.nodes[r].inputs[0]}}}", wide=self.wide)
                for r in plain if r not in maxes]
        tail += [fold("max", g.nodes[m].spec.dtype, f"cm{m}", f"{{n{g.nodes[m].inputs[0]}}}") for m in maxes]
        self.loop([g.nodes[r].inputs[0] for r in plain], tail, "c0", "c1", "        ", prefetch=prefetch)
        for m in maxes:
            fn = "kg_maxf" if _ctype(g, m) == "float" else "kg_max"
            self.lines.append(f"        const {_ctype(g, m)} mn{m} = {fn}(acc{m}, cm{m});")
        for s in sums:
            self.lines.append(f"        {accumulator_type(g, s, self.wide)} cs{s} = 0;")
        self.env.update({m: f"mn{m}" for m in maxes})
        # the sums' own element DAG (exp(a - m)) evaluated against the chunk's new running max
        self.loop([g.nodes[s].inputs[0] for s in sums],
                  [f"cs{s} += {{n{g.nodes[s].inputs[0]}}};" for s in sums], "c0", "c1", "        ",
                  tail_sums=[f"cs{s}" for s in sums if cpp_expr.is_float(g.nodes[s].spec.dtype)])
        for s in sums:
            m = pairs[s]
            exp = "expf" if _ctype(g, s) == "float" else "exp"
            # an unchanged max rescales by 1: with -inf - -inf = nan, a row starting with a chunk of -inf lost
            # its sum (eager softmax is finite there)
            self.lines.append(f"        acc{s} = (acc{m} == mn{m} ? acc{s} : acc{s} * {exp}(acc{m} - mn{m})) + cs{s};")
        for m in maxes:
            self.lines.append(f"        acc{m} = mn{m};")
        self.env = saved
        self.lines.append("      }")
        for r in reds:
            self.lines.append(f"      const {_ctype(g, r)} r{r} = acc{r};")
            self.env[r] = f"r{r}"


def _ctype(graph: Graph, node_id: int) -> str:
    return cpp_expr.compute_type(graph.nodes[node_id].spec.dtype)


def render(problem: ReductionProblem, config: Config, target: Target) -> Source:
    """C++ source of the kernel; ``ValueError`` for a config outside ``space(problem, target)``."""
    violations = space(problem, target).violations(config)
    if violations:
        raise ValueError(f"reduction config {dict(config)} is invalid: {'; '.join(violations)}")
    if config["layout"] == "columns":
        return _render_columns(problem, config)
    graph = problem.graph
    n, rows, leading = problem.row_len, problem.rows, problem.shape[:-1]
    out_specs = graph.output_specs
    lv = levels(problem)
    pairs = online_pairs(problem) if config["online"] else {}
    for s, m in pairs.items():
        lv[s] = lv[m]
    n_passes = max(lv.values()) + 1
    pass_roots = _pass_roots(problem, lv)
    plan = cache_plan(problem, pass_roots) if config["cache_row"] else [[]] * (n_passes + 1)
    element_outs = [(k, o) for k, o in enumerate(graph.outputs) if problem.kinds[o] == "element"]
    row_outs = [(k, o) for k, o in enumerate(graph.outputs) if problem.kinds[o] == "row"]
    # a cached value kept in an output's row needs the row contiguous there (reduced dims trailing)
    in_place = _in_place(problem, pass_roots, plan, element_outs) if problem.rows_contiguous else {}
    buffers = [i for stores in plan for i in stores if i not in in_place]
    # prefetch the next row in the first pass that re-reads this row (it is in cache by then), or in the
    # only pass there is
    prefetch_pass = -1 if not config["prefetch"] else (1 if n_passes + bool(element_outs) > 1 else 0)

    dyn = dynamic_source(graph, problem.shape)
    lines = _prologue(problem, dyn)
    split = bool(config["split"])
    shared_at = len(lines)  # split: the shared accumulators go here, before the parallel region
    # tiny problems: waking threads costs more
    lines.append(f"  #pragma omp parallel num_threads(num_threads) if({'' if split else 'rows > 1 && '}"
                 f"rows * {n} >= {PARALLEL_MIN})")
    lines.append("  {")
    for i in buffers:  # per-thread row buffers, allocated once per launch
        ctype = _ctype(graph, i)
        lines.append(f"    {ctype}* __restrict cache{i} = ({ctype}*)std::aligned_alloc(64, {(n * 8 + 63) // 64 * 64});")
    if split:  # the one row, a stretch per thread
        lines.append("    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();")
        lines.append(f"    const int64_t lo = {n} * tid / nt, hi = {n} * (tid + 1) / nt;")
        lines.append("    for (int64_t r = 0; r < 1; ++r) {")
    else:
        lines.append(f"    #pragma omp for schedule({config['schedule']}, {config['rows_per_task']})")
        lines.append("    for (int64_t r = 0; r < rows; ++r) {")
    if leading:
        lines.append("      int64_t rem = r;")
        for d in range(len(leading) - 1, 0, -1):
            lines.append(f"      const int64_t i{d} = rem % {leading[d]}; rem /= {leading[d]};")
        lines.append("      const int64_t i0 = rem;")  # the outermost index needs no size (it may be n0)
    row = _Row(problem, config)
    for ld in problem.loads:
        offset = " + ".join(f"i{d} * {ld.strides[d]}" for d in range(len(leading)) if ld.strides[d]) or "0"
        t = cpp_expr.storage_type(ld.dtype)
        lines.append(f"      const {t}* __restrict p{ld.node} = in{ld.arg} + {offset};")
        if problem.kinds[ld.node] == "row":
            lines.append(f"      const {cpp_expr.compute_type(ld.dtype)} c{ld.node} = {cpp_expr.load(ld.dtype, f'p{ld.node}[0]')};")
            row.env[ld.node] = f"c{ld.node}"
    if prefetch_pass >= 0:
        for ld in _next_row_loads(problem):  # the last row prefetches itself again: harmless, no branch
            t = cpp_expr.storage_type(ld.dtype)
            lines.append(f"      const {t}* nx{ld.node} = p{ld.node} + (r + 1 < rows ? {ld.strides[-2]} : 0);")
    for i, k in in_place.items():
        lines.append(f"      {_ctype(graph, i)}* __restrict cache{i} = out{k} + r * {n};")
    row.lines = lines
    for level in range(n_passes):
        reds = [r for r in problem.reductions if lv[r] == level]
        if any(s in reds for s in pairs):
            row.online_pass(reds, pairs, int(config["chunk"]), prefetch=level == prefetch_pass)
        else:
            row.reduce_pass(reds, plan[level], prefetch=level == prefetch_pass)
    row.hoist([o for _, o in row_outs])
    for k, o in row_outs:
        lines.append(f"      {'if (tid == 0) ' if split else ''}" + cpp_expr.store(out_specs[k].dtype, f"out{k}[r]", row.env[o]))
    if element_outs:
        rows_of = {k: i for i, k in in_place.items()}
        if problem.rows_contiguous:
            where = {k: f"out{k}[r * {n} + j]" for k, _ in element_outs}
        else:  # reduced dims not trailing: the row's elements are spread over the output
            base = " + ".join(f"i{d} * {st}" for d, st in enumerate(problem.out_strides[:-1]) if st) or "0"
            nested = row.nested(row.lo, row.hi) and n_passes != prefetch_pass  # as the element loop runs
            where = {k: f"out{k}[{base} + {row.offset(problem.out_row, nested)}]" for k, _ in element_outs}
        tail = [cpp_expr.store(out_specs[k].dtype, f"cache{rows_of[k]}[j]" if k in rows_of else where[k],
                               f"{{n{o}}}") for k, o in element_outs]
        row.loop([o for _, o in element_outs], tail, prefetch=n_passes == prefetch_pass)
    lines.append("    }")
    lines += [f"    std::free(cache{i});" for i in buffers]
    lines += ["  }", "}", ""]
    lines[shared_at:shared_at] = row.shared
    return _source(problem, lines, dyn)


def _prologue(problem: ReductionProblem, dyn: int | None) -> list[str]:
    """The kernel's head: includes, entry, typed argument pointers and ``rows`` (the kept index count)."""
    graph = problem.graph
    lines = [cpp_expr.PRELUDE, "#include <cstdlib>", "#include <limits>", "#include <omp.h>",
             entry_declaration(ENTRY, dyn is not None)]
    lines += cpp_expr.argument_pointers(graph.signature, graph.output_specs)
    # rows is a C++ value: the literal, or n0 times the static leading dims of a shape-generic kernel
    rows = problem.rows
    lines.append(f"  const int64_t rows = {rows if dyn is None else f'n0 * {rows // graph.dynamic}'};")
    return lines


def _source(problem: ReductionProblem, lines: list[str], dyn: int | None) -> Source:
    graph = problem.graph
    signature = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return Source("cpp", "\n".join(lines), ENTRY, meta=FrozenMap(signature=signature, template="reduction",
                                                              **dynamic_meta(graph, dyn)))


def _render_columns(problem: ReductionProblem, config: Config) -> Source:
    """The column structure (``reduction_cpp_columns``): tasks of (outer kept index, tile of columns)."""
    dyn = dynamic_source(problem.graph, problem.shape)
    tile, ncol = int(config["tile"]), problem.shape[-2]
    lines = _prologue(problem, dyn)
    lines.append(f"  const int64_t ntiles = {-(-ncol // tile)};")
    lines.append(f"  const int64_t tasks = rows / {ncol} * ntiles;")
    lines.append(f"  #pragma omp parallel for num_threads(num_threads) schedule(static) "
                 f"if(tasks > 1 && rows * {problem.row_len} >= {PARALLEL_MIN})")
    lines.append("  for (int64_t t = 0; t < tasks; ++t) {")
    lines.append("    const int64_t o = t / ntiles;")
    lines.append(f"    const int64_t c0 = (t % ntiles) * {tile};")
    lines.append(f"    const int64_t cn = {ncol} - c0 < {tile} ? {ncol} - c0 : {tile};")
    lines += columns.body(problem, tile, levels(problem))
    lines += ["  }", "}", ""]
    return _source(problem, lines, dyn)


__all__ = ["ENTRY", "levels", "online_pairs", "render", "space"]
