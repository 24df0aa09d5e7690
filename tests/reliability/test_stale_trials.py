"""A tuner killed mid-trial leaves its Optuna trial RUNNING; the next run fails it and measures the config.

Before: the killed trial stayed RUNNING for ever and counted as taken, so no rerun (``--retune`` included)
measured that config again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from optuna.trial import TrialState

from kernelgen.db import open_db
from kernelgen.tune import leases
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
    dead = dict(me, pid=2**22 + 12345)  # above the kernel's pid_max: never a live process
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
