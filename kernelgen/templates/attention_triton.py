"""Attention template, Triton renderer: flash-attention forward with an online softmax.

Each program owns ``BLOCK_M`` queries of one (batch, head) and streams keys/values in ``BLOCK_N`` blocks,
keeping the running row max and row sum in float32 and rescaling the accumulator; scores are scaled by
``scale * log2(e)`` so the exponentials are ``exp2``. Key blocks split in two loops: blocks every query
of the tile sees (no mask) and the blocks on the causal diagonal or the key tail (masked); causal blocks
past the diagonal are skipped. The causal mask follows ``torch.nn.functional.scaled_dot_product_attention``
(``tril`` of the ``[q_len, kv_len]`` matrix: query i sees keys 0..i), the reference kernelgen checks against.
An ``attn_mask`` is loaded per key block through its strides (0 on broadcast dims): an additive one is added
to the scores (times log2(e)), a bool one sets hidden keys to -inf. A query with no visible key gets output 0
and logsumexp 0, as ATen's CPU kernel gives; the optional ``lse`` output is ``(m + log2(l)) * ln(2)``.
"""

from __future__ import annotations

import json

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.triton_expr import (HEADER, TL_DTYPE, bf16_round, kernel_params, pow2_at_least, signature_json,
                                           tile_offset)
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.attention import AttentionProblem
from kernelgen.templates.indexing import dynamic_meta, dynamic_source

ENTRY = "kg_attention"
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def head_blocks(problem: AttentionProblem) -> tuple[int, int]:
    """Padded head sizes: powers of two, at least 16 (``tl.dot``'s minimum)."""
    return max(16, pow2_at_least(problem.head_dim)), max(16, pow2_at_least(problem.v_dim))


def shared_memory_estimate(problem: AttentionProblem, config: Config) -> int:
    """Bytes of the Q tile plus the pipelined K and V tiles."""
    d, dv = head_blocks(problem)
    size = _ITEMSIZE.get(problem.q.dtype, 4)
    stages = max(1, int(config["num_stages"]))
    return (config["BLOCK_M"] * d + config["BLOCK_N"] * (d + dv) * stages) * size


def space(problem: AttentionProblem, target: Target) -> SearchSpace:
    cap_m, cap_n = max(16, pow2_at_least(problem.q_len)), max(16, pow2_at_least(problem.kv_len))
    if target.kind == "cpu":  # interpreter: tiny space
        default = {"BLOCK_M": min(64, cap_m) if min(64, cap_m) in (16, 64) else 64,
                   "BLOCK_N": min(64, cap_n) if min(64, cap_n) in (16, 64) else 64, "num_warps": 4, "num_stages": 1}
        return SearchSpace([Param("BLOCK_M", (16, 64)), Param("BLOCK_N", (16, 64)), Param("num_warps", (4,)),
                            Param("num_stages", (1,))], default=default)
    limits = gpu_limits(target)
    warp, max_threads, smem = limits["warp_size"], limits["max_threads"], limits["shared_memory"]
    d, dv = head_blocks(problem)
    params = [Param("BLOCK_M", (16, 32, 64, 128, 256)), Param("BLOCK_N", (16, 32, 64, 128)),
              Param("num_warps", (1, 2, 4, 8)), Param("num_stages", (1, 2, 3, 4))]
    constraints = [
        Constraint(f"num_warps * {warp} threads <= {max_threads}", lambda c: c["num_warps"] * warp <= max_threads),
        Constraint(f"(BLOCK_M * D + BLOCK_N * (D + DV) * num_stages) * itemsize <= {smem} B shared memory",
                   lambda c: shared_memory_estimate(problem, c) <= smem),
        Constraint("scores and accumulator <= 128 float32 registers per thread",
                   lambda c: c["BLOCK_M"] * (c["BLOCK_N"] + dv) <= 128 * c["num_warps"] * warp),
        Constraint(f"tiles no larger than the sequences (BLOCK_M <= {cap_m}, BLOCK_N <= {cap_n})",
                   lambda c: c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n),
    ]
    candidates = [{"BLOCK_M": min(bm, cap_m), "BLOCK_N": min(bn, cap_n), "num_warps": warps, "num_stages": stages}
                  for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 4, 2), (64, 64, 4, 2),
                                                (64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1), (16, 16, 1, 1))]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def _body(p: AttentionProblem, masked: bool, d_mask: str, dv_mask: str, precision: str) -> list[str]:
    """One key block of the online softmax, at ``start_n``."""
    k_ptr = tile_offset([("offs_n[None, :]", p.k.strides[2]), ("offs_d[:, None]", p.k.strides[3])])
    v_ptr = tile_offset([("offs_n[:, None]", p.v.strides[2]), ("offs_dv[None, :]", p.v.strides[3])])
    k_tail, v_tail = (f"(offs_n[None, :] < {p.kv_len})", f"(offs_n[:, None] < {p.kv_len})") if masked else ("", "")
    k_mask = " & ".join(x for x in (k_tail, d_mask.replace("[None, :]", "[:, None]")) if x)  # K is loaded as [D, N]
    v_mask = " & ".join(x for x in (v_tail, dv_mask) if x)
    lines = ["offs_n = start_n + offs_n0",
             f"k = tl.load(k_base + {k_ptr}" + (f", mask={k_mask}, other=0.0)" if k_mask else ")"),
             f"qk = tl.dot(q, k{precision}) * {p.scale * LOG2E!r}"]
    if masked:
        keep = f"(offs_n[None, :] < {p.kv_len})"
        if p.causal:
            keep += " & (offs_n[None, :] <= offs_m[:, None])"
        lines.append(f"qk = tl.where({keep}, qk, float(\"-inf\"))")
    if p.mask is not None:  # rows past q_len and keys past kv_len read nothing (their scores are never used)
        m_ptr = tile_offset([("offs_m[:, None]", p.mask.strides[2]), ("offs_n[None, :]", p.mask.strides[3])])
        m_in = "(offs_m[:, None] < " + str(p.q_len) + ")" + (f" & (offs_n[None, :] < {p.kv_len})" if masked else "")
        lines.append(f"am = tl.load(m_base + {m_ptr}, mask={m_in}, other=0)")
        lines.append("qk = tl.where(am, qk, float(\"-inf\"))" if p.mask.dtype == "bool" else
                     f"qk = qk + am.to(tl.float32) * {LOG2E!r}")
    lines += [
        "m_new = tl.maximum(m_i, tl.max(qk, 1))",
        "m_safe = tl.where(m_new == float(\"-inf\"), 0.0, m_new)  # a row with no visible key yet",
        "p = tl.exp2(qk - m_safe[:, None])",
        "alpha = tl.exp2(m_i - m_safe)",
        "l_i = l_i * alpha + tl.sum(p, 1)",
        f"v = tl.load(v_base + {v_ptr}" + (f", mask={v_mask}, other=0.0)" if v_mask else ")"),
        f"acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None]{precision})",
        "m_i = m_new",
    ]
    return lines


def render(problem: AttentionProblem, config: Config, target: Target) -> Source:
    p = problem
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    d, dv = head_blocks(p)
    precision = ', input_precision="ieee"' if p.q.dtype in ("float32", "float64") else ""  # as torch: no tf32
    d_mask = f"(offs_d[None, :] < {p.head_dim})" if d != p.head_dim else ""
    dv_mask = f"(offs_dv[None, :] < {p.v_dim})" if dv != p.v_dim else ""
    index_64 = max(p.batch * p.heads * p.q_len * p.v_dim,
                   *(sum((s - 1) * st for s, st in zip((p.batch, p.heads, n, dim), op.strides))
                     for op, n, dim in ((p.q, p.q_len, p.head_dim), (p.k, p.kv_len, p.head_dim),
                                        (p.v, p.kv_len, p.v_dim))),
                   *([sum((s - 1) * st for s, st in zip((p.batch, p.heads, p.q_len, p.kv_len), p.mask.strides))]
                     if p.mask is not None else [])) >= 2**31
    # Shape-generic: the batch is the run-time n0, only the grid's (batch x heads) axis grows with it.
    dyn = dynamic_source(p.graph, (p.batch, p.heads, p.q_len))
    wide = ".to(tl.int64)" if index_64 or dyn is not None else ""
    q_ptr = tile_offset([("offs_m[:, None]", p.q.strides[2]), ("offs_d[None, :]", p.q.strides[3])])
    kh = "kh" if p.group > 1 else "h"
    q_mask = " & ".join(x for x in (f"(offs_m[:, None] < {p.q_len})", d_mask) if x)
    if p.causal:  # query i sees keys j <= i: blocks below start_m * BLOCK_M are fully visible
        full, hi = f"min(start_m * BLOCK_M + 1, {p.kv_len}) // BLOCK_N * BLOCK_N", \
            f"min((start_m + 1) * BLOCK_M, {p.kv_len})"
    else:
        full, hi = f"{p.kv_len // bn * bn}", f"{p.kv_len}"
    lines = [
        "start_m = tl.program_id(0)",
        "bh = tl.program_id(1)" + wide,
        f"b = bh // {p.heads}",
        f"h = bh % {p.heads}",
        f"q_base = in{p.q.arg} + {tile_offset([('b', p.q.strides[0]), ('h', p.q.strides[1])])}",
        *([f"kh = h // {p.group}  # grouped-query attention: the key/value head"] if p.group > 1 else []),
        f"k_base = in{p.k.arg} + {tile_offset([('b', p.k.strides[0]), (kh, p.k.strides[1])])}",
        f"v_base = in{p.v.arg} + {tile_offset([('b', p.v.strides[0]), (kh, p.v.strides[1])])}",
        *([f"m_base = in{p.mask.arg} + {tile_offset([('b', p.mask.strides[0]), ('h', p.mask.strides[1])])}"]
          if p.mask is not None else []),
        f"offs_m = (start_m * BLOCK_M + tl.arange(0, BLOCK_M)){wide}",
        f"offs_n0 = tl.arange(0, BLOCK_N){wide}",
        f"offs_d = tl.arange(0, {d})",
        f"offs_dv = tl.arange(0, {dv})",
        f"q = tl.load(q_base + {q_ptr}, mask={q_mask}, other=0.0)",
        "m_i = tl.full([BLOCK_M], float(\"-inf\"), tl.float32)",
        "l_i = tl.zeros([BLOCK_M], tl.float32)",
        f"acc = tl.zeros([BLOCK_M, {dv}], tl.float32)",
        f"full = {full}",
        "for start_n in range(0, full, BLOCK_N):  # every query of the tile sees every key: no mask",
        *("    " + ln for ln in _body(p, False, d_mask, dv_mask, precision)),
        f"for start_n in range(full, {hi}, BLOCK_N):  # causal diagonal and key tail: masked",
        *("    " + ln for ln in _body(p, True, d_mask, dv_mask, precision)),
        "seen = l_i > 0  # a query with no visible key: output and logsumexp 0, as ATen's CPU kernel",
        "out = acc / tl.where(seen, l_i, 1.0)[:, None]",
        f"o_mask = (offs_m[:, None] < {p.q_len})" + (f" & {dv_mask}" if dv_mask else ""),
        f"tl.store(out{p.outputs.index('out')} + (bh * {p.q_len} + offs_m[:, None]) * {p.v_dim} + offs_dv[None, :], "
        f"out.to({TL_DTYPE[p.out_dtype]}), mask=o_mask)",
    ]
    if "lse" in p.outputs:
        lse_dtype = "tl.float64" if p.q.dtype == "float64" else "tl.float32"
        lines[-1:-1] = [f"lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * {LN2!r}, 0.0)",
                        f"tl.store(out{p.outputs.index('lse')} + bh * {p.q_len} + offs_m, lse.to({lse_dtype}), "
                        f"mask=offs_m < {p.q_len})"]
    if target.kind == "cpu" and p.out_dtype == "bfloat16":
        lines[-1] = lines[-1].replace("out.to(tl.bfloat16)", f"{bf16_round('out')}.to(tl.bfloat16)")
    params = ", ".join([*kernel_params(p.graph), *(["n0"] if dyn is not None else [])])
    text = HEADER + f"@triton.jit\ndef {ENTRY}({params}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):\n" + \
        "\n".join("    " + ln for ln in lines) + "\n"
    meta = FrozenMap({"signature": signature_json(p.graph), "grid": json.dumps([-(-p.q_len // bm), p.batch * p.heads]),
                      "constexprs": json.dumps({"BLOCK_M": bm, "BLOCK_N": bn}), "num_warps": int(config["num_warps"]),
                      "num_stages": int(config["num_stages"]), **dynamic_meta(p.graph, dyn),
                      **({"grid_per_n0": json.dumps([1, p.heads, 1, 1])} if dyn is not None else {})})
    return Source("triton", text, ENTRY, meta=meta)
