"""The OpInfo differential table: per op kernelgen lowers, how many OpInfo samples passed, fell back, failed.

Run from the repository root: ``python benchmarks/bench_opinfo.py`` (C++ backend, every lowered op, every
dtype), ``--backend triton`` (under TRITON_INTERPRET=1 without a GPU: use ``--ops`` and few samples),
``--backend both``, ``--ops add,nn.functional.gelu``, ``--dtypes float32,int32``, ``--max-samples N``,
``--failures`` to list each failing sample. Prints a table; asserts nothing (tests/opinfo holds the CI check).
Needs ``expecttest`` (``pip install -e '.[dev]'``) for torch.testing._internal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpp", "triton", "both"), default="cpp")
    parser.add_argument("--ops", help="comma-separated OpInfo names or full names (default: every lowered op)")
    parser.add_argument("--dtypes", help="comma-separated torch dtype names (default: every dtype kernelgen supports)")
    parser.add_argument("--max-samples", type=int, default=4, help="OpInfo samples per op and dtype (default 4)")
    parser.add_argument("--variant-samples", type=int, default=2,
                        help="of those, how many also run non-contiguous, with NaN/Inf and with integer extremes")
    parser.add_argument("--failures", action="store_true", help="list every failing sample with the reason")
    args = parser.parse_args()
    if args.backend in ("triton", "both") and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

    from kernelgen.lowering.lower import handled_ops
    from kernelgen.testing import opinfo

    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")] if args.dtypes else None
    infos = opinfo.op_infos(args.ops.split(",") if args.ops else None)
    backends = ("cpp", "triton") if args.backend == "both" else (args.backend,)
    for backend in backends:
        start = time.perf_counter()
        outcomes = []
        for info in infos:
            outcomes += opinfo.run_op(info, backend, dtypes, args.max_samples,
                                           max_variant_samples=args.variant_samples)
        rows = opinfo.table(outcomes)
        width = max([len(r[0]) for r in rows] + [8])
        print(f"\nbackend {backend}: {len(rows)} OpInfo entries over {len(handled_ops())} lowered op names, "
              f"{time.perf_counter() - start:.0f} s")
        print(f"{'op':<{width}}  {'pass':>5}  {'fallback':>8}  {'fail':>5}")
        for op, passed, fell_back, failed in rows:
            print(f"{op:<{width}}  {passed:>5}  {fell_back:>8}  {failed:>5}")
        totals = [sum(r[i] for r in rows) for i in (1, 2, 3)]
        print(f"{'total':<{width}}  {totals[0]:>5}  {totals[1]:>8}  {totals[2]:>5}")
        kinds = {}
        for o in outcomes:
            for kind in o.case.kinds or {"plain"}:
                kinds.setdefault(kind, [0, 0, 0])[opinfo.STATUSES.index(o.status)] += 1
        print("by input kind (pass/fallback/fail): " + ", ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in sorted(kinds.items())))
        if args.failures:
            for o in outcomes:
                if o.status == "fail":
                    c = o.case
                    print(f"FAIL {backend} {c.op} {str(c.dtype).removeprefix('torch.')} sample {c.index} {c.variant} "
                          f"{','.join(sorted(c.kinds))}: {o.detail}")


if __name__ == "__main__":
    main()
