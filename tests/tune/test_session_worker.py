"""One tuning session keeps one measuring worker: across implementations, phases (search, confirmation, the
showdown between implementations) and workloads, and across timing thread counts; it is replaced only after a
fault, and the replacement serves the rest of the session."""

from __future__ import annotations

import os

import pytest

from kernelgen.check.measure import TimingPolicy
from kernelgen.db import open_db
from kernelgen.ir.values import Status
from kernelgen.tune.tuner import tune_graph

from session_fakes import PidImpl, worker_pids
from tune_fakes import relu_add_graph


@pytest.fixture()
def db(tmp_path):
    with open_db(f"sqlite:///{tmp_path / 'tune.sqlite'}") as database:
        yield database


def _tune(db, graph, log, threads, crash=()):
    impls = [PidImpl(graph, "pid-a", log, crash), PidImpl(graph, "pid-b", log)]
    return tune_graph(graph, db=db, implementations=impls, trials=2, seed=1, isolate=True, timeout=20.0,
                      policy=TimingPolicy(min_time=0.002, threads=threads))


@pytest.mark.timeout(300)
def test_one_worker_measures_every_implementation_phase_and_workload_of_a_run(db, tmp_path) -> None:
    log = str(tmp_path / "pids.log")
    # Two workloads, two implementations each (so a showdown between them), timed with the thread counts the
    # tuner picks from the load (kernelgen.tune.tuner._threads_free_here): they change from one workload to the next.
    first = _tune(db, relu_add_graph(256), log, threads=1)
    second = _tune(db, relu_add_graph(128), log, threads=2)
    for result in (first, second):
        assert result.best is not None and all(r.measurement.ok for r in result.trials)
        assert {r.implementation for r in result.trials} == {"pid-a", "pid-b"}
    assert {r.measurement.threads for r in second.trials} == {2}  # the reused worker timed with the new count
    pids = set(worker_pids(log))
    assert len(pids) == 1 and os.getpid() not in pids, f"worker processes started: {sorted(pids)}"


@pytest.mark.timeout(300)
def test_a_worker_killed_by_a_crashing_candidate_is_replaced_and_the_next_candidate_measures(db, tmp_path) -> None:
    log = str(tmp_path / "pids.log")
    first = _tune(db, relu_add_graph(256), log, threads=1, crash=(1,))  # pid-a's default (reps=1) segfaults
    crashed, after = [r for r in first.search_trials if r.implementation == "pid-a"][:2]
    assert crashed.config["reps"] == 1 and crashed.measurement.status is Status.RUNTIME_ERROR
    assert "SIGSEGV" in crashed.measurement.message
    assert after.measurement.ok and first.best is not None
    second = _tune(db, relu_add_graph(128), log, threads=1)
    assert second.best is not None and all(r.measurement.ok for r in second.trials)
    pids = worker_pids(log)
    dead = pids[0]
    # The crashed worker built reps=1 and died; one fresh worker took over and measured everything after it.
    assert pids[:2] == [dead, dead] and dead not in pids[2:]
    assert len(set(pids[2:])) == 1, f"worker processes after the crash: {sorted(set(pids[2:]))}"


@pytest.mark.timeout(120)
def test_a_worker_is_replaced_after_an_environment_failure(tmp_path) -> None:
    from kernelgen.check.worker import IsolatedMeasurer
    from kernelgen.ir.values import Config

    log = str(tmp_path / "pids.log")
    impl = PidImpl(relu_add_graph(), "pid-env", log, no_space=(2,))  # reps=2 fails to build: the disk is full
    with IsolatedMeasurer(impl, policy=TimingPolicy(min_time=0.002, threads=1), timeout=20.0) as measurer:
        first = measurer.measure(Config(mode="ok", reps=1))
        full = measurer.measure(Config(mode="ok", reps=2))
        after = measurer.measure(Config(mode="ok", reps=4))
    assert first.ok and full.retryable and "No space left" in full.message and after.ok
    builds = worker_pids(log, "build")
    # The worker that ran short is not reused: the next config is measured by a fresh one.
    assert builds[0] == builds[1] != builds[2] and measurer.restarts == 1
