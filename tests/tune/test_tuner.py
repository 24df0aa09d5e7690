"""tune_graph: budgets, commits, resume, zero re-measurement, warm starts, isolation of bad candidates."""

from __future__ import annotations

import pytest

from kernelgen.db import open_db
from kernelgen.tune.measure import TimingPolicy
from kernelgen.tune.tuner import CONFIRM_ROUNDS, is_confirmation, tune_graph
from kernelgen.values import Config, Status

from tune_fakes import CountingMeasurer, FakeImpl, LandscapeImpl, landscape_time, relu_add_graph


@pytest.fixture()
def db(tmp_path):
    with open_db(f"sqlite:///{tmp_path / 'tune.sqlite'}") as database:
        yield database


def _tune(db, graph, measurer, **kw):
    return tune_graph(graph, db=db, implementations=[LandscapeImpl(graph)], measure=measurer, seed=1, **kw)


def test_search_respects_budget_constraints_and_commits_every_trial(db) -> None:
    graph = relu_add_graph()
    measurer = CountingMeasurer(fail=lambda c: c["c"] == 4)
    result = _tune(db, graph, measurer, trials=10)
    search = result.search_trials
    assert len(search) == 10 and len({r.config for r in search}) == 10
    assert all(r.config["a"] * r.config["b"] <= 4096 for r in search)
    assert search[0].config == Config(a=1, b=1, c=1)  # the default is measured first
    stored = db.trials(graph.workload_key, result.target.fingerprint)
    assert {r.record_id for r in stored} == {r.record_id for r in result.trials}
    failed = [r for r in search if r.config["c"] == 4]
    assert all(r.measurement.status is Status.RUNTIME_ERROR for r in failed)
    assert result.failures == len(failed)
    # The declared best is a confirmation of the fastest ok config, re-measured CONFIRM_ROUNDS times.
    fastest = min((r for r in search if r.measurement.ok), key=lambda r: r.measurement.time.median)
    assert is_confirmation(result.best) and result.best.config == fastest.config
    assert measurer.calls[fastest.config] == 1 + CONFIRM_ROUNDS


def test_second_run_measures_nothing(db) -> None:
    graph = relu_add_graph()
    first = _tune(db, graph, CountingMeasurer(), trials=6)
    again = CountingMeasurer()
    second = _tune(db, graph, again, trials=6)
    assert again.total == 0 and second.measured == 0
    assert second.best.record_id == first.best.record_id
    assert second.stop_reasons == {"landscape": "already tuned"}


def test_interrupted_run_resumes_without_remeasuring(db) -> None:
    graph = relu_add_graph()
    interrupted = CountingMeasurer(interrupt_after=4)
    with pytest.raises(KeyboardInterrupt):
        _tune(db, graph, interrupted, trials=9)
    kept = db.trials(graph.workload_key, graph_target(db, graph))
    assert len(kept) == 4 and not any(is_confirmation(r) for r in kept)
    rerun = CountingMeasurer()
    result = _tune(db, graph, rerun, trials=9)
    assert not set(rerun.calls) - set(c.config for c in result.search_trials)
    searched = [r.config for r in result.search_trials]
    assert len(searched) == 9 and len(set(searched)) == 9  # budget completed, nothing measured twice
    assert all(rerun.calls.get(r.config, 0) <= CONFIRM_ROUNDS for r in kept)  # old trials: only confirmations


def graph_target(db, graph) -> str:
    from kernelgen.target import Target

    return Target.current("cpp").fingerprint


def _trials_to_reach(result, target: float) -> int:
    for i, r in enumerate(result.search_trials, 1):
        if r.measurement.ok and r.measurement.time.median <= target:
            return i
    return len(result.search_trials) + 1


def test_warm_start_from_a_neighbouring_shape_needs_fewer_trials(db, tmp_path) -> None:
    neighbour = _tune(db, relu_add_graph(256), CountingMeasurer(), trials=25)
    target = neighbour.best.measurement.time.median  # what tuning the neighbouring shape achieved
    warm = _tune(db, relu_add_graph(512), CountingMeasurer(), trials=20, sampler="random")  # same family, new shape
    with open_db(f"sqlite:///{tmp_path / 'cold.sqlite'}") as fresh:
        cold = _tune(fresh, relu_add_graph(512), CountingMeasurer(), trials=20, sampler="random")
    # The default first, then the neighbour's best config.
    assert _trials_to_reach(warm, target) == 2
    assert _trials_to_reach(cold, target) > 2


def test_workers_share_one_study_without_duplicates(db) -> None:
    graph = relu_add_graph()
    measurer = CountingMeasurer()
    result = _tune(db, graph, measurer, trials=12, workers=3)
    configs = [r.config for r in result.search_trials]
    assert len(configs) == 12 and len(set(configs)) == 12


@pytest.mark.timeout(180)
def test_run_completes_through_crash_hang_garbage_and_compile_error(db) -> None:
    graph = relu_add_graph()
    impl = FakeImpl(graph, modes=("ok", "segv", "hang", "garbage", "syntax"), reps=(1,))
    result = tune_graph(graph, db=db, implementations=[impl], sampler="exhaustive", trials=8, timeout=2.0,
                        policy=TimingPolicy(min_time=0.002, threads=1))
    status = {r.config["mode"]: r.measurement.status for r in result.search_trials}
    assert status == {"ok": Status.OK, "segv": Status.RUNTIME_ERROR, "hang": Status.TIMEOUT,
                      "garbage": Status.WRONG_RESULT, "syntax": Status.COMPILE_ERROR}
    assert result.best is not None and result.best.config["mode"] == "ok"


def test_patience_and_seconds_budgets_stop_the_search(db, tmp_path) -> None:
    flat = CountingMeasurer(fail=lambda c: c != Config(a=1, b=1, c=1))  # nothing ever beats the default
    result = _tune(db, relu_add_graph(), flat, patience=3)
    assert result.stop_reasons == {"landscape": "patience"} and len(result.search_trials) == 1 + 3

    import time as _time

    def slow(impl, config):
        _time.sleep(0.05)
        return CountingMeasurer()(impl, config)

    with open_db(f"sqlite:///{tmp_path / 'seconds.sqlite'}") as other:
        timed = tune_graph(relu_add_graph(), db=other, implementations=[LandscapeImpl(relu_add_graph())],
                           measure=slow, seconds=0.3, seed=1)
    assert timed.stop_reasons == {"landscape": "seconds"} and 1 <= len(timed.search_trials) < 100


class _Named(LandscapeImpl):
    def __init__(self, graph, name: str) -> None:
        super().__init__(graph)
        self.name = name


class _LoadShiftMeasurer(CountingMeasurer):
    """``fast`` is truly twice as fast as the other implementation, but it is tuned first while the machine
    is busy (3x slower); by the time the other one is tuned, the load is gone."""

    def __init__(self, fast: str) -> None:
        super().__init__()
        self.fast, self.load = fast, 3.0

    def __call__(self, impl, config):
        if impl.name != self.fast:
            self.load = 1.0
        m = super().__call__(impl, config)
        scale = self.load * (0.5 if impl.name == self.fast else 1.0)
        t = m.time.median * scale
        return type(m)(config, m.status, type(m.time)(median=t, min=t, spread=0.0, repeats=5), threads=1)


def test_implementations_are_compared_side_by_side_and_dispatch_agrees(db) -> None:
    from kernelgen.values import Evidence

    graph = relu_add_graph()
    impls = [_Named(graph, "a-fast-under-load"), _Named(graph, "b-slow")]
    measurer = _LoadShiftMeasurer(fast="a-fast-under-load")
    result = tune_graph(graph, db=db, implementations=impls, measure=measurer, seed=1, trials=16)
    # Each implementation's own confirmed winner says b is faster (a was timed under load) ...
    per_impl = {r.implementation: r for r in result.trials if r.evidence is Evidence.CONFIRMED
                and r.measurement.message.endswith("configs")}
    assert set(per_impl) == {"a-fast-under-load", "b-slow"}
    # ... but side by side, a wins: it is declared, and the database gives dispatch the same record.
    assert result.best.implementation == "a-fast-under-load" and result.best.evidence is Evidence.DECLARED
    assert db.best(graph.workload_key, result.target.fingerprint) == result.best
    declared = [r for r in result.trials if r.evidence is Evidence.DECLARED]
    assert len(declared) == 1
    from kernelgen.tune.report import summarise

    assert summarise(result.trials)[0].best == result.best  # the HTML report names the same winner
    again = CountingMeasurer()
    second = tune_graph(graph, db=db, implementations=impls, measure=again, seed=1, trials=8)
    assert again.total == 0 and second.measured == 0 and second.best == result.best


def test_a_lucky_search_sample_never_outranks_the_declared_winner(db) -> None:
    graph = relu_add_graph()
    lucky = Config(a=1, b=1, c=1)  # the default: measured first, far from the optimum

    class LuckyOnce(CountingMeasurer):
        def __call__(self, impl, config):
            m = super().__call__(impl, config)
            if config == lucky and self.calls[config] == 1:  # one sample at 1% of its real time
                t = m.time.median * 0.01
                return type(m)(config, m.status, type(m.time)(median=t, min=t, spread=0.0, repeats=5), threads=1)
            return m

    result = _tune(db, graph, LuckyOnce(), trials=10)
    assert result.best.config != lucky and is_confirmation(result.best)
    assert db.best(graph.workload_key, result.target.fingerprint) == result.best


class _TinyImpl(LandscapeImpl):
    """Eight configs, the default being the one a tie broken by config key alone would never pick."""

    def space(self, target):
        from kernelgen.space import Param, SearchSpace

        params = [Param("a", (1, 2, 4, 8)), Param("b", (1, 2)), Param("c", (1,))]
        default = max(SearchSpace(params), key=lambda c: c.key())
        return SearchSpace(params, default=default)


def test_a_config_within_the_tie_tolerance_of_the_default_does_not_replace_it(db) -> None:
    from kernelgen.tune.trial_loop import TIE_TOLERANCE

    graph = relu_add_graph()
    impl = _TinyImpl(graph)
    space = impl.space(None)
    default = space.default()
    challenger = next(c for c in space if c != default)  # a hair faster than the default, within the tolerance

    class NearTie(CountingMeasurer):
        def __call__(self, impl, config):
            m = super().__call__(impl, config)
            if not m.ok:
                return m
            t = 1e-3 * ((1 - TIE_TOLERANCE / 2) if config == challenger else 1.0)
            return type(m)(config, m.status, type(m.time)(median=t, min=t, spread=0.0, repeats=5), threads=1)

    measurer = NearTie(fail=lambda c: c not in (default, challenger))
    result = tune_graph(graph, db=db, implementations=[impl], measure=measurer, seed=1, trials=8)
    assert measurer.calls[challenger] == 1 + CONFIRM_ROUNDS  # it was a finalist ...
    assert result.best.config == default and is_confirmation(result.best)  # ... and lost the tie
