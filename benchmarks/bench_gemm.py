"""GEMM-with-epilogue and attention: kernelgen (C++ backend) vs torch eager vs torch.compile, in one run.

Prints medians of interleaved repeats (one call of each variant per round, so load changes hit every
column alike), GFLOP/s and the speed ratios eager/kg and compile/kg (> 1: kernelgen is faster). kernelgen
is timed into a preallocated ``out=`` and end to end (allocating its output, as eager does). Never asserts.

    python benchmarks/bench_gemm.py [--reps 11] [--no-torch-compile] [--only gemm,attn]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from kernelgen.api import compile as kg_compile
from kernelgen.backends.cpp import default_threads
from kernelgen.backends.timing import Stopwatch, interleaved


def _sdpa(causal: bool) -> Callable[..., Any]:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _attention_flops(b: int, h: int, lq: int, lk: int, d: int, causal: bool) -> float:
    return 4.0 * b * h * lq * lk * d * (0.5 if causal else 1.0)


def workloads() -> list[tuple[str, Callable[..., Any], Callable[[], tuple], float]]:
    """(name, fn, make_inputs, flops)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    rows: list[tuple[str, Callable[..., Any], Callable[[], tuple], float]] = [
        ("gemm relu(x@w+b) 2048^3", lambda x, w, b: torch.relu(x @ w + b),
         lambda: (r(2048, 2048), r(2048, 2048), r(2048)), 2.0 * 2048**3),
        ("gemm gelu(linear) 8x512x1024->4096", lambda x, w, b: F.gelu(F.linear(x, w, b)),
         lambda: (r(8, 512, 1024), r(4096, 1024), r(4096)), 2.0 * 8 * 512 * 1024 * 4096),
    ]
    for b, h, s, d, causal in ((2, 16, 1024, 64, False), (2, 16, 1024, 64, True), (1, 16, 2048, 128, True)):
        rows.append((f"attn b{b} h{h} s{s} d{d}{' causal' if causal else ''}", _sdpa(causal),
                     lambda b=b, h=h, s=s, d=d: tuple(r(b, h, s, d) for _ in range(3)),
                     _attention_flops(b, h, s, s, d, causal)))
    return rows


def bench_row(name: str, fn: Callable[..., Any], inputs: tuple, flops: float, reps: int,
              use_compile: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": name, "flops": flops}
    expected = fn(*inputs)
    compiled = kg_compile(fn, backend="cpp")
    result = compiled(*inputs)
    info = compiled.explain(*inputs)
    if info.get("implementation") == "eager":
        row["note"] = f"kernelgen ran eagerly ({info}); row skipped"
        return row
    err = (result - expected).abs().max().item()
    if not torch.allclose(result, expected, rtol=1e-3, atol=1e-3):
        row["note"] = f"WRONG RESULT (max err {err:.3g})"
        return row
    out = torch.empty_like(expected)
    variants: dict[str, Callable[[], Any]] = {
        "kg_out": lambda: compiled(*inputs, out=out),
        "kg_e2e": lambda: compiled(*inputs),
        "eager": lambda: fn(*inputs),
    }
    if use_compile:
        try:
            tc = torch.compile(fn)
            tc(*inputs)
            variants["compile"] = lambda: tc(*inputs)
        except Exception as exc:  # torch.compile needs a working toolchain and may reject the fn
            row["compile_error"] = " ".join(str(exc).split())[:200]
    samples = interleaved(variants, reps, Stopwatch())
    for key, values in samples.items():
        row[key] = statistics.median(values)
    row["config"] = info.get("config")
    return row


def _ms(value: float | None) -> str:
    return "       -" if value is None else f"{value * 1e3:8.2f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'workload':36} {'kg out=':>8} {'GF/s':>5} {'kg e2e':>8} {'eager':>8} {'GF/s':>5} {'compile':>8}"
            f" {'eager/kg':>8} {'comp/kg':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "note" in r:
            print(f"{r['workload']:36} {r['note']}")
            continue
        comp = r.get("compile")
        print(f"{r['workload']:36} {_ms(r['kg_out'])} {r['flops'] / r['kg_out'] / 1e9:5.0f} {_ms(r['kg_e2e'])}"
              f" {_ms(r['eager'])} {r['flops'] / r['eager'] / 1e9:5.0f} {_ms(comp)}"
              f" {r['eager'] / r['kg_e2e']:8.2f} {(comp / r['kg_e2e'] if comp else float('nan')):8.2f}")
        if "compile_error" in r:
            print(f"{'':36} torch.compile failed: {r['compile_error']}")
    print("times: medians in ms; GF/s of kernelgen (out=) and eager; ratios > 1 mean kernelgen (e2e) is faster")
    for r in rows:
        if "config" in r:
            print(f"  {r['workload']}: config {r['config']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    args = parser.parse_args()
    print(f"threads={default_threads()} torch threads={torch.get_num_threads()} "
          f"load average before={os.getloadavg()[0]:.2f}")
    rows = []
    for name, fn, make, flops in workloads():
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        rows.append(bench_row(name, fn, make(), flops, args.reps, not args.no_torch_compile))
    print(f"load average after={os.getloadavg()[0]:.2f}")
    print_table(rows)


if __name__ == "__main__":
    main()
