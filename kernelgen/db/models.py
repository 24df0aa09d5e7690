"""The SQLAlchemy model of the tuning database: one row per measured trial, keyed by its content.

The row holds the columns the queries filter and sort on, plus the record's full canonical JSON so a
record round-trips losslessly. This module describes the schema at the newest migration (``head``); the
alembic migrations under ``kernelgen/db/migrations`` build it, and a test checks the two agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from kernelgen.ir.values import TuningRecord, canonical_json, content_hash

# Alembic's default table is ``alembic_version``, which Optuna's storage uses in the same database.
VERSION_TABLE = "kernelgen_alembic_version"
RECORDS_TABLE = "kernelgen_records"


class Base(DeclarativeBase):
    pass


class RecordRow(Base):
    """One ``TuningRecord``. ``record_id`` (content hash without provenance) is the primary key."""

    __tablename__ = RECORDS_TABLE

    record_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workload_key: Mapped[str] = mapped_column(String(128))
    workload_family: Mapped[str] = mapped_column(String(128))
    implementation: Mapped[str] = mapped_column(String(255))
    implementation_hash: Mapped[str] = mapped_column(String(128))
    backend: Mapped[str] = mapped_column(String(64))
    target_fingerprint: Mapped[str] = mapped_column(String(128))
    target_family: Mapped[str] = mapped_column(String(255))
    toolchain_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    # NULL unless status is ok; best() sorts on it.
    time_median: Mapped[float | None] = mapped_column(Float, nullable=True)
    # kernelgen.ir.values.Evidence (schema 3): best() ranks on it before time_median.
    evidence: Mapped[int] = mapped_column(Integer, server_default="2")
    # The workload's human name (schema 4): `db show --workload NAME` filters on it; NULL in older rows.
    name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    kernelgen_version: Mapped[str] = mapped_column(String(64))
    data: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        # best(): equality on the first three columns, then already in (evidence, time, record_id) order, so
        # the first row that passes the optional implementation/toolchain filters is the answer.
        Index("ix_kgrec_best", "workload_key", "target_fingerprint", "status", "evidence", "time_median",
              "record_id"),
        # nearest() tier 1 and records(target=family).
        Index("ix_kgrec_workload_family_target", "workload_key", "target_family"),
        # nearest() tier 2 (schema 2): neighbouring shapes of one graph on one target.
        Index("ix_kgrec_neighbours", "workload_family", "target_fingerprint", "status"),
        Index("ix_kgrec_created", "created_at"),
        Index("ix_kgrec_name", "name"),
    )


def toolchain_hash(toolchain: Any) -> str:
    """The hash best(toolchain=...) matches on: equal mappings give equal hashes, key order aside."""
    return content_hash(dict(toolchain), 32)


def record_kernelgen_version(record: TuningRecord) -> str:
    """The kernelgen version a record was measured with (prune criterion)."""
    version = record.toolchain.get("kernelgen")
    return str(version) if version is not None else record.provenance.kernelgen_version


def row_values(record: TuningRecord, record_id: str | None = None) -> dict[str, Any]:
    """The column values of one record (what INSERT writes); pass ``record_id`` if already computed."""
    m = record.measurement
    return {
        "record_id": record_id or record.record_id,
        "workload_key": record.workload_key,
        "workload_family": record.workload_family,
        "implementation": record.implementation,
        "implementation_hash": record.implementation_hash,
        "backend": record.backend,
        "target_fingerprint": record.target_fingerprint,
        "target_family": record.target_family,
        "toolchain_hash": toolchain_hash(record.toolchain),
        "status": m.status.value,
        "time_median": m.time.median if m.time is not None else None,
        "evidence": int(record.evidence),
        "name": record.name,
        "created_at": record.provenance.created_at,
        "kernelgen_version": record_kernelgen_version(record),
        "data": canonical_json(record.to_json()),
    }
