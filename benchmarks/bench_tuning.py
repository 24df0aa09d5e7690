"""Tuned config vs default config vs torch.compile vs eager for every workload of a manifest, and tuning time.

    python benchmarks/bench_tuning.py [--manifest examples/workloads.toml] [--trials N] [--rounds R] [--db URL]

Tunes each workload into a fresh temporary SQLite database (or ``--db``: then already-tuned workloads are
reused and their tuning time is ~0), then times the four contenders in one process, interleaved over
``--rounds`` rounds so machine noise hits them alike, and prints the median of the round medians. Prints
figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]


def _timer(fn: Callable[[], Any], min_time: float) -> tuple[float, float]:
    """(median, min) of one round. On a shared, oversubscribed machine the min is the steadier figure."""
    from kernelgen.backends import get_backend

    stats = get_backend("cpp").benchmark(fn, min_time=min_time, warmup=3, min_repeats=5)
    return stats.median, stats.min


def contenders(workload: Any, graph: Any, best: Any) -> dict[str, Callable[[], Any]]:
    """Zero-argument callables on shared seeded inputs: eager, torch.compile, default config, tuned config."""
    import torch

    from kernelgen.ir.implementation import allocate_outputs
    from kernelgen.runtime.implementations import resolve
    from kernelgen.ir.target import Target
    from kernelgen.check.compare import make_inputs

    inputs = [view for _, view in make_inputs(graph.signature, 0)]
    outputs = allocate_outputs(graph)
    target = Target.current(workload.backend)
    impl = resolve(graph, best.implementation, workload.backend)
    tuned = impl.build(best.config, target)
    default = impl.build(impl.default_config(target), target)
    compiled = torch.compile(workload.fn, dynamic=False)
    with torch.no_grad():
        compiled(*inputs)  # compile outside the timed region
    tuned_launch = getattr(tuned, "launch", tuned)
    default_launch = getattr(default, "launch", default)
    return {
        "eager": lambda: workload.fn(*inputs),
        "torch.compile": lambda: compiled(*inputs),
        "default": lambda: default_launch(*inputs, *outputs),
        "tuned": lambda: tuned_launch(*inputs, *outputs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", default=str(ROOT / "examples" / "workloads.toml"))
    parser.add_argument("--trials", type=int, default=None, help="override the manifest's trial budget")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.1, help="seconds of timed runs per contender and round")
    parser.add_argument("--db", default=None, help="tuning database URL (default: a fresh temporary SQLite file)")
    parser.add_argument("--only", nargs="*", default=None, help="workload names to run")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    import torch

    sys.path.insert(0, str(ROOT))
    from kernelgen.db import open_db
    from kernelgen.tune.manifest import load_manifest
    from kernelgen.tune.tuner import tune_workload

    workloads = [w for w in load_manifest(args.manifest) if not args.only or w.name in args.only]
    tmp = tempfile.TemporaryDirectory()
    url = args.db or f"sqlite:///{Path(tmp.name) / 'bench.sqlite'}"
    print(f"# bench_tuning: {len(workloads)} workloads, db {url}, torch threads {torch.get_num_threads()}, "
          f"rounds {args.rounds}")
    header = (f"{'workload':<16} {'shapes':<34} {'tune s':>7} {'trials':>6} {'eager':>10} {'compile':>10} "
              f"{'default':>10} {'tuned':>10} {'tuned/def':>9} {'vs eager':>8} {'vs compile':>10}")
    print(header)
    rows = []
    with open_db(url) as db:
        for workload in workloads:
            start = time.monotonic()
            results = tune_workload(workload, db=db, trials=args.trials, time_eager=False)
            tune_seconds = time.monotonic() - start
            for graph, result in zip(workload.graphs, results):
                if result.best is None:
                    print(f"{workload.name:<16} no result: every trial failed")
                    continue
                fns = contenders(workload, graph, result.best)
                samples: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
                for r in range(args.rounds):
                    order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
                    for name in order:
                        with torch.no_grad():
                            samples[name].append(_timer(fns[name], args.min_time))
                t = {name: statistics.median(m for m, _ in v) for name, v in samples.items()}
                best = {name: min(b for _, b in v) for name, v in samples.items()}
                shapes = ", ".join("x".join(map(str, s.shape)) for s in graph.signature)
                row = {"workload": workload.name, "shapes": shapes, "tune_seconds": tune_seconds / len(results),
                       "trials": len(result.search_trials), "implementation": result.best.implementation,
                       "config": result.best.config.to_json(), **{f"{k}_s": v for k, v in t.items()},
                       **{f"{k}_min_s": v for k, v in best.items()}}
                rows.append(row)
                print(f"{workload.name:<16} {shapes:<34} {row['tune_seconds']:7.1f} {row['trials']:6d} "
                      f"{t['eager'] * 1e3:8.3f}ms {t['torch.compile'] * 1e3:8.3f}ms {t['default'] * 1e3:8.3f}ms "
                      f"{t['tuned'] * 1e3:8.3f}ms {t['default'] / t['tuned']:8.2f}x {t['eager'] / t['tuned']:7.2f}x "
                      f"{t['torch.compile'] / t['tuned']:9.2f}x | min: def/tuned {best['default'] / best['tuned']:.2f}x "
                      f"eager/tuned {best['eager'] / best['tuned']:.2f}x compile/tuned "
                      f"{best['torch.compile'] / best['tuned']:.2f}x", flush=True)
    if rows:
        geo = lambda key: statistics.geometric_mean(r[key] / r["tuned_s"] for r in rows)  # noqa: E731
        geo_min = lambda k: statistics.geometric_mean(r[f"{k}_min_s"] / r["tuned_min_s"] for r in rows)  # noqa: E731
        print(f"# geometric mean speedup of tuned over: default {geo('default_s'):.2f}x, eager {geo('eager_s'):.2f}x, "
              f"torch.compile {geo('torch.compile_s'):.2f}x (by min: default {geo_min('default'):.2f}x, eager "
              f"{geo_min('eager'):.2f}x, torch.compile {geo_min('torch.compile'):.2f}x); total tuning time "
              f"{sum(r['tune_seconds'] for r in rows):.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
