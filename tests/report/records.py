"""One small, realistic workload's records for the report tests: search trials of two implementations
(failures with messages among them), then the confirmation rounds that declared a verdict, timed beside
eager PyTorch and torch.compile (which Inductor failed to compile in one variant)."""

from __future__ import annotations

from dataclasses import replace

from kernelgen.ir.values import CONFIRM_PREFIX, DECLARED_PREFIX, Evidence, Reference, Status, TimeStats, TuningRecord
from tests.db.factories import record

T0 = 1_700_000_000.0
TAG = "0a1b2c3d"
EAGER_TIME = 3.0e-4
COMPILED_TIME = 9.0e-5

# (implementation, config, status, median seconds, message)
SEARCH = [
    ("pointwise", {"block": 1024, "simd": True}, "ok", 2.0e-4, ""),
    ("pointwise", {"block": 4096, "simd": True}, "ok", 1.2e-4, ""),
    ("pointwise", {"block": 16384, "simd": False}, "compile_error", 0.0,
     "g++ failed: error: 'vfloat16' was not declared in this scope (kernel.cpp:12)"),
    ("custom:bias_gelu/cpp", {"rows_per_task": 4}, "ok", 1.5e-4, ""),
    ("pointwise", {"block": 8192, "simd": True}, "ok", 8.0e-5, ""),
    ("custom:bias_gelu/cpp", {"rows_per_task": 64}, "wrong_result", 0.0,
     "output 0: 12 of 524288 elements outside rtol=0.001 atol=0.0001; first at [0, 7]"),
    ("pointwise", {"block": 2048, "simd": False}, "ok", 6.0e-4, ""),
    ("pointwise", {"block": 8192, "simd": False}, "timeout", 0.0, "no answer within 60 s; the worker was killed"),
]


def _stats(t: float) -> TimeStats:
    return TimeStats(median=t, min=t * 0.97, spread=0.02, repeats=20)


def _with(rec: TuningRecord, *, median: float | None = None, message: str, status: str = "ok",
          references: tuple[Reference, ...] = ()) -> TuningRecord:
    m = rec.measurement
    if status != "ok":
        return replace(rec, measurement=replace(m, message=message, threads=2))
    # evidence is a field of its own (schema 4); the message prefix names it for people reading the record
    return replace(rec, measurement=replace(m, time=_stats(median), message=message, threads=2,  # type: ignore[arg-type]
                                            references=references), evidence=Evidence.of(message))


def workload_records(*, compiled_fails: bool = False, workload: str = "wk-bias-gelu") -> list[TuningRecord]:
    """Search trials in order, then the verdict's rounds: the winner (declared), a rival and the default."""
    out = []
    for i, (impl, config, status, median, message) in enumerate(SEARCH):
        base = record(workload=workload, implementation=impl, config=config, status=Status(status),
                      median=median or 1.0, created_at=T0 + i)
        out.append(_with(base, median=median, message=message, status=status))
    compiled = (Reference("torch.compile", None, "torch.compile failed: InductorError: CppCompileError: no compiler")
                if compiled_fails else Reference("torch.compile", _stats(COMPILED_TIME)))
    refs = (Reference("eager", _stats(EAGER_TIME)), compiled)
    rounds = f"fastest round median of 3 interleaved rounds (rounds {TAG}) against the winners of 2 implementations"
    for k, (impl, config, median, prefix) in enumerate([
            ("pointwise", {"block": 8192, "simd": True}, 7.5e-5, DECLARED_PREFIX),
            ("pointwise", {"block": 4096, "simd": True}, 1.1e-4, CONFIRM_PREFIX),
            ("custom:bias_gelu/cpp", {"rows_per_task": 4}, 1.4e-4, CONFIRM_PREFIX)]):
        base = record(workload=workload, implementation=impl, config=config, created_at=T0 + 100 + k)
        out.append(_with(base, median=median, message=f"{prefix}: {rounds}", references=refs))
    return out
