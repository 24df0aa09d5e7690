"""Search over a synthetic space with an injected measurer: validity, no repeats, budgets, failures, sharing."""

from __future__ import annotations

import math

import pytest

from kernelgen.errors import KernelgenError
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.values import Config, Measurement, Status, TimeStats
from kernelgen.tune import search as search_mod
from kernelgen.tune.domain import Domain
from kernelgen.tune.search import SAMPLERS, Searcher, run_search

CONCRETE = [s for s in SAMPLERS if s != "auto"]


def bowl_space() -> SearchSpace:
    # Tile-like ordinal params plus an unordered one; the product constraint removes big tiles.
    return SearchSpace(
        [Param("bx", (1, 2, 4, 8, 16, 32)), Param("by", (1, 2, 4, 8, 16)), Param("mode", ("a", "b")),
         Param("fixed", (7,))],
        [Constraint("bx*by <= 64", lambda c: c["bx"] * c["by"] <= 64)],
    )


def bowl_time(config: Config) -> float:
    return 1e-3 * (1.0 + (math.log2(config["bx"]) - 3) ** 2 + (math.log2(config["by"]) - 1) ** 2
                   + (0.5 if config["mode"] == "b" else 0.0))


OPTIMUM = Config(bx=8, by=2, mode="a", fixed=7)


class Bowl:
    """A measurer recording what it was asked; bx == 32 fails to compile, like an oversized tile."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.asked: list[Config] = []

    def __call__(self, config: Config) -> Measurement:
        assert self.space.is_valid(config), f"asked an invalid config {config}"
        self.asked.append(config)
        if config["bx"] == 32:
            return Measurement.failure(config, Status.COMPILE_ERROR, "too many registers")
        t = bowl_time(config)
        return Measurement(config, Status.OK, TimeStats(t, t, 0.0, 1))


@pytest.mark.parametrize("sampler", CONCRETE)
def test_every_sampler_exhausts_the_valid_space_without_repeats(sampler: str) -> None:
    space = bowl_space()
    bowl = Bowl(space)
    result = run_search(space, bowl, sampler=sampler, seed=3)
    valid = list(space)
    assert result.stop_reason == "exhausted"
    assert len(bowl.asked) == len(valid) == len(set(bowl.asked))
    assert set(bowl.asked) == set(valid)
    assert result.best is not None and result.best.config == OPTIMUM
    assert [m.config for m in result.evaluated] == bowl.asked


def test_default_sampler_finds_the_optimum_well_before_exhausting_the_space() -> None:
    space = bowl_space()
    budget = len(list(space)) // 2
    result = run_search(space, Bowl(space), trials=budget, seed=0)
    assert result.stop_reason == "trials" and len(result.evaluated) == budget
    assert result.best is not None and result.best.config == OPTIMUM


def test_default_sampler_starts_at_the_config_farthest_from_those_taken() -> None:
    # A random start clumps; the maximin start goes to the far corner, then fills the largest gaps.
    space = SearchSpace([Param("x", tuple(range(21))), Param("y", tuple(range(21)))])
    searcher = Searcher(space, sampler="bo", seed=5)
    taken: list[Config] = []
    for _ in range(4):
        config = searcher.ask()
        assert config is not None
        taken.append(config)
        searcher.tell(config, Measurement(config, Status.OK, TimeStats(1e-3, 1e-3, 0.0, 1)))
    first, second = taken[0], taken[1]
    assert abs(second["x"] - first["x"]) == max(first["x"], 20 - first["x"])
    assert abs(second["y"] - first["y"]) == max(first["y"], 20 - first["y"])
    gaps = [abs(a["x"] - b["x"]) + abs(a["y"] - b["y"]) for i, a in enumerate(taken) for b in taken[:i]]
    assert min(gaps) >= 10


def test_trials_budget_and_failures_are_recorded_as_data() -> None:
    space = bowl_space()
    bowl = Bowl(space)
    seen: list[tuple[int, Config, Status]] = []
    result = run_search(space, bowl, trials=12, sampler="random", seed=1,
                        on_trial=lambda i, c, m: seen.append((i, c, m.status)))
    assert len(result.evaluated) == 12 and result.stop_reason == "trials"
    assert [i for i, _, _ in seen] == list(range(12))
    statuses = {m.status for m in result.evaluated}
    assert statuses <= {Status.OK, Status.COMPILE_ERROR}


def test_all_failures_do_not_crash_and_leave_no_best() -> None:
    space = bowl_space()

    def broken(config: Config) -> Measurement:
        return Measurement.failure(config, Status.RUNTIME_ERROR, "segfault")

    result = run_search(space, broken, trials=15, seed=0)
    assert len(result.evaluated) == 15 and result.best is None
    assert len({m.config for m in result.evaluated}) == 15


def test_patience_stops_after_n_evaluations_without_improvement() -> None:
    space = bowl_space()
    calls = []

    def worse_each_time(config: Config) -> Measurement:
        calls.append(config)
        t = float(len(calls))  # the first is the best forever
        return Measurement(config, Status.OK, TimeStats(t, t, 0.0, 1))

    result = run_search(space, worse_each_time, patience=4, sampler="random", seed=0)
    assert result.stop_reason == "patience"
    assert len(result.evaluated) == 5


def test_seconds_budget_uses_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(search_mod.time, "monotonic", lambda: clock[0])
    space = bowl_space()
    bowl = Bowl(space)

    def slow(config: Config) -> Measurement:
        clock[0] += 2.0  # each measurement takes two (fake) seconds
        return bowl(config)

    result = run_search(space, slow, seconds=7.0, seed=0)
    assert result.stop_reason == "seconds"
    assert len(result.evaluated) == 4  # started at 0, 2, 4, 6 s; at 8 s the budget is spent


@pytest.mark.parametrize("bad", [{"trials": 0}, {"seconds": -1.0}, {"patience": 0}, {"seconds": math.nan}])
def test_impossible_budgets_are_rejected(bad: dict) -> None:
    with pytest.raises(KernelgenError):
        run_search(bowl_space(), Bowl(bowl_space()), **bad)


def test_unknown_sampler_names_the_choices() -> None:
    with pytest.raises(KernelgenError, match="random"):
        Searcher(bowl_space(), sampler="simplex")


def test_warm_start_configs_are_asked_first_and_invalid_ones_skipped() -> None:
    space = bowl_space()
    warm = [Config(bx=2, by=4, mode="b", fixed=7), Config(bx=32, by=16, mode="a", fixed=7),  # breaks bx*by
            Config(bx=1, by=1, mode="a", fixed=7), Config(bx=3, by=1, mode="a", fixed=7)]  # 3 not a choice
    bowl = Bowl(space)
    run_search(space, bowl, trials=5, warm_start=warm, seed=0)
    assert bowl.asked[:2] == [warm[0], warm[2]]
    assert len(set(bowl.asked)) == 5


def test_ask_tell_best_and_counts() -> None:
    space = bowl_space()
    searcher = Searcher(space, sampler="random", seed=2)
    bowl = Bowl(space)
    for _ in range(6):
        config = searcher.ask()
        assert config is not None
        searcher.tell(config, bowl(config))
    assert searcher.n_evaluated == 6
    ok = [c for c in bowl.asked if c["bx"] != 32]
    best_config = min(ok, key=bowl_time)
    assert searcher.best == (best_config, pytest.approx(bowl_time(best_config)))
    with pytest.raises(KernelgenError):
        searcher.tell(OPTIMUM if OPTIMUM not in bowl.asked else bowl.asked[0], bowl(OPTIMUM))


def test_a_raising_measurer_ends_the_run_and_its_config_can_be_asked_again() -> None:
    space = bowl_space()

    def explode(config: Config) -> Measurement:
        raise RuntimeError("measurer bug")

    with pytest.raises(RuntimeError):
        run_search(space, explode, trials=3, sampler="exhaustive")
    searcher = Searcher(space, sampler="exhaustive")
    assert searcher.ask() == next(iter(space))


def test_two_searchers_sharing_a_sqlite_study_never_repeat_each_others_configs(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'study.sqlite'}"
    space = bowl_space()
    bowl = Bowl(space)
    a = Searcher(space, sampler="auto", seed=0, storage=url, study_name="shared")
    b = Searcher(space, sampler="auto", seed=0, storage=url, study_name="shared")  # same seed on purpose
    for _ in range(5):
        ca, cb = a.ask(), b.ask()  # both pending at once: b must not take a's config
        assert ca is not None and cb is not None and ca != cb
        a.tell(ca, bowl(ca))
        b.tell(cb, bowl(cb))
    assert len(bowl.asked) == len(set(bowl.asked)) == 10
    assert a.n_evaluated == b.n_evaluated == 10
    # A later worker on the same study resumes: it never re-measures what is stored.
    c = Searcher(space, sampler="random", seed=5, storage=url, study_name="shared")
    rest = []
    for _ in range(3):
        config = c.ask()
        assert config is not None
        rest.append(config)
        c.tell(config, bowl(config))
    assert set(rest).isdisjoint(bowl.asked[:10]) and len(set(rest)) == 3
    assert c.n_evaluated == 13


def test_spaces_too_large_to_enumerate_are_sampled_validly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_mod, "Domain", lambda space: Domain(space, enumerate_limit=0))
    space = bowl_space()
    for sampler in ("auto", "tpe", "random"):
        bowl = Bowl(space)
        result = run_search(space, bowl, trials=20, sampler=sampler, seed=4)
        assert len(result.evaluated) == 20 and len(set(bowl.asked)) == 20


def test_a_space_with_one_config_is_exhausted_after_it() -> None:
    space = SearchSpace([Param("only", (4,))])
    bowl_calls = []

    def measure(config: Config) -> Measurement:
        bowl_calls.append(config)
        return Measurement(config, Status.OK, TimeStats(1.0, 1.0, 0.0, 1))

    result = run_search(space, measure, trials=10)
    assert result.stop_reason == "exhausted" and bowl_calls == [Config(only=4)]
