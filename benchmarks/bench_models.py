"""Whole models through eager, Inductor, Inductor max-autotune, kernelgen untuned and kernelgen tuned, in one run.

Models: Hugging Face ``transformers`` GPT-2, Llama, BERT and ResNet-18 built from configs with random weights
(``examples/hf_models.py``: 2 layers, hidden 256, 4 x 128 tokens; 4 x 128² images), and optionally the held-out
families (``--families held-out``, or ``--families all`` for both sets: T5, an encoder-decoder with a relative
position bias; Mistral, grouped-query attention with a sliding window; Qwen2, grouped-query attention; ViT, a patch
embedding and an encoder; at the same sizes, with PyTorch's default ``sdpa`` attention) and the blocks of
``examples/models.py`` (``--models block-gpt2,...``; ``--models`` names any set). Each model runs in both modes: ``infer`` (eval, no_grad)
and ``train`` (forward, ``kernelgen.tune.model.training_loss``, backward).

Per model and mode: first ``kernelgen tune --model FACTORY --mode MODE --seconds S`` tunes it in a separate,
earlier process (its wall time is the tuning time; records in ``--db``, a temporary SQLite file by default);
then this process compiles five variants (``kernelgen untuned`` reads an empty database, ``kernelgen tuned`` the
tuned one) and times them in interleaved rounds (eager, Inductor, max-autotune, kg untuned, kg tuned, eager, ...)
so a change of machine load hits every column alike. It prints medians, speedups, geomeans per mode, each
compiler's first-call time beside the tuning time, the max abs error vs eager, what the tuned regions run
(kernels vs their ATen ops) and the load average before and after each model, with the CPU model.

    python benchmarks/bench_models.py [--families named|held-out|all] [--models hf-gpt2,hf-t5,...] [--modes infer,train]
        [--rounds 10] [--tune-seconds 60] [--db URL] [--no-max-autotune] [--hog] [--warm-caches] [--json]
        [--default-malloc]

``--hog`` runs the timing rounds while two busy processes load every core (what a shared machine does to each
compiler); reuse a quiet run's tuned records with ``--db URL``. It prints; it never asserts.

``--device cuda`` runs the models at GPU sizes (``examples/hf_models.py``'s ``*_gpu`` factories: 4 layers, hidden
768, 8 x 512 tokens, default ``sdpa`` attention; inference in bfloat16, training in float32) with CUDA-synchronised
step times, and adds the columns Inductor ``reduce-overhead`` (CUDA graphs) and kernelgen tuned with CUDA graphs
(``options={"cudagraphs": True}``); the max-autotune column is off there unless ``--max-autotune``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from kernelgen.backends import cpp  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.runtime import memory  # noqa: E402
from kernelgen.tune.model import dispatched, load_model, prepare, step  # noqa: E402

MODELS = {"hf-gpt2": "examples.hf_models:gpt2", "hf-llama": "examples.hf_models:llama",
          "hf-bert": "examples.hf_models:bert", "hf-resnet": "examples.hf_models:resnet",
          "hf-t5": "examples.hf_models:t5", "hf-mistral": "examples.hf_models:mistral",
          "hf-qwen2": "examples.hf_models:qwen2", "hf-vit": "examples.hf_models:vit",
          "block-gpt2": "examples.models:gpt2_block", "block-llama": "examples.models:llama_block",
          "block-bert": "examples.models:bert_block", "block-cnn": "examples.models:cnn_block"}
DEFAULT_MODELS = "hf-gpt2,hf-llama,hf-bert,hf-resnet"
# families none of the four above exercise (issue 33 item 4): not run unless asked for
HELD_OUT_MODELS = "hf-t5,hf-mistral,hf-qwen2,hf-vit"
FAMILIES = {"named": DEFAULT_MODELS, "held-out": HELD_OUT_MODELS, "all": f"{DEFAULT_MODELS},{HELD_OUT_MODELS}"}
MODES = ("infer", "train")
VARIANTS = ("eager", "inductor", "max-autotune", "kg-untuned", "kg-tuned")
# --device cuda: the GPU-size factories per mode (bfloat16 inference, float32 training) and two more columns
GPU_FACTORY_SUFFIX = {"infer": "_gpu", "train": "_gpu_fp32"}
GPU_VARIANTS = ("eager", "inductor", "reduce-overhead", "max-autotune", "kg-untuned", "kg-tuned", "kg-tuned-cg")


def factory_of(name: str, mode: str, device: str) -> str:
    """The ``module:function`` factory of model ``name`` for ``mode`` on ``device``."""
    factory = MODELS[name]
    if device != "cuda":
        return factory
    if not name.startswith("hf-"):
        raise SystemExit(f"--device cuda runs the Hugging Face models only (hf-*), not {name}")
    return factory + GPU_FACTORY_SUFFIX[mode]


def synchronizer(device: str) -> Callable[[], None]:
    """What ends a timed step: nothing on a CPU, the device's queue on a GPU (a step's kernels run async)."""
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


# CPU features that change which kernels eager's ATen (MKL/oneDNN) and kernelgen's C++ run
FLAGS_THAT_MATTER = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """What tells two machines of one CPU name apart: family/model/stepping, the flags that choose kernels,
    the hypervisor, cores; and the GPU when there is one."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    parts = [f"{cpu_model()} (family {info.get('cpu family', '?')} model {info.get('model', '?')} stepping "
             f"{info.get('stepping', '?')}; {' '.join(f for f in FLAGS_THAT_MATTER if f in flags) or 'no AVX'}"
             f"{'; VM guest' if 'hypervisor' in flags else ''}), {os.cpu_count()} cores"]
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name()}")
    return "; ".join(parts)


def cpu_times() -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat (user nice system idle iowait irq softirq steal ...), or []."""
    try:
        return [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return []


def steal_share(before: list[int], after: list[int]) -> float | None:
    """The share of CPU time the hypervisor gave other guests between two ``cpu_times`` (steal time)."""
    if len(before) < 8 or len(after) < 8:
        return None
    delta = [a - b for a, b in zip(after, before)]
    return delta[7] / sum(delta) if sum(delta) > 0 else None


def spread(samples: list[float]) -> float | None:
    """Run-to-run spread of a column: the interquartile range over the median (0.05: 5%)."""
    if len(samples) < 4:
        return None
    q = statistics.quantiles(samples, n=4)
    return (q[2] - q[0]) / statistics.median(samples)


def tune_in_subprocess(factory: str, mode: str, url: str, seconds: float) -> dict[str, Any]:
    """``kernelgen tune --model`` in its own process: its wall time and its JSON summary of the model."""
    cmd = [str(Path(sys.executable).parent / "kernelgen"), "tune", "--model", factory, "--mode", mode, "--db", url,
           "--seconds", str(seconds), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    try:
        model = json.loads(proc.stdout)["models"][0]
    except (ValueError, KeyError, IndexError):
        model = {"ok": False, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return {"seconds": wall, **model}


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    leaves = out.to_tuple() if hasattr(out, "to_tuple") else out
    return next(t for t in torch.utils._pytree.tree_leaves(leaves) if isinstance(t, torch.Tensor))


def _compile(model: torch.nn.Module, variant: str, urls: dict[str, str]) -> torch.nn.Module:
    # A copy per compiler, so one compiler's grads never land in another's parameters.
    model = copy.deepcopy(model)
    if variant == "inductor":
        return torch.compile(model)
    if variant in ("max-autotune", "reduce-overhead"):
        return torch.compile(model, mode=variant)
    if variant == "kg-tuned-cg":
        return torch.compile(model, backend="kernelgen", options={"db": urls["kg-tuned"], "cudagraphs": True})
    return torch.compile(model, backend="kernelgen", options={"db": urls[variant]})


@contextlib.contextmanager
def hog(enabled: bool, processes: int | None = None) -> Iterator[None]:
    """Busy processes while the block runs: ``processes`` of them, by default one per CPU (two on this project's
    machine)."""
    if not enabled:
        yield
        return
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes or os.cpu_count() or 2)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def _spin() -> None:
    x = 0
    while True:
        x += 1


def bench_model(name: str, mode: str, args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    factory = factory_of(name, mode, args.device)
    sync = synchronizer(args.device)
    row: dict[str, Any] = {"model": name, "mode": mode, "load_before": os.getloadavg()[0], "times": {},
                           "compile_s": {}, "error": {}, "failed": {}}
    if args.tune_seconds > 0:
        row["tuning"] = tune_in_subprocess(factory, mode, urls["kg-tuned"], args.tune_seconds)
        print(f"  {name} {mode}: tuned in {row['tuning']['seconds']:.0f} s "
              f"({row['tuning'].get('regions_done', '-')}/{row['tuning'].get('regions_total', '-')} regions"
              f"{'' if row['tuning'].get('ok') else ', ' + str(row['tuning'].get('error'))})", file=sys.stderr,
              flush=True)
        check = row["tuning"].get("check")
        if check:  # the tuner's own whole-step check (kernelgen.tune.model_check), in the tuning process
            steps = ", ".join(f"{v} {ms:.2f}" for v, ms in check["step_ms"].items())
            eager_step = "; eager's step as fast or faster: the model runs eagerly" if check.get("eager_step") else ""
            print(f"  {name} {mode}: whole-step check (ms): {steps}; kept {check['kept']}, "
                  f"{check['changed']} region(s) changed{eager_step}", file=sys.stderr, flush=True)
    model, fargs, fkwargs = load_model(factory)
    prepare(model, mode)
    steps: dict[str, Callable[[], Any]] = {"eager": step(model, fargs, fkwargs, mode)}
    reference = _first_tensor(steps["eager"]()).detach()
    variants = [v for v in args.variants[1:] if not (v == "max-autotune" and args.no_max_autotune)]
    for variant in variants:
        try:
            run = step(_compile(model, variant, urls), fargs, fkwargs, mode)
            with dynamo_backend.collect() as graphs:
                t0 = time.perf_counter()
                got = _first_tensor(run()).detach()
                sync()
                row["compile_s"][variant] = time.perf_counter() - t0
            row["error"][variant] = (got.double() - reference.double()).abs().max().item()
            if variant == "kg-tuned":
                chosen = dispatched(graphs)
                row["tuned_runs"] = dict(Counter(c["implementation"] for c in chosen))
                row["tuned_sources"] = dict(Counter(c["source"] for c in chosen))
                # the ATen ops the partitioner left outside every region, by reason (views not counted)
                row["left"] = dict(Counter(re.sub(r" at `[^`]*`", "", reason).split(";")[0][:100]
                                           for g in graphs for reason in g.left.values()))
            steps[variant] = run
        except Exception as exc:  # a compiler that cannot take the model is a row entry, not the end of the run
            row["failed"][variant] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    for run in steps.values():  # warm: allocator, caches, lazily built kernels
        run()
    samples: dict[str, list[float]] = {v: [] for v in steps}
    caps: dict[str, Counter] = {v: Counter() for v in steps}  # kernelgen's kernel thread cap after each run
    with hog(args.hog):
        row["load_during"] = os.getloadavg()[0]
        before = cpu_times()
        for _ in range(args.rounds):
            for variant, run in steps.items():
                sync()
                t0 = time.perf_counter()
                run()
                sync()
                samples[variant].append(time.perf_counter() - t0)
                cap = cpp.THREAD_CAP[0]
                caps[variant]["none" if cap >= 1 << 30 else str(cap)] += 1
        row["steal"] = steal_share(before, cpu_times())
    row["times"] = {v: statistics.median(s) for v, s in samples.items()}
    row["spread"] = {v: spread(s) for v, s in samples.items()}
    row["thread_cap"] = {v: dict(c) for v, c in caps.items() if v.startswith("kg")}
    row["load_after"] = os.getloadavg()[0]
    torch._dynamo.reset()  # the next model starts from empty Dynamo caches (and recompile limits)
    return row


def _ms(t: float | None) -> str:
    return f"{t * 1e3:8.2f}" if t is not None else f"{'-':>8}"


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:6.2f}x" if num and den else f"{'-':>7}"


def _secs(t: float | None) -> str:
    return f"{t:6.0f}s" if t is not None else f"{'-':>7}"


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


# Short column names, and the (numerator, denominator) ratios each row prints: time of the first over the second,
# >1 means the second is faster.
SHORT = {"eager": "eager", "inductor": "ind", "reduce-overhead": "ind-ro", "max-autotune": "ind-ma",
         "kg-untuned": "kg-u", "kg-tuned": "kg-t", "kg-tuned-cg": "kg-t-cg"}
RATIOS = (("eager", "kg-tuned"), ("inductor", "kg-tuned"), ("max-autotune", "kg-tuned"),
          ("reduce-overhead", "kg-tuned-cg"), ("eager", "kg-tuned-cg"), ("eager", "kg-untuned"),
          ("kg-untuned", "kg-tuned"), ("eager", "inductor"))


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    variants = [v for v in args.variants if any(v in r["times"] for r in rows)]
    ratios = [(n, d) for n, d in RATIOS if n in variants and d in variants]
    print(f"machine: {machine()}; torch {torch.__version__}, threads={torch.get_num_threads()}; device {args.device}; "
          f"{args.rounds} interleaved rounds, medians; malloc: {args.malloc}"
          f"{'; TWO BUSY PROCESSES LOAD EVERY CORE' if args.hog else ''}")
    head = (f"{'model':12} {'mode':5} " + " ".join(f"{SHORT[v]:>8}" for v in variants) + " "
            + " ".join(f"{SHORT[d] + '/' + SHORT[n]:>13}" for n, d in ratios)
            + f" {'c.ind':>7} {'c.kg':>7} {'tune':>7} {'err kg-t':>9} {'load b/d/a':>14} {'steal':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        t, c = r["times"], r["compile_s"]
        tune_s = (r.get("tuning") or {}).get("seconds")
        load = f"{r['load_before']:.1f}/{r.get('load_during', 0):.1f}/{r['load_after']:.1f}"
        steal = f"{r['steal']:6.1%}" if r.get("steal") is not None else f"{'-':>6}"
        print(f"{r['model']:12} {r['mode']:5} " + " ".join(_ms(t.get(v)) for v in variants) + " "
              + " ".join(f"{_ratio(t.get(n), t.get(d)):>13}" for n, d in ratios)
              + f" {_secs(c.get('inductor'))} {_secs(c.get('kg-untuned'))} {_secs(tune_s)} "
              f"{r['error'].get('kg-tuned', float('nan')):9.1e} {load:>14} {steal}")
        spreads = ", ".join(f"{SHORT[v]} {x:.1%}" for v, x in (r.get("spread") or {}).items() if x is not None)
        print(f"{'':18} spread (IQR/median): {spreads}; kernel thread cap after each run: {r.get('thread_cap')}")
        if r.get("tuned_runs"):
            print(f"{'':18} tuned regions run: {r['tuned_runs']} (records: {r.get('tuned_sources')})")
        for reason, n in sorted((r.get("left") or {}).items(), key=lambda kv: -kv[1]):
            print(f"{'':18} {n} ATen op(s) outside regions: {reason}")
        for variant, why in r["failed"].items():
            print(f"{'':18} {variant} failed: {why}")
    print("-" * len(head))
    for mode in MODES:
        sel = [r for r in rows if r["mode"] == mode]
        parts = []
        for num, den in ratios:
            g = geomean([r["times"][num] / r["times"][den] for r in sel if r["times"].get(num) and r["times"].get(den)])
            parts.append(f"{den} vs {num} {g:.2f}x" if g else f"{den} vs {num} -")
        if sel:
            print(f"geomean {mode:5}: " + ", ".join(parts))
    print("columns: ms per step (medians); a/b ratios = b's time / a's (>1: a faster, e.g. kg-t/eager = how much "
          "faster kernelgen tuned is than eager); c.* = first call (compile) seconds, c.kg = kernelgen untuned's (its "
          "kernels' one-off checks included); tune = `kernelgen tune --model` wall time in its own earlier process; "
          "err = max abs error of the first output vs eager; load = 1-min load average before / during rounds / "
          "after; steal = CPU time the hypervisor gave other guests during the rounds; spread = a column's "
          "interquartile range over its median; thread cap: kernelgen's kernel threads after each run (none: all "
          "CPUs), by how many runs.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None,
                        help=f"comma-separated, from {', '.join(MODELS)} (default: --families' set)")
    parser.add_argument("--families", default="named", choices=tuple(FAMILIES),
                        help=f"named: {DEFAULT_MODELS} (the default); held-out: {HELD_OUT_MODELS}; all: both")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from infer, train")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tune-seconds", type=float, default=60.0,
                        help="kernelgen tune --model budget per model and mode (0: no tuning; use --db's records)")
    parser.add_argument("--db", default=None, help="tuning database of the tuned column (default: a fresh file)")
    parser.add_argument("--no-max-autotune", action="store_true", help="skip Inductor's max-autotune column")
    parser.add_argument("--max-autotune", action="store_true", help="with --device cuda: keep the max-autotune column")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: GPU sizes, bf16 inference / fp32 training, CUDA graph columns")
    parser.add_argument("--hog", action="store_true", help="time while busy processes load every core")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc defaults (KERNELGEN_MALLOC=0) instead of the settings the kernelgen "
                             "backend applies; by default every column runs under those settings from the start")
    parser.add_argument("--warm-caches", action="store_true",
                        help="keep Inductor's and kernelgen's on-disk caches (default: both start empty, so the "
                             "compile columns are cold compiles)")
    args = parser.parse_args()
    if args.models is None:
        args.models = FAMILIES[args.families]
    elif args.families != "named":
        parser.error("--models and --families both name the models: give one")
    unknown = sorted(set(args.models.split(",")) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    if any(m.startswith("hf-") for m in args.models.split(",")) and importlib.util.find_spec("transformers") is None:
        parser.error("the hf-* models need Hugging Face transformers: pip install -e '.[models]' (or --models "
                     "block-gpt2,block-llama,block-bert,block-cnn)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    args.variants = GPU_VARIANTS if args.device == "cuda" else VARIANTS
    args.no_max_autotune = args.no_max_autotune or (args.device == "cuda" and not args.max_autotune)
    dynamo_backend.register()
    if args.default_malloc:
        os.environ[memory.ENV] = "0"  # (the tuning subprocesses inherit it)
    # The backend changes the whole process's malloc (kernelgen.runtime.memory) when it first compiles; applied
    # here first, eager and Inductor run under the same allocator settings as kernelgen in every round.
    args.malloc = "kept freed memory (kernelgen.runtime.memory)" if memory.keep_freed_memory() else "glibc defaults"
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        if not args.warm_caches:  # cold compiles: Inductor's and kernelgen's caches start empty (read at first use)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{tmp}/inductor"
            os.environ["KERNELGEN_CACHE_DIR"] = f"{tmp}/kernelgen"  # the tuning subprocesses share it
        urls = {"kg-untuned": f"sqlite:///{tmp}/empty.sqlite", "kg-tuned": args.db or f"sqlite:///{tmp}/tuned.sqlite"}
        rows = []
        for name in args.models.split(","):
            for mode in args.modes.split(","):
                rows.append(bench_model(name, mode, args, urls))
                print(f"  {name} {mode}: done", file=sys.stderr, flush=True)
    print_table(rows, args)
    if args.json:
        print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main()
