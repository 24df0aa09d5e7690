"""kernelgen's Triton kernels on a GPU vs eager and torch.compile (Inductor), untuned and tuned, side by side.

For every problem of a GPU manifest (default ``examples/workloads_gpu.toml``) it prints the median kernel time
(``triton.testing.do_bench``: CUDA events, L2 flushed between runs) of eager, torch.compile, kernelgen with an
empty database (the templates' default configs) and kernelgen over ``--db`` (what ``kernelgen tune`` recorded),
with the implementation and config each kernelgen run dispatched and its largest difference from eager.
Rounds are interleaved (one measurement of each variant per round) so clock and thermal drift hit every
column alike; the figure is the median over rounds. A memory-bound row (no GEMM or attention) also gets each
column's share of the bandwidth floor (``kernelgen.report.floor``: the bytes it must move over the device's copy
bandwidth, measured here with a 1 GiB device-to-device copy; 1.00 = at the floor).

    kernelgen tune examples/workloads_gpu.toml --db sqlite:///gpu.sqlite
    python benchmarks/bench_gpu.py --db sqlite:///gpu.sqlite [--rounds 5] [--only softmax] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch


def _inputs(specs, device: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cpu").manual_seed(0)
    return tuple(torch.randn(s.shape, generator=g).to(device=device, dtype=getattr(torch, s.dtype)) for s in specs)


def _max_error(got, want) -> float:
    return float((got.float() - want.float()).abs().nan_to_num(float("inf")).max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default="examples/workloads_gpu.toml")
    parser.add_argument("--db", default=os.environ.get("KERNELGEN_DB"), help="the tuned database URL")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA or ROCm GPU here; Triton timings under the interpreter mean nothing",
              file=sys.stderr)
        return 2
    from triton.testing import do_bench

    import kernelgen
    from kernelgen.report.floor import floor_share, memory_bound
    from kernelgen.tune.manifest import load_manifest

    only = [s for s in args.only.split(",") if s]
    empty_db = f"sqlite:///{Path(tempfile.mkdtemp()) / 'untuned.sqlite'}"
    bandwidth = _copy_bandwidth(do_bench)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  tuned db: {args.db}  "
          f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s")
    rows = []
    for workload in load_manifest(args.manifest):
        if only and not any(s in workload.name for s in only):
            continue
        for specs, graph in zip(workload.signatures, workload.graphs):
            args_ = _inputs(specs, "cuda")
            label = f"{workload.name} {'x'.join(map(str, specs[0].shape))} {specs[0].dtype}"
            variants = {"eager": workload.fn}
            if not args.no_torch_compile:
                variants["inductor"] = torch.compile(workload.fn)
            untuned = kernelgen.compile(workload.fn, db=empty_db)
            variants["kg untuned"] = untuned
            tuned = kernelgen.compile(workload.fn, db=args.db) if args.db else None
            if tuned is not None:
                variants["kg tuned"] = tuned
            want = workload.fn(*args_)
            errors = {}
            for name, fn in variants.items():
                errors[name] = _max_error(fn(*args_), want)  # also the warm-up (compiles, autotunes)
            samples: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    samples[name].append(do_bench(lambda fn=fn: fn(*args_), warmup=5, rep=40))
            med = {name: statistics.median(v) for name, v in samples.items()}
            floor = {name: floor_share(graph, t / 1e3, bandwidth) for name, t in med.items()} \
                if memory_bound(graph) else None
            row = {"problem": label, "ms": med, "max_error": errors, "floor_share": floor,
                   "untuned": _explained(untuned, args_), "tuned": _explained(tuned, args_) if tuned else None}
            rows.append(row)
            cells = "  ".join(f"{name} {t * 1e3:8.1f} us" for name, t in med.items())
            ratio = "  ".join(f"{name}: {med['eager'] / t:.2f}x eager" for name, t in med.items()
                              if name.startswith("kg"))
            print(f"{label:38s} {cells}  | {ratio}")
            if floor is not None:
                print("    share of the bandwidth floor: " + "  ".join(f"{name} {v:.2f}" for name, v in floor.items()))
            for key in ("untuned", "tuned"):
                if row[key]:
                    print(f"    {key}: {row[key]}  err {errors['kg ' + key]:.2e}")
    kg = [r["ms"]["eager"] / r["ms"]["kg tuned"] for r in rows if "kg tuned" in r["ms"]]
    if kg:
        print(f"geomean kg tuned vs eager: {statistics.geometric_mean(kg):.2f}x over {len(kg)} problems")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


def _copy_bandwidth(do_bench) -> float:
    """Bytes per second a 1 GiB device-to-device copy moves (read + write), timed as the kernels are."""
    from kernelgen.report.floor import copy_bandwidth

    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = do_bench(lambda: dst.copy_(src), warmup=5, rep=100) / 1e3
    return copy_bandwidth(src.numel(), seconds)


def _explained(fast, args) -> str:
    info = fast.explain(*args)
    return f"{info.get('implementation')} {info.get('config')} ({info.get('source')})"


if __name__ == "__main__":
    raise SystemExit(main())
