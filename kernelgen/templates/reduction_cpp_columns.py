"""C++/OpenMP loop structure of the reduction template for "outer" reductions: the reduced dims lie outside the
innermost kept dim in memory (``sum(dim=0)`` of a contiguous [N, C], ``sum([0, 1])`` of [B, T, C]).

Reducing such a problem row by row reads each row with a stride of C elements, one scalar at a time. Here a
task owns a tile of up to ``tile`` consecutive columns (innermost kept dim) of one outer kept index and walks
the reduced index ``j`` once per pass, folding the whole tile into an array of accumulators: the inner loop
runs over contiguous columns, so gcc vectorises it and every cache line read is used whole. Per-column values
(reductions, their epilogue, inputs broadcast over the reduced dims) live in arrays of the tile.
Element outputs are written by a last walk over the reduced index, tile by tile.
"""

from __future__ import annotations

from kernelgen.codegen import cpp_expr
from kernelgen.ir.graph import INDEX_REDUCTIONS, REDUCTION_OPS, Graph
from kernelgen.templates.reduction import ReductionProblem
from kernelgen.templates.reduction_cpp_ops import accumulator_type, fold, initial_value, reduction_dtype, row_offset

TILES = (4, 16, 64, 256, 1024)


def eligible(problem: ReductionProblem) -> bool:
    """Whether the column structure can compute ``problem``: a kept dim to tile."""
    return len(problem.shape) >= 2 and problem.row_len > 1


def preferred(problem: ReductionProblem) -> bool:
    """Whether it should be the default: every streamed input is contiguous along the columns and strided
    along the row (the row structure would read it one strided scalar at a time: sum(0) of [8192, 768]
    took 6983 us by rows, 196 us here). A row of several groups of reduced dims (batch norm's (0, 2, 3) of
    NCHW) runs by rows, whose nested group loops read the inner group contiguously (var over (0, 2, 3) of
    [32, 64, 56, 56]: 508 us by rows, 876 us here; a BN backward region of [8, 64, 32, 32]: 92 vs 1249 us)."""
    return eligible(problem) and problem.outer


def default_tile(problem: ReductionProblem, cores: int) -> int:
    """The widest tile that still gives every core a task (16 at least where the columns are contiguous: a
    narrower tile does not fill a vector)."""
    columns, outer = problem.shape[-2], problem.rows // problem.shape[-2]
    contiguous = all(ld.strides[-2] in (0, 1) for ld in problem.loads)
    for tile in reversed(TILES):
        if tile <= max(columns, TILES[0]) and outer * -(-columns // tile) >= max(1, cores):
            return max(tile, 16) if contiguous else tile
    return 16 if contiguous else TILES[0]


def _ctype(graph: Graph, i: int) -> str:
    return cpp_expr.compute_type(graph.nodes[i].spec.dtype)


class _Columns:
    """Emits the body of one task: a tile of columns through every pass, then the row outputs."""

    def __init__(self, problem: ReductionProblem, tile: int) -> None:
        self.p, self.g, self.tile = problem, problem.graph, tile
        self.env: dict[int, str] = {}  # per-column values, as expressions of the column index c
        self.lines: list[str] = []

    def out(self, line: str, depth: int = 3) -> None:
        self.lines.append("  " * depth + line)

    def column_loop(self, body: list[str], depth: int = 3) -> None:
        self.out("for (int64_t c = 0; c < cn; ++c) {", depth)
        self.lines += ["  " * (depth + 1) + b for b in body]
        self.out("}", depth)

    def hoist(self) -> None:
        """Materialise, into arrays of the tile, every per-column node now computable from what is known."""
        graph, todo = self.g, []
        known = set(self.env)
        for i, node in enumerate(graph.nodes):
            if i in known or self.p.kinds[i] != "row" or node.op in REDUCTION_OPS or node.op in ("input", "transpose"):
                continue
            if all(j in known for j in node.inputs):
                known.add(i)
                todo.append(i)
        if not todo:
            return
        env = dict(self.env)
        body: list[str] = []
        for i in todo:
            if graph.nodes[i].op == "reshape":  # a per-column value dropping its reduced 1s: the same value
                env[i] = env[graph.nodes[i].inputs[0]]
                continue
            body += cpp_expr.emit(graph, [i], env, prefix="h")
        arrays = [i for i in todo if graph.nodes[i].op not in ("reshape", "const")]
        for i in arrays:
            self.out(f"{_ctype(graph, i)} w{i}[{self.tile}];")
        if arrays:
            self.column_loop(body + [f"w{i}[c] = {env[i]};" for i in arrays])
        for i in todo:
            node = graph.nodes[i]
            self.env[i] = f"w{i}[c]" if i in arrays else (env[i] if node.op == "const" else self.env[node.inputs[0]])

    def reduce_pass(self, reds: list[int]) -> None:
        graph = self.g
        for r in reds:
            node = graph.nodes[r]
            dtype = reduction_dtype(graph, r)
            if node.op in INDEX_REDUCTIONS:
                init = initial_value("max" if node.op == "argmax" else "min", dtype)
                self.out(f"int64_t acc{r}[{self.tile}]; {cpp_expr.compute_type(dtype)} acc{r}v[{self.tile}];")
                self.column_loop([f"acc{r}[c] = 0; acc{r}v[c] = {init};"])
            else:
                self.out(f"{accumulator_type(graph, r, wide=True)} acc{r}[{self.tile}];")
                self.column_loop([f"acc{r}[c] = {initial_value(node.op, dtype)};"])
        self.out(f"for (int64_t j = 0; j < {self.p.row_len}; ++j) {{")
        env = self.streamed_env()
        roots = [graph.nodes[r].inputs[0] for r in reds]
        body = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, roots, env), env)
        for r in reds:
            body.append(fold(graph.nodes[r].op, reduction_dtype(graph, r), f"acc{r}[c]",
                                    env[graph.nodes[r].inputs[0]], f"acc{r}v[c]", wide=True))
        self.column_loop(body, 4)
        self.out("}")
        for r in reds:
            self.env[r] = f"acc{r}[c]"


    def element_pass(self) -> None:
        """Compute and store the element outputs, walking the reduced index once more."""
        graph, p = self.g, self.p
        outs = [(k, o) for k, o in enumerate(graph.outputs) if p.kinds[o] == "element"]
        if not outs:
            return
        base = [f"i{d} * {st}" for d, st in enumerate(p.out_strides[:-2]) if st] + [f"c0 * {p.out_strides[-2]}"]
        self.out(f"for (int64_t j = 0; j < {p.row_len}; ++j) {{")
        env = self.streamed_env()
        self.out(f"  const int64_t oj = {' + '.join(base)} + {p.out_offset('j')};")
        values = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, [o for _, o in outs], env), env)
        stride = p.out_strides[-2]
        values += [cpp_expr.store(graph.nodes[o].spec.dtype, f"out{k}[oj + c{'' if stride == 1 else f' * {stride}'}]",
                                  env[o]) for k, o in outs]
        self.column_loop(values, 4)
        self.out("}")

    def streamed_env(self) -> dict[int, str]:
        """Inside a loop over ``j``: declare the streamed loads' pointers at ``j``; the env reading them at ``c``."""
        streamed = [ld for ld in self.p.loads if self.p.kinds[ld.node] == "element"]
        for ld in streamed:
            t = cpp_expr.storage_type(ld.dtype)
            self.out(f"  const {t}* __restrict q{ld.node} = p{ld.node} + {row_offset(self.p, ld, 'j')};")
        env = dict(self.env)
        for ld in streamed:
            stride = ld.strides[-2]
            env[ld.node] = cpp_expr.load(ld.dtype, f"q{ld.node}[{'c' if stride == 1 else f'c * {stride}'}]")
        return env


def body(problem: ReductionProblem, tile: int, levels: dict[int, int]) -> list[str]:
    """Statements of one task (inside the task loop, with ``o``, ``c0`` and ``cn`` defined): per-column input
    values, the passes, then the row outputs. Values fold as in the row structure (reduction_cpp's helpers)."""
    graph = problem.graph
    cols = _Columns(problem, tile)
    kept = problem.shape[:-1]
    if len(kept) > 1:
        cols.out("int64_t rem = o;")
        for d in range(len(kept) - 2, 0, -1):
            cols.out(f"const int64_t i{d} = rem % {kept[d]}; rem /= {kept[d]};")
        cols.out("const int64_t i0 = rem;")
    for ld in problem.loads:
        terms = [f"i{d} * {ld.strides[d]}" for d in range(len(kept) - 1) if ld.strides[d]]
        if ld.strides[-2]:
            terms.append(f"c0 * {ld.strides[-2]}")
        t = cpp_expr.storage_type(ld.dtype)
        cols.out(f"const {t}* __restrict p{ld.node} = in{ld.arg} + {' + '.join(terms) or '0'};")
        if problem.kinds[ld.node] == "row":
            stride = ld.strides[-2]
            cols.out(f"{cpp_expr.compute_type(ld.dtype)} w{ld.node}[{tile}];")
            cols.column_loop([f"w{ld.node}[c] = {cpp_expr.load(ld.dtype, f'p{ld.node}[c * {stride}]')};"])
            cols.env[ld.node] = f"w{ld.node}[c]"
    cols.hoist()
    for level in range(max(levels.values()) + 1):
        cols.reduce_pass([r for r in problem.reductions if levels[r] == level])
        cols.hoist()
    stores = []
    for k, o in enumerate(graph.outputs):
        if problem.kinds[o] == "row":
            stores.append(cpp_expr.store(graph.nodes[o].spec.dtype, f"out{k}[o * {kept[-1]} + c0 + c]", cols.env[o]))
    if stores:
        cols.column_loop(stores)
    cols.element_pass()
    return cols.lines


__all__ = ["TILES", "body", "default_tile", "eligible", "preferred"]
