"""What a model's region costs beside the ATen ops it replaces: the measurement behind the untuned rule of
``kernelgen/runtime/aten.py`` (a lone small op runs ATen) and the per-region call cost.

For chains of 1, 2 and 3 pointwise ops over tensors of 64 to 1Mi elements, compiled through
``torch.compile(backend="kernelgen")`` with the rule turned off, it times one region call (the region's
shortcut: signature key, output allocation, C++ launch), the same ops run eagerly, and the region's fx replay
(what the ``aten`` candidate runs), as the minimum over repeats of the mean of a batch of calls.

    python benchmarks/bench_regions.py [--calls 2000] [--repeats 7]

It prints; it never asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_models import cpu_model  # noqa: E402
from kernelgen.frontend import dynamo_backend, region_op  # noqa: E402
from kernelgen.runtime import aten  # noqa: E402

CHAINS = {1: lambda x: torch.sigmoid(x), 2: lambda x: torch.sigmoid(x * 2), 3: lambda x: torch.sigmoid(x * 2 + 1)}
SIZES = (64, 1024, 16384, 65536, 262144, 1 << 20)


def per_call(fn, calls: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    aten.ENABLED = False  # every region runs its kernel: the rule is what this measures
    dynamo_backend.register()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.2f}; best of {args.repeats} x {args.calls} calls, us per call")
    print(f"{'ops':>3} {'elements':>9} {'region':>8} {'eager':>8} {'fx replay':>9} {'eager/region':>12}")
    for ops, fn in CHAINS.items():
        for n in SIZES:
            x = torch.randn(n)
            compiled = torch.compile(fn, backend="kernelgen")
            seen: list = []
            with torch.no_grad():
                compiled(x)
                with region_op.observe(lambda kernel, inputs: seen.append((kernel, list(inputs)))):
                    compiled(x)
                kernel, inputs = seen[0]
                calls = max(20, args.calls * 4096 // max(n, 4096))
                region = per_call(lambda: kernel.run(inputs), calls, args.repeats)
                eager = per_call(lambda: fn(x), calls, args.repeats)
                replay = per_call(lambda: kernel.gm(*inputs), calls, args.repeats)
            print(f"{ops:3} {n:9} {region * 1e6:8.2f} {eager * 1e6:8.2f} {replay * 1e6:9.2f} {eager / region:11.2f}x")
            torch._dynamo.reset()
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
