"""kernelgen (C++ backend) vs torch eager vs torch.compile, side by side in one run, with a bandwidth floor.

For each workload of issue 3 (item 7) it prints median times of: kernelgen into a preallocated ``out=``
(kernel only), kernelgen end to end (allocating the output, as eager and torch.compile do), eager, and
torch.compile; plus the floor = minimal bytes moved / STREAM-triad bandwidth measured in the same run.
Repeats are interleaved (one of each variant per round) so load changes hit every column alike.

    python benchmarks/bench_kernels.py [--reps 15] [--no-torch-compile] [--only softmax,gemm]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from kernelgen.api import compile as kg_compile
from kernelgen.backends.cpp import build_shared_library, default_threads
from kernelgen.backends.timing import Stopwatch, interleaved

R, N = 8192, 4096


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def workloads() -> list[tuple[str, Callable, Callable[[], tuple], str]]:
    """(name, fn, make_inputs, template family)."""
    g = torch.Generator().manual_seed(0)

    def mat(*shape):
        return lambda: torch.randn(*shape, generator=g)

    big = mat(R, N)
    return [
        ("gelu(x+b) erf", lambda x, b: F.gelu(x + b), lambda: (big(), torch.randn(N, generator=g)), "pointwise"),
        ("gelu(x+b) tanh", lambda x, b: F.gelu(x + b, approximate="tanh"),
         lambda: (big(), torch.randn(N, generator=g)), "pointwise"),
        ("softmax", lambda x: torch.softmax(x, -1), lambda: (big(),), "reduction"),
        ("layer_norm", lambda x, w, b: F.layer_norm(x, (N,), w, b),
         lambda: (big(), torch.randn(N, generator=g), torch.randn(N, generator=g)), "reduction"),
        ("rmsnorm", _rms, lambda: (big(), torch.randn(N, generator=g)), "reduction"),
        ("relu((x+y)*z)", lambda x, y, z: torch.relu((x + y) * z), lambda: (big(), big(), big()), "pointwise"),
        ("logsumexp", lambda x: torch.logsumexp(x, -1), lambda: (big(),), "reduction"),
        ("relu(x@w+b) 2048^3", lambda x, w, b: torch.relu(x @ w + b),
         lambda: (torch.randn(2048, 2048, generator=g), torch.randn(2048, 2048, generator=g),
                  torch.randn(2048, generator=g)), "gemm"),
        ("attention b2 h16 s1024 d64", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
         lambda: tuple(torch.randn(2, 16, 1024, 64, generator=g) for _ in range(3)), "attention"),
    ]


_TRIAD = r"""
#include <cstdint>
extern "C" void triad(float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n,
                      int64_t threads) {
  #pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
}
"""


def make_triad(n: int) -> Callable[[], None]:
    """a = b + s*c over n floats (3 arrays of 4n bytes count as moved, as STREAM counts them)."""
    import ctypes

    lib = ctypes.CDLL(str(build_shared_library(_TRIAD, name="triad")))
    lib.triad.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    a, b, c = torch.zeros(n), torch.ones(n), torch.ones(n)
    return lambda: lib.triad(a.data_ptr(), b.data_ptr(), c.data_ptr(), n, default_threads())


def triad_bandwidth(n: int, reps: int) -> float:
    """Bytes per second of the triad, median of ``reps`` runs."""
    samples = interleaved({"triad": make_triad(n)}, reps, Stopwatch())["triad"]
    return 3 * 4 * n / statistics.median(samples)


def min_bytes(inputs: tuple, outputs: Any) -> int:
    outs = outputs if isinstance(outputs, tuple) else (outputs,)
    return sum(t.numel() * t.element_size() for t in (*inputs, *outs))


def bench_row(name: str, fn: Callable, inputs: tuple, family: str, reps: int, use_compile: bool,
              triad: Callable[[], None]) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": name}
    expected = fn(*inputs)
    compiled = kg_compile(fn, backend="cpp")
    result = compiled(*inputs)
    info = compiled.explain(*inputs)
    if info["implementation"] == "eager":
        row["note"] = f"{family} C++ template not available yet: kernelgen ran eagerly; row skipped"
        return row
    tol = 1e-3 if family in ("gemm", "attention") else 1e-4
    if not torch.allclose(result, expected, rtol=tol, atol=tol):
        row["note"] = f"WRONG RESULT (max err {(result - expected).abs().max().item():.3g})"
        return row
    out = torch.empty_like(expected)
    variants: dict[str, Callable[[], Any]] = {
        "kg_out": lambda: compiled(*inputs, out=out),
        "kg_e2e": lambda: compiled(*inputs),
        "eager": lambda: fn(*inputs),
        "triad": triad,  # interleaved too, so the floor sees the same machine load as the kernels
    }
    if use_compile:
        try:
            tc = torch.compile(fn)
            tc(*inputs)
            variants["compile"] = lambda: tc(*inputs)
        except Exception as exc:  # torch.compile needs a working C++ toolchain and may reject the fn
            row["compile_error"] = " ".join(str(exc).split())[:200]
    samples = interleaved(variants, reps, Stopwatch())
    for key, values in samples.items():
        row[key] = statistics.median(values)
    if family in ("pointwise", "reduction"):
        row["bandwidth"] = 3 * 4 * R * N / row["triad"]
        row["floor"] = min_bytes(inputs, expected) / row["bandwidth"]
    row["config"] = info["config"]
    return row


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:8.2f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'workload':28} {'floor':>8} {'kg out=':>8} {'%floor':>6} {'kg e2e':>8} {'eager':>8} {'compile':>8}"
            f" {'eager/kg':>8} {'comp/kg':>8} {'GB/s':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "note" in r:
            print(f"{r['workload']:28} {r['note']}")
            continue
        floor, out, e2e = r.get("floor"), r["kg_out"], r["kg_e2e"]
        pct = f"{100 * floor / out:5.0f}%" if floor else "     -"
        comp = r.get("compile")
        print(f"{r['workload']:28} {_ms(floor)} {_ms(out)} {pct} {_ms(e2e)} {_ms(r['eager'])} {_ms(comp)}"
              f" {r['eager'] / e2e:8.2f} {(comp / e2e if comp else float('nan')):8.2f}"
              f" {r.get('bandwidth', 0) / 1e9:6.2f}")
        if "compile_error" in r:
            print(f"{'':28} torch.compile failed: {r['compile_error']}")
    print("times in ms (medians); floor = minimal bytes / triad bandwidth of the same row's rounds (GB/s column);\n"
          "%floor = floor / kernel-only time; ratios > 1 mean kernelgen (end to end) is faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    print(f"threads={default_threads()} torch threads={torch.get_num_threads()} "
          f"load average before={os.getloadavg()[0]:.2f}")
    print(f"STREAM-like triad: {triad_bandwidth(R * N, max(args.reps, 10)) / 1e9:.2f} GB/s")
    triad = make_triad(R * N)
    rows = []
    for name, fn, make, family in workloads():
        if args.only and not any(s in name for s in args.only.split(",")):
            continue
        if family in ("gemm", "attention") and importlib.util.find_spec(f"kernelgen.templates.{family}_cpp") is None:
            rows.append({"workload": name, "note": f"skipped: kernelgen/templates/{family}_cpp.py not available yet"})
            continue
        rows.append(bench_row(name, fn, make(), family, args.reps, not args.no_torch_compile, triad))
    print(f"triad after: {triad_bandwidth(R * N, 10) / 1e9:.2f} GB/s; load average after={os.getloadavg()[0]:.2f}")
    print_table(rows)
    if args.json:
        print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
