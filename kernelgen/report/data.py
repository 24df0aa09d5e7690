"""What the report shows, computed from tuning records alone, with no HTML or plotting: per workload and
target, the search trials in measuring order with the best time so far, the best record (what dispatch runs),
the confirmed finalists of its rounds with the baselines timed in them, the failures and the device details.

The plots and the tables are both drawn from one ``WorkloadSummary``, so they cannot disagree.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelgen.db.verdict import is_refused, rounds_tag, verdict
from kernelgen.ir.target import Target
from kernelgen.ir.values import Evidence, Reference, TuningRecord

# (workload key, target fingerprint) -> the record dispatch runs; ``TuningDB.best`` has this signature.
BestLookup = Callable[[str, str], "TuningRecord | None"]


def signature_text(record: TuningRecord) -> str:
    """The inputs of a record's workload as people read them: ``float32[2048, 1024], float32[1024]``."""
    return ", ".join(f"{s.dtype}{list(s.shape)}" for s in record.signature)


def _workload_title(records: Sequence[TuningRecord]) -> str:
    """The heading of a workload's section: its human name where records carry one, else its inputs."""
    for r in records:
        name = getattr(r, "name", None)
        if name:
            return str(name)
    return signature_text(records[0])


def best_of(records: Iterable[TuningRecord]) -> TuningRecord | None:
    """``TuningDB.best``'s answer computed over ``records``: the one definition, ``kernelgen.db.verdict``."""
    return verdict(records)


@dataclass(frozen=True)
class TrialPoint:
    """One search trial as plotted: its number in measuring order (from 1, all implementations together),
    its record and the fastest ok median of the trials up to and including it (None before the first)."""

    number: int
    record: TuningRecord
    best_so_far: float | None

    @property
    def time(self) -> float | None:
        t = self.record.measurement.time
        return None if t is None else t.median


@dataclass
class WorkloadSummary:
    """The records of one workload on one target, and everything the report derives from them."""

    workload_key: str
    target_fingerprint: str
    title: str
    signature: str
    records: list[TuningRecord]  # oldest first
    best: TuningRecord | None  # what dispatch runs (``TuningDB.best``): the ★ of the plot and the tables
    points: list[TrialPoint] = field(init=False)

    def __post_init__(self) -> None:
        self.points = []
        fastest: float | None = None
        for r in self.records:
            if r.evidence is not Evidence.TRIAL:  # a confirmation: plotted apart, after the search
                continue
            t = r.measurement.time
            if t is not None and (fastest is None or t.median < fastest):
                fastest = t.median
            self.points.append(TrialPoint(len(self.points) + 1, r, fastest))

    @property
    def first(self) -> TuningRecord:
        return self.records[0]

    @property
    def device(self) -> str:
        return (self.best or self.first).device

    @property
    def confirmations(self) -> list[TuningRecord]:
        return [r for r in self.records if r.evidence is not Evidence.TRIAL]

    @property
    def by_implementation(self) -> dict[str, list[TuningRecord]]:
        """Search trials per implementation, in measuring order."""
        out: dict[str, list[TuningRecord]] = defaultdict(list)
        for p in self.points:
            out[p.record.implementation].append(p.record)
        return dict(sorted(out.items()))

    @property
    def implementations(self) -> list[str]:
        return sorted({r.implementation for r in self.records})

    @property
    def finalists(self) -> list[TuningRecord]:
        """The records of the rounds that produced ``best`` (it included), fastest first; ``[best]`` when the
        best is a search trial, [] when nothing ran ok."""

        if self.best is None:
            return []
        tag = rounds_tag(self.best)
        if tag is None:
            return [self.best]
        same = [r for r in self.confirmations if rounds_tag(r) == tag and r.measurement.ok]
        return sorted(same, key=lambda r: (r.measurement.time.median, r.record_id))  # type: ignore[union-attr]

    @property
    def references(self) -> tuple[Reference, ...]:
        """The baselines (eager, torch.compile) timed in the best record's rounds."""
        return () if self.best is None else self.best.measurement.references

    @property
    def failures(self) -> list[TrialPoint]:
        """Every failed trial, in measuring order."""
        return [p for p in self.points if not p.record.measurement.ok]

    @property
    def verdict_trusted(self) -> bool:
        """False when the best record's rounds refused a verdict: their ratios are the load's, not the kernels'."""

        return self.best is not None and not is_refused(self.best)

    def parameter_effects(self) -> dict[tuple[str, str], list[tuple[Any, TrialPoint]]]:
        """(implementation, parameter) -> (value, trial) for every ok search trial."""
        out: dict[tuple[str, str], list[tuple[Any, TrialPoint]]] = defaultdict(list)
        for p in self.points:
            if p.record.measurement.ok:
                for name, value in p.record.config.items():
                    out[(p.record.implementation, name)].append((value, p))
        return dict(sorted(out.items()))

    def details(self) -> list[tuple[str, str]]:
        """Device and toolchain facts, as (label, value): what the records say, and the ``Target`` fields
        when this machine is the target the records were measured on."""
        rec = self.best or self.first
        rows = [("device", rec.device), ("backend", rec.backend), ("target family", rec.target_family),
                ("target fingerprint", rec.target_fingerprint)]
        target = target_here(rec.backend, rec.target_fingerprint)
        if target is not None:
            caches = ", ".join(f"{k} {_bytes(v)}" for k, v in target.caches.items())
            rows += [("kind · arch", f"{target.kind} · {target.arch}"), ("cores", str(target.cores)),
                     ("memory", _bytes(target.memory))]
            rows += [("caches", caches)] if caches else []
            rows += [("ISA features", " ".join(target.features))] if target.features else []
            rows += [("limits", ", ".join(f"{k} {v}" for k, v in target.limits.items()))] if target.limits else []
        for key, values in _distinct(r.toolchain.items() for r in self.records).items():
            rows.append((key, " | ".join(values)))
        threads = sorted({r.measurement.threads for r in self.records if r.measurement.threads is not None})
        if threads:
            rows.append(("timing threads", ", ".join(map(str, threads))))
        rows.append(("measured on", ", ".join(sorted({f"{r.provenance.user}@{r.provenance.host}"
                                                      for r in self.records}))))
        return rows


def _distinct(items: Iterable[Iterable[tuple[str, Any]]]) -> dict[str, list[str]]:
    """Each toolchain key with its distinct values, in first-seen order (records of one target share them)."""
    out: dict[str, list[str]] = {}
    for pairs in items:
        for key, value in pairs:
            seen = out.setdefault(key, [])
            if str(value) not in seen:
                seen.append(str(value))
    return dict(sorted(out.items()))


def _bytes(n: Any) -> str:
    n = int(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


@functools.lru_cache(maxsize=8)
def target_here(backend: str, fingerprint: str) -> Any:
    """This machine's ``Target`` for ``backend`` when its fingerprint is ``fingerprint``, else None."""
    try:
        target = Target.current(backend)
    except Exception:  # a backend this machine cannot describe: the records' own fields still show
        return None
    return target if target.fingerprint == fingerprint else None


def summarise(records: Iterable[TuningRecord], best: BestLookup | None = None) -> list[WorkloadSummary]:
    """One summary per (workload, target), ordered by title. ``best(workload_key, fingerprint)`` is the
    lookup dispatch uses (``TuningDB.best``); without one it is computed over ``records`` the same way."""
    groups: dict[tuple[str, str], list[TuningRecord]] = defaultdict(list)
    for r in records:
        groups[(r.workload_key, r.target_fingerprint)].append(r)
    out = []
    for (key, fingerprint), rs in groups.items():
        rs.sort(key=lambda r: (r.provenance.created_at, r.record_id))
        chosen = best(key, fingerprint) if best is not None else best_of(rs)
        out.append(WorkloadSummary(key, fingerprint, _workload_title(rs), signature_text(rs[0]), rs, chosen))
    out.sort(key=lambda s: (s.title, s.signature, s.workload_key, s.target_fingerprint))
    return out


def best_so_far(records: Sequence[TuningRecord]) -> list[float | None]:
    """Fastest ok median after each of ``records`` (None until the first ok one)."""
    best: float | None = None
    out: list[float | None] = []
    for r in records:
        t = r.measurement.time
        if t is not None and (best is None or t.median < best):
            best = t.median
        out.append(best)
    return out


__all__ = ["BestLookup", "TrialPoint", "WorkloadSummary", "best_of", "best_so_far", "signature_text", "summarise",
           "target_here"]
