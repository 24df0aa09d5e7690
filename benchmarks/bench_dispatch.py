"""Dispatch overhead of ``kernelgen.compile``: a compiled call vs launching the same kernel directly.

Small shapes keep the kernel short, but a tiny OpenMP kernel still takes 8-17 µs with that much jitter,
so "compiled minus direct" of two separate medians cannot resolve a few µs. The last two columns isolate
the dispatcher exactly: the cached launcher is swapped for a no-op, and a compiled call (signature key,
cache lookup, ``out=`` check) is timed interleaved with a bare call of the same no-op; the figure is the
median over rounds of the paired difference. Goal: at most 5 µs.

    python benchmarks/bench_dispatch.py [--calls 20000] [--repeats 7] [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from kernelgen.api import compile as kg_compile


CLOCK = time.perf_counter


def per_call(fn, calls: int, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = CLOCK()
        for _ in range(calls):
            fn()
        samples.append((CLOCK() - t0) / calls)
    return statistics.median(samples)


def paired_overhead(compiled, inputs, out, calls: int, repeats: int) -> tuple[float, float]:
    """Dispatcher cost per call (out=, alloc) with the kernel replaced by a no-op: median paired difference."""
    entry = next(iter(compiled._cache.values()))
    real, entry.launch = entry.launch, (lambda *tensors: None)
    noop = entry.launch
    try:
        diffs_out, diffs_alloc = [], []
        for r in range(repeats):
            times = {}
            order = [("bare", lambda: noop(*inputs, out)), ("out", lambda: compiled(*inputs, out=out)),
                     ("alloc", lambda: compiled(*inputs))]
            for name, fn in order[r % 3:] + order[:r % 3]:  # rotate so drifts hit each alike
                fn()
                t0 = CLOCK()
                for _ in range(calls):
                    fn()
                times[name] = (CLOCK() - t0) / calls
            diffs_out.append(times["out"] - times["bare"])
            diffs_alloc.append(times["alloc"] - times["bare"])
        return statistics.median(diffs_out), statistics.median(diffs_alloc)
    finally:
        entry.launch = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this thread's CPU time, robust on a shared, loaded machine")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.thread_time
    print(f"load average {os.getloadavg()[0]:.2f}; {args.clock} clock; medians of {args.repeats} x {args.calls} calls, in µs")
    cases = [
        ("bias_gelu [16,64]", lambda x, b: F.gelu(x + b), (torch.randn(16, 64), torch.randn(64))),
        ("relu((x+y)*z) [256]", lambda x, y, z: torch.relu((x + y) * z), tuple(torch.randn(256) for _ in range(3))),
        ("softmax [4,128]", lambda x: torch.softmax(x, -1), (torch.randn(4, 128),)),
    ]
    print(f"{'workload':22} {'direct':>8} {'out=':>8} {'alloc':>8} {'eager':>8} {'overhead out=':>14} "
          f"{'overhead alloc':>15} {'dispatch out=':>14} {'dispatch alloc':>15}")
    for name, fn, inputs in cases:
        compiled = kg_compile(fn, backend="cpp")
        out = compiled(*inputs)
        entry = next(iter(compiled._cache.values()))
        launch = entry.launch
        direct = per_call(lambda: launch(*inputs, out), args.calls, args.repeats)
        with_out = per_call(lambda: compiled(*inputs, out=out), args.calls, args.repeats)
        alloc = per_call(lambda: compiled(*inputs), args.calls, args.repeats)
        eager = per_call(lambda: fn(*inputs), args.calls, args.repeats)
        empty = per_call(lambda: torch.empty(out.shape), args.calls, args.repeats)
        only_out, only_alloc = paired_overhead(compiled, inputs, out, args.calls, args.repeats)
        us = 1e6
        print(f"{name:22} {direct * us:8.2f} {with_out * us:8.2f} {alloc * us:8.2f} {eager * us:8.2f} "
              f"{(with_out - direct) * us:14.2f} {(alloc - direct - empty) * us:15.2f} {only_out * us:14.2f} "
              f"{only_alloc * us:15.2f}")
    print("direct = CppKernel.launch (no checks); overhead alloc excludes torch.empty itself; dispatch = the\n"
          "dispatcher alone (no-op kernel, paired with a bare no-op call; alloc includes torch.empty)")


if __name__ == "__main__":
    main()
