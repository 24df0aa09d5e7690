"""Where eager's step spends its time, by kind of ATen op, and the speed-up that bounds any backend that leaves
the vendor GEMMs and convolutions as they are: a model's ceiling on this machine.

Each model of ``examples/hf_models.py`` (bench size by default) runs its eager step under ``torch.profiler``; every
ATen op's *self* time (nested ops not counted twice; MKL/oneDNN run inside their ATen op's self time) is put in one
of the kinds below, and the GEMM's own throughput is timed beside it. If GEMMs and convolutions take a share ``f`` of
eager's step and already run at the machine's FMA peak, no fusion of the rest can make the step faster than
``1 / f`` (Amdahl): the ``ceiling`` column. A goal above it needs a faster GEMM, not a better epilogue.

    python benchmarks/step_ceiling.py [--models gpt2,llama,...] [--modes infer,train] [--size bench] [--steps 5]

It prints; it never asserts. Quote it with the CPU line it prints, and from a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from kernelgen.tune.model import prepare, step  # noqa: E402

# ATen op (without the "aten::" prefix) -> kind; everything else is "other" (pointwise, reductions, copies, ...)
KINDS = {
    **dict.fromkeys(("addmm", "mm", "bmm", "baddbmm", "addbmm", "_mkl_linear"), "gemm"),
    **dict.fromkeys(("mkldnn_convolution", "_convolution", "convolution_backward", "_slow_conv2d_forward",
                     "thnn_conv2d", "_nnpack_spatial_convolution", "mkldnn_convolution_backward"), "conv"),
    **dict.fromkeys(("_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention_for_cpu_backward"), "attention"),
}


def profile_step(name: str, mode: str, size: str, steps: int) -> dict:
    """Self time per kind over ``steps`` eager steps (after two warm-ups), and the step's median wall time."""
    from examples.hf_models import build

    model, inputs = build(name, size)
    prepare(model, mode)
    run = step(model, (), inputs, mode)
    for _ in range(2):
        run()
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        walls.append(time.perf_counter() - start)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
    kinds: Counter = Counter()
    for event in prof.key_averages():
        op = event.key.removeprefix("aten::")
        if event.key.startswith("aten::"):
            kinds[KINDS.get(op, "other")] += event.self_cpu_time_total
    total = sum(kinds.values()) or 1.0
    shares = {kind: kinds[kind] / total for kind in ("gemm", "conv", "attention", "other")}
    vendor = shares["gemm"] + shares["conv"]
    return {"model": name, "mode": mode, "step_ms": statistics.median(walls) * 1e3, **shares,
            "ceiling": 1 / vendor if vendor else float("inf")}


def gemm_gflops(m: int = 512, k: int = 256, n: int = 1024) -> float:
    """fp32 ``addmm`` throughput at a transformer's MLP shape on this machine (median of 9 rounds of 10 calls)."""
    x, w, b = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    out = torch.empty(m, n)
    times = []
    for _ in range(9):
        torch.addmm(b, x, w, out=out)
        start = time.perf_counter()
        for _ in range(10):
            torch.addmm(b, x, w, out=out)
        times.append((time.perf_counter() - start) / 10)
    return 2 * m * k * n / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2,llama,bert,resnet")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--size", default="bench")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    from benchmarks.bench_models import machine  # the same CPU line as the model benchmark's

    print(machine())
    print(f"threads {torch.get_num_threads()}; load average {os.getloadavg()[0]:.2f}; fp32 addmm 512x256x1024: "
          f"{gemm_gflops():.1f} GFLOP/s")
    print(f"{'model':8} {'mode':5} {'step ms':>8} {'gemm':>6} {'conv':>6} {'attn':>6} {'other':>6} {'ceiling':>8}")
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            r = profile_step(name, mode, args.size, args.steps)
            print(f"{name:8} {mode:5} {r['step_ms']:8.2f} {r['gemm']:6.1%} {r['conv']:6.1%} {r['attention']:6.1%} "
                  f"{r['other']:6.1%} {r['ceiling']:7.2f}x")
    print("self time of each ATen op by kind (profiler); ceiling = 1 / (gemm + conv share): the step's speed-up "
          "if everything but the vendor GEMMs and convolutions took no time")


if __name__ == "__main__":
    main()
