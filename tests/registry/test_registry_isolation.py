"""A faulty custom call never reaches the caller: its first check runs in a worker with a timeout, in
dispatch, in tuning and in ``kernelgen registry check``; a crash, a hang or a wrong result becomes its
exact status, and the caller runs the next candidate or eager PyTorch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kernelgen
from cc_helpers import FAULTS, FAULTY_CPP, double, import_faulty_module

from kernelgen.check import verdicts
from kernelgen.check.measure import TimingPolicy
from kernelgen.custom_calls.candidates import candidates
from kernelgen.frontend.capture import trace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Measurement, Status, TimeStats
from kernelgen.registry import custom_call

tuner = pytest.importorskip("kernelgen.tune.tuner")

CHECK_TIMEOUT = 4.0


def _calls_one(name):
    def fn(x):
        return custom_call(name, x)

    return fn


@pytest.fixture()
def short_checks(monkeypatch):
    monkeypatch.setenv(verdicts.TIMEOUT_ENV, str(CHECK_TIMEOUT))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faulty_call_in_dispatch_leaves_the_caller_alive_and_eager(registry, tmp_path, monkeypatch, short_checks,
                                                                   caplog, fault):
    # Before isolation, segv / aborts / exits killed this test process and loops hung it.
    import_faulty_module(tmp_path, monkeypatch, [(f"f_{fault}", fault, "")])
    compiled = kernelgen.compile(_calls_one(f"f_{fault}"), backend="cpp", db=f"sqlite:///{tmp_path / 'db.sqlite'}")
    x = torch.randn(4, 8)
    with caplog.at_level("WARNING", logger="kernelgen"):
        y = compiled(x)
    torch.testing.assert_close(y, double(x))
    assert compiled.explain(x)["implementation"] == "eager"
    assert any(f"{FAULTS[fault]}:" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


@pytest.mark.timeout(180)
def test_a_database_verdict_for_a_crashing_call_is_not_dispatched(registry, tmp_path, monkeypatch, short_checks):
    import_faulty_module(tmp_path, monkeypatch, [("dbc", "segv", "bad"), ("dbc", "twice", "good")])
    x = torch.randn(4, 8)
    fn = _calls_one("dbc")
    graph = trace(fn, x)
    bad = next(i for i in candidates(graph, "cpp") if i.name == "custom:dbc/cpp.bad")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    from kernelgen.db import open_db

    def says_fast(impl, config):  # a database (perhaps imported) that says the crashing kernel is ok and fast
        return Measurement(config, Status.OK, TimeStats(median=1e-6, min=1e-6, spread=0.0, repeats=5), threads=1)

    db = open_db(url)
    try:
        result = tuner.tune_graph(graph, backend="cpp", db=db, trials=1, implementations=[bad], measure=says_fast)
    finally:
        db.close()
    assert result.best is not None and result.best.implementation == "custom:dbc/cpp.bad"

    compiled = kernelgen.compile(fn, backend="cpp", db=url)
    torch.testing.assert_close(compiled(x), double(x))
    assert compiled.explain(x)["implementation"] == "custom:dbc/cpp.good"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_tuning_records_the_exact_status_of_each_fault(registry, tmp_path, monkeypatch):
    calls = [("tc", symbol, symbol) for symbol in ("twice", *sorted(FAULTS))]
    import_faulty_module(tmp_path, monkeypatch, calls)
    graph = trace(_calls_one("tc"), torch.randn(4, 8))
    impls = candidates(graph, "cpp")
    from kernelgen.db import open_db

    db = open_db(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        result = tuner.tune_graph(graph, backend="cpp", db=db, trials=1, implementations=impls, isolate=True,
                                  timeout=CHECK_TIMEOUT, policy=TimingPolicy(min_time=0.002, min_repeats=3))
    finally:
        db.close()
    statuses = {r.implementation.rsplit(".", 1)[1]: r.measurement.status.value for r in result.search_trials}
    assert statuses == {"twice": "ok", **FAULTS}, [(r.implementation, r.measurement.message) for r in result.trials]
    assert result.best.implementation == "custom:tc/cpp.twice"


def test_verdicts_are_kept_on_disk_under_a_complete_key(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    import_faulty_module(tmp_path, monkeypatch, [("dk", "thrice", "")])
    graph = trace(_calls_one("dk"), torch.randn(4, 8))
    (impl,) = candidates(graph, "cpp")
    target = Target.current("cpp")
    first = verdicts.check(impl, Config({}), target)
    assert first.status is Status.WRONG_RESULT and not first.cached
    verdicts.forget()  # as a new process would
    again = verdicts.check(impl, Config({}), target)
    assert again.status is Status.WRONG_RESULT and again.cached and again.message == first.message
    other = trace(_calls_one("dk"), torch.randn(4, 9))  # another signature is another key
    (impl9,) = candidates(other, "cpp")
    assert not verdicts.check(impl9, Config({}), target).cached


def test_a_timeout_is_not_kept_on_disk(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    import_faulty_module(tmp_path, monkeypatch, [("tk", "loops", "")])
    (impl,) = candidates(trace(_calls_one("tk"), torch.randn(4, 8)), "cpp")
    target = Target.current("cpp")
    assert verdicts.check(impl, Config({}), target, timeout=2.0).status is Status.TIMEOUT
    verdicts.forget()
    digest, _ = verdicts._key(impl, Config({}), target, TimingPolicy().resolved_threads())
    assert not verdicts._path(digest).exists()


FOLDER_INIT = '''
from kernelgen.registry import register_custom_call

def _double(x):
    return x * 2.0

def _launch(inputs, outputs, config, kernel):
    kernel(inputs[0], outputs[0], inputs[0].numel())

for _symbol in ("twice", {faults}):
    register_custom_call("cli_" + _symbol, language="cpp", source="faulty.cpp", symbol=_symbol, reference=_double,
                         examples=[(((4, 8), "float32"),)])(_launch)
'''


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_registry_check_reports_each_fault_as_a_status_line(tmp_path):
    folder = tmp_path / "team" / "faulty"
    folder.mkdir(parents=True)
    (folder / "faulty.cpp").write_text(FAULTY_CPP)
    faults = ", ".join(map(repr, sorted(FAULTS)))
    (folder / "__init__.py").write_text(textwrap.dedent(FOLDER_INIT.format(faults=faults)))
    env = {**os.environ, "KERNELGEN_REGISTRY_PATH": str(tmp_path / "team"),
           "KERNELGEN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    names = [arg for symbol in ("twice", *FAULTS) for arg in ("--name", f"cli_{symbol}")]
    proc = subprocess.run([sys.executable, "-m", "kernelgen", "registry", "check", "--timeout", str(CHECK_TIMEOUT),
                           *names], capture_output=True, text=True, env=env, timeout=220)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out, out
    lines = out.splitlines()
    for symbol, status in FAULTS.items():
        (line,) = [l for l in lines if f"custom:cli_{symbol}/cpp:" in l]
        assert line.lstrip().startswith("failed") and f": {status}: " in line, line
    assert any(l.lstrip().startswith("passed") and "custom:cli_twice/cpp" in l for l in lines), out
    (error,) = [l for l in lines if l.startswith("error:")]
    assert f"{len(FAULTS)} check(s) failed" in error


def test_registry_check_json_gives_the_exact_outcome(tmp_path, monkeypatch, capsys):
    from kernelgen.cli import main
    from kernelgen.registry import Registry, use_registry

    with use_registry(Registry()):
        import_faulty_module(tmp_path, monkeypatch, [("jw", "thrice", "")])
        assert main(["registry", "check", "--name", "jw", "--json"]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    assert result["status"] == "failed" and result["outcome"] == "wrong_result"


def test_registry_check_refuses_a_non_positive_timeout(capsys):
    from kernelgen.cli import main

    assert main(["registry", "check", "--timeout", "0"]) == 1
    assert capsys.readouterr().err.startswith("error: --timeout 0")



def test_a_pooled_worker_never_checks_a_stale_registration(registry, tmp_path, monkeypatch):
    """The same call name registered again with another kernel (an edited team folder, a reloaded module):
    the worker that imported the first one must not check it in place of the second."""
    from kernelgen.registry import Registry, use_registry

    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    x = torch.randn(4, 8)
    import_faulty_module(tmp_path / "v1", monkeypatch, [("again", "twice", "")])
    (first,) = candidates(trace(_calls_one("again"), x), "cpp")
    assert verdicts.check(first, Config({}), Target.current("cpp")).ok
    with use_registry(Registry()):
        import_faulty_module(tmp_path / "v2", monkeypatch, [("again", "thrice", "")])
        (second,) = candidates(trace(_calls_one("again"), x), "cpp")
        assert second.source_hash() != first.source_hash()
        assert verdicts.check(second, Config({}), Target.current("cpp")).status is Status.WRONG_RESULT
