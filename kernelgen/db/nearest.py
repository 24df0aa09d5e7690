"""Ranking of warm-start candidates for ``nearest()``: pure functions, shared by single and layered DBs.

A database returns *groups*: the fastest ok record per other target of the same family (tier 1), and the
fastest ok record per neighbouring shape of the same graph on the same target (tier 2). Groups from
several layers merge by keeping the faster record of each group; tier 1 ranks by time, tier 2 by shape
distance, then time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kernelgen.db.verdict import best_key, preferred  # noqa: F401  (re-exported: the definition lives there)
from kernelgen.ir.values import TensorSpec, TuningRecord

_DTYPE_PENALTY = 8.0  # a different dtype is a far neighbour: like 256x in one dimension
_RANK_PENALTY = 16.0


@dataclass
class NearestGroups:
    same_family: dict[str, TuningRecord] = field(default_factory=dict)  # target fingerprint -> fastest
    neighbours: dict[str, TuningRecord] = field(default_factory=dict)  # workload key -> fastest


def speed_key(record: TuningRecord) -> tuple[float, str]:
    """Sort key of ok records: median time, ties broken by record_id (deterministic everywhere)."""
    assert record.measurement.time is not None
    return record.measurement.time.median, record.record_id


def faster(a: TuningRecord | None, b: TuningRecord | None) -> TuningRecord | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if speed_key(a) <= speed_key(b) else b


def shape_distance(a: Sequence[TensorSpec], b: Sequence[TensorSpec]) -> float:
    """Sum over tensors and dimensions of |log2(size ratio)|, plus penalties for dtype or rank changes."""
    if len(a) != len(b):
        return _RANK_PENALTY * (abs(len(a) - len(b)) + 1)
    total = 0.0
    for x, y in zip(a, b):
        if x.rank != y.rank:
            total += _RANK_PENALTY
            continue
        total += sum(abs(math.log2(max(p, 1) / max(q, 1))) for p, q in zip(x.shape, y.shape))
        if x.dtype != y.dtype:
            total += _DTYPE_PENALTY
        if x.strides != y.strides:
            total += 1.0
    return total


def merge_groups(layers: Iterable[NearestGroups]) -> NearestGroups:
    merged = NearestGroups()
    for groups in layers:
        for target, rec in groups.same_family.items():
            merged.same_family[target] = faster(merged.same_family.get(target), rec)
        for key, rec in groups.neighbours.items():
            merged.neighbours[key] = faster(merged.neighbours.get(key), rec)
    return merged


def rank(groups: NearestGroups, signature: Sequence[TensorSpec], limit: int) -> list[TuningRecord]:
    """Tier 1 (same workload, sibling targets) by time, then tier 2 (neighbour shapes) by distance."""
    first = sorted(groups.same_family.values(), key=speed_key)
    second = sorted(groups.neighbours.values(),
                    key=lambda r: (shape_distance(signature, r.signature), *speed_key(r)))
    return (first + second)[: max(limit, 0)]

