"""Custom calls compete in tuning and dispatch: the fastest correct one wins, a slower one loses, and a
wrong one is rejected and never dispatched (the function then runs eagerly and stays correct)."""

from __future__ import annotations

import pytest
import torch

import kernelgen
from cc_helpers import BIAS_GELU_CPP, bias_gelu, launch

from kernelgen.custom_calls.candidates import candidates
from kernelgen.frontend.capture import trace
from kernelgen.registry import custom_call, register_custom_call

tuner = pytest.importorskip("kernelgen.tune.tuner", reason="the tuner (kernelgen/tune/tuner.py) is not built yet")


def _register(variant="", symbol="bias_gelu", repeat=1, replaces=bias_gelu, name="bg"):
    register_custom_call(name, language="cpp", variant=variant, source=BIAS_GELU_CPP, symbol=symbol,
                         reference=bias_gelu, replaces=replaces)(launch(repeat))


@pytest.fixture()
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'tuning.sqlite'}"


def _tune(graph, impls, url):
    from kernelgen.db import open_db
    from kernelgen.check.measure import TimingPolicy

    db = open_db(url)
    try:
        return tuner.tune_graph(graph, backend="cpp", db=db, trials=1, implementations=impls, isolate=False,
                                policy=TimingPolicy(min_time=0.01, min_repeats=3))
    finally:
        db.close()


@pytest.fixture()
def checks_here(monkeypatch):
    """These calls are registered inside the test, so no worker process can rebuild them: dispatch checks
    them in this process (test_registry_isolation covers checks in a worker)."""
    from kernelgen.check.verdicts import ISOLATE_ENV

    monkeypatch.setenv(ISOLATE_ENV, "0")


@pytest.mark.slow
def test_fastest_correct_custom_call_wins_dispatch(registry, db_url, checks_here):
    _register()  # fast
    _register(variant="slow", repeat=2000)  # the same kernel, recomputed 2000 times
    _register(variant="wrong", symbol="bias_only")  # forgets the GELU
    x, b = torch.randn(64, 256), torch.randn(256)
    graph = trace(bias_gelu, x, b)
    impls = candidates(graph, "cpp")
    assert sorted(i.name for i in impls) == ["custom:bg/cpp", "custom:bg/cpp.slow", "custom:bg/cpp.wrong"]
    result = _tune(graph, impls, db_url)
    by_impl = {}
    for record in result.trials:
        by_impl.setdefault(record.implementation, []).append(record)
    assert {r.measurement.status.value for r in by_impl["custom:bg/cpp.wrong"]} == {"wrong_result"}
    assert any(r.measurement.ok for r in by_impl["custom:bg/cpp.slow"])
    assert result.best.implementation == "custom:bg/cpp"

    compiled = kernelgen.compile(bias_gelu, backend="cpp", db=db_url)
    torch.testing.assert_close(compiled(x, b), bias_gelu(x, b))
    assert compiled.explain(x, b)["implementation"] == "custom:bg/cpp"


def test_wrong_custom_call_is_never_dispatched(registry, db_url, caplog, checks_here):
    _register(name="bad", symbol="bias_only", replaces=None)
    x, b = torch.randn(16, 32), torch.randn(32)

    def uses_bad(x, b):
        return custom_call("bad", x, b)

    graph = trace(uses_bad, x, b)
    (impl,) = candidates(graph, "cpp")
    result = _tune(graph, [impl], db_url)
    assert result.best is None and result.trials and all(not r.measurement.ok for r in result.trials)

    compiled = kernelgen.compile(uses_bad, backend="cpp", db=db_url)
    with caplog.at_level("WARNING"):
        y = compiled(x, b)
    torch.testing.assert_close(y, bias_gelu(x, b))  # eager: the reference, not the wrong kernel
    assert compiled.explain(x, b)["implementation"] == "eager"
    assert any("custom:bad/cpp" in r.getMessage() and "wrong_result" in r.getMessage() for r in caplog.records)


TEAM_MODULE = '''
from cc_helpers import BIAS_GELU_CPP, bias_gelu, launch
from kernelgen.registry import register_custom_call

register_custom_call("bg", language="cpp", source=BIAS_GELU_CPP, symbol="bias_gelu", reference=bias_gelu,
                     replaces=bias_gelu)(launch())
'''


def test_isolated_tuning_worker_rebuilds_a_call_from_its_module(registry, db_url, tmp_path, monkeypatch):
    """The worker process never ran the registration: it imports the registering module by name."""
    (tmp_path / "kg_team_module.py").write_text(TEAM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    importlib.import_module("kg_team_module")
    x, b = torch.randn(8, 32), torch.randn(32)
    graph = trace(bias_gelu, x, b)
    (impl,) = candidates(graph, "cpp")
    from kernelgen.db import open_db
    from kernelgen.check.measure import TimingPolicy

    db = open_db(db_url)
    try:
        result = tuner.tune_graph(graph, backend="cpp", db=db, trials=1, implementations=[impl], isolate=True,
                                  policy=TimingPolicy(min_time=0.01, min_repeats=3))
    finally:
        db.close()
    assert result.best is not None and result.best.implementation == "custom:bg/cpp", \
        [r.measurement.message for r in result.trials]



def test_a_custom_call_that_won_a_size_still_runs_it_beside_a_shape_family(registry, db_url, checks_here):
    """A shape family serves sizes with no custom-call verdict; a size whose record a custom call won runs it."""
    _register()
    x = torch.randn(64, 256)
    b = torch.randn(256)
    graph = trace(bias_gelu, x, b)
    from kernelgen.db import open_db

    with open_db(db_url) as db:  # the custom call's record, as a tuning run where it won would leave
        from kernelgen.backends import get_backend
        from kernelgen.ir.values import Config, FrozenMap, Measurement, Provenance, Status, TimeStats, TuningRecord

        (impl,) = candidates(graph, "cpp")
        target = get_backend("cpp").target()
        db.commit(TuningRecord(
            workload_key=graph.workload_key, workload_family=graph.family_key, signature=graph.signature,
            implementation=impl.name, implementation_hash=impl.source_hash(), backend="cpp",
            target_fingerprint=target.fingerprint, target_family=target.family, device=target.device_name,
            toolchain=FrozenMap({"compiler": "test"}),
            measurement=Measurement(Config(impl.default_config(target)), Status.OK, TimeStats(1e-6, 1e-6, 0.0, 5)),
            provenance=Provenance("host", "user", "test", 0.0)))
    f = kernelgen.compile(bias_gelu, backend="cpp", db=db_url, dynamic=True)
    for n in (3, 64, 5):
        x = torch.randn(n, 256)
        torch.testing.assert_close(f(x, b), bias_gelu(x, b))
    assert f.explain(torch.randn(64, 256), b)["implementation"] == impl.name
    assert f.explain(torch.randn(5, 256), b)["family"] is not None
