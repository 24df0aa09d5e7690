"""Shape families under a sweep of batch sizes: compiles, first-call time at a new size, bucket vs exact tuning.

    python benchmarks/bench_dynamic.py [--sizes 100] [--max 8192] [--exact 3] [--trials 6] [--only gemm ...]

For each of four functions (pointwise, row reduction, GEMM with epilogue, attention) it calls one
``kernelgen.compile`` function (default ``dynamic=None``) on ``--sizes`` distinct batch sizes from 1 to ``--max``
(log-spaced plus odd ones, in shuffled order) and prints:

- compiles: shared libraries the host compiler built during the sweep (a fresh kernel cache), kernelgen's
  compiled shape variants, and ``torch.compile(dynamic=True)``'s frame compiles on the same sweep;
- first call at a new size once the family exists (no compile): median, 90th percentile and max, and its
  overhead (first call minus a second call at that size: what the new size cost beyond the kernel), for
  kernelgen and for torch.compile(dynamic=True); wrong results (vs eager) are counted, not asserted;
- for ``--exact`` sampled sizes: the size's bucket tuned (``--trials``, as ``tune="auto"`` tunes it: the
  family's generic kernels at the bucket's size) and the exact size tuned, in two databases; the dispatched
  generic kernel with the bucket's config vs kernelgen compiled with ``dynamic=False`` over the exact size's
  record (a kernel compiled and tuned for exactly that size) (goal: geomean within 5%, worst within 15%), and vs eager and torch.compile(dynamic=True),
  timed interleaved over ``--rounds`` rounds (median of round minimums).

C++ backend, this machine's threads. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def _functions() -> dict[str, tuple[Callable[..., Any], Callable[[int], tuple]]]:
    import torch
    import torch.nn.functional as F

    def pointwise(x, b):
        return F.gelu(x + b)

    def reduction(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def gemm(x, w, b):
        return F.relu(F.linear(x, w, b))

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(256, 256, generator=g) / 16, torch.randn(256, generator=g)
    ln_w, ln_b, bias = torch.randn(512, generator=g), torch.randn(512, generator=g), torch.randn(512, generator=g)
    return {
        "pointwise": (pointwise, lambda n: (torch.randn(n, 512), bias)),
        "reduction": (reduction, lambda n: (torch.randn(n, 512), ln_w, ln_b)),
        "gemm": (gemm, lambda n: (torch.randn(n, 256), w, b)),
        "attention": (attention, lambda n: tuple(torch.randn(n, 2, 32, 16) for _ in range(3))),
    }


def sweep_sizes(count: int, top: int, seed: int = 0) -> list[int]:
    """``count`` distinct sizes in [1, top]: log-spaced, topped up with odd sizes, shuffled."""
    sizes = {max(1, min(top, round(math.exp(math.log(top) * i / (count * 0.7 - 1))))) for i in range(int(count * 0.7))}
    rng = random.Random(seed)
    while len(sizes) < min(count, top):
        sizes.add(rng.randrange(1, top + 1) | 1)
    out = sorted(sizes)
    rng.shuffle(out)
    return out


def _libraries(cache: Path) -> int:
    return sum(1 for _ in (cache / "cpp").rglob("*.so")) if (cache / "cpp").exists() else 0


def _best_of(fn: Callable[[], Any], rounds: int, min_time: float) -> list[float]:
    from kernelgen.backends import get_backend

    return [get_backend("cpp").benchmark(fn, min_time=min_time, warmup=2, min_repeats=3).min for _ in range(rounds)]


def _tune(graph: Any, db: Any, trials: int) -> Any:
    from kernelgen.tune.tuner import tune_graph

    return tune_graph(graph, backend="cpp", db=db, trials=trials).best


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run_function(name: str, fn: Callable[..., Any], make: Callable[[int], tuple], sizes: list[int], args: Any,
                 cache: Path, tmp: Path) -> dict[str, Any]:
    import torch

    import kernelgen
    from kernelgen.db import open_db
    from kernelgen.runtime.dynamic import bucket

    rng = random.Random(1)
    exact_sizes = sorted(rng.sample([n for n in sizes if n >= 2], min(args.exact, len(sizes))))
    bucket_url, exact_url = f"sqlite:///{tmp / f'{name}-buckets.sqlite'}", f"sqlite:///{tmp / f'{name}-exact.sqlite'}"
    tune_start = time.monotonic()
    if args.trials > 0:  # the buckets of the sampled sizes, and the sampled sizes exactly, in separate databases
        # the buckets as tune="auto" tunes them: the family's generic kernels, at each bucket's size
        tuner = kernelgen.compile(fn, backend="cpp", db=bucket_url, dynamic=True, tune="auto", trials=args.trials)
        with torch.no_grad():
            for b in sorted({bucket(n) for n in exact_sizes}):
                tuner(*make(b))
        with open_db(exact_url) as db:
            for n in exact_sizes:
                _tune(kernelgen.trace(fn, *make(n)), db, args.trials)
    tune_seconds = time.monotonic() - tune_start

    # The sweep: kernelgen (default dynamic=None) and torch.compile(dynamic=True), first call at each size.
    f = kernelgen.compile(fn, backend="cpp", db=bucket_url)
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    tc = torch.compile(fn, dynamic=True)
    first, tc_first, wrong, compiled_at = [], [], 0, []
    libraries = _libraries(cache)
    for n in sizes:
        inputs = make(n)
        with torch.no_grad():
            start = time.perf_counter()
            got = f(*inputs)
            elapsed = time.perf_counter() - start
            now = _libraries(cache)
            if now != libraries:
                compiled_at.append(n)
            else:  # the first call's cost over the second's: lookup, entry and config choice, no kernel time
                start = time.perf_counter()
                f(*inputs)
                first.append((elapsed, max(0.0, elapsed - (time.perf_counter() - start))))
            libraries = now
            start = time.perf_counter()
            tc(*inputs)
            tc_first.append(time.perf_counter() - start)
            if not torch.allclose(got, fn(*inputs), atol=1e-4, rtol=1e-4):
                wrong += 1
    tc_frames = counters["stats"]["unique_graphs"]
    sources = {n: (lambda w: f"{w['implementation']} {w.get('source')}")(f.explain(*make(n))) for n in exact_sizes}

    # Speed at the sampled sizes: dispatched (bucket config) vs exact-tuned static kernel vs eager vs torch.compile.
    ratios = []
    # the exact contender: kernelgen compiled per size (dynamic=False) over the exact-size records, so both
    # sides pay the same dispatch and only kernel and config differ
    exact = kernelgen.compile(fn, backend="cpp", db=exact_url, dynamic=False)
    for n in exact_sizes:
        inputs = make(n)
        out = torch.empty_like(fn(*inputs))
        with torch.no_grad():
            exact(*inputs)  # built outside the timed region
        contenders = {"bucket": lambda: f(*inputs, out=out), "exact": lambda: exact(*inputs, out=out),
                      "eager": lambda: fn(*inputs), "torch.compile": lambda: tc(*inputs)}
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        with torch.no_grad():
            for r in range(args.rounds):
                for k in list(contenders)[r % 4:] + list(contenders)[:r % 4]:
                    samples[k] += _best_of(contenders[k], 1, args.min_time)
        t = {k: statistics.median(v) for k, v in samples.items()}
        ratios.append(t["bucket"] / t["exact"])
        print(f"  {name:<10} n={n:<5} bucket {bucket(n):<5} ({sources[n]:<17}) {t['bucket'] * 1e6:9.1f} us | exact "
              f"{t['exact'] * 1e6:9.1f} us | bucket/exact {t['bucket'] / t['exact']:5.2f} | eager/bucket "
              f"{t['eager'] / t['bucket']:5.2f}x | torch.compile/bucket {t['torch.compile'] / t['bucket']:5.2f}x",
              flush=True)
    return {"name": name, "sizes": len(sizes), "libraries": len(compiled_at), "compiled_at": compiled_at,
            "variants": f.variants, "first": first, "tc_first": tc_first, "tc_frames": tc_frames, "wrong": wrong,
            "ratios": ratios, "tune_seconds": tune_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, default=100, help="distinct batch sizes in the sweep")
    parser.add_argument("--max", type=int, default=8192, help="largest batch size")
    parser.add_argument("--exact", type=int, default=3, help="sizes tuned exactly, to compare with their bucket")
    parser.add_argument("--trials", type=int, default=6, help="tuning trials per size (0: no tuning, defaults only)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds of timed runs per contender and round")
    parser.add_argument("--only", nargs="*", default=None, help="functions to run: pointwise reduction gemm attention")
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory()
    cache = Path(tmp.name) / "cache"
    os.environ["KERNELGEN_CACHE_DIR"] = str(cache)  # a fresh cache: every library built is a compile
    sys.path.insert(0, str(ROOT))
    import torch

    sizes = sweep_sizes(args.sizes, args.max)
    print(f"# bench_dynamic: {len(sizes)} batch sizes in [1, {args.max}], torch threads {torch.get_num_threads()}, "
          f"exact-tuned sample {args.exact}, trials {args.trials}")
    rows = []
    for name, (fn, make) in _functions().items():
        if args.only and name not in args.only:
            continue
        rows.append(run_function(name, fn, make, sizes, args, cache, Path(tmp.name)))
    print(f"{'function':<10} {'sizes':>5} {'g++ builds':>10} {'variants':>8} {'first call med/p90/max':>27} "
          f"{'  its overhead med/p90/max':>27} {'torch.compile first med/max':>28} {'tc frames':>9} {'wrong':>5} "
          f"{'bucket/exact geo/worst':>22}")
    for r in rows:
        first, over = [t for t, _ in r["first"]] or [float("nan")], [o for _, o in r["first"]] or [float("nan")]
        geo = statistics.geometric_mean(r["ratios"]) if r["ratios"] else float("nan")
        worst = max(r["ratios"]) if r["ratios"] else float("nan")
        print(f"{r['name']:<10} {r['sizes']:>5} {r['libraries']:>10} {r['variants']:>8} "
              f"{statistics.median(first) * 1e3:7.3f} / {_quantile(first, 0.9) * 1e3:7.3f} / {max(first) * 1e3:7.3f} ms "
              f"{statistics.median(over) * 1e3:7.3f} / {_quantile(over, 0.9) * 1e3:7.3f} / {max(over) * 1e3:7.3f} ms "
              f"{statistics.median(r['tc_first']) * 1e3:10.3f} / {max(r['tc_first']) * 1e3:9.1f} ms "
              f"{r['tc_frames']:>9} {r['wrong']:>5} {geo:10.3f} / {worst:.3f}")
        print(f"  {r['name']}: libraries built at sizes {r['compiled_at']}; tuning took {r['tune_seconds']:.0f} s")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
