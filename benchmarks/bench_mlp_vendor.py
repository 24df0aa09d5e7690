"""Forward time of a transformer MLP block (Linear 256->1024, gelu, Linear 1024->256 over 64x128 tokens):
torch.compile(backend="kernelgen") vs eager vs torch.compile (Inductor), interleaved rounds, medians.

Untuned kernelgen (point KERNELGEN_DB at an empty database) is what a new user gets; ``--tune-trials N``
tunes each region on first call (both GEMM implementations, side by side). Prints, never asserts.
    python benchmarks/bench_mlp_vendor.py [--rounds 15] [--calls 5] [--dtype float32] [--batch 64] [--tokens 128] [--tune-trials 0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d: int = 256, h: int = 1024) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="tune each kernelgen region on first call with this many trials per implementation")
    args = parser.parse_args()
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = MLP().to(dtype).eval()
    x = torch.randn(args.batch, args.tokens, 256, dtype=dtype)
    runs = {"eager": model}
    started = {}
    for name, backend in (("kernelgen", "kernelgen"), ("inductor", "inductor")):
        t0 = time.perf_counter()
        options = {"tune": "auto", "trials": args.tune_trials} if name == "kernelgen" and args.tune_trials else None
        runs[name] = torch.compile(model, backend=backend, options=options)
        with torch.no_grad():
            runs[name](x)  # compiles (and checks kernels) on first call
        started[name] = time.perf_counter() - t0
    with torch.no_grad():
        want = model(x)
        for name, fn in runs.items():
            torch.testing.assert_close(fn(x), want, rtol=2e-2, atol=2e-2) if dtype != torch.float32 else \
                torch.testing.assert_close(fn(x), want, rtol=1e-4, atol=1e-4)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():  # interleaved: each round times every contender back to back
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn(x)
                times[name].append((time.perf_counter() - t0) / args.calls)
    eager = statistics.median(times["eager"])
    print(f"MLP 256->1024->256, x {list(x.shape)} {args.dtype}, {args.rounds} rounds x {args.calls} calls, "
          f"{torch.get_num_threads()} threads")
    for name, ts in times.items():
        med = statistics.median(ts)
        compile_s = f", first call {started[name]:.1f} s" if name in started else ""
        print(f"  {name:10s} median {med * 1e3:8.3f} ms  (min {min(ts) * 1e3:7.3f})  {eager / med:5.2f}x eager{compile_s}")


if __name__ == "__main__":
    main()
