"""The one definition of "best": which record of a workload on a target dispatch runs.

Rank ok records by evidence (the tuner's declared verdict first, then confirmed finalists, then search
trials; ``kernelgen.ir.values.Evidence``), among verdicts the newest, then by median time, ties by record_id.
``TuningDB.best`` runs the same order in SQL on an index; everything else that names a best record (``db
show --best``, ``explain()``, the tune table, the report, the Optuna study's mark, a layered database's
choice between layers) calls ``verdict``/``best_key`` here, so they all name the same config.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernelgen.ir.values import Evidence, TuningRecord


def best_key(record: TuningRecord) -> tuple[int, float, float, str]:
    """Sort key of ok records, best first, in ``TuningDB.best()``'s SQL order: evidence, the newest verdict,
    median time, record_id. A later tuning re-measured its rivals side by side, so its verdict stands."""
    assert record.measurement.time is not None, "best_key ranks ok records only"
    newest = -record.provenance.created_at if record.evidence is Evidence.DECLARED else 0.0
    return int(record.evidence), newest, record.measurement.time.median, record.record_id


def verdict(records: Iterable[TuningRecord]) -> TuningRecord | None:
    """The record dispatch runs among ``records`` (one workload on one target), or None without an ok one."""
    return min((r for r in records if r.measurement.ok), key=best_key, default=None)


def preferred(a: TuningRecord | None, b: TuningRecord | None) -> TuningRecord | None:
    """The better of two ``verdict`` answers (either may be None): how layered databases combine theirs."""
    return verdict(r for r in (a, b) if r is not None)


def verdicts(records: Iterable[TuningRecord]) -> dict[tuple[str, str], TuningRecord]:
    """``verdict`` per (workload key, target fingerprint) among ``records``."""
    out: dict[tuple[str, str], TuningRecord] = {}
    for r in records:
        if r.measurement.ok:
            key = (r.workload_key, r.target_fingerprint)
            current = out.get(key)
            if current is None or best_key(r) < best_key(current):
                out[key] = r
    return out


__all__ = ["best_key", "preferred", "verdict", "verdicts"]
