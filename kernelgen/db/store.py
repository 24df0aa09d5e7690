"""``TuningDB``: every measured trial of every workload, in one SQLAlchemy database (SQLite or a server).

All writes go through ``engine.transaction`` (commit or roll back); inserts are idempotent on the
record's content identity (``record_id``) with ``INSERT ... ON CONFLICT DO NOTHING``, so two processes
committing the same record both succeed and it is stored once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import and_, bindparam, column, delete, func, insert, or_, select, table, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from kernelgen.db import jsonl
from kernelgen.db.engine import make_engine, parse_url, shown, sqlite_path, transaction
from kernelgen.db.limits import checked_row
from kernelgen.db.locks import named_lock
from kernelgen.db.models import VERSION_TABLE, RecordRow, toolchain_hash
from kernelgen.db.nearest import NearestGroups, rank
from kernelgen.db.schema import current_revision, ensure_schema, schema_number
from kernelgen.errors import DatabaseError
from kernelgen.input_limits import MAX_RECORDS_ENV, max_records, too_large
from kernelgen.ir.values import Evidence, Status, TensorSpec, TuningRecord
from kernelgen.paths import default_db_url

log = logging.getLogger(__name__)
T = RecordRow.__table__
V = table(VERSION_TABLE, column("version_num"))
_CHUNK = 500  # rows per INSERT: well under SQLite's bound-parameter limit
_PAGE = 2000  # rows per read page of records(): short read transactions, bounded memory


def _decode(data: str) -> TuningRecord:
    return TuningRecord.from_json(json.loads(data))


def _bounded(records: Iterable[TuningRecord], where: str) -> list[TuningRecord]:
    """``records`` as a list, at most ``KERNELGEN_MAX_IMPORT_RECORDS`` of them (a merge holds them all at once)."""
    limit, out = max_records(), []
    for record in records:
        if len(out) >= limit:
            raise DatabaseError(str(too_large(where, "records", limit, MAX_RECORDS_ENV)))
        out.append(record)
    return out


def _workload_clause(workload: str, by_name: bool):
    """Records of the workload named ``workload`` (``by_name``), else whose key is or starts with it."""
    if by_name:
        return T.c.name == workload
    escaped = workload.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return or_(T.c.workload_key == workload, T.c.workload_key.like(escaped + "%", escape="\\"))


def _target_clause(target: str):
    return or_(T.c.target_fingerprint == target, T.c.target_family == target)


class TuningDB:
    """A tuning database at one SQLAlchemy URL.

    Contract: ``commit``/``commit_many`` are idempotent on ``record_id`` and atomic (a batch is stored
    whole or not at all); reads return ``TuningRecord`` values equal to what was committed. Nothing is
    deleted except by an explicit ``prune``. Every failure is a ``DatabaseError`` subclass with a one-line
    message. Safe to use from several processes at once; one instance may be shared by threads (each
    call takes its own pooled connection), except a ``sqlite://`` memory database (one connection).
    """

    def __init__(self, url: str | None = None, *, read_only: bool = False) -> None:
        self._url = parse_url(url if url is not None else default_db_url())
        self.url: str = shown(self._url)
        self.read_only = read_only
        self._engine = make_engine(self._url, read_only=read_only)
        self._upsert: Any = None
        self._best_sql: dict[tuple[int, bool, bool], tuple[str, Sequence[str] | None, dict[str, Any]]] = {}
        self.damaged_rows: set[str] = set()  # rows records() skipped: content changed outside kernelgen
        try:
            ensure_schema(self._engine, self._url, read_only=read_only)
        except BaseException:
            self._engine.dispose()
            raise

    # -- plumbing ---------------------------------------------------------------------------------------
    @property
    def optuna_storage_url(self) -> str:
        """The URL Optuna's RDBStorage should use: the same database (password included)."""
        return self._url.render_as_string(hide_password=False)

    def _tx(self, *, write: bool = False, single_read: bool = False):
        return transaction(self._engine, self._url, write=write, read_only=self.read_only, single_read=single_read)

    def files(self) -> dict[Path, str]:
        """The files that hold this database (a SQLite file, its -wal, -shm and writers' lock; none for a
        server), each mapped to how a message names it: what an output path must never replace."""
        path = sqlite_path(self._url)
        if path is None:
            return {}
        return {Path(f"{path}{suffix}"): f"{'the' if not suffix else 'a ' + suffix + ' file of the'} tuning "
                f"database {self.url}" for suffix in ("", "-wal", "-shm", "-lock")}

    def lock(self, name: str, wait: bool = True):
        """A context manager holding the exclusive lock ``name`` of this database: every process and host
        using it waits for the holder (see ``kernelgen.db.locks``). Released when the holder dies. It yields
        whether the lock is held: ``wait=False`` does not wait for a holder elsewhere and yields False."""
        return named_lock(self._url, name, self._engine, wait)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> "TuningDB":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDB({self.url!r}{', read_only=True' if self.read_only else ''})"

    # -- writes -----------------------------------------------------------------------------------------
    def commit(self, record: TuningRecord) -> bool:
        """Store one record; True if it was new, False if an identical record was already present."""
        return self.commit_many([record]) == 1

    def commit_many(self, records: Iterable[TuningRecord]) -> int:
        """Store records in one transaction; returns how many were new."""
        rows: dict[str, dict[str, Any]] = {}
        for record in records:
            if not isinstance(record, TuningRecord):
                raise TypeError(f"commit needs TuningRecord values, got {type(record).__name__}")
            try:
                rid = record.record_id  # a content hash: compute it once per record
                if rid not in rows:
                    rows[rid] = checked_row(record, rid)
            except ValueError as err:  # validated before any write, so a batch is never half refused
                raise DatabaseError(f"a record of workload {str(record.workload_key)[:40]!r} cannot be stored: "
                                    f"{' '.join(str(err).split())}; nothing was written") from None
        if not rows:
            with self._tx(write=True):  # still refuse a read-only database, even with nothing to write
                return 0
        values = list(rows.values())
        with self._tx(write=True) as conn:
            return sum(self._insert(conn, values[i:i + _CHUNK]) for i in range(0, len(values), _CHUNK))

    def _insert(self, conn: Connection, rows: list[dict[str, Any]]) -> int:
        dialect = conn.dialect.name
        if dialect in ("sqlite", "postgresql") and conn.dialect.insert_returning:  # SQLite >= 3.35
            if self._upsert is None:  # built once: statement construction costs more than a small insert
                if dialect == "sqlite":
                    from sqlalchemy.dialects.sqlite import insert as dialect_insert
                else:
                    from sqlalchemy.dialects.postgresql import insert as dialect_insert
                self._upsert = (dialect_insert(T).on_conflict_do_nothing(index_elements=["record_id"])
                                .returning(T.c.record_id))
            return len(conn.execute(self._upsert, rows).all())
        # Other dialects: skip known ids, and count a concurrent identical insert as already present.
        present = set(conn.scalars(select(T.c.record_id).where(T.c.record_id.in_([r["record_id"] for r in rows]))))
        added = 0
        for row in rows:
            if row["record_id"] in present:
                continue
            try:
                with conn.begin_nested():
                    conn.execute(insert(T), [row])
                added += 1
            except sa_exc.IntegrityError:
                pass
        return added

    def check_writable(self) -> None:
        """Raise ReadOnlyDatabaseError (one line, naming the database) when nothing can be written to it: a
        tuning checks this before its first trial, instead of failing in Optuna's tables with their message."""
        # A write that changes nothing: SQLite reports "readonly" only once a page is written, PostgreSQL refuses
        # any write in a read-only transaction; either becomes ReadOnlyDatabaseError (engine.translate).
        with self._tx(write=True) as conn:
            conn.execute(update(V).values(version_num=V.c.version_num))

    def check_integrity(self, action: str) -> None:
        """Raise DatabaseError when SQLite's ``quick_check`` finds a damaged page (a server checks itself):
        a bulk write into a damaged file "succeeds" and may land on the damage. ``action`` is what was refused."""
        if self._engine.dialect.name != "sqlite":
            return
        with self._tx(single_read=True) as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check").all()]
        if rows != ["ok"]:
            first = " ".join(rows[0].replace("*** in database main ***", "").split())
            raise DatabaseError(f"{self.url} is damaged (SQLite quick_check: {first}); nothing was {action}: restore "
                                "it from a backup, or export what is readable and import that into a new database")

    def import_file(self, path: str | os.PathLike) -> tuple[int, int]:
        """Import a ``kernelgen db export`` file, all or nothing; returns (added, already present)."""
        records = jsonl.read_records(path)  # validates every line before the database is touched
        self.check_integrity("imported")
        unique = len({r.record_id for r in records})
        added = self.commit_many(records)
        return added, unique - added

    def merge(self, source: "str | os.PathLike | TuningDB | Any") -> tuple[int, int]:
        """Add every record of ``source`` (an export file, a database URL or an open database) that is not
        here yet, in one transaction; returns (added, already present). Provenance travels with each record.
        """
        if isinstance(source, (str, os.PathLike)) and "://" not in str(source):
            return self.import_file(source)
        if isinstance(source, (str, os.PathLike)):
            other = TuningDB(str(source), read_only=True)
            try:
                records = _bounded(other.records(), other.url)
            finally:
                other.close()
        elif hasattr(source, "records"):
            records = _bounded(source.records(), str(getattr(source, "url", source)))
        else:
            raise DatabaseError(f"cannot merge from {source!r}: pass an export file, a database URL or a TuningDB")
        self.check_integrity("merged")
        added = self.commit_many(records)
        return added, len({r.record_id for r in records}) - added

    def prune(self, *, older_than_days: float | None = None, kernelgen_version: str | None = None,
              target: str | None = None) -> int:
        """Delete the records matching *all* given criteria; refuses to run with none. Returns the count."""
        where = self._prune_where(older_than_days, kernelgen_version, target)
        with self._tx(write=True) as conn:
            return conn.execute(delete(T).where(where)).rowcount or 0

    def prune_summary(self, *, older_than_days: float | None = None, kernelgen_version: str | None = None,
                      target: str | None = None) -> list[dict[str, Any]]:
        """What ``prune`` with the same criteria would delete, grouped by target family, version, implementation."""
        where = self._prune_where(older_than_days, kernelgen_version, target)
        cols = (T.c.target_family, T.c.kernelgen_version, T.c.implementation)
        with self._tx() as conn:
            rows = conn.execute(select(*cols, func.count()).where(where).group_by(*cols).order_by(*cols)).all()
        return [{"target_family": f, "kernelgen_version": v, "implementation": i, "records": n} for f, v, i, n in rows]

    @staticmethod
    def _prune_where(older_than_days: float | None, kernelgen_version: str | None, target: str | None):
        clauses = []
        if older_than_days is not None:
            if not math.isfinite(older_than_days) or older_than_days < 0:
                raise DatabaseError(f"--older-than {older_than_days} is not an age: give a finite number of days >= 0; "
                                    "nothing was removed")
            clauses.append(T.c.created_at < time.time() - older_than_days * 86400.0)
        if kernelgen_version is not None:
            clauses.append(T.c.kernelgen_version == kernelgen_version)
        if target is not None:
            clauses.append(_target_clause(target))
        if not clauses:
            raise DatabaseError("prune needs at least one criterion (--older-than DAYS, --kernelgen-version V "
                                "or --target T); nothing was removed")
        return and_(*clauses)

    # -- reads ------------------------------------------------------------------------------------------
    def best(self, workload_key: str, target_fingerprint: str, *, implementations: Mapping[str, str] | None = None,
             toolchain: Mapping[str, str] | None = None) -> TuningRecord | None:
        """The record dispatch should run for the workload on exactly this target: the newest one the tuner
        declared best, else the fastest confirmed finalist, else the fastest ok trial (ties: smallest
        record_id). See ``kernelgen.ir.values.Evidence``: a lucky single sample never outranks a verdict. This
        is ``kernelgen.db.verdict.verdict`` over those records, run in SQL on an index.

        ``implementations`` (name -> implementation hash) restricts to those exact pairs; ``toolchain``
        restricts to records measured with exactly that toolchain mapping.
        """
        if implementations is not None and not implementations:
            return None
        pairs = sorted(implementations.items()) if implementations is not None else []
        params: dict[str, Any] = {"wk": workload_key, "tf": target_fingerprint}
        for i, (name, digest) in enumerate(pairs):
            params[f"in{i}"], params[f"ih{i}"] = name, digest
        if toolchain is not None:
            params["tc"] = toolchain_hash(toolchain)
        shape = (len(pairs) if implementations is not None else -1, toolchain is not None)
        with self._tx(single_read=True) as conn:
            # In index order (evidence, time, record_id): no sort. Only when the first row is a verdict can
            # a newer verdict exist, and only then is the (few-row) newest-verdict query run.
            row = self._run_best(conn, shape, False, params)
            if row is not None and row[1] == int(Evidence.DECLARED):
                row = self._run_best(conn, shape, True, params)
        return None if row is None else _decode(row[0])

    def _run_best(self, conn: Connection, shape: tuple[int, bool], newest_verdict: bool,
                  params: dict[str, Any]) -> Any:
        sql, order, defaults = self._prepared_best(*shape, newest_verdict)
        values = {**defaults, **params}
        return conn.exec_driver_sql(sql, tuple(values[n] for n in order) if order else values).first()

    def _prepared_best(self, n_pairs: int, with_toolchain: bool,
                       newest_verdict: bool) -> tuple[str, Sequence[str] | None, dict[str, Any]]:
        """best()'s SQL compiled once per filter shape: the hot lookup skips SQLAlchemy's statement building.

        ``newest_verdict``: only declared records, newest first (a later tuning re-measured its rivals side
        by side, so the latest verdict stands); else every ok record in ``ix_kgrec_best`` order.
        """
        key = (n_pairs, with_toolchain, newest_verdict)
        hit = self._best_sql.get(key)
        if hit is None:
            stmt = select(T.c.data, T.c.evidence).where(T.c.workload_key == bindparam("wk"),
                                                        T.c.target_fingerprint == bindparam("tf"),
                                                        T.c.status == Status.OK.value)
            if n_pairs >= 0:
                stmt = stmt.where(or_(*(and_(T.c.implementation == bindparam(f"in{i}"),
                                             T.c.implementation_hash == bindparam(f"ih{i}")) for i in range(n_pairs))))
            if with_toolchain:
                stmt = stmt.where(T.c.toolchain_hash == bindparam("tc"))
            if newest_verdict:
                stmt = stmt.where(T.c.evidence == int(Evidence.DECLARED))
                order = (T.c.created_at.desc(), T.c.time_median, T.c.record_id)  # verdict.best_key's order
            else:
                order = (T.c.evidence, T.c.time_median, T.c.record_id)
            compiled = stmt.order_by(*order).limit(1).compile(dialect=self._engine.dialect)
            defaults = {k: v for k, v in compiled.params.items() if v is not None}
            hit = self._best_sql[key] = (str(compiled), compiled.positiontup, defaults)
        return hit

    def trials(self, workload_key: str, target_fingerprint: str, *, implementation: str | None = None,
               implementation_hash: str | None = None) -> list[TuningRecord]:
        """Every trial (failures included) of the workload on this target, oldest first."""
        stmt = select(T.c.data).where(T.c.workload_key == workload_key, T.c.target_fingerprint == target_fingerprint)
        if implementation is not None:
            stmt = stmt.where(T.c.implementation == implementation)
        if implementation_hash is not None:
            stmt = stmt.where(T.c.implementation_hash == implementation_hash)
        with self._tx() as conn:
            rows = conn.scalars(stmt.order_by(T.c.created_at, T.c.record_id)).all()
        return [_decode(d) for d in rows]

    def nearest_groups(self, *, workload_key: str, workload_family: str, target_fingerprint: str,
                       target_family: str, implementation: str | None = None) -> NearestGroups:
        """The warm-start candidates before ranking (see ``kernelgen.db.nearest``)."""
        ok = T.c.status == Status.OK.value
        impl = [T.c.implementation == implementation] if implementation is not None else []
        same_family = self._fastest_per(T.c.target_fingerprint, T.c.workload_key == workload_key,
                                        T.c.target_family == target_family,
                                        T.c.target_fingerprint != target_fingerprint, ok, *impl)
        neighbours = self._fastest_per(T.c.workload_key, T.c.workload_family == workload_family,
                                       T.c.target_fingerprint == target_fingerprint,
                                       T.c.workload_key != workload_key, ok, *impl)
        return NearestGroups(same_family={r.target_fingerprint: r for r in same_family},
                             neighbours={r.workload_key: r for r in neighbours})

    def _fastest_per(self, group_column, *where) -> list[TuningRecord]:
        rn = func.row_number().over(partition_by=group_column, order_by=(T.c.time_median, T.c.record_id))
        inner = select(T.c.data, rn.label("rn")).where(*where).subquery()
        with self._tx() as conn:
            rows = conn.scalars(select(inner.c.data).where(inner.c.rn == 1)).all()
        return [_decode(d) for d in rows]

    def nearest(self, *, workload_key: str, workload_family: str, target_fingerprint: str, target_family: str,
                signature: Sequence[TensorSpec], implementation: str | None = None,
                limit: int = 5) -> list[TuningRecord]:
        """Warm-start candidates, best first: the same workload on sibling targets of the family, then
        neighbouring shapes of the same graph on this target by shape distance. Never the exact pair."""
        groups = self.nearest_groups(workload_key=workload_key, workload_family=workload_family,
                                     target_fingerprint=target_fingerprint, target_family=target_family,
                                     implementation=implementation)
        return rank(groups, signature, limit)

    def has_name(self, name: str) -> bool:
        """Whether some record carries the workload name ``name``."""
        with self._tx() as conn:
            return conn.scalar(select(T.c.record_id).where(T.c.name == name).limit(1)) is not None

    def records(self, *, target: str | None = None, workload: str | None = None,
                workload_is_name: bool | None = None) -> Iterator[TuningRecord]:
        """Every record (ascending record_id); ``target`` matches fingerprint or family. ``workload`` is a
        workload name or a key (prefix): the name wins, i.e. when some record carries that name only the
        records of that name are returned, else those whose key is or starts with it (``workload_is_name``
        decides instead when given). Reads in pages, so it is safe to write to the database while iterating."""
        clauses = []
        if target is not None:
            clauses.append(_target_clause(target))
        if workload is not None:
            by_name = self.has_name(workload) if workload_is_name is None else workload_is_name
            clauses.append(_workload_clause(workload, by_name))
        last = ""
        while True:
            stmt = (select(T.c.record_id, T.c.data).where(T.c.record_id > last, *clauses)
                    .order_by(T.c.record_id).limit(_PAGE))
            with self._tx() as conn:
                page = conn.execute(stmt).all()
            for rid, data in page:
                record = _decode(data)
                if record.record_id != rid:
                    # Changed outside kernelgen (identity is content): not exported, shown or merged as if it
                    # were the record its id names.
                    log.warning("%s: row %s holds a record whose content hashes to %s (changed outside "
                                "kernelgen); skipped: delete the row or restore the database", self.url, rid,
                                record.record_id)
                    self.damaged_rows.add(rid)
                    continue
                yield record
            if len(page) < _PAGE:
                return
            last = page[-1][0]

    def count(self) -> int:
        with self._tx() as conn:
            return conn.scalar(select(func.count()).select_from(T)) or 0

    def stats(self) -> dict[str, Any]:
        """Counts by status, target and kernelgen version, distinct workloads, time range, schema."""
        with self._tx() as conn:
            total = conn.scalar(select(func.count()).select_from(T)) or 0
            by_status = dict(conn.execute(select(T.c.status, func.count()).group_by(T.c.status)).all())
            targets = conn.execute(select(T.c.target_family, T.c.target_fingerprint, func.count())
                                   .group_by(T.c.target_family, T.c.target_fingerprint)
                                   .order_by(T.c.target_family, T.c.target_fingerprint)).all()
            versions = dict(conn.execute(select(T.c.kernelgen_version, func.count())
                                         .group_by(T.c.kernelgen_version)).all())
            workloads = conn.scalar(select(func.count(func.distinct(T.c.workload_key)))) or 0
            families = conn.scalar(select(func.count(func.distinct(T.c.workload_family)))) or 0
            impls = conn.scalar(select(func.count(func.distinct(T.c.implementation)))) or 0
            oldest, newest = conn.execute(select(func.min(T.c.created_at), func.max(T.c.created_at))).one()
            revision = current_revision(conn)
        return {
            "url": self.url, "read_only": self.read_only, "schema": schema_number(revision),
            "records": total, "by_status": dict(sorted(by_status.items())), "workloads": workloads,
            "workload_families": families, "implementations": impls,
            "targets": [{"target_family": f, "target_fingerprint": fp, "records": n} for f, fp, n in targets],
            "kernelgen_versions": dict(sorted(versions.items())), "oldest": oldest, "newest": newest,
        }

    def export(self, path: str | os.PathLike, *, target: str | None = None, workload: str | None = None) -> int:
        """Write the matching records to a JSON-lines file (atomically); returns the count. Refuses a path that
        is this database (or any SQLite database) instead of replacing it."""
        return jsonl.write_records(path, self.records(target=target, workload=workload), protected=self.files())
