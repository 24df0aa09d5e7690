"""Host cost of one region call inside a compiled graph, beyond its kernel's launch (issue 31: goal <= 5 us a region).

A compiled model's step calls dozens of regions; on a GPU every microsecond of host work per region is time the
device may sit idle. This compiles a small function through ``torch.compile(backend="kernelgen")``, finds its
region (``dynamo_backend.collect``), and times, interleaved and paired per round, ``run_region`` (what the compiled
graph calls: signature check, output allocation, the launch) with the kernel's launch swapped for a no-op, beside
a bare call of that no-op: the difference is the region's own host cost. It also times the real call (with the
kernel) and, on a GPU, synchronises after each batch of calls so queued kernels cannot hide host time.

    python benchmarks/bench_region_overhead.py [--device cpu|cuda] [--calls 5000] [--rounds 7]

It prints; it never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from kernelgen.frontend import dynamo_backend, region_op


def _region(device: str, shape: tuple[int, ...]) -> tuple[str, Any, list[torch.Tensor]]:
    """The one region of a bias + GELU, compiled, with the inputs its graph passes it."""
    x, b = torch.randn(*shape, device=device), torch.randn(shape[-1], device=device)
    seen: list[list[torch.Tensor]] = []
    torch._dynamo.reset()
    with dynamo_backend.collect() as graphs:
        fn = torch.compile(lambda x, b: torch.nn.functional.gelu(x + b), backend="kernelgen")
        fn(x, b)
    (key,) = [k for g in graphs for k in g.keys]
    kernel = region_op.kernel_of(key)
    with region_op.observe(lambda _kernel, inputs: seen.append(list(inputs))):
        fn(x, b)
    return key, kernel, seen[-1]


def _timed(call: Any, calls: int, sync: Any) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shape", default="8,64", help="the region's input shape (small: the kernel is short)")
    args = parser.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    key, kernel, inputs = _region(args.device, tuple(int(s) for s in args.shape.split(",")))
    fast = kernel._fast
    if fast is None:
        print(f"the region takes the general path (no shortcut): {kernel.template}, {kernel.impl}")
        return
    real = lambda: region_op.run_region(key, inputs)  # noqa: E731
    noop_launch = lambda *tensors: None  # noqa: E731
    run, plan = fast[2], fast[3]
    stubbed = (fast[0], fast[1], run, (noop_launch, *plan[1:]) if isinstance(plan, tuple) else plan, fast[4])
    rows: dict[str, list[float]] = {"region call (kernel)": [], "region call (no-op launch)": [], "bare no-op": []}
    for _ in range(args.rounds):
        kernel._fast = fast
        rows["region call (kernel)"].append(_timed(real, args.calls, sync))
        kernel._fast = stubbed
        rows["region call (no-op launch)"].append(_timed(real, args.calls, sync))
        rows["bare no-op"].append(_timed(lambda: noop_launch(*inputs), args.calls, sync))
    kernel._fast = fast
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"device: {name}; region {kernel.template} ({kernel.impl}); shape {args.shape}; {args.rounds} rounds of "
          f"{args.calls} calls, medians")
    for label, samples in rows.items():
        print(f"  {label:28} {statistics.median(samples) * 1e6:8.2f} us")
    paired = [a - b for a, b in zip(rows["region call (no-op launch)"], rows["bare no-op"])]
    print(f"  host cost per region beyond the launch (output allocation included): "
          f"{statistics.median(paired) * 1e6:.2f} us (goal <= 5 us)")


if __name__ == "__main__":
    main()
