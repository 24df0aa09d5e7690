"""Compare search strategies by replaying recorded GPU tuning landscapes (prints figures, never asserts).

For every sampler of kernelgen (and, optionally, Kernel Tuner's strategies in simulation mode) over every
landscape and seed: the number of unique evaluations until the best found is within 5% of the landscape's
optimum, and the best found after 50 evaluations relative to the optimum. Prints per-landscape medians,
geometric means over landscapes and their ratio to that of random search without replacement (exact
medians, computed from the landscape), and a 90% bootstrap interval over seeds for each best-after-50
median. Example (the final figures):

    python benchmarks/bench_search.py --seeds 30 --jobs 2 --save /tmp/bench.json
    python benchmarks/bench_search.py --load /tmp/bench.json      # table again, from saved runs

With ``--dir`` given twice (the shared folder and one written by ``fetch_landscapes.py``), one table covers
the six landscapes the defaults were chosen on and the held-out one.
"""

from __future__ import annotations

import argparse
import os

# One BLAS thread per run: runs go in parallel processes, and threads only fight over the cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import gzip
import json
import math
import multiprocessing
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path(os.environ.get("KERNELGEN_LANDSCAPES", "/work/shared/landscapes"))
KT_STRATEGIES = ("random_sample", "genetic_algorithm", "dual_annealing", "simulated_annealing", "greedy_ils",
                 "basinhopping", "mls", "pso", "bayes_opt")
WITHIN = 1.05
AT = 50


def landscapes(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.json.gz") if p.parent.name != "kernels")


def name_of(path: Path) -> str:
    return f"{path.parent.name}/{path.name.removesuffix('.json.gz')}"


# ----------------------------------------------------------------------------------------------- runners
_LOADED: dict[str, object] = {}


def _landscape(path: str):
    from kernelgen.tune.landscape import load_landscape

    if path not in _LOADED:
        _LOADED[path] = load_landscape(path)
    return _LOADED[path]


def run_kernelgen(sampler: str, path: str, seed: int, cap: int) -> list[float | None]:
    """Times (ms; None = failed) of unique evaluations in order, stopping once within 5% and past AT."""
    from kernelgen.tune.search import Searcher

    land = _landscape(path)
    target = WITHIN * land.optimum_ms
    searcher = Searcher(land.space, sampler=sampler, seed=seed)
    out: list[float | None] = []
    reached = False
    while len(out) < cap and not (reached and len(out) >= AT):
        config = searcher.ask()
        if config is None:
            break
        m = land.measure(config)
        searcher.tell(config, m)
        out.append(None if m.time is None else m.time.median * 1000.0)
        reached = reached or (out[-1] is not None and out[-1] <= target)
    return out


def _kt_workdir(path: str) -> tuple[Path, Path]:
    """A temporary copy Kernel Tuner can read: the gunzipped cache, the kernel spec and a placeholder source."""
    src = Path(path)
    key = f"kt:{path}"
    if key not in _LOADED:
        work = Path(tempfile.mkdtemp(prefix="kg-bench-"))
        cache = work / src.name.removesuffix(".gz")
        cache.write_bytes(gzip.decompress(src.read_bytes()))
        spec_src = next((src.parent.parent / "kernels").glob(f"{src.parent.name}*.json"))
        spec = work / spec_src.name
        shutil.copy(spec_src, spec)
        kernel_file = work / json.loads(spec.read_text())["KernelSpecification"]["KernelFile"]
        kernel_file.parent.mkdir(parents=True, exist_ok=True)
        kernel_file.touch()  # simulation mode never compiles, but the spec must name an existing file
        _LOADED[key] = (spec, cache)
    return _LOADED[key]  # type: ignore[return-value]


def run_kernel_tuner(strategy: str, path: str, seed: int, cap: int) -> list[float | None]:
    from kernel_tuner import tune_kernel

    spec_path, cache = _kt_workdir(path)
    spec = json.loads(spec_path.read_text())
    kernel = spec["KernelSpecification"]
    data = json.loads(gzip.decompress(Path(path).read_bytes()))
    tune_params = {name: data["tune_params"][name] for name in data["tune_params_keys"]}
    restrictions = [c["Expression"] for c in spec["ConfigurationSpace"]["Conditions"]]
    # Simulation mode never touches the arguments: tiny placeholders instead of the real multi-GB inputs.
    arguments = [np.zeros(1, dtype=np.float32) for _ in kernel["Arguments"]]
    random.seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        devnull = open(os.devnull, "w")
        old = sys.stdout
        sys.stdout = devnull
        try:
            results, _ = tune_kernel(kernel["KernelName"], str(spec_path.parent / kernel["KernelFile"]),
                                     kernel["ProblemSize"], arguments, tune_params,
                                     grid_div_x=kernel.get("GridDivX"), grid_div_y=kernel.get("GridDivY"),
                                     restrictions=restrictions, cache=str(cache), simulation_mode=True,
                                     strategy=strategy, strategy_options={"max_fevals": cap}, quiet=True,
                                     lang="CUDA")
        finally:
            sys.stdout = old
            devnull.close()
    land = _landscape(path)
    out: list[float | None] = []
    seen = set()
    for r in results:  # Kernel Tuner lists repeated visits too; count unique configs like kernelgen does
        key = tuple(r[n] for n in land.names)
        if key in seen:
            continue
        seen.add(key)
        out.append(r["time"] if isinstance(r["time"], (int, float)) else None)
    return out[:cap]


def job(args: tuple[str, str, int, int]) -> tuple[str, str, int, list[float | None], float]:
    method, path, seed, cap = args
    start = time.perf_counter()
    if method.startswith("kt:"):
        try:
            times = run_kernel_tuner(method[3:], path, seed, cap)
        except Exception as exc:  # a strategy that does not run is reported, not fatal
            print(f"  {method} on {name_of(Path(path))}: {type(exc).__name__}: {exc}", file=sys.stderr)
            times = []
    else:
        times = run_kernelgen(method, path, seed, cap)
    return method, path, seed, times, time.perf_counter() - start


# ----------------------------------------------------------------------------------------------- figures
def reach(times: list[float | None], optimum: float) -> int | None:
    for i, t in enumerate(times):
        if t is not None and t <= WITHIN * optimum:
            return i + 1
    return None


def best_at(times: list[float | None], optimum: float, n: int = AT) -> float:
    ok = [t for t in times[:n] if t is not None]
    return min(ok) / optimum if ok else math.inf


def exact_random_median(path: Path) -> int:
    """Median draws of uniform sampling without replacement until one of the K good configs (of N) is hit."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    times = [e["time"] for e in data["cache"].values()]
    ok = [t for t in times if isinstance(t, (int, float))]
    n, k = len(times), sum(t <= WITHIN * min(ok) for t in ok)
    miss = 1.0
    for t in range(1, n + 1):
        miss *= (n - k - t + 1) / (n - t + 1)  # P(no good one in the first t draws)
        if miss <= 0.5:
            return t
    return n


def median_censored(values: list[int | None], cap: int) -> tuple[float, bool]:
    """Median where None (not reached within ``cap``) ranks above every number; flags a censored median."""
    ranked = sorted(v if v is not None else math.inf for v in values)
    med = statistics.median_low(ranked) if ranked else math.inf
    return (cap, True) if math.isinf(med) else (float(med), False)


def bootstrap_medians(values: np.ndarray, draws: int = 2000) -> np.ndarray:
    """Medians of ``draws`` resamples (with replacement) of the seeds' results.

    Best-after-50 is often bimodal over seeds (a run finds the good basin or it does not), so its median
    jumps between the modes with the seed set: the interval says how far a figure can be trusted, and
    a sampler change smaller than it is noise. Fixed generator seed: the same runs print the same table.
    """
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(values), size=(draws, len(values)))
    return np.median(values[picks], axis=1)


def interval(medians: np.ndarray) -> str:
    low, high = np.percentile(medians, [5, 95])
    return f"[{low:.2f}-{high:.2f}]"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values)) if values else math.nan


def pooled_lines(runs: list[dict], paths: list[Path], optimum: dict[str, float], methods: list[str]) -> list[str]:
    """Best after AT evaluations over every run of a method on every landscape at once (no per-landscape median).

    This reading weighs each run equally, so easy landscapes count as much as needles: a method that finds
    the optimum on half the landscapes every time and never on the rest sits on the 5% line. The share of runs
    within 5% says how far from that line a method is.
    """
    out = [f"all runs pooled: median best after {AT} evaluations / optimum, share of runs within 5%"]
    wanted = {str(p) for p in paths}
    for m in methods:
        best = np.array([best_at(r["times"], optimum[r["path"]]) for r in runs
                         if r["method"] == m and r["path"] in wanted])
        if len(best):
            share = float(np.mean(best <= WITHIN))
            out.append(f"{m:24s}{np.median(best):>10.4f} {interval(bootstrap_medians(best))}"
                       f"{share:>8.2f} ({len(best)} runs)")
    return out


def table(runs: list[dict], paths: list[Path], cap: int) -> str:
    optimum = {str(p): _landscape(str(p)).optimum_ms for p in paths}
    methods = list(dict.fromkeys(r["method"] for r in runs))
    lines = []
    head = f"{'method':24s}" + "".join(f"{name_of(p):>22s}" for p in paths) + f"{'geomean':>12s}{'vs random':>11s}"
    lines.append("median unique evaluations to within 5% of the optimum ('>N': fewer than half the seeds got there"
                 " within the run's cap N; the geomean then uses N, a lower bound)")
    lines.append(head)
    evals_geo = {}
    for m in methods:
        cells, meds = [], []
        for p in paths:
            rs = [reach(r["times"], optimum[str(p)]) for r in runs if r["method"] == m and r["path"] == str(p)]
            if not rs:
                cells.append(f"{'-':>22s}")
                continue
            run_cap = max(r.get("cap", cap) for r in runs if r["method"] == m and r["path"] == str(p))
            med, censored = median_censored(rs, run_cap)
            meds.append(med)
            hit = sum(v is not None for v in rs)
            cells.append(f"{('>' if censored else '') + f'{med:.0f}':>12s} ({hit:>2d}/{len(rs):<2d} hit)")
        evals_geo[m] = geomean(meds) if len(meds) == len(paths) else math.nan
        lines.append(f"{m:24s}" + "".join(cells) + f"{evals_geo[m]:12.1f}")
    exact = [exact_random_median(p) for p in paths]
    base = geomean(exact)
    lines = [ln + (f"{evals_geo[ln.split()[0]] / base:11.2f}" if ln.split()[0] in evals_geo else "")
             for ln in lines]
    lines.append(f"{'random (exact median)':24s}" + "".join(f"{v:>22d}" for v in exact) + f"{base:12.1f}{1:11.2f}")
    lines.append("")
    lines.append(f"median best found after {AT} evaluations / optimum, [90% bootstrap interval over seeds]")
    lines.append(f"{'method':24s}" + "".join(f"{name_of(p):>22s}" for p in paths) + f"{'geomean':>22s}")
    for m in methods:
        samples = [np.array([best_at(r["times"], optimum[str(p)]) for r in runs
                             if r["method"] == m and r["path"] == str(p)]) for p in paths]
        cells, meds, boots = [], [], []
        for s in samples:
            if len(s) == 0:  # this method was not run on this landscape (tables merged from --load files)
                cells.append("-")
                continue
            meds.append(float(np.median(s)))
            boots.append(bootstrap_medians(s))
            cells.append(f"{meds[-1]:.3f} {interval(boots[-1])}")
        if len(meds) == len(paths):
            geo = np.exp(np.mean(np.log(np.stack(boots)), axis=0))
            cells.append(f"{geomean(meds):.3f} {interval(geo)}")
        lines.append(f"{m:24s}" + "".join(f"{c:>22s}" for c in cells))
    lines.append("")
    lines.extend(pooled_lines(runs, paths, optimum, methods))
    seconds = {m: statistics.mean(r["seconds"] for r in runs if r["method"] == m) for m in methods}
    lines.append("")
    lines.append("mean wall seconds per run: " + ", ".join(f"{m} {s:.2f}" for m, s in seconds.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, action="append",
                    help=f"landscapes folder (*/NAME.json.gz + kernels/); repeat for several (default {DEFAULT_DIR})")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cap", type=int, default=300, help="most evaluations per run")
    ap.add_argument("--samplers", default="random,auto,tpe,cmaes,qmc", help="kernelgen samplers, comma-separated")
    ap.add_argument("--kt", default=",".join(KT_STRATEGIES), help="Kernel Tuner strategies ('' for none)")
    ap.add_argument("--only", default="", help="substring filter on landscape names")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--save", type=Path, help="write every run's evaluations here (JSON)")
    ap.add_argument("--load", type=Path, action="append", help="print the table from saved runs instead")
    args = ap.parse_args(argv)
    paths = [p for folder in args.dir or [DEFAULT_DIR] for p in landscapes(folder) if args.only in name_of(p)]
    if args.load:
        runs = []
        for f in args.load:
            saved = json.loads(f.read_text())
            runs += [{"cap": saved["cap"], **r} for r in saved["runs"]]
        paths = [p for p in paths if any(r["path"] == str(p) for r in runs)]
        print(table(runs, paths, args.cap))
        return 0
    methods = [s for s in args.samplers.split(",") if s] + [f"kt:{s}" for s in args.kt.split(",") if s]
    tasks = [(m, str(p), seed, args.cap) for m in methods for p in paths for seed in range(args.seeds)]
    runs = []
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for i, (m, p, seed, times, secs) in enumerate(pool.imap_unordered(job, tasks)):
            runs.append({"method": m, "path": p, "seed": seed, "times": times, "seconds": secs, "cap": args.cap})
            if (i + 1) % 50 == 0:
                print(f"  {i + 1}/{len(tasks)} runs, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.save:
        args.save.write_text(json.dumps({"cap": args.cap, "runs": runs}))
    print(table(runs, paths, args.cap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
