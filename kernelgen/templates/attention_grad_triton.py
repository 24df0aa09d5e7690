"""Attention backward template, Triton renderer: the flash-attention backward in one launch without atomics.

The grid's first axis holds two kinds of programs over one (batch, head): the first ``ceil(kv_len / BLOCK_N)``
own a key block and walk the query blocks that see it, accumulating dK and dV; the rest own a query block and walk
its visible key blocks, accumulating dQ. Both recompute ``P = exp(scale · Q Kᵀ [+ mask] - lse)`` and
``dS = P ∘ (dO Vᵀ - Δ)`` with ``Δ = rowsum(dO ∘ O)`` from the tiles they load, so neither waits for the other and
every output element has one writer. Products are ``tl.dot`` in float32 (``ieee`` for float32, as torch; float64 in float64).
Grouped-query attention (``group`` query heads per key/value head): the key-block programs of a group's first query
head walk the query blocks of every head of the group, summing their dK and dV; those of the group's other heads
have nothing to do.
"""

from __future__ import annotations

import json

from kernelgen.backends.triton_aot import gpu_limits, gpu_space
from kernelgen.codegen.triton_expr import HEADER, TL_DTYPE, bf16_round, kernel_params, pow2_at_least, signature_json
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.attention_grad import AttentionGradProblem

ENTRY = "kg_attention_grad"


def _padded(n: int) -> int:
    return max(16, pow2_at_least(n))  # tl.dot's minimum


def space(problem: AttentionGradProblem, target: Target) -> SearchSpace:
    cap_m, cap_n = _padded(problem.q_len), _padded(problem.kv_len)
    if target.kind == "cpu":  # interpreter: tiny space
        return SearchSpace([Param("BLOCK_M", (16, 32)), Param("BLOCK_N", (16, 32)), Param("num_warps", (4,))],
                           default={"BLOCK_M": min(32, cap_m), "BLOCK_N": min(32, cap_n), "num_warps": 4})
    limits = gpu_limits(target)
    warp, max_threads = limits["warp_size"], limits["max_threads"]
    d, dv = _padded(problem.head_dim), _padded(problem.v_dim)
    params = [Param("BLOCK_M", (16, 32, 64, 128)), Param("BLOCK_N", (16, 32, 64, 128)), Param("num_warps", (2, 4, 8))]
    constraints = [
        Constraint(f"num_warps * {warp} threads <= {max_threads}", lambda c: c["num_warps"] * warp <= max_threads),
        Constraint("tiles, accumulators and scores <= 160 float32 registers per thread",
                   lambda c: (c["BLOCK_N"] * (2 * d + 2 * dv) + 2 * c["BLOCK_M"] * c["BLOCK_N"])
                   <= 160 * c["num_warps"] * warp),
        Constraint(f"tiles no larger than the sequences (BLOCK_M <= {cap_m}, BLOCK_N <= {cap_n})",
                   lambda c: c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n),
    ]
    candidates = [{"BLOCK_M": min(bm, cap_m), "BLOCK_N": min(bn, cap_n), "num_warps": w}
                  for bm, bn, w in ((64, 64, 4), (32, 64, 4), (32, 32, 4), (16, 32, 4), (16, 16, 2))]
    return gpu_space(params, constraints, candidates, lambda c: render(problem, c, target), target)


def _tile(base: str, operand: object, rows: str, cols: str, row_mask: str, col_mask: str, acc: str) -> str:
    strides = operand.strides  # (batch, heads, seq, dim)
    mask = " & ".join(m for m in (row_mask, col_mask) if m)
    return f"tl.load({base} + {rows} * {strides[2]} + {cols} * {strides[3]}" + \
        (f", mask={mask}, other=0.0)" if mask else ")") + f".to({acc})"


def _probabilities(p: AttentionGradProblem, precision: str) -> list[str]:
    """``prob`` and ``ds`` of the tile at (offs_m, offs_n) from q, k, v, do, lse, delta."""
    keep = [f"(offs_m[:, None] < {p.q_len})", f"(offs_n[None, :] < {p.kv_len})"]
    if p.causal:
        keep.append("(offs_n[None, :] <= offs_m[:, None])")
    lines = [f"s = tl.dot(q, tl.trans(k){precision}) * {p.scale!r}"]
    if p.mask is not None:
        st = p.mask.strides
        lines.append(f"am = tl.load(m_base + offs_m[:, None] * {st[2]} + offs_n[None, :] * {st[3]}, "
                     f"mask={keep[0]} & {keep[1]}, other=0)")
        lines.append("s = tl.where(am, s, float(\"-inf\"))" if p.mask.dtype == "bool" else "s = s + am.to(s.dtype)")
    lines += [f"prob = tl.where({' & '.join(keep)}, tl.exp(s - lse[:, None]), 0.0)",
              f"dp = tl.dot(do, tl.trans(v){precision})",
              "ds = prob * (dp - delta[:, None])"]
    return lines


def render(problem: AttentionGradProblem, config: Config, target: Target) -> Source:
    p = problem
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    d, dv = _padded(p.head_dim), _padded(p.v_dim)
    precision = ', input_precision="ieee"' if p.q.dtype in ("float32", "float64") else ""
    d_mask = f"(offs_d[None, :] < {p.head_dim})" if d != p.head_dim else ""
    dv_mask = f"(offs_dv[None, :] < {p.v_dim})" if dv != p.v_dim else ""
    nk, nq = -(-p.kv_len // bn), -(-p.q_len // bm)
    grouped = p.group > 1
    kh = f"(h // {p.group})" if grouped else "h"

    def query_bases(head: str) -> list[str]:  # what a query head reads
        lines = [f"{name}_base = in{op.arg} + b * {op.strides[0]} + {head} * {op.strides[1]}"
                 for name, op in (("g", p.grad), ("q", p.q), ("o", p.out))]
        lines.append(f"l_base = in{p.lse.arg} + b * {p.lse.strides[0]} + {head} * {p.lse.strides[1]}")
        if p.mask is not None:
            lines.append(f"m_base = in{p.mask.arg} + b * {p.mask.strides[0]} + {head} * {p.mask.strides[1]}")
        return lines

    bases = [f"{name}_base = in{op.arg} + b * {op.strides[0]} + {kh} * {op.strides[1]}"
             for name, op in (("k", p.k), ("v", p.v))]
    if not grouped:  # (the order of the plain kernel's lines, unchanged)
        bases = [*query_bases("h")[:2], *bases, *query_bases("h")[2:]]
    m_rows = f"(offs_m[:, None] < {p.q_len})"
    n_rows = f"(offs_n[:, None] < {p.kv_len})"
    acc = "tl.float64" if p.q.dtype == "float64" else "tl.float32"
    query_tiles = [
        f"q = {_tile('q_base', p.q, 'offs_m[:, None]', 'offs_d[None, :]', m_rows, d_mask, acc)}",
        f"do = {_tile('g_base', p.grad, 'offs_m[:, None]', 'offs_dv[None, :]', m_rows, dv_mask, acc)}",
        f"o = {_tile('o_base', p.out, 'offs_m[:, None]', 'offs_dv[None, :]', m_rows, dv_mask, acc)}",
        f"lse = tl.load(l_base + offs_m * {p.lse.strides[2]}, mask=offs_m < {p.q_len}, other=0.0).to({acc})",
        "delta = tl.sum(do * o, 1)"]
    key_tiles = [f"k = {_tile('k_base', p.k, 'offs_n[:, None]', 'offs_d[None, :]', n_rows, d_mask, acc)}",
                 f"v = {_tile('v_base', p.v, 'offs_n[:, None]', 'offs_dv[None, :]', n_rows, dv_mask, acc)}"]
    body = _probabilities(p, precision)
    out_dtype = TL_DTYPE[p.q.dtype]

    def store(part: str, rows: str, n: int, offs: str, width: int, value: str, col_mask: str) -> str:
        if target.kind == "cpu" and p.q.dtype == "bfloat16":
            value = bf16_round(f"({value})")
        mask = f"({rows}[:, None] < {n})" + (f" & {col_mask}" if col_mask else "")
        head = f"(b * {p.heads // p.group} + {kh})" if grouped and part != "q" else "bh"
        return f"tl.store(out{p.outputs.index(part)} + ({head} * {n} + {rows}[:, None]) * " \
               f"{width} + {offs}[None, :], ({value}).to({out_dtype}), mask={mask})"

    lines = ["pid = tl.program_id(0)", "bh = tl.program_id(1).to(tl.int64)", f"b = bh // {p.heads}",
             f"h = bh % {p.heads}", *bases, f"offs_d = tl.arange(0, {d})", f"offs_dv = tl.arange(0, {dv})"]
    keys_part = "k" in p.outputs or "v" in p.outputs
    if keys_part:
        lo = f"pid * BLOCK_N // BLOCK_M * BLOCK_M" if p.causal else "0"
        walk = [f"for start_m in range({lo}, {p.q_len}, BLOCK_M):",
                "    offs_m = start_m + tl.arange(0, BLOCK_M)",
                *("    " + ln for ln in query_tiles + body),
                f"    dv += tl.dot(tl.trans(prob), do{precision})",
                f"    dk += tl.dot(tl.trans(ds), q{precision})"]
        if grouped:  # the group's first head sums its heads' dK and dV; the others' key programs do nothing
            walk = [f"for gi in range({p.group}):", "    hq = h + gi", *("    " + ln for ln in query_bases("hq")),
                    *("    " + ln for ln in walk)]
        pad = "    " if grouped else ""
        lines += [f"if pid < {nk}:  # a key block: dK and dV over the query blocks that see it",
                  *([f"    if h % {p.group} == 0:"] if grouped else []),
                  f"    {pad}offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)",
                  *(f"    {pad}" + ln for ln in key_tiles),
                  f"    {pad}dk = tl.zeros([BLOCK_N, {d}], {acc})",
                  f"    {pad}dv = tl.zeros([BLOCK_N, {dv}], {acc})",
                  *(f"    {pad}" + ln for ln in walk)]
        if "k" in p.outputs:
            lines.append(f"    {pad}" + store("k", "offs_n", p.kv_len, "offs_d", p.head_dim, f"dk * {p.scale!r}",
                                               d_mask))
        if "v" in p.outputs:
            lines.append(f"    {pad}" + store("v", "offs_n", p.kv_len, "offs_dv", p.v_dim, "dv", dv_mask))
    if "q" in p.outputs:
        hi = f"min((pid - {nk} + 1) * BLOCK_M, {p.kv_len})" if p.causal else f"{p.kv_len}"
        lines += [f"{'if' if not keys_part else 'elif'} pid >= {nk}:  # a query block: dQ over the key blocks it sees",
                  f"    offs_m = (pid - {nk}) * BLOCK_M + tl.arange(0, BLOCK_M)",
                  *("    " + ln for ln in (query_bases("h") if grouped else [])),
                  *("    " + ln for ln in query_tiles),
                  f"    dq = tl.zeros([BLOCK_M, {d}], {acc})",
                  f"    for start_n in range(0, {hi}, BLOCK_N):",
                  "        offs_n = start_n + tl.arange(0, BLOCK_N)",
                  *("        " + ln for ln in key_tiles + body),
                  f"        dq += tl.dot(ds, k{precision})",
                  "    " + store("q", "offs_m", p.q_len, "offs_d", p.head_dim, f"dq * {p.scale!r}", d_mask)]
    text = HEADER + f"@triton.jit\ndef {ENTRY}({', '.join(kernel_params(p.graph))}, BLOCK_M: tl.constexpr, " \
        f"BLOCK_N: tl.constexpr):\n" + "\n".join("    " + ln for ln in lines) + "\n"
    meta = FrozenMap({"signature": signature_json(p.graph), "grid": json.dumps([nk + nq, p.batch * p.heads]),
                      "constexprs": json.dumps({"BLOCK_M": bm, "BLOCK_N": bn}), "num_warps": int(config["num_warps"]),
                      "num_stages": 1})
    return Source("triton", text, ENTRY, meta=meta)


__all__ = ["ENTRY", "render", "space"]
