"""The pure helpers of the GPU checks: a tuning's pace per workload from its records (tools/gpu_check.sh) and the
bandwidth floor of a memory-bound graph (benchmarks/bench_gpu.py); both only run on a GPU, their arithmetic here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelgen.frontend.capture import trace
from kernelgen.ir.values import Evidence, TensorSpec
from kernelgen.report.floor import bytes_moved, copy_bandwidth, floor_share, memory_bound
from kernelgen.report.pace import pace, render
from tests.db.factories import record

T0 = 1_700_000_000.0


def _rec(name: str, at: float, evidence: Evidence = Evidence.TRIAL):
    return record(name=name, created_at=T0 + at, evidence=evidence, seed=int(at * 10))


def test_pace_is_the_gap_before_each_workloads_first_trial_and_its_trials_per_second() -> None:
    records = [_rec("softmax", 31.0), _rec("bias_gelu", 2.0), _rec("bias_gelu", 3.0), _rec("bias_gelu", 4.0),
               _rec("bias_gelu", 5.0, Evidence.DECLARED), _rec("softmax", 30.0), _rec("softmax", 32.0)]
    first, second = pace(records, since=T0)
    assert (first.name, first.first_after, first.trials, first.seconds, first.per_second) == \
        ("bias_gelu", 2.0, 3, 3.0, 1.0)
    assert (second.name, second.first_after, second.trials, second.per_second) == ("softmax", 25.0, 3, 1.0)
    assert pace(records)[0].first_after is None  # no start time given: the first gap is unknown
    table = render([first, second])
    assert "25.0 s" in table and "softmax" in table.splitlines()[2]


def test_bytes_moved_reads_each_input_once_and_writes_each_output_once() -> None:
    graph = trace(lambda x, b: F.gelu(x + b), TensorSpec((8192, 4096), "float32"), TensorSpec((4096,), "float32"))
    assert bytes_moved(graph) == (8192 * 4096 * 2 + 4096) * 4  # x read, the output written, the bias once
    assert memory_bound(graph)
    gemm = trace(lambda a, w: torch.relu(a @ w), TensorSpec((64, 32), "float16"), TensorSpec((32, 16), "float16"))
    assert not memory_bound(gemm)


def test_floor_share_against_a_measured_copy_bandwidth() -> None:
    bandwidth = copy_bandwidth(2**30, 2**30 * 2 / 4.0e12)  # a 1 GiB copy at 4 TB/s (read + write)
    assert bandwidth == pytest.approx(4.0e12)
    graph = trace(lambda x: torch.softmax(x, -1), TensorSpec((8192, 4096), "bfloat16"))
    floor = bytes_moved(graph) / bandwidth  # 128 MiB at 4 TB/s: 33.6 us
    assert floor_share(graph, floor, bandwidth) == pytest.approx(1.0)
    assert floor_share(graph, 2 * floor, bandwidth) == pytest.approx(0.5)
