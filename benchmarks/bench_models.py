"""Whole models (examples/models.py) with kernelgen's torch.compile backend vs eager vs Inductor, in one run.

For each model and each mode, forward (inference, ``torch.no_grad``) and forward+backward (a training step
without optimizer: ``out.float().sum().backward()``), it prints median times of the three variants measured
in interleaved rounds (eager, Inductor, kernelgen, eager, Inductor, kernelgen, ...) so a change of machine
load hits every column alike; speedups vs eager and vs Inductor with geomeans over the models; each
compiler's compile time (its first call); correctness (max abs error of the outputs and gradients vs eager,
within tolerance or not); and coverage: the share of the ATen ops and of eager's time that ran inside
kernelgen regions, and kernels launched vs eager's op count.

    python benchmarks/bench_models.py [--models gpt2,llama] [--modes fwd,fwd+bwd] [--size {test,bench}]
        [--rounds 10] [--tuned [--tune-seconds 3]] [--warm-caches] [--json]

It prints; it never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from examples.models import make, names, training_loss  # noqa: E402

VARIANTS = ("eager", "inductor", "kernelgen")
MODES = ("fwd", "fwd+bwd")
# float32 models: kernels reorder sums (GEMM, softmax, norms, weight grads summed over every token), so
# results differ from eager in the last bits, more with longer sums; Inductor's own errors at the bench size
# (up to ~6e-4 on the grads) sit inside this bound.
RTOL = ATOL = 1e-3


# --- kernelgen's backend and its coverage stats, looked up so the bench runs (with empty columns) without it

def _backend_module() -> Any:
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()  # idempotent; the entry point may not be installed for this checkout
    return dynamo_backend


def unavailable_reason() -> str | None:
    try:
        from torch._dynamo.backends.registry import lookup_backend

        _backend_module()
        lookup_backend("kernelgen")
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    return None


def recording() -> contextlib.AbstractContextManager:
    """``with recording() as graphs:`` collects the backend's stats of the graphs compiled in the block."""
    return _backend_module().collect()


def graph_summary(graphs: list) -> dict[str, Any]:
    """The backend's view of one model step: ATen ops in and outside regions, region runs, reasons left."""
    left: dict[str, int] = {}
    for g in graphs:
        for reason in g.left.values():
            # One line per kind of reason: drop the node it names and the list of what is supported.
            reason = re.sub(r" at `[^`]*`", "", reason).split(";")[0]
            left[reason] = left.get(reason, 0) + 1
    total, fused = sum(g.aten_ops for g in graphs), sum(g.fused_ops for g in graphs)
    return {"graphs": [g.as_dict() for g in graphs], "aten_ops": total, "fused_ops": fused,
            "op_share": fused / total if total else None, "left": left,
            "kernel_runs": sum(g.runs.get("kernel", 0) for g in graphs),
            "eager_runs": sum(g.runs.get("eager", 0) for g in graphs)}


def measure(kg_step: Callable[[], Any], eager_step: Callable[[], Any]) -> dict[str, Any]:
    """Coverage of one kernelgen step seen by the profiler, beside eager's same step.

    Ops left to ATen run at eager's speed, so eager's time inside kernelgen regions is estimated as eager's
    op time minus the time of the ATen ops kernelgen left outside its regions.
    """
    ops = _top_level_ops({"eager": eager_step, "kernelgen": kg_step})
    eager, kg = ops["eager"], ops["kernelgen"]
    share = 1.0 - kg["aten_s"] / eager["aten_s"] if eager["aten_s"] else None
    return {"launches": kg["kernelgen"] + kg["aten"], "regions": kg["kernelgen"], "eager_launches": eager["aten"],
            "time_share": None if share is None else min(max(share, 0.0), 1.0)}


def tune(name: str, size: str, mode: str, seconds: float) -> str:
    """One step with the backend's ``tune="auto"``: each region is tuned by kernelgen's tuner on its first
    call (records in ``KERNELGEN_DB``), so the timed compile after it finds the tuned configs there."""
    module, inputs = make(name, size)
    compiled = torch.compile(copy.deepcopy(module), backend="kernelgen", options={"tune": "auto", "seconds": seconds})
    try:
        with recording() as graphs:
            _step(compiled, inputs, mode)()
    except Exception as exc:  # the timed compile meets the same failure and reports it in its row
        return f"not tuned: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
    finally:
        torch._dynamo.reset()
    return f"tuned the regions of {len(graphs)} graph(s) ({sum(g.regions for g in graphs)} regions)"


@functools.lru_cache(maxsize=None)
def _is_view(name: str) -> bool:
    # A view returns an alias of its input and launches no kernel; it counts as no launch on either side.
    schemas = torch._C._jit_get_schemas_for_operator(name)
    return bool(schemas) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for s in schemas for r in s.returns)


def _top_level_ops(steps: dict[str, Callable[[], Any]], reps: int = 5) -> dict[str, dict[str, float]]:
    """Per step and call: kernelgen region ops, ATen ops (views excluded) and the ATen ops' time, outermost
    ops only (an op called inside another, e.g. aten::mm inside aten::linear, is part of its caller's launch).
    The steps alternate inside one profile, so machine load hits them alike."""
    def is_op(e: Any) -> bool:
        return e.name.startswith(("aten::", "kernelgen"))

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            for label, step in steps.items():
                with torch.profiler.record_function(f"bench::{label}"):
                    step()
    counts = {label: {"kernelgen": 0.0, "aten": 0.0, "aten_s": 0.0} for label in steps}
    for e in prof.events():
        parent = e.cpu_parent
        while parent is not None and not is_op(parent) and not parent.name.startswith("bench::"):
            parent = parent.cpu_parent
        if parent is None or not parent.name.startswith("bench::") or not is_op(e):
            continue  # not a step's outermost op (backward ops run on the autograd thread: see below)
        c = counts[parent.name.removeprefix("bench::")]
        if e.name.startswith("kernelgen"):
            c["kernelgen"] += 1
            continue
        c["aten_s"] += e.cpu_time_total * 1e-6
        c["aten"] += not _is_view(e.name)
    return {label: {k: v / reps for k, v in c.items()} for label, c in counts.items()}


# --- the bench -----------------------------------------------------------------------------------------

def _step(module: torch.nn.Module, inputs: tuple, mode: str) -> Callable[[], Any]:
    """One call of ``module`` in ``mode``: returns (output, grads) for the correctness check."""
    params = [p for p in module.parameters() if p.requires_grad]

    def fwd() -> Any:
        with torch.no_grad():
            return module(*inputs), []

    def train() -> Any:
        for p in params:
            p.grad = None  # every step does the same work: no accumulation into old grads
        out = module(*inputs)
        training_loss(out).backward()
        return out, [p.grad for p in params]

    return fwd if mode == "fwd" else train


def _max_err(got: Any, want: Any) -> tuple[float, bool]:
    """Max abs error over outputs and grads, and whether every tensor is within the tolerance."""
    (out, grads), (ref, ref_grads) = got, want
    pairs = [(out, ref), *zip(grads, ref_grads)]
    err, ok = 0.0, len(grads) == len(ref_grads)
    for a, b in pairs:
        if a is None or b is None:
            ok = ok and a is None and b is None
            continue
        diff = (a.detach().double() - b.detach().double()).abs()
        err = max(err, diff.max().item() if diff.numel() else 0.0)
        ok = ok and a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=RTOL, atol=ATOL,
                                                                                   equal_nan=True)
    return err, ok


def _compile(module: torch.nn.Module, backend: str) -> torch.nn.Module:
    # A copy per compiler, so one compiler's grads never land in another's parameters.
    return torch.compile(copy.deepcopy(module), backend=backend)


def bench_model(name: str, size: str, mode: str, rounds: int, kernelgen: bool) -> dict[str, Any]:
    module, inputs = make(name, size)
    row: dict[str, Any] = {"model": name, "mode": mode, "times": {}, "compile_s": {}, "error": {}, "ok": {},
                           "failed": {}}
    eager_step = _step(module, inputs, mode)
    reference = eager_step()
    steps: dict[str, Callable[[], Any]] = {"eager": eager_step}
    kg_graphs: list = []
    for variant in VARIANTS[1:]:
        if variant == "kernelgen" and not kernelgen:
            continue
        backend = "inductor" if variant == "inductor" else "kernelgen"
        try:
            step = _step(_compile(module, backend), inputs, mode)
            with recording() if variant == "kernelgen" else contextlib.nullcontext([]) as graphs:
                t0 = time.perf_counter()
                got = step()  # the first call compiles (and, for kernelgen, checks its kernels once)
                row["compile_s"][variant] = time.perf_counter() - t0
            if variant == "kernelgen":
                kg_graphs = graphs
            row["error"][variant], row["ok"][variant] = _max_err(got, reference)
            steps[variant] = step
        except Exception as exc:  # a compiler that cannot take the model is a row entry, not the end of the run
            row["failed"][variant] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    if "kernelgen" in steps:
        row["coverage"] = {**measure(steps["kernelgen"], eager_step), **graph_summary(kg_graphs)}
    for step in steps.values():  # warm: allocator, caches, lazily built kernels
        step()
    samples: dict[str, list[float]] = {v: [] for v in steps}
    for _ in range(rounds):
        for variant, step in steps.items():
            t0 = time.perf_counter()
            step()
            samples[variant].append(time.perf_counter() - t0)
    row["times"] = {v: statistics.median(s) for v, s in samples.items()}
    torch._dynamo.reset()  # the next model starts from empty Dynamo caches (and recompile limits)
    return row


def _ms(t: float | None) -> str:
    return f"{t * 1e3:9.2f}" if t is not None else f"{'-':>9}"


def _secs(t: float | None) -> str:
    return f"{t:.1f}s" if t is not None else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}x" if a and b else f"{'-':>7}"


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def print_table(rows: list[dict[str, Any]], size: str, tuned_note: str) -> None:
    head = (f"{'model':7} {'mode':8} {'eager ms':>9} {'ind. ms':>9} {'kg ms':>9} {'kg×eag':>7} {'kg×ind':>7}"
            f" {'ind×eag':>7} {'compile ind':>11} {'compile kg':>10} {'err ind':>8} {'err kg':>8} {'ok':>3}"
            f" {'ops in kg':>9} {'time in kg':>10} {'launch/eager':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        t, c, e = r["times"], r["compile_s"], r["error"]
        eag, ind, kg = t.get("eager"), t.get("inductor"), t.get("kernelgen")
        cov = r.get("coverage") or {}
        ok = {True: "yes", False: "NO"}.get(r["ok"].get("kernelgen"), "-")
        ops = f"{100 * cov['op_share']:8.0f}%" if cov.get("op_share") is not None else f"{'-':>9}"
        tshare = f"{100 * cov['time_share']:9.0f}%" if cov.get("time_share") is not None else f"{'-':>10}"
        launches = (f"{cov['launches']:>6.0f}/{cov['eager_launches']:<5.0f}" if cov.get("launches") is not None
                    else f"{'-':>12}")
        # speedups are "times faster": eager time / kernelgen time, Inductor time / kernelgen time
        print(f"{r['model']:7} {r['mode']:8} {_ms(eag)} {_ms(ind)} {_ms(kg)} {_ratio(eag, kg)} {_ratio(ind, kg)}"
              f" {_ratio(eag, ind)} {_secs(c.get('inductor')):>11} {_secs(c.get('kernelgen')):>10}"
              f" {e.get('inductor', float('nan')):8.1e} {e.get('kernelgen', float('nan')):8.1e} {ok:>3}"
              f" {ops} {tshare} {launches:>12}")
        if r["ok"].get("inductor") is False:
            print(f"{'':16} Inductor outside tolerance (max err {e['inductor']:.2e})")
        for variant, why in r["failed"].items():
            print(f"{'':16} {variant} failed: {why}")
        if cov.get("eager_runs"):
            print(f"{'':16} {cov['eager_runs']} of {cov['eager_runs'] + cov['kernel_runs']} region runs replayed "
                  f"ATen (kernel unavailable or failed its check)")
    print("-" * len(head))
    for mode in MODES:
        sel = [r for r in rows if r["mode"] == mode]
        parts = []
        for label, num, den in (("kg vs eager", "eager", "kernelgen"), ("kg vs Inductor", "inductor", "kernelgen"),
                                ("Inductor vs eager", "eager", "inductor")):
            g = _geomean([r["times"][num] / r["times"][den] for r in sel
                          if r["times"].get(num) and r["times"].get(den)])
            parts.append(f"{label} {g:.2f}x" if g else f"{label} -")
        print(f"geomean {mode:8}: " + ", ".join(parts))
    left: dict[str, list[str]] = {}
    for r in rows:
        for reason, n in (r.get("coverage") or {}).get("left", {}).items():
            left.setdefault(reason, []).append(f"{r['model']} {r['mode']} {n}")
    if left:
        print("ATen ops left outside kernelgen regions, by reason (model, mode, ops):")
        for reason, where in sorted(left.items(), key=lambda kv: -sum(int(w.rsplit(" ", 1)[1]) for w in kv[1])):
            print(f"  {reason}: {', '.join(where)}")
    print(f"size={size}; times are medians of interleaved rounds (eager, Inductor, kernelgen per round); "
          f"kg×eag = eager's time / kernelgen's (>1: kernelgen faster), kg×ind and ind×eag alike; compile = first call (kernelgen's includes its one-off "
          f"isolated kernel checks); err = max abs error of outputs and grads vs eager, ok = kernelgen within "
          f"rtol=atol={RTOL:g}; ops in kg = share of the ATen graph's ops inside kernelgen regions (backend stats); "
          f"time in kg = eager's op time minus the time of the ATen ops kernelgen leaves outside its regions, over "
          f"eager's op time (profiler); launch/eager = kernelgen regions + ATen ops (views excluded) kernelgen "
          f"launches per call vs the ATen ops eager launches. {tuned_note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(names()), help=f"comma-separated, from {', '.join(names())}")
    parser.add_argument("--size", choices=("test", "bench"), default="bench")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from fwd, fwd+bwd")
    parser.add_argument("--tuned", action="store_true",
                        help="tune each model step's kernelgen regions first (records go to KERNELGEN_DB)")
    parser.add_argument("--tune-seconds", type=float, default=3.0,
                        help="with --tuned: tuning budget per region (already tuned ones are skipped)")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument("--warm-caches", action="store_true",
                        help="keep Inductor's and kernelgen's on-disk caches (default: both start empty, so the "
                             "compile columns are cold compiles)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if not args.warm_caches:
            # Read when each compiler first compiles, i.e. after this point.
            cold = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-models-")))
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cold / "inductor")
            os.environ["KERNELGEN_CACHE_DIR"] = str(cold / "kernelgen")
        run(args)


def run(args: argparse.Namespace) -> None:
    kernelgen = unavailable_reason() is None
    tuned_note = ("kernelgen: untuned defaults, unless KERNELGEN_DB already holds tuned records for its regions."
                  if not args.tuned else
                  f"kernelgen: tuned (options={{'tune': 'auto', 'seconds': {args.tune_seconds:g}}} on a first "
                  f"compile: each region up to {args.tune_seconds:g} s of kernelgen's tuner, records in KERNELGEN_DB, "
                  f"a region tuned before is not tuned again; the compile column is then warm: tuning built the "
                  f"kernels).")
    print(f"caches: {'warm (kept)' if args.warm_caches else 'cold (fresh, empty)'}; "
          f"torch {torch.__version__}, threads={torch.get_num_threads()}, cores={os.cpu_count()}, "
          f"load average before={os.getloadavg()[0]:.2f}")
    if not kernelgen:
        print(f"kernelgen's torch.compile backend is not available: {unavailable_reason()}; "
              f"its columns stay empty")
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            if args.tuned and kernelgen:
                print(f"  {name} {mode}: {tune(name, args.size, mode, args.tune_seconds)}", file=sys.stderr,
                      flush=True)
            rows.append(bench_model(name, args.size, mode, args.rounds, kernelgen))
            print(f"  {name} {mode}: done", file=sys.stderr, flush=True)
    print(f"load average after={os.getloadavg()[0]:.2f}")
    print_table(rows, args.size, tuned_note)
    if args.json:
        print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
