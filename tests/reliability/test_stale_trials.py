"""A tuner killed mid-trial leaves its Optuna trial RUNNING; the next run fails it and measures the config.

Before: the killed trial stayed RUNNING for ever and counted as taken, so no rerun (``--retune`` included)
measured that config again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from optuna.trial import TrialState

from kernelgen.backends import get_backend
from kernelgen.db import open_db
from kernelgen.ir.values import Evidence
from kernelgen.tune import leases, search
from kernelgen.tune.tuner import tune_graph
from tests.reliability.conftest import ROOT
from tests.reliability.fakes import Counting, FourConfigs, add_graph

KILLED_RUN = textwrap.dedent("""
    import sys
    from kernelgen.db import open_db
    from kernelgen.tune.tuner import tune_graph
    from tests.reliability.fakes import Counting, FourConfigs, add_graph
    graph = add_graph()
    with open_db(sys.argv[1]) as db:
        tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=Counting(die_on=2),
                   sampler="exhaustive", trials=4, seed=0)
""")


def _studies(url: str):
    import optuna

    storage = optuna.storages.RDBStorage(url)
    return [optuna.load_study(study_name=s.study_name, storage=storage) for s in optuna.get_all_study_summaries(storage)]


def test_a_trial_whose_tuner_was_killed_is_measured_by_the_next_run(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, url], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr
    (study,) = _studies(url)
    running = study.get_trials(states=(TrialState.RUNNING,))
    assert [t.params for t in running] == [{"a": 2}]
    assert running[0].user_attrs[leases.ATTR_OWNER]["pid"] > 0  # who was measuring it

    graph = add_graph()
    measurer = Counting()
    with open_db(url) as db:
        result = tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=measurer,
                            sampler="exhaustive", trials=4, seed=0)
    assert {c["a"] for c in measurer.calls} >= {2}  # the killed trial's config was measured now
    assert sorted(r.config["a"] for r in result.search_trials) == [1, 2, 3, 4]
    assert result.best is not None and result.best.config["a"] == 4
    (study,) = _studies(url)
    assert not study.get_trials(states=(TrialState.RUNNING,))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_live_owner_keeps_its_trial_and_a_silent_remote_one_loses_it() -> None:
    import datetime
    import time

    from optuna.trial import create_trial

    me = leases.owner()
    now = time.time()

    def running(attrs):
        t = create_trial(state=TrialState.RUNNING, user_attrs=attrs)
        return t

    assert leases.stale_reason(running({leases.ATTR_OWNER: me, leases.ATTR_BEAT: now}), me, now) == ""
    dead = dict(me, pid=_dead_pid())
    assert "is gone" in leases.stale_reason(running({leases.ATTR_OWNER: dead, leases.ATTR_BEAT: now}), me, now)
    reused = dict(me, started="1")  # this pid, but a process started at another time
    assert "is gone" in leases.stale_reason(running({leases.ATTR_OWNER: reused, leases.ATTR_BEAT: now}), me, now)
    remote = dict(me, host="elsewhere")
    assert leases.stale_reason(running({leases.ATTR_OWNER: remote, leases.ATTR_BEAT: now - 10}), me, now) == ""
    assert "no heartbeat" in leases.stale_reason(
        running({leases.ATTR_OWNER: remote, leases.ATTR_BEAT: now - leases.GRACE_S - 1}), me, now)
    legacy = create_trial(state=TrialState.RUNNING)  # an older kernelgen's: no owner, started long ago
    legacy.datetime_start = datetime.datetime.now() - datetime.timedelta(seconds=leases.GRACE_S + 5)
    assert "no heartbeat" in leases.stale_reason(legacy, me, now)


# --- hand-edited attributes, owners in other PID namespaces, victims (issue 34, item 3) -------------------------

FORGED = {  # what a RUNNING trial's attributes were edited to: (owner fields replaced, heartbeat)
    "pid 2**40": ({"pid": 2**40}, None),
    "pid a string": ({"pid": "123"}, None),
    "pid -1": ({"pid": -1}, None),  # os.kill(-1, 0) reaches every process: "alive" for ever
    "pid 0": ({"pid": 0}, None),
    "pid nan": ({"pid": float("nan")}, None),
    "pid True": ({"pid": True}, None),
    "owner a string": ("me", None),
    "owner a list": ([1, 2], None),
    "host a number": ({"host": 5, "pid": 1}, None),
    "heartbeat a string": ({}, "yesterday"),
    "heartbeat nan": ({}, float("nan")),
    "heartbeat inf": ({}, float("inf")),
    "heartbeat negative": ({}, -5.0),
    "heartbeat in the future": ({}, 1e9),  # seconds ahead of now
    "heartbeat True": ({}, True),
}


def _forged_trial(name: str, now: float):
    import datetime

    from optuna.trial import create_trial

    changes, beat = FORGED[name]
    owner = dict(leases.owner(), **changes) if isinstance(changes, dict) else changes
    beat = now if beat is None else now + beat if name == "heartbeat in the future" else beat
    trial = create_trial(state=TrialState.RUNNING, user_attrs={leases.ATTR_OWNER: owner, leases.ATTR_BEAT: beat})
    trial.datetime_start = datetime.datetime.fromtimestamp(now)
    return trial


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_attributes_never_raise_and_never_keep_a_trial_running_for_ever(name: str) -> None:
    import time

    now = time.time()
    trial, me = _forged_trial(name, now), leases.owner()
    leases.stale_reason(trial, me, now)  # whatever it says, it says it without an exception
    # by the heartbeat rule at the latest: silence (or no valid heartbeat) past the grace period since it started
    later = now + 2 * leases.GRACE_S + 1
    assert leases.stale_reason(trial, me, later), name


def test_a_study_with_a_forged_pid_opens_and_its_trial_is_retried(tmp_path) -> None:
    import time

    from kernelgen.ir.space import Param, SearchSpace
    from kernelgen.tune.search import Searcher

    url = f"sqlite:///{tmp_path / 'forged.sqlite'}"
    space = SearchSpace([Param("a", (1, 2, 3, 4))], [], default={"a": 1})
    first = Searcher(space, sampler="exhaustive", storage=url, study_name="forged")
    config = first.ask()
    trial = first._pending[config]
    search._HEARTBEAT.release(trial)  # its owner went silent: only the forged attributes are left
    trial.set_user_attr(leases.ATTR_OWNER, dict(leases.owner(), pid=2**40))
    trial.set_user_attr(leases.ATTR_BEAT, time.time() - leases.GRACE_S - 1)
    second = Searcher(space, sampler="exhaustive", storage=url, study_name="forged")  # OverflowError before
    assert not second.study.get_trials(states=(TrialState.RUNNING,))
    assert second.ask() == config  # failed and queued again


def test_an_owner_in_another_pid_namespace_keeps_its_trial_while_its_heartbeat_is_fresh() -> None:
    import time

    from optuna.trial import create_trial

    me, now = leases.owner(), time.time()
    # A container on this host: same hostname and boot id, its own PID namespace, where it is pid 1; here no
    # process has that pid (or another one has: either way the pid says nothing about it).
    dead = _dead_pid()
    container = dict(me, pidns="nsfs:4026530000", pid=dead)
    fresh = create_trial(state=TrialState.RUNNING, user_attrs={leases.ATTR_OWNER: container, leases.ATTR_BEAT: now})
    assert leases.stale_reason(fresh, me, now + 10) == ""
    assert "no heartbeat" in leases.stale_reason(fresh, me, now + leases.GRACE_S + 1)
    legacy = {k: v for k, v in me.items() if k in ("host", "boot", "pid", "started")}  # an older kernelgen's owner
    old = create_trial(state=TrialState.RUNNING, user_attrs={leases.ATTR_OWNER: dict(legacy, pid=dead),
                                                             leases.ATTR_BEAT: now})
    assert leases.stale_reason(old, me, now + 10) == ""  # its namespace is unknown: the heartbeat decides
    # Another machine with this one's hostname (hostnames repeat: "vm", "localhost"): not a reboot of this one.
    twin = create_trial(state=TrialState.RUNNING, user_attrs={leases.ATTR_OWNER: dict(me, boot="another-boot-id"),
                                                              leases.ATTR_BEAT: now})
    assert leases.stale_reason(twin, me, now + 10) == ""


class FailedUnderIt(Counting):
    """While measuring ``a == 2``, another process fails that trial as stale and queues its config again (what
    ``fail_stale`` of a tuner that took its owner for dead does)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def __call__(self, impl, config):
        if config["a"] == 2 and not any(c["a"] == 2 for c in self.calls):
            (study,) = _studies(self.url)
            (trial,) = study.get_trials(states=(TrialState.RUNNING,))
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params)
        return super().__call__(impl, config)


def test_a_tuner_whose_trial_was_failed_under_it_does_not_crash_and_keeps_its_measurement(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'victim.sqlite'}"
    graph = add_graph()
    measurer = FailedUnderIt(url)
    with open_db(url) as db:  # UpdateFinishedTrialError from tell() before
        result = tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=measurer,
                            sampler="exhaustive", trials=4, seed=0)
    assert sorted(r.config["a"] for r in result.search_trials) == [1, 2, 3, 4]  # a=2 in kernelgen's records
    # measured once in the search (then in each confirmation round, as every finalist): not again when re-queued
    counts = Counter(c["a"] for c in measurer.calls)
    assert set(counts) == {1, 2, 3, 4} and len(set(counts.values())) == 1, counts
    assert result.best is not None and result.best.config["a"] == 4
    (study,) = _studies(url)
    assert not study.get_trials(states=(TrialState.RUNNING,))


CONTAINED_RUN = textwrap.dedent("""
    import os, sys, time
    from kernelgen.db import open_db
    from kernelgen.tune.tuner import tune_graph
    from tests.reliability.fakes import Counting, FourConfigs, add_graph

    class WaitOnTwo(Counting):
        def __call__(self, impl, config):
            if config["a"] == 2:  # tell the test it is measuring, then wait until the test has looked
                open(sys.argv[2] + ".measuring", "w").close()
                while not os.path.exists(sys.argv[2] + ".go"):
                    time.sleep(0.05)
            return super().__call__(impl, config)

    graph = add_graph()
    with open_db(sys.argv[1]) as db:
        tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=WaitOnTwo(), sampler="exhaustive",
                   trials=4, seed=0)
    print("pid", os.getpid())
""")


def result_target() -> str:
    return get_backend("cpp").target().fingerprint


def _unshare_pid() -> list[str]:
    """The command prefix that runs a process in a PID namespace of its own (as a container), or skip."""
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]  # (killing it kills the tuner)
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no unshare here: {exc}")
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode(errors='replace').strip()}")
    return prefix


def test_a_tuner_in_another_pid_namespace_keeps_its_live_trial(tmp_path) -> None:
    """Two tuners of one workload on one database, one in a PID namespace of its own (same hostname and boot id,
    as containers on one host): the other must not take the contained one's live trial for a dead process's."""
    import time

    url, marker = f"sqlite:///{tmp_path / 'shared.sqlite'}", str(tmp_path / "a2")
    contained = subprocess.Popen([*_unshare_pid(), sys.executable, "-c", CONTAINED_RUN, url, marker], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not os.path.exists(marker + ".measuring"):
            assert contained.poll() is None and time.monotonic() < deadline, contained.communicate()
            time.sleep(0.1)
        graph = add_graph()
        here = Counting()
        with open_db(url) as db:  # before: failed the contained trial ("pid 1 on this host is gone") and measured a=2
            tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=here, sampler="exhaustive",
                       trials=4, seed=0)
        assert 2 not in {c["a"] for c in here.calls}
        open(marker + ".go", "w").close()
        out, err = contained.communicate(timeout=240)
    finally:
        contained.kill()
    assert contained.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert out.split() == ["pid", "1"]  # it really was pid 1 of its own namespace
    with open_db(url) as db:
        searched = [r.config["a"] for r in db.trials(graph.workload_key, result_target())
                    if r.evidence is Evidence.TRIAL]
    assert sorted(searched) == [1, 2, 3, 4]  # every config measured once, by one of the two
