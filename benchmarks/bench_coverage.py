"""How much of PyTorch's op surface runs inside kernelgen kernels through ``torch.compile(backend="kernelgen")``.

Every OpInfo entry of PyTorch's ``op_db`` (not only the ops kernelgen lowers: this is the peer-style sweep of
small functions a new user would write), its first float32 sample, wrapped as ``lambda x: op(x, *args)`` and
compiled with the kernelgen backend. Per entry it records whether Dynamo produced a graph, the ATen ops in
it (views excluded), how many of them ran inside kernelgen regions, whether a region launched a kernel, and
whether the result equals eager's (within float32 tolerance, NaN where eager has NaN). It prints the share of
entries that ran at least one kernelgen kernel, the share of ATen ops fused, wrong results (which must be 0),
and the reasons ops stay ATen, most frequent first.

    python benchmarks/bench_coverage.py [--limit N] [--ops add,cumsum] [--backend cpp] [--json]

It prints; it never asserts. About 1 s per entry on a cold kernel cache (a Dynamo compile, kernels built and
checked once), much less warm.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402


def _sweep_one(info, backend: str) -> dict:
    from kernelgen.frontend import dynamo_backend

    row = {"op": info.full_name, "status": "skipped", "aten_ops": 0, "fused_ops": 0, "kernel_runs": 0, "left": {}}
    if torch.float32 not in info.supported_dtypes("cpu") or "empty" in info.name:
        return row  # (empty, empty_like, new_empty...: uninitialised memory, nothing to compare)
    try:
        sample = next(iter(info.sample_inputs("cpu", torch.float32)))
    except Exception:  # noqa: BLE001 - an OpInfo without a float32 sample here
        return row
    if not isinstance(sample.input, torch.Tensor):
        return row
    args, kwargs = sample.args, sample.kwargs

    def fn(x):
        return info.op(x, *args, **kwargs)

    try:
        want = fn(sample.input.clone())
    except Exception:  # noqa: BLE001 - eager rejects its own sample: nothing to compare
        return row
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="kernelgen", options={"backend": backend})
    with dynamo_backend.collect() as graphs:
        try:
            got = compiled(sample.input.clone())
        except Exception as exc:  # noqa: BLE001 - eager ran it, so this is kernelgen's (or Dynamo's) failure
            row.update(status="error", detail=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            return row
    row["aten_ops"] = sum(g.aten_ops for g in graphs)
    row["fused_ops"] = sum(g.fused_ops for g in graphs)
    row["kernel_runs"] = sum(g.runs.get("kernel", 0) for g in graphs)
    row["left"] = {reason.split(" at `")[0].split(";")[0][:90]: 1 for g in graphs for reason in g.left.values()}
    try:
        torch.testing.assert_close(got, want, rtol=1.3e-6 * 10, atol=1e-5, equal_nan=True)
        row["status"] = "fused" if row["kernel_runs"] else ("no ops" if not row["aten_ops"] else "aten")
    except Exception as exc:  # noqa: BLE001 - a wrong answer: the worst bug; listed by name
        row.update(status="wrong", detail=str(exc).splitlines()[0][:200])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpp", "triton"), default="cpp")
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all of op_db)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N entries (0: all)")
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    parser.add_argument("--aten-first", action="store_true",
                        help="keep the untuned rule that runs a region of one or two small ops as its ATen ops")
    args = parser.parse_args()
    if not args.aten_first:
        # Every OpInfo sample is a few dozen elements, so the untuned rule (kernelgen.runtime.aten.aten_first,
        # a speed choice measured on real sizes) would run most one-op regions as ATen and this sweep would stop
        # asking what it is for: do kernels cover the op, and do they match eager? (--aten-first: 146 of 633
        # entries then run a kernel against 358 without the rule, same 82% of ops in regions; AMD EPYC)
        from kernelgen.runtime import aten

        aten.ENABLED = False
    if args.backend == "triton" and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from torch.testing._internal.common_methods_invocations import op_db

    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    logging.getLogger("kernelgen").setLevel(logging.ERROR)
    logging.getLogger("torch").setLevel(logging.ERROR)
    wanted = set(args.ops.split(",")) if args.ops else None
    infos = [i for i in op_db if wanted is None or {i.name, i.full_name} & wanted]
    if args.limit:
        infos = infos[:args.limit]
    start = time.perf_counter()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in infos:
            rows.append(_sweep_one(info, args.backend))
    ran = [r for r in rows if r["status"] != "skipped"]
    counts = Counter(r["status"] for r in ran)
    aten = sum(r["aten_ops"] for r in ran)
    fused = sum(r["fused_ops"] for r in ran)
    reasons = Counter(reason for r in ran for reason in r["left"])
    print(f"OpInfo entries: {len(infos)}, with a float32 sample eager runs: {len(ran)} "
          f"({time.perf_counter() - start:.0f} s, backend {args.backend})")
    for status in ("fused", "aten", "no ops", "error", "wrong"):
        print(f"  {status:<7} {counts.get(status, 0):>5}  ({100 * counts.get(status, 0) / max(len(ran), 1):.0f}%)")
    print(f"ATen ops inside kernelgen regions: {fused}/{aten} ({100 * fused / max(aten, 1):.0f}%)")
    print("ops left to ATen, by reason (entries):")
    for reason, n in reasons.most_common(25):
        print(f"  {n:>4}  {reason}")
    for r in ran:
        if r["status"] in ("wrong", "error"):
            print(f"{r['status'].upper()} {r['op']}: {r.get('detail', '')}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
