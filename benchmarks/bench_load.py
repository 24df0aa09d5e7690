"""One model under load, side by side: eager, AOTAutograd alone (``aot_eager``), kernelgen (untuned) and the same
compiled kernelgen graph with its load-following thread cap lifted (``kg-nocap``), in one process, while busy
processes load every core.

Why beside ``bench_models.py --hog``: under load every compiler's step swings from round to round (eager's
two-thread ATen ops the most), so one loaded table says little about one model. This runs only the three variants
that share ATen's convolutions and GEMMs, in interleaved rounds of ``--steps`` steps (each round's median), repeats
the whole comparison ``--runs`` times (each run compiles nothing new: the variants are compiled once), and prints
per run the median, mean and worst round of each variant: under load a two-thread step has phases of several
slow steps that the median hides and a job's total time does not. ``aot_eager`` is the floor kernelgen's graph starts from: the
same AOTAutograd graph with no kernelgen region.

    python benchmarks/bench_load.py [--model hf-resnet] [--mode infer] [--runs 2] [--rounds 16] [--steps 5]
        [--hogs 2] [--json]

``--hogs 0`` runs it quiet. It prints; it never asserts.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # run from a checkout without installing
sys.path.insert(0, str(ROOT))

from bench_models import MODELS, cpu_model, hog  # noqa: E402

from kernelgen.backends import cpp  # noqa: E402
from kernelgen.runtime import memory  # noqa: E402
from kernelgen.tune.model import load_model, prepare, step  # noqa: E402

VARIANTS = ("eager", "aot_eager", "kernelgen", "kg-nocap")


def uncapped(run: Any) -> Any:
    """``run`` with the load-following thread cap lifted for its duration (``kernelgen.runtime.threads``): the
    same compiled graph, its kernels and ATen ops on every thread, as with ``KERNELGEN_ADAPT_THREADS=0``. The
    sampler only writes the cap when its count changes, so restoring it afterwards sticks."""
    def run_uncapped() -> Any:
        cap = cpp.THREAD_CAP[0]
        cpp.set_thread_cap(None)
        try:
            return run()
        finally:
            cpp.set_thread_cap(cap)

    return run_uncapped


def compiled_steps(factory: str, mode: str, db_url: str) -> dict[str, Any]:
    model, fargs, fkwargs = load_model(factory)
    prepare(model, mode)
    steps = {"eager": step(model, fargs, fkwargs, mode),
             "aot_eager": step(torch.compile(copy.deepcopy(model), backend="aot_eager"), fargs, fkwargs, mode),
             "kernelgen": step(torch.compile(copy.deepcopy(model), backend="kernelgen", options={"db": db_url}),
                               fargs, fkwargs, mode)}
    steps["kg-nocap"] = uncapped(steps["kernelgen"])
    for run in steps.values():  # compile, then warm the allocator and the lazily built kernels
        for _ in range(3):
            run()
    return steps


def one_run(steps: dict[str, Any], rounds: int, per_round: int) -> dict[str, list[float]]:
    """Each variant's round medians (ms), rounds interleaved so a change of load hits every variant alike."""
    found: dict[str, list[float]] = {v: [] for v in steps}
    for _ in range(rounds):
        for variant, run in steps.items():
            times = []
            for _ in range(per_round):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            found[variant].append(statistics.median(times) * 1e3)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="hf-resnet", choices=sorted(MODELS))
    parser.add_argument("--mode", default="infer", choices=("infer", "train"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5, help="steps per round (the round's median is kept)")
    parser.add_argument("--hogs", type=int, default=2, help="busy processes during the rounds (0: quiet)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    memory.keep_freed_memory()  # every variant under the allocator kernelgen's users get (bench_models does too)
    with tempfile.TemporaryDirectory() as tmp:
        steps = compiled_steps(MODELS[args.model], args.mode, f"sqlite:///{Path(tmp) / 'untuned.sqlite'}")
        results = []
        for _ in range(args.runs):
            with hog(args.hogs > 0, args.hogs):
                time.sleep(1.0)  # let the busy processes reach the CPUs before the first round
                before = os.getloadavg()[0]
                rounds = one_run(steps, args.rounds, args.steps)
                results.append({"load": [before, os.getloadavg()[0]], "rounds_ms": rounds})
    if args.json:
        print(json.dumps({"model": args.model, "mode": args.mode, "hogs": args.hogs, "cpu": cpu_model(),
                          "runs": results}, indent=1))
        return 0
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, threads={torch.get_num_threads()};"
          f" {args.model} {args.mode}; {args.hogs} busy processes; {args.rounds} interleaved rounds of {args.steps}"
          f" steps per run (round medians)")
    print(f"{'run':>3} {'load':>9}  " + "  ".join(f"{v + ' med/mean/worst':>26}" for v in VARIANTS))
    for i, run in enumerate(results, 1):
        got = run["rounds_ms"]
        med = {v: statistics.median(got[v]) for v in VARIANTS}
        mean = {v: statistics.fmean(got[v]) for v in VARIANTS}
        cells = "  ".join(f"{med[v]:>10.1f}/{mean[v]:>6.1f}/{max(got[v]):>6.1f}" for v in VARIANTS)
        print(f"{i:>3} {run['load'][0]:>4.1f}/{run['load'][1]:<4.1f}  {cells}")
        print(f"{'':>15}kernelgen's speedup (median, mean): " + ", ".join(
            f"over {v} {med[v] / med['kernelgen']:.2f}x {mean[v] / mean['kernelgen']:.2f}x" for v in VARIANTS
            if v != "kernelgen"))
    print("speedup > 1: kernelgen's step is faster; mean: over the rounds' medians (a slow phase of several steps "
          "shows there, not in the median); load: 1-min load average before / after the run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
