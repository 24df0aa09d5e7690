"""The seam values: frozen, hashable, JSON round-trippable, and validating what they are given."""

from __future__ import annotations

import json

import pytest

from kernelgen.ir.values import (Config, FrozenMap, Measurement, Provenance, Status, TensorSpec, TimeStats,
                                 TuningRecord)


def _record(status: Status = Status.OK) -> TuningRecord:
    config = Config(BLOCK=64, unroll=True)
    time = TimeStats.from_samples([1e-3, 2e-3, 3e-3]) if status is Status.OK else None
    measurement = Measurement(config, status, time, "" if time else "boom", threads=2)
    return TuningRecord(
        workload_key="w" * 24, workload_family="f" * 24, signature=(TensorSpec((4, 8), "float32"),),
        implementation="pointwise", implementation_hash="h" * 16, backend="cpp", target_fingerprint="t" * 24,
        target_family="cpp:cpu:x86_64:avx2", device="AMD EPYC", toolchain=FrozenMap(torch="2.13.0"),
        measurement=measurement, provenance=Provenance("host", "me", "0.1.0", 1.5),
    )


@pytest.mark.parametrize("status", [Status.OK, Status.TIMEOUT])
def test_record_json_round_trip_is_lossless(status: Status) -> None:
    record = _record(status)
    again = TuningRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record
    assert again.record_id == record.record_id


def test_record_id_ignores_provenance_but_not_content() -> None:
    record = _record()
    moved = TuningRecord(**{**record.__dict__, "provenance": Provenance("other", "you", "0.2.0", 9.0)})
    assert moved.record_id == record.record_id
    other_config = TuningRecord(**{**record.__dict__, "measurement": Measurement(
        Config(BLOCK=128, unroll=True), Status.OK, record.measurement.time)})
    assert other_config.record_id != record.record_id


def test_config_is_hashable_and_order_independent() -> None:
    assert Config(a=1, b=2) == Config(b=2, a=1)
    assert hash(Config(a=1, b=2)) == hash(Config(b=2, a=1))
    assert len({Config(a=1), Config(a=1), Config(a=2)}) == 2
    with pytest.raises(ValueError, match="JSON scalar"):
        Config(a=[1, 2])


def test_tensor_spec_normalises_contiguous_strides() -> None:
    assert TensorSpec((4, 8), "float32", (8, 1)) == TensorSpec((4, 8), "float32")
    assert TensorSpec((4, 8), "float32", (1, 4)).strides == (1, 4)
    with pytest.raises(ValueError, match="dtype"):
        TensorSpec((4,), "complex64")


def test_measurement_requires_time_exactly_when_ok() -> None:
    with pytest.raises(ValueError):
        Measurement(Config(), Status.OK, None)
    with pytest.raises(ValueError):
        Measurement(Config(), Status.TIMEOUT, TimeStats(1.0, 1.0, 0.0, 1))


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("workload_key"),
    lambda d: d["measurement"].update(status="exploded"),
    lambda d: d["signature"][0].update(shape="4x8"),
    lambda d: d["measurement"]["time"].update(median=-1),
    lambda d: d["toolchain"].update(torch={"nested": 1}),
])
def test_from_json_rejects_malformed_records(mutate) -> None:
    data = _record().to_json()
    mutate(data)
    with pytest.raises(ValueError):
        TuningRecord.from_json(data)


def test_time_stats_from_samples() -> None:
    stats = TimeStats.from_samples([4.0, 1.0, 2.0, 3.0, 5.0])
    assert stats.median == 3.0 and stats.min == 1.0 and stats.repeats == 5
    assert stats.spread == pytest.approx((4.0 - 2.0) / 3.0)
