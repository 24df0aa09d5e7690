"""The one definition of "best": which record of a workload on a target dispatch runs.

Rank ok records by evidence (the tuner's declared verdict first, then confirmed finalists, then search
trials; ``kernelgen.ir.values.Evidence``), among verdicts the newest, then by median time, ties by record_id.
``TuningDB.best`` runs the same order in SQL on an index; everything else that names a best record (``db
show --best``, ``explain()``, the tune table, the report, the Optuna study's mark, a layered database's
choice between layers) calls ``verdict``/``best_key`` here, so they all name the same config. ``rounds_tag``,
``is_refused`` and ``note_of`` read what the tuner's confirmation rounds wrote into a record's message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kernelgen.ir.values import Evidence, TuningRecord

NO_VERDICT = "no verdict"  # in the message of every record of a confirmation that declared none
_TAG = re.compile(r"\(rounds ([0-9a-f]{8})\)")  # how kernelgen.tune.confirm names the rounds in each message


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


def rounds_tag(record: TuningRecord) -> str | None:
    """The tag of the confirmation rounds that produced ``record`` (None for a search trial or an old record)."""
    found = _TAG.search(record.measurement.message)
    return found.group(1) if found else None


def is_refused(record: TuningRecord) -> bool:
    """A record of confirmation rounds that were due to declare a verdict and refused to."""
    return rounds_tag(record) is not None and f"; {NO_VERDICT}: " in record.measurement.message


def note_of(record: TuningRecord) -> str:
    """What the verdict's rounds had to say ("" when nothing): what ``commit_confirmation`` appended."""
    message = record.measurement.message
    if rounds_tag(record) is None or "; " not in message:
        return ""
    return message.split("; ", 1)[1]


__all__ = ["NO_VERDICT", "best_key", "is_refused", "note_of", "preferred", "rounds_tag", "verdict", "verdicts"]
