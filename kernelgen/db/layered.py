"""``LayeredDB``: a local, writable tuning database over a team database that is only read.

A composition of two ``TuningDB`` values, not a second implementation: reads consult both layers and
combine the answers (the better best record by best()'s own rank, the union of trials and records); every
write goes to the local layer, and the team layer refuses writes itself (it is opened read-only).
"""

from __future__ import annotations

import heapq
import os
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kernelgen.db import jsonl
from kernelgen.db.nearest import NearestGroups, merge_groups, rank
from kernelgen.db.store import TuningDB
from kernelgen.db.verdict import preferred
from kernelgen.ir.values import TensorSpec, TuningRecord


class LayeredDB:
    """Local (read-write) over team (read-only). Same read API as ``TuningDB``; writes go to ``local``.

    What the team database holds is used as if it were local (no re-tuning); a record present in both
    layers is reported once.
    """

    def __init__(self, local: TuningDB, team: TuningDB) -> None:
        self.local = local
        self.team = team

    @property
    def url(self) -> str:
        return self.local.url

    @property
    def team_url(self) -> str:
        return self.team.url

    @property
    def damaged_rows(self) -> set[str]:
        return self.local.damaged_rows | self.team.damaged_rows

    @property
    def read_only(self) -> bool:
        return self.local.read_only

    @property
    def optuna_storage_url(self) -> str:
        return self.local.optuna_storage_url

    def __repr__(self) -> str:
        return f"LayeredDB(local={self.local.url!r}, team={self.team.url!r})"

    def __enter__(self) -> "LayeredDB":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.local.close()
        self.team.close()

    def files(self) -> dict[Path, str]:
        return {**self.team.files(), **self.local.files()}

    def lock(self, name: str, wait: bool = True):
        return self.local.lock(name, wait)  # the team layer is only read: its locks guard nothing of ours

    # -- writes: local layer only -----------------------------------------------------------------------
    def check_writable(self) -> None:
        self.local.check_writable()

    def commit(self, record: TuningRecord) -> bool:
        return self.local.commit(record)

    def commit_many(self, records) -> int:
        return self.local.commit_many(records)

    def import_file(self, path: str | os.PathLike) -> tuple[int, int]:
        return self.local.import_file(path)

    def merge(self, source: Any) -> tuple[int, int]:
        return self.local.merge(source)

    def prune(self, **criteria: Any) -> int:
        return self.local.prune(**criteria)

    def prune_summary(self, **criteria: Any) -> list[dict[str, Any]]:
        return self.local.prune_summary(**criteria)

    # -- reads: both layers -----------------------------------------------------------------------------
    def best(self, workload_key: str, target_fingerprint: str, *, implementations: Mapping[str, str] | None = None,
             toolchain: Mapping[str, str] | None = None) -> TuningRecord | None:
        kwargs = {"implementations": implementations, "toolchain": toolchain}
        return preferred(self.local.best(workload_key, target_fingerprint, **kwargs),
                         self.team.best(workload_key, target_fingerprint, **kwargs))

    def trials(self, workload_key: str, target_fingerprint: str, *, implementation: str | None = None,
               implementation_hash: str | None = None) -> list[TuningRecord]:
        kwargs = {"implementation": implementation, "implementation_hash": implementation_hash}
        seen: dict[str, TuningRecord] = {}
        for layer in (self.local, self.team):
            for record in layer.trials(workload_key, target_fingerprint, **kwargs):
                seen.setdefault(record.record_id, record)
        return sorted(seen.values(), key=lambda r: (r.provenance.created_at, r.record_id))

    def nearest_groups(self, **query: Any) -> NearestGroups:
        return merge_groups(layer.nearest_groups(**query) for layer in (self.local, self.team))

    def nearest(self, *, workload_key: str, workload_family: str, target_fingerprint: str, target_family: str,
                signature: Sequence[TensorSpec], implementation: str | None = None,
                limit: int = 5) -> list[TuningRecord]:
        groups = self.nearest_groups(workload_key=workload_key, workload_family=workload_family,
                                     target_fingerprint=target_fingerprint, target_family=target_family,
                                     implementation=implementation)
        return rank(groups, signature, limit)

    def has_name(self, name: str) -> bool:
        return self.local.has_name(name) or self.team.has_name(name)

    def records(self, *, target: str | None = None, workload: str | None = None,
                workload_is_name: bool | None = None) -> Iterator[TuningRecord]:
        """The union of both layers, ascending record_id, each record once (the local copy wins). A
        ``workload`` name known to either layer selects by name in both (``TuningDB.records``)."""
        if workload is not None and workload_is_name is None:
            workload_is_name = self.has_name(workload)
        streams = [((r.record_id, i, r) for r in layer.records(target=target, workload=workload,
                                                              workload_is_name=workload_is_name))
                   for i, layer in enumerate((self.local, self.team))]
        last = None
        for rid, _layer, record in heapq.merge(*streams):
            if rid != last:
                yield record
                last = rid

    def count(self) -> int:
        return sum(1 for _ in self.records())

    def stats(self) -> dict[str, Any]:
        local, team = self.local.stats(), self.team.stats()
        return {"url": self.local.url, "team_url": self.team.url, "records": self.count(),
                "local": local, "team": team}

    def export(self, path: str | os.PathLike, *, target: str | None = None, workload: str | None = None) -> int:
        return jsonl.write_records(path, self.records(target=target, workload=workload), protected=self.files())
