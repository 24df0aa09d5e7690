"""``kernelgen report --model pkg.module:make``: what a tuning database does for a model on this machine.

The model is captured and one step profiled now (``kernelgen.tune.model.capture``): its distinct regions with
their share of eager's step; then, per region, the record dispatch runs (``TuningDB.best`` over the same
candidates dispatch has) and its speedup over the region's own ATen ops, measured in the record's confirmation
rounds (the ``aten`` candidate's record of those rounds, else the eager reference they timed; for a finalist of its
implementation's own rounds, through the winner those rounds sent to the verdict's: ``speedup_over_aten``). The
total: eager's step beside the kernelgen step run with those records, both timed now.
"""

from __future__ import annotations

from typing import Any

from kernelgen.backends import get_backend
from kernelgen.runtime.implementations import candidates_for
from kernelgen.runtime.records import usable_best
from kernelgen.tune.model import ModelResult, RegionOutcome, speedup_over_aten
from kernelgen.tune.model_capture import capture
from kernelgen.tune.model_spec import ModelSpec


def model_report(spec: ModelSpec, db: Any) -> dict[str, Any]:
    """The JSON summary ``kernelgen tune`` prints for a model, from the records ``db`` holds now, with
    ``eager_step_ms`` and ``kernelgen_step_ms`` (the model run through the backend with those records), timed
    interleaved with the threads this process has (``step_ms``, the shares' base, is single-threaded)."""
    timed: list[float] = []
    regions, step_s = capture(spec, db, timed)[:2]
    target = get_backend(spec.backend).target()
    result = ModelResult(spec, regions, step_s)
    for region in regions:
        impls = candidates_for(region.graph, spec.backend)
        best = usable_best(db, region.key, target.fingerprint, impls)
        if best is None:
            result.outcomes.append(RegionOutcome(region, note="no record: untuned default"))
            continue
        result.outcomes.append(RegionOutcome(region, implementation=best.implementation, config=dict(best.config),
                                             speedup=speedup_over_aten(db, best, target), note="record"))
    summary = result.to_json()
    summary.update(eager_step_ms=timed[0] * 1e3, kernelgen_step_ms=timed[1] * 1e3, seconds=0.0, error=None)
    return summary


__all__ = ["model_report"]
