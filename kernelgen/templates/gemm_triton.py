"""GEMM template with fused epilogue, Triton renderer: ``BLOCK_M x BLOCK_N`` output tiles, a ``BLOCK_K`` loop
of ``tl.dot`` into a float32 accumulator, grouped tile ordering (``GROUP_M`` rows of tiles share B in L2)
and the pointwise epilogue applied to the accumulator before one masked store.

Operand loads are masked only along the dims whose size is not a multiple of the tile (masked loads stay
vectorised and pipelined); the store masks the M/N edges. Batched matmuls use the grid's second axis.
"""

from __future__ import annotations

import json

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.triton_expr import (HEADER, ExprEmitter, kernel_params, offset_expr, pow2_at_least,
                                           signature_json, tile_offset, to_compute, to_storage)
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.gemm import GemmProblem
from kernelgen.templates.indexing import dynamic_meta, dynamic_source

ENTRY = "kg_gemm"
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_PREFERRED = (  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages), best first
    (128, 128, 32, 8, 4, 3), (128, 128, 32, 8, 4, 2), (128, 64, 32, 8, 4, 2), (64, 64, 32, 8, 4, 2),
    (64, 64, 16, 8, 4, 2), (32, 32, 16, 4, 4, 2), (16, 16, 16, 1, 2, 2), (16, 16, 16, 1, 1, 1),
)


def shared_memory_estimate(problem: GemmProblem, config: Config) -> int:
    """Bytes of the A and B tiles held in shared memory across ``num_stages`` pipeline stages."""
    stages = max(1, int(config["num_stages"]))
    tile = (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * _ITEMSIZE.get(problem.a.dtype, 4)
    return tile * stages


def space(problem: GemmProblem, target: Target) -> SearchSpace:
    cap_m, cap_n, cap_k = (max(16, pow2_at_least(d)) for d in (problem.m, problem.n, problem.k))
    if target.kind == "cpu":  # interpreter: a handful of configs, big tiles run fastest
        params = [Param("BLOCK_M", (16, 64)), Param("BLOCK_N", (16, 64)), Param("BLOCK_K", (16, 32)),
                  Param("GROUP_M", (1, 4)), Param("num_warps", (4,)), Param("num_stages", (1,))]
        default = {"BLOCK_M": min(64, cap_m), "BLOCK_N": min(64, cap_n), "BLOCK_K": min(32, cap_k), "GROUP_M": 4,
                   "num_warps": 4, "num_stages": 1}
        if default["BLOCK_M"] not in (16, 64):
            default["BLOCK_M"] = 64
        if default["BLOCK_N"] not in (16, 64):
            default["BLOCK_N"] = 64
        return SearchSpace(params, default=default)
    limits = gpu_limits(target)
    warp, max_threads, smem = limits["warp_size"], limits["max_threads"], limits["shared_memory"]
    params = [Param("BLOCK_M", (16, 32, 64, 128, 256)), Param("BLOCK_N", (16, 32, 64, 128, 256)),
              Param("BLOCK_K", (16, 32, 64, 128)), Param("GROUP_M", (1, 4, 8)), Param("num_warps", (1, 2, 4, 8)),
              Param("num_stages", (1, 2, 3, 4, 5))]
    constraints = [
        Constraint(f"num_warps * {warp} threads <= {max_threads}", lambda c: c["num_warps"] * warp <= max_threads),
        Constraint(f"(BLOCK_M + BLOCK_N) * BLOCK_K * num_stages * itemsize <= {smem} B shared memory",
                   lambda c: shared_memory_estimate(problem, c) <= smem),
        Constraint("accumulator <= 128 float32 registers per thread (BLOCK_M * BLOCK_N / threads)",
                   lambda c: c["BLOCK_M"] * c["BLOCK_N"] <= 128 * c["num_warps"] * warp),
        Constraint(f"tiles no larger than the problem (BLOCK_M <= {cap_m}, BLOCK_N <= {cap_n}, BLOCK_K <= {cap_k})",
                   lambda c: c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n and c["BLOCK_K"] <= cap_k),
        Constraint("GROUP_M only matters with several tile rows",
                   lambda c: c["GROUP_M"] == 1 or c["BLOCK_M"] < problem.m),
    ]
    candidates = [{"BLOCK_M": min(bm, cap_m), "BLOCK_N": min(bn, cap_n), "BLOCK_K": min(bk, cap_k),
                   "GROUP_M": group if min(bm, cap_m) < problem.m else 1, "num_warps": warps, "num_stages": stages}
                  for bm, bn, bk, group, warps, stages in _PREFERRED]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def _max_offset(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(shape, strides))


def render(problem: GemmProblem, config: Config, target: Target) -> Source:
    p, g = problem, problem.graph
    bm, bn, bk = int(config["BLOCK_M"]), int(config["BLOCK_N"]), int(config["BLOCK_K"])
    interp = target.kind == "cpu"
    batch_count = 1
    for size in p.batch:
        batch_count *= size
    out_shape = p.batch + (p.m, p.n)
    index_64 = max(batch_count * p.m * p.n, _max_offset(p.batch + (p.m, p.k), p.a.strides),
                   _max_offset(p.batch + (p.k, p.n), p.b.strides),
                   *(_max_offset(out_shape, ld.strides) for ld in p.loads)) >= 2**31
    grid_m, grid_n = -(-p.m // bm), -(-p.n // bn)
    # Shape-generic: the run-time n0 is the outermost batch dim (grid axis 1) or a factor of M; M is then
    # a value of the kernel (``M = n0 * k``), its tile rows ``tl.cdiv(M, BLOCK_M)`` and always masked.
    dyn = dynamic_source(g, out_shape)
    m_dyn = dyn is not None and not p.batch
    index_64 = index_64 or dyn is not None
    m_val, grid_m_val = (("M", "tl.cdiv(M, BLOCK_M)") if m_dyn else (str(p.m), str(grid_m)))
    precision = ', input_precision="ieee"' if p.a.dtype in ("float32", "float64") else ""  # as torch: no tf32
    wide = ".to(tl.int64)" if index_64 else ""
    lines = [
        *([f"M = n0 * {p.m // g.dynamic}"] if m_dyn else []),
        "pid = tl.program_id(0)",
        "bid = tl.program_id(1)" + wide,
        f"num_pid_in_group = GROUP_M * {grid_n}",
        "group_id = pid // num_pid_in_group",
        "first_pid_m = group_id * GROUP_M",
        f"group_size_m = min({grid_m_val} - first_pid_m, GROUP_M)",
        "pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
        "pid_n = (pid % num_pid_in_group) // group_size_m",
        f"offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){wide}",
        f"offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){wide}",
        "offs_k = tl.arange(0, BLOCK_K)",
        f"a_ptrs = in{p.a.arg} + {offset_expr('bid', p.batch, p.a.strides[:-2])} + "
        f"{tile_offset([('offs_m[:, None]', p.a.strides[-2]), ('offs_k[None, :]', p.a.strides[-1])])}",
        f"b_ptrs = in{p.b.arg} + {offset_expr('bid', p.batch, p.b.strides[:-2])} + "
        f"{tile_offset([('offs_k[:, None]', p.b.strides[-2]), ('offs_n[None, :]', p.b.strides[-1])])}",
        f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={'tl.float64' if p.a.dtype == 'float64' else 'tl.float32'})",
        f"for k in range(0, {-(-p.k // bk)}):",
    ]
    # Masks only where a tile can overhang; masked loads keep their contiguity, so they stay vectorised
    # and pipelined (cp.async zero-fills), unlike wrapping indices with a modulo.
    k_tail = p.k % bk != 0
    a_mask = [m for m, need in ((f"(offs_m[:, None] < {m_val})", m_dyn or p.m % bm != 0),
                                ("(offs_k[None, :] < k_left)", k_tail)) if need]
    b_mask = [m for m, need in (("(offs_k[:, None] < k_left)", k_tail),
                                (f"(offs_n[None, :] < {p.n})", p.n % bn != 0)) if need]
    if k_tail:
        lines.append(f"    k_left = {p.k} - k * BLOCK_K")
    lines += [f"    a = tl.load(a_ptrs, mask={' & '.join(a_mask)}, other=0.0)" if a_mask else "    a = tl.load(a_ptrs)",
              f"    b = tl.load(b_ptrs, mask={' & '.join(b_mask)}, other=0.0)" if b_mask else "    b = tl.load(b_ptrs)"]
    # out_dtype names the float64 accumulator: Triton 3.6's tl.dot asserts acc's dtype equals out_dtype (float32
    # by default); an H100 run found float64 GEMMs refused there
    out = ", out_dtype=tl.float64" if p.a.dtype == "float64" else ""
    lines += [f"    acc = tl.dot(a, b, acc{precision}{out})",
              f"    a_ptrs += BLOCK_K * {p.a.strides[-1]}",
              f"    b_ptrs += BLOCK_K * {p.b.strides[-2]}",
              f"mask = (offs_m[:, None] < {m_val}) & (offs_n[None, :] < {p.n})"]
    names = {p.matmul: "acc"}
    for ld in p.loads:
        var = f"x{ld.node}"
        if ld.is_scalar:
            lines.append(f"{var} = {to_compute(f'tl.load(in{ld.arg})', ld.dtype, interp)}")
        else:
            ptr = (f"in{ld.arg} + {offset_expr('bid', p.batch, ld.strides[:-2])} + "
                   f"{tile_offset([('offs_m[:, None]', ld.strides[-2]), ('offs_n[None, :]', ld.strides[-1])])}")
            lines.append(f"{var} = {to_compute(f'tl.load({ptr}, mask=mask, other=0)', ld.dtype, interp)}")
        names[ld.node] = var
    emitter = ExprEmitter(g, names, interpreter=interp)
    lines += emitter.emit([i for i, n in enumerate(g.nodes)
                           if i not in names and n.op not in ("input", "reshape", "transpose", "matmul")])
    out = g.outputs[0]
    value = to_storage(emitter.names[out], g.nodes[out].spec.dtype, p.out_dtype, interp)
    lines.append(f"tl.store(out0 + bid * {p.m * p.n} + offs_m[:, None] * {p.n} + offs_n[None, :], {value}, mask=mask)")
    params = ", ".join([*kernel_params(g), *(["n0"] if dyn is not None else [])])
    text = HEADER + (f"@triton.jit\ndef {ENTRY}({params}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
                     "BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):\n") + "\n".join("    " + ln for ln in lines) + "\n"
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": int(config["GROUP_M"])}
    meta = FrozenMap({"signature": signature_json(g), "grid": json.dumps([grid_m * grid_n, batch_count]),
                      "constexprs": json.dumps(constexprs), "num_warps": int(config["num_warps"]),
                      "num_stages": int(config["num_stages"]), **dynamic_meta(g, dyn),
                      **({} if dyn is None else {"grid_per_n0": json.dumps(
                          [0, p.m // g.dynamic, bm, grid_n] if m_dyn else [1, batch_count // g.dynamic, 1, 1])})})
    return Source("triton", text, ENTRY, meta=meta)
