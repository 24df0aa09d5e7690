"""A full disk, exhausted file descriptors or a killed compiler are the machine's failures, not verdicts on a
config: recorded as retryable, measured again by the next run, never cached as a check verdict.

Before: a full disk under the kernel cache was recorded as a permanent ``compile_error`` for every trial,
the default config's included, and after space was freed ``kernelgen tune`` said "already tuned" and exited 1.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kernelgen.check import verdicts
from kernelgen.db import open_db
from kernelgen.errors import EnvironmentFailure, environment_cause
from kernelgen.ir.target import Target
from kernelgen.ir.values import RETRYABLE_PREFIX, Measurement, Status, TimeStats
from kernelgen.runtime.implementations import implementations_for
from kernelgen.tune.tuner import tune_graph
from tests.reliability.fakes import FourConfigs, add_graph

# What g++ prints when the disk under its temporary files is full, and what a compiler the OOM killer ends does.
FULL_DISK = "#!/bin/sh\n[ \"$1\" = --version ] && exec g++ --version\necho 'cc1plus: fatal error: error writing to /tmp/ccQ1.s: No space left on device' >&2\nexit 1\n"
KILLED = "#!/bin/sh\n[ \"$1\" = --version ] && exec g++ --version\nkill -9 $$\n"


def _compiler(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "kernels"
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(cache))
    verdicts.forget()
    yield cache
    verdicts.forget()


def _pointwise(graph):
    return [i for i in implementations_for(graph, "cpp") if i.name == "pointwise"]


@pytest.mark.parametrize("script,n", [(FULL_DISK, 4096), (KILLED, 4097)], ids=["full-disk", "killed-compiler"])
def test_a_broken_machine_judges_no_config_and_the_rerun_tunes(tmp_path, monkeypatch, fresh_cache, script, n) -> None:
    graph = add_graph(n)  # a size of its own: the backend keeps kernels it built in memory
    impls = _pointwise(graph)
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    monkeypatch.setenv("CXX", _compiler(tmp_path, "cxx", script))
    with open_db(url) as db:
        broken = tune_graph(graph, db=db, implementations=impls, trials=3, isolate=False, seed=0)
        stored = db.trials(graph.workload_key, broken.target.fingerprint)
    assert broken.best is None and "environment failure" in broken.note
    assert stored and all(r.measurement.retryable and r.measurement.status is Status.COMPILE_ERROR for r in stored)
    assert len(stored) == 1  # the search stopped at the first one: every other config would fail alike

    monkeypatch.delenv("CXX")  # the disk was freed
    with open_db(url) as db:
        fixed = tune_graph(graph, db=db, implementations=impls, trials=3, isolate=False, seed=0)
    assert fixed.best is not None and fixed.measured > 0 and "environment" not in fixed.note
    default = impls[0].default_config(fixed.target)
    assert any(r.config == default and r.measurement.ok for r in fixed.search_trials)


def test_a_retryable_check_verdict_is_not_kept_on_disk(tmp_path, monkeypatch, fresh_cache) -> None:
    from kernelgen.ir.target import Target

    graph = add_graph(4098)
    (impl,) = _pointwise(graph)
    target = Target.current("cpp")
    config = impl.default_config(target)
    monkeypatch.setenv("CXX", _compiler(tmp_path, "cxx", FULL_DISK))
    monkeypatch.setenv(verdicts.ISOLATE_ENV, "0")
    bad = verdicts.check(impl, config, target, quiet=True)
    assert not bad.ok and bad.message.startswith("retryable")
    assert not list(fresh_cache.rglob("checks/**/*.json"))  # no verdict on disk for the next process
    monkeypatch.delenv("CXX")
    verdicts.forget()  # a new process
    assert verdicts.check(impl, config, target, quiet=True).ok


def test_os_errors_of_the_environment_are_told_apart() -> None:
    assert environment_cause(OSError(errno.ENOSPC, "No space left on device", "/cache/x.cpp")) is not None
    assert environment_cause(OSError(errno.EMFILE, "Too many open files")) is not None
    assert environment_cause(EnvironmentFailure("disk full")) == "disk full"
    assert environment_cause(OSError(errno.ENOENT, "No such file or directory")) is None
    assert environment_cause(ValueError("bad config")) is None


def test_a_full_kernel_cache_is_retryable_not_a_compile_error(tmp_path, monkeypatch, fresh_cache) -> None:
    from kernelgen.backends import cpp
    from kernelgen.check.measure import Bench
    from kernelgen.ir.target import Target

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(cpp, "atomic_write_text", full)
    graph = add_graph(4099)
    (impl,) = _pointwise(graph)
    target = Target.current("cpp")
    failure = Bench(impl, target).build(impl.default_config(target))
    assert failure is not None and failure.retryable and "No space left on device" in failure.message


def test_the_config_a_broken_machine_failed_is_measured_by_the_rerun_and_only_by_it(tmp_path) -> None:
    """The default config failed with a full disk (retryable): the rerun measures it first, as the warm start it
    is, and a third run measures nothing. Before: the abandoned Optuna trial of that config made
    ``enqueue_trial(skip_if_exists=True)`` drop the warm start, and with the sampler proposing other configs the
    default was never measured again (nor confirmed, so there was no "vs default")."""
    graph = add_graph(64)
    impl = FourConfigs(graph)
    default = impl.default_config(Target.current("cpp"))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    calls: list[dict] = []
    disk = {"full": True}

    def measure(_impl, config):
        calls.append(dict(config))
        if disk["full"]:
            return Measurement.failure(config, Status.COMPILE_ERROR, RETRYABLE_PREFIX + "No space left on device")
        t = 1e-3 / config["a"]
        return Measurement(config, Status.OK, TimeStats(median=t, min=t, spread=0.0, repeats=5), threads=1)

    def run():
        calls.clear()
        with open_db(url, team_url="") as db:  # seed 1: the sampler's own first pick is not the default
            return tune_graph(graph, db=db, implementations=[impl], trials=2, measure=measure, seed=1)

    assert not run().best and calls == [dict(default)]  # the disk is full: the search stops at the default
    disk["full"] = False
    rerun = run()
    assert calls[0] == dict(default), calls  # the failed warm start comes first again
    assert any(r.config == default and r.measurement.ok for r in rerun.search_trials)
    assert rerun.default is not None  # measured in the verdict's rounds: "vs default" is known
    third = run()
    assert calls == [] and third.measured == 0  # measured once is measured: nothing again


def test_a_trial_the_database_could_not_store_is_not_left_running(tmp_path) -> None:
    """The server refused the commit of a measured trial (no connection slot left): the tuning ends with that
    one-line error, and the trial is abandoned, not left RUNNING under a live owner (which no other process takes
    over while this one lives: a model's tuner goes on with its next region)."""
    import optuna
    from optuna.trial import TrialState

    from kernelgen.errors import TooManyConnectionsError
    from tests.reliability.fakes import Counting

    graph = add_graph(64)
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    with open_db(url, team_url="") as db:
        def refused(_record):
            raise TooManyConnectionsError("the database server has no connection left")

        db.commit = refused
        with pytest.raises(TooManyConnectionsError):
            tune_graph(graph, db=db, implementations=[FourConfigs(graph)], measure=Counting(), trials=2, seed=0)
    storage = optuna.storages.RDBStorage(url)
    trials = [t for s in optuna.get_all_study_summaries(storage)
              for t in optuna.load_study(study_name=s.study_name, storage=storage).get_trials()]
    storage.engine.dispose()
    assert trials and not [t for t in trials if t.state is TrialState.RUNNING]
