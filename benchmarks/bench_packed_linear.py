"""ATen's addmm against MKL's linear over a weight packed once (``aten_gemm``'s ``pack_weight`` choice), side by
side in one process: interleaved rounds, each timing every variant in turn, medians over rounds.

    python benchmarks/bench_packed_linear.py [--rows 512] [--rounds 15] [--calls 50] [--threads 1 2]

Variants per (K, N): ``addmm`` (into a preallocated output, what the launcher runs unpacked), ``packed`` (the
packed call's fresh result, what an epilogue then reads) and ``packed+copy`` (copied into the output: the
launcher with no epilogue). Prints the median microseconds per call and each packed variant's ratio to addmm."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

SHAPES = ((256, 768), (256, 256), (256, 1024), (1024, 256))


def _time(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def bench(rows: int, k: int, n: int, rounds: int, calls: int) -> dict[str, float]:
    x, w, b = torch.randn(rows, k), torch.randn(n, k), torch.randn(n)
    out = torch.empty(rows, n)
    packed = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    wt = w.t()
    variants = {
        "addmm": lambda: torch.addmm(b, x, wt, out=out),
        "packed": lambda: torch.ops.mkl._mkl_linear(x, packed, w, b, rows),
        "packed+copy": lambda: out.copy_(torch.ops.mkl._mkl_linear(x, packed, w, b, rows)),
    }
    torch.testing.assert_close(variants["packed"](), torch.addmm(b, x, wt))
    times: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm: first-call allocation and MKL's thread start
        _time(fn, calls)
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(_time(fn, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print(f"torch {torch.__version__}, M={args.rows}, load average {os.getloadavg()[0]:.1f}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for k, n in SHAPES:
            m = bench(args.rows, k, n, args.rounds, args.calls)
            ratios = "  ".join(f"{name} {m[name] / m['addmm']:.2f}x" for name in m if name != "addmm")
            print(f"threads {threads} K={k:5d} N={n:5d}: addmm {m['addmm']:8.1f} us  packed {m['packed']:8.1f} us  "
                  f"packed+copy {m['packed+copy']:8.1f} us  ({ratios} of addmm's time)")
    print(f"load average after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
