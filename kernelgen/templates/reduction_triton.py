"""Row-reduction template, Triton renderer: each program owns ``ROWS`` rows, as a ``[ROWS, BLOCK_N]`` tile.

Single pass when a row fits in ``BLOCK_N`` (the row stays in registers, every reduction and the epilogue
reuse it); otherwise one loop over the row per dependency level of reductions with ``[ROWS, BLOCK_N]``
float32 accumulators, and a last loop that computes and stores the element outputs. A sum of
``exp(x - max(x))`` (softmax, log_softmax, logsumexp) joins its max's loop as an online softmax.
Per-row values are ``[ROWS, 1]`` tensors (``keep_dims``), so broadcasting is free.
"""

from __future__ import annotations

import json

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.triton_expr import (HEADER, TL_DTYPE, ExprEmitter, compute_dtype, is_float, kernel_params,
                                           offset_expr, pow2_at_least, signature_json, to_compute, to_storage)
from kernelgen.ir.graph import INDEX_REDUCTIONS, REDUCTION_OPS
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.indexing import Load, dynamic_meta, dynamic_source, flat_offset
from kernelgen.templates.reduction import ReductionProblem

ENTRY = "kg_reduction"
_MAX_ELEMENTS_PER_THREAD = 64  # live float32 values per thread per tile: more spills registers


def space(problem: ReductionProblem, target: Target) -> SearchSpace:
    full = pow2_at_least(problem.row_len)
    max_rows = pow2_at_least(problem.rows)
    if target.kind == "cpu":  # interpreter: tiny space, big tiles run fastest
        blocks = sorted({min(full, 2**k) for k in (5, 8, 11, 13)})
        rows = sorted({1, min(4, max_rows)})
        default = {"ROWS": min(4, max_rows) if full <= 256 else 1, "BLOCK_N": min(full, 8192), "num_warps": 4}
        return SearchSpace([Param("ROWS", rows), Param("BLOCK_N", blocks), Param("num_warps", (4,))],
                           default=default)
    limits = gpu_limits(target)
    warp, max_threads = limits["warp_size"], limits["max_threads"]
    blocks = sorted({min(full, 2**k) for k in range(5, 16)})
    # An outer reduction (sum(0) of [N, C]) has its rows adjacent in memory: a [ROWS, BLOCK_N] tile of many rows
    # reads ROWS consecutive elements per reduced index, which Triton's coalescing lays along the threads.
    rows_choices = (1, 2, 4, 8, 16, 32, 64) if problem.outer else (1, 2, 4, 8, 16)
    params = [Param("ROWS", rows_choices), Param("BLOCK_N", blocks), Param("num_warps", (1, 2, 4, 8, 16))]
    constraints = [
        Constraint(f"num_warps * {warp} threads <= {max_threads}", lambda c: c["num_warps"] * warp <= max_threads),
        Constraint(f"ROWS <= {max_rows} (no more rows per program than rows)", lambda c: c["ROWS"] <= max_rows),
        Constraint(f"ROWS * BLOCK_N / threads <= {_MAX_ELEMENTS_PER_THREAD} elements per thread",
                   lambda c: c["ROWS"] * c["BLOCK_N"] <= _MAX_ELEMENTS_PER_THREAD * c["num_warps"] * warp),
        Constraint("no idle warps: ROWS * BLOCK_N >= threads (or one warp)",
                   lambda c: c["num_warps"] == 1 or c["ROWS"] * c["BLOCK_N"] >= c["num_warps"] * warp),
        Constraint("several rows per program only when a row fits in one block or the rows are adjacent",
                   lambda c: c["ROWS"] == 1 or c["BLOCK_N"] >= problem.row_len or problem.outer),
    ]
    block = full if full <= 8192 else 4096
    tile_rows = min(16, max(1, 1024 // block), max_rows)
    warps = min(16, max(1, tile_rows * block // (warp * 8)), max_threads // warp)
    candidates = [{"ROWS": min(64, max_rows), "BLOCK_N": min(full, 32), "num_warps": 4}] if problem.outer else []
    candidates += [{"ROWS": tile_rows, "BLOCK_N": block, "num_warps": warps},
                  {"ROWS": 1, "BLOCK_N": min(block, 2048), "num_warps": min(8, max_threads // warp)}]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def _identity(op: str, dtype: str) -> str:
    if is_float(dtype):
        return {"sum": "0.0", "prod": "1.0", "max": 'float("-inf")', "min": 'float("inf")'}[op]
    bits = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64, "bool": 1}[dtype]
    if op in ("sum", "prod"):
        return str(int(op == "prod"))
    if dtype in ("uint8", "bool"):
        return "0" if op == "max" else str(2**bits - 1)
    return str(-(2 ** (bits - 1))) if op == "max" else str(2 ** (bits - 1) - 1)


_NAN_HELPERS = """@triton.jit
def _kg_mul(a, b):
    return a * b


@triton.jit
def _kg_max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _kg_min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


"""

# argmax/argmin combine (value, index) pairs: the larger (smaller) value, NaN above all, the first index on ties
_ARG_HELPER = """@triton.jit
def _kg_{op}_pick(v1, i1, v2, i2):
    nan1 = v1 != v1
    nan2 = v2 != v2
    take = (v2 {cmp} v1) | (nan2 & (v1 == v1)) | (((v2 == v1) | (nan1 & nan2)) & (i2 < i1))
    return tl.where(take, v2, v1), tl.where(take, i2, i1)


"""
_NO_INDEX = 2**31 - 1  # the index of masked-off lanes: loses every tie


class _Renderer:
    def __init__(self, problem: ReductionProblem, config: Config, target: Target) -> None:
        self.p = problem
        self.g = problem.graph
        self.rows_per = int(config["ROWS"])
        self.block = int(config["BLOCK_N"])
        self.interp = target.kind == "cpu"
        self.loads: dict[int, Load] = {ld.node: ld for ld in problem.loads}
        self.lines: list[str] = []
        self.row_names: dict[int, str] = {}
        self.nan_helpers = False
        self.arg_helpers: set[str] = set()

    def out(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def load_base(self, ld: Load) -> str:
        return offset_expr("rows", self.p.shape[:-1], ld.strides[:-1])

    def row_offset(self, ld: Load) -> str:
        """Offset of the current ``cols`` from the row's start in load ``ld`` (per group of reduced dims)."""
        if not self.p.grouped:
            return f"cols * {ld.strides[-1]}"
        return flat_offset("cols", self.p.row_shape, self.p.row_strides[self.p.loads.index(ld)], div="//")

    def row_loads(self) -> None:
        for ld in self.p.loads:
            if self.p.kinds[ld.node] != "row":
                continue
            var = f"x{ld.node}"
            if ld.is_scalar:
                self.out(f"{var} = {to_compute(f'tl.load(in{ld.arg})', ld.dtype, self.interp)}")
            else:
                expr = f"tl.load(in{ld.arg} + {self.load_base(ld)}, mask=row_mask, other=0)"
                self.out(f"{var} = {to_compute(expr, ld.dtype, self.interp)}")
            self.row_names[ld.node] = var

    def cone(self, targets: list[int], available: dict[int, str]) -> list[int]:
        """Nodes (topological order) needed to compute ``targets`` from what is ``available``."""
        seen: set[int] = set()
        stack = list(targets)
        while stack:
            i = stack.pop()
            if i in seen or i in available:
                continue
            seen.add(i)
            if i not in self.loads:
                stack.extend(self.g.nodes[i].inputs)
        return sorted(seen)

    def element_block(self, targets: list[int], depth: int, names: dict[int, str] | None = None) -> ExprEmitter:
        """Load the element inputs and compute the element nodes ``targets`` need, for the current cols.

        ``names`` holds element values already computed for these cols (single pass reuses them)."""
        names = {**(names or {}), **self.row_names}
        needed = self.cone(targets, names)
        for i in needed:
            if i in self.loads:
                ld = self.loads[i]
                expr = f"tl.load(in{ld.arg} + {self.load_base(ld)} + {self.row_offset(ld)}, mask=mask, other=0)"
                self.out(f"x{i} = {to_compute(expr, ld.dtype, self.interp)}", depth)
                names[i] = f"x{i}"
        emitter = ExprEmitter(self.g, names, interpreter=self.interp)
        compute = [i for i in needed if i not in names and self.g.nodes[i].op not in REDUCTION_OPS]
        for line in emitter.emit(compute):
            self.out(line, depth)
        return emitter

    def masked(self, emitter: ExprEmitter, r: int) -> str:
        node = self.g.nodes[r]
        x = node.inputs[0]
        op = {"argmax": "max", "argmin": "min"}.get(node.op, node.op)
        return f"tl.where(mask, {emitter.names[x]}, {_identity(op, compute_dtype(self.g.nodes[x].spec.dtype))})"

    def arg_reduce(self, r: int, values: str, index: str) -> str:
        """``v<r>``: the [ROWS, 1] int64 index of the first extreme of ``values`` (indices ``index``)."""
        op = self.g.nodes[r].op
        self.arg_helpers.add(op)
        return (f"_, v{r} = tl.reduce(({values}, {index}), 1, _kg_{op}_pick, keep_dims=True)\n"
                f"    v{r} = v{r}.to(tl.int64)")

    def finish_rows(self) -> None:
        """Emit every row-kind node whose inputs are now available (after a level of reductions)."""
        emitter = ExprEmitter(self.g, self.row_names, interpreter=self.interp)
        names = emitter.names
        for i, node in enumerate(self.g.nodes):
            if i in names or self.p.kinds[i] != "row" or node.op in ("input", "transpose") or node.op in REDUCTION_OPS:
                continue
            if node.op == "reshape":
                if node.inputs[0] in names:
                    names[i] = names[node.inputs[0]]
                continue
            if all(j in names for j in node.inputs):
                for line in emitter.emit([i]):
                    self.out(line)
        self.row_names = names

    def levels(self) -> list[list[int]]:
        level: dict[int, int] = {}
        for r in self.p.reductions:
            deps = self.cone([self.g.nodes[r].inputs[0]], {})
            level[r] = 1 + max((level[d] for d in deps if d in level), default=-1)
        return [[r for r in self.p.reductions if level[r] == k] for k in range(max(level.values()) + 1)]

    def reduce_expr(self, op: str, acc: str, r: int | None = None) -> str:
        """Reduce ``acc`` over the row; float max/min of node ``r`` propagate NaN as torch does."""
        if op == "prod":
            self.nan_helpers = True
            return f"tl.reduce({acc}, 1, _kg_mul, keep_dims=True)"
        if op != "sum" and r is not None and is_float(self.g.nodes[r].spec.dtype):
            self.nan_helpers = True
            return f"tl.reduce({acc}, 1, _kg_{op}_nan, keep_dims=True)"
        return f"tl.{op}({acc}, axis=1, keep_dims=True)"

    def store_elements(self, emitter: ExprEmitter, depth: int) -> None:
        for j, o in enumerate(self.g.outputs):
            if self.p.kinds[o] != "element":
                continue
            dtype = self.g.nodes[o].spec.dtype
            value = to_storage(emitter.names[o], dtype, dtype, self.interp)
            if self.p.rows_contiguous:
                where = f"rows * {self.p.row_len} + cols"
            else:  # reduced dims not trailing: the row's elements are spread over the output
                base = offset_expr("rows", self.p.shape[:-1], self.p.out_strides[:-1])
                where = f"{base} + {self.p.out_offset('cols', div='//')}"
            self.out(f"tl.store(out{j} + {where}, {value}, mask=mask)", depth)

    def render(self) -> str:
        p = self.p
        # Shape-generic: n0 (run-time dim 0) scales the row count; the index is 64-bit as any n0 may come.
        dyn = dynamic_source(self.g, p.shape)
        index_64 = dyn is not None or p.rows * p.row_len >= 2**31 or any(
            sum((s - 1) * st for s, st in zip(p.shape, ld.strides)) >= 2**31 for ld in p.loads)
        rows_expr = "pid * ROWS + tl.arange(0, ROWS)[:, None]"
        self.out("pid = tl.program_id(0)")
        self.out(f"rows = ({rows_expr}).to(tl.int64)" if index_64 else f"rows = {rows_expr}")
        self.out(f"row_mask = rows < {p.rows if dyn is None else f'n0 * {p.rows // self.g.dynamic}'}")
        self.out("cols0 = tl.arange(0, BLOCK_N)[None, :]")
        self.row_loads()
        self.finish_rows()
        element_outputs = [o for o in self.g.outputs if p.kinds[o] == "element"]
        if self.block >= p.row_len:
            self.single_pass(element_outputs)
        else:
            self.looped(element_outputs)
        for j, o in enumerate(self.g.outputs):
            if p.kinds[o] == "row":
                dtype = self.g.nodes[o].spec.dtype
                value = f"tl.broadcast_to({self.row_names[o]}, [ROWS, 1])"
                self.out(f"tl.store(out{j} + rows, {to_storage(value, dtype, dtype, self.interp)}, mask=row_mask)")
        params = ", ".join([*kernel_params(self.g), *(["n0"] if dyn is not None else [])])
        helpers = _NAN_HELPERS if self.nan_helpers else ""
        helpers += "".join(_ARG_HELPER.format(op=op, cmp=">" if op == "argmax" else "<")
                           for op in sorted(self.arg_helpers))
        signature = f"def {ENTRY}({params}, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):\n"
        return HEADER + helpers + "@triton.jit\n" + signature + "\n".join(self.lines) + "\n"

    def single_pass(self, element_outputs: list[int]) -> None:
        self.out("cols = cols0")
        self.out(f"mask = row_mask & (cols < {self.p.row_len})")
        computed: dict[int, str] = {}  # the row stays in registers: compute each element value once
        for level in self.levels():
            emitter = self.element_block([self.g.nodes[r].inputs[0] for r in level], 1, computed)
            computed.update(emitter.names)
            for r in level:
                if self.g.nodes[r].op in INDEX_REDUCTIONS:
                    self.out(self.arg_reduce(r, self.masked(emitter, r), f"tl.where(mask, cols, {_NO_INDEX})"))
                else:
                    self.out(f"v{r} = {self.reduce_expr(self.g.nodes[r].op, self.masked(emitter, r), r)}")
                self.row_names[r] = f"v{r}"
            self.finish_rows()
        if element_outputs:
            self.store_elements(self.element_block(element_outputs, 1, computed), 1)

    def online_sums(self, levels: list[list[int]]) -> dict[int, int]:
        """``{sum: max}`` for sums of ``exp(X - max(X))`` one level above their max (softmax, logsumexp):
        the looped path computes them in the max's pass with an online rescaling, saving a pass."""
        fused: dict[int, int] = {}
        for k in range(len(levels) - 1):
            for r in levels[k + 1]:
                e = self.g.nodes[self.g.nodes[r].inputs[0]]
                if self.g.nodes[r].op != "sum" or e.op != "exp" or self.g.nodes[e.inputs[0]].op != "sub":
                    continue
                x, m = self.g.nodes[e.inputs[0]].inputs
                if m in levels[k] and self.g.nodes[m].op == "max" and self.g.nodes[m].inputs[0] == x \
                        and compute_dtype(self.g.nodes[x].spec.dtype) == "float32":
                    fused[r] = m
        return fused

    def looped(self, element_outputs: list[int]) -> None:
        loop = f"for start in range(0, {self.p.row_len}, BLOCK_N):"
        levels = self.levels()
        fused = self.online_sums(levels)
        for k, level in enumerate(levels):
            level = [r for r in level if r not in fused]
            online = {r: m for r, m in fused.items() if m in level}
            if not level:
                continue
            for r in level + list(online):
                dtype = compute_dtype(self.g.nodes[self.g.nodes[r].inputs[0]].spec.dtype)
                op = self.g.nodes[r].op
                identity = _identity({"argmax": "max", "argmin": "min"}.get(op, op), dtype)
                self.out(f"acc{r} = tl.full([ROWS, BLOCK_N], {identity}, {TL_DTYPE[dtype]})")
                if op in INDEX_REDUCTIONS:
                    self.out(f"idx{r} = tl.full([ROWS, BLOCK_N], {_NO_INDEX}, tl.int32)")
            self.out(loop)
            self.out("cols = start + cols0", 2)
            self.out(f"mask = row_mask & (cols < {self.p.row_len})", 2)
            emitter = self.element_block([self.g.nodes[r].inputs[0] for r in level], 2)
            for r in level:
                op = self.g.nodes[r].op
                if r in online.values():  # per-lane online softmax: rescale the sums to the new max
                    self.out(f"xm{r} = {self.masked(emitter, r)}", 2)
                    # NaN must win as in eager (and the max may be an output): the interpreter's maximum
                    # propagates NaN by default, a GPU's does not
                    self.out(f"new{r} = tl.maximum(acc{r}, xm{r}, propagate_nan=tl.PropagateNan.ALL)", 2)
                    self.out(f"safe{r} = tl.where(new{r} == float(\"-inf\"), 0.0, new{r})", 2)
                    for s_node in (s for s, m in online.items() if m == r):
                        self.out(f"acc{s_node} = acc{s_node} * tl.exp(acc{r} - safe{r}) + tl.exp(xm{r} - safe{r})", 2)
                    self.out(f"acc{r} = new{r}", 2)
                    continue
                if op in INDEX_REDUCTIONS:  # each lane's cols rise: the pick keeps the first extreme
                    self.arg_helpers.add(op)
                    self.out(f"acc{r}, idx{r} = _kg_{op}_pick(acc{r}, idx{r}, {self.masked(emitter, r)}, "
                             f"tl.where(mask, cols, {_NO_INDEX}))", 2)
                    continue
                nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float(self.g.nodes[r].spec.dtype) else ""
                combine = {"sum": f"acc{r} + {{}}", "prod": f"acc{r} * {{}}"}.get(op, f"tl.{op}imum(acc{r}, {{}}{nan})")
                self.out(f"acc{r} = {combine.format(self.masked(emitter, r))}", 2)
            for r in level:
                if self.g.nodes[r].op in INDEX_REDUCTIONS:
                    self.out(self.arg_reduce(r, f"acc{r}", f"idx{r}"))
                else:
                    self.out(f"v{r} = {self.reduce_expr(self.g.nodes[r].op, f'acc{r}', r)}")
                self.row_names[r] = f"v{r}"
            for s_node, m in online.items():
                safe = f"tl.where(v{m} == float(\"-inf\"), 0.0, v{m})"
                self.out(f"v{s_node} = {self.reduce_expr('sum', f'acc{s_node} * tl.exp(acc{m} - {safe})')}")
                self.row_names[s_node] = f"v{s_node}"
            self.finish_rows()
        if element_outputs:
            self.out(loop)
            self.out("cols = start + cols0", 2)
            self.out(f"mask = row_mask & (cols < {self.p.row_len})", 2)
            self.store_elements(self.element_block(element_outputs, 2), 2)


def render(problem: ReductionProblem, config: Config, target: Target) -> Source:
    text = _Renderer(problem, config, target).render()
    rows = int(config["ROWS"])
    graph = problem.graph
    dyn = dynamic_source(graph, problem.shape)
    grid_per_n0 = {"grid_per_n0": json.dumps([0, problem.rows // graph.dynamic, rows, 1])} if dyn is not None else {}
    meta = FrozenMap({"signature": signature_json(graph), "grid": json.dumps([-(-problem.rows // rows)]),
                      "constexprs": json.dumps({"ROWS": rows, "BLOCK_N": int(config["BLOCK_N"])}),
                      "num_warps": int(config["num_warps"]), "num_stages": 1, **dynamic_meta(graph, dyn),
                      **grid_per_n0})
    return Source("triton", text, ENTRY, meta=meta)
