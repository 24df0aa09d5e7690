"""Builders of ``TuningRecord`` values for tests (reusable by any helper's tests).

Every builder is deterministic: the same arguments give the same record (and ``record_id``); vary
``seed`` or ``config`` to get distinct records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert, inspect

from kernelgen.ir.values import (Config, FrozenMap, Measurement, Provenance, Status, TensorSpec, TimeStats,
                                 TuningRecord, canonical_json)

TOOLCHAIN = {"kernelgen": "0.1.0", "torch": "2.13.0", "triton": "3.9.0", "compiler": "g++ 12.2.0"}
TARGET = "fp-cpu-zen3-a"
FAMILY = "cpp:cpu:x86_64:avx2"


def record(
    *,
    workload: str = "wk-bias-gelu-1024x1024",
    family: str = "wf-bias-gelu",
    shape: tuple[int, ...] = (1024, 1024),
    dtype: str = "float32",
    implementation: str = "pointwise",
    implementation_hash: str = "impl-h1",
    target: str = TARGET,
    target_family: str = FAMILY,
    toolchain: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    status: Status | str = Status.OK,
    median: float = 1e-4,
    seed: int = 0,
    created_at: float = 1_700_000_000.0,
    host: str = "test-host",
    user: str = "tester",
    kernelgen_version: str = "0.1.0",
    message: str = "",
    name: str | None = None,
    evidence: Any = None,
) -> TuningRecord:
    """One record; ``status`` other than ok gives a failure measurement (no time statistics)."""
    status = Status(status)
    cfg = Config(config if config is not None else {"BLOCK": 64, "seed": seed})
    if status is Status.OK:
        measurement = Measurement(cfg, status, TimeStats(median=median, min=median * 0.95, spread=0.02, repeats=10),
                                  message=message)
    else:
        measurement = Measurement.failure(cfg, status, f"{status.value} for seed {seed}")
    tc = dict(TOOLCHAIN if toolchain is None else toolchain)
    return TuningRecord(
        workload_key=workload,
        workload_family=family,
        signature=(TensorSpec(shape, dtype), TensorSpec(shape[-1:], dtype)),
        implementation=implementation,
        implementation_hash=implementation_hash,
        backend="cpp",
        target_fingerprint=target,
        target_family=target_family,
        device="AMD EPYC test",
        toolchain=FrozenMap(tc),
        measurement=measurement,
        provenance=Provenance(host=host, user=user, kernelgen_version=kernelgen_version, created_at=created_at),
        name=name,
        evidence=evidence,
    )


def many(n: int, *, prefix: str = "r", workloads: int = 10, targets: int = 2, **kwargs: Any) -> list[TuningRecord]:
    """``n`` distinct records spread over ``workloads`` workloads and ``targets`` targets; every 7th fails."""
    out = []
    for i in range(n):
        status = Status.COMPILE_ERROR if i % 7 == 3 else Status.OK
        out.append(record(
            workload=f"wk-{prefix}-{i % workloads}", target=f"{TARGET}-{i % targets}", seed=i,
            config={"BLOCK": 16 << (i % 4), "i": i, "p": prefix}, status=status,
            median=1e-5 * (1 + (i * 7919) % 997), created_at=1_700_000_000.0 + i, **kwargs))
    return out


def database_at(url: str, revision: str, records: Iterable[TuningRecord] = ()) -> None:
    """A database as an older kernelgen left it: migrated only up to ``revision``, holding ``records``."""
    from kernelgen.db.engine import make_engine, parse_url
    from kernelgen.db.models import RecordRow, row_values
    from kernelgen.db.schema import upgrade

    records = list(records)
    parsed = parse_url(url)
    engine = make_engine(parsed, read_only=False)
    upgrade(engine, parsed, revision)
    with engine.begin() as conn:
        # Only the columns that schema had: newer ones (e.g. evidence, schema 3) do not exist yet.
        have = {c["name"] for c in inspect(conn).get_columns(RecordRow.__tablename__)}
        rows = [{k: v for k, v in row_values(r).items() if k in have} for r in records]
        if "name" not in have:  # before schema 4 the stored record had neither name nor evidence
            for row, r in zip(rows, records):
                data = r.to_json()
                data.pop("name"), data.pop("evidence")
                row["data"] = canonical_json(data)
        if rows:
            conn.execute(insert(RecordRow.__table__), rows)
    engine.dispose()
