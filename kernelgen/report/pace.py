"""How quickly a tuning ran, per workload, read back from its records: the seconds between the previous workload's
last record and this one's first trial (a measuring worker's start, its imports, CUDA's initialisation and the
ahead-of-time check of the space all land there), and search trials per second once it started.

On an H200 25-40 s passed between one workload's last trial and the next one's first, so a 100 s run tuned 2-3
of 8 workloads; ``tools/gpu_check.sh`` prints this table after its tuning step so the next run shows the gap.

    python -m kernelgen.report.pace sqlite:///gpu.sqlite [--since EPOCH_SECONDS]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

from kernelgen.ir.values import Evidence, TuningRecord


@dataclass(frozen=True)
class Pace:
    """One workload's pace: ``first_after`` is None for the first workload when no start time was given."""

    name: str
    first_after: float | None  # seconds from the previous workload's last record (or ``since``) to its first trial
    trials: int  # search trials (confirmation rounds not counted)
    seconds: float  # from its first trial to its last record
    per_second: float | None  # search trials per second of its first-to-last-trial span (None: fewer than 2)


def pace(records: Iterable[TuningRecord], since: float | None = None) -> list[Pace]:
    """One ``Pace`` per workload (its name, else the first 16 characters of its key), in the order they were tuned.
    A workload is a run of consecutive records of one name, ordered by creation time."""
    runs: list[tuple[str, list[TuningRecord]]] = []
    for r in sorted(records, key=lambda r: r.provenance.created_at):
        name = r.name or r.workload_key[:16]
        if runs and runs[-1][0] == name:
            runs[-1][1].append(r)
        else:
            runs.append((name, [r]))
    out, previous_end = [], since
    for name, rows in runs:
        trials = [r.provenance.created_at for r in rows if r.evidence is Evidence.TRIAL]
        start = trials[0] if trials else rows[0].provenance.created_at
        end = rows[-1].provenance.created_at
        span = trials[-1] - trials[0] if len(trials) > 1 else 0.0
        out.append(Pace(name, None if previous_end is None else start - previous_end, len(trials), end - start,
                        (len(trials) - 1) / span if span > 0 else None))
        previous_end = end
    return out


def render(rows: Iterable[Pace]) -> str:
    """The table ``tools/gpu_check.sh`` prints."""
    lines = [f"{'workload':32s} {'to first trial':>14s} {'trials':>7s} {'seconds':>8s} {'trials/s':>9s}"]
    for p in rows:
        first = "-" if p.first_after is None else f"{p.first_after:.1f} s"
        rate = "-" if p.per_second is None else f"{p.per_second:.2f}"
        lines.append(f"{p.name[:32]:32s} {first:>14s} {p.trials:7d} {p.seconds:8.1f} {rate:>9s}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="the tuning database URL")
    parser.add_argument("--since", type=float, default=None, help="when the tuning began (seconds since the epoch)")
    args = parser.parse_args(argv)
    from kernelgen.db import open_db  # deferred: SQLAlchemy loads only when the command runs

    db = open_db(args.db)
    try:
        print(render(pace(db.records(), args.since)))
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Pace", "main", "pace", "render"]
