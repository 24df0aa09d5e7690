"""Kernel threads under load (``kernelgen.runtime.threads``): the load elsewhere from two samples, the threads
left for kernels, and kernels that still compute eager's values with fewer threads."""

from __future__ import annotations

import pytest
import torch

import kernelgen
from kernelgen.backends import cpp
from kernelgen.runtime import threads


def test_load_elsewhere_is_busy_time_minus_ours(monkeypatch):
    monkeypatch.setattr(threads, "_cpus", lambda: {0, 1})
    # 100 ticks per CPU elapsed on 2 CPUs: 150 busy ticks, 40 of them ours -> 1.1 CPUs busy elsewhere
    assert threads.busy_elsewhere((0, 0, 0), (150, 200, 40)) == pytest.approx(1.1)
    assert threads.busy_elsewhere((0, 0, 0), (150, 200, 150)) == 0.0  # all of it ours
    assert threads.free_threads(1.1, 2) == 1 and threads.free_threads(0.4, 2) == 2
    assert threads.free_threads(2.0, 2) == 1  # never fewer than one


def test_steal_time_is_elapsed_but_not_busy(monkeypatch):
    # user nice system idle iowait irq softirq steal: cpu1 had 60 ticks stolen by the hypervisor, which no
    # process of this machine holds and fewer threads do not win back
    stat = ["cpu  200 0 40 100 0 0 0 60", "cpu0 100 0 20 70 10 0 0 0", "cpu1 100 0 20 30 0 5 5 60", "intr 1 2"]
    assert threads.cpu_ticks(stat, {0, 1}) == (250, 420)
    assert threads.cpu_ticks(stat, {1}) == (130, 220)
    monkeypatch.setattr(threads, "_cpus", lambda: {0, 1})
    busy, total = threads.cpu_ticks(stat, {0, 1})
    # this process used 200 of the 250 busy ticks: 0.24 CPUs elsewhere, so kernels keep both threads
    assert threads.free_threads(threads.busy_elsewhere((0, 0, 0), (busy, total, 200)), 2) == 2


def test_a_sample_reads_this_machine():
    found = threads.sample()
    if found is None:
        pytest.skip("no /proc here")
    busy, total, ours = found
    assert 0 <= busy <= total and ours >= 0


def test_capped_kernels_compute_eagers_values(monkeypatch):
    x = torch.randn(256, 1000)
    fn = kernelgen.compile(lambda x: torch.softmax(x * 2, dim=-1), backend="cpp")
    free = fn(x)
    monkeypatch.setattr(cpp, "THREAD_CAP", [1 << 30])
    cpp.set_thread_cap(1)
    try:
        torch.testing.assert_close(fn(x), torch.softmax(x * 2, dim=-1))
        torch.testing.assert_close(fn(x), free)
    finally:
        cpp.set_thread_cap(None)


def test_a_compiled_graphs_aten_ops_follow_the_cap(monkeypatch):
    seen = []

    def graph(x):
        seen.append(torch.get_num_threads())
        return x + 1

    run = threads.following_load(graph)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    monkeypatch.setattr(cpp, "THREAD_CAP", [1 << 30])
    try:
        run(torch.ones(1))  # nothing capped: the user's count
        cpp.set_thread_cap(2)
        run(torch.ones(1))  # capped below it: the cap while the graph runs, the user's count after
        after_capped = torch.get_num_threads()
        cpp.set_thread_cap(8)
        run(torch.ones(1))  # a cap above the user's count changes nothing
    finally:
        cpp.set_thread_cap(None)
        torch.set_num_threads(before)
    assert seen == [3, 2, 3]
    assert after_capped == 3


def test_a_compiled_model_under_a_cap_computes_eagers_values(monkeypatch):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = torch.compile(model, backend="kernelgen")
    monkeypatch.setattr(cpp, "THREAD_CAP", [1 << 30])
    cpp.set_thread_cap(1)
    try:
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    finally:
        cpp.set_thread_cap(None)
