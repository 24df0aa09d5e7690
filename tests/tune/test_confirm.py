"""confirm(): finalists, the default and eager share every round; rounds are bounded; the robust statistic."""

from __future__ import annotations

from kernelgen.ir.values import Config, Measurement, Status, TimeStats
from kernelgen.tune.confirm import CONFIRM_ROUNDS, MAX_ROUNDS, Finalist, confirm, robust_time


def _stats(t: float) -> TimeStats:
    return TimeStats(median=t, min=t, spread=0.0, repeats=5)


def _finalist(log: list[str], name: str, times, trial=None, default=False) -> Finalist:
    it = iter(times)

    def measure() -> Measurement:
        log.append(name)
        return Measurement(Config(name=name), Status.OK, _stats(next(it)), threads=1)

    return Finalist(name, measure, trial, default)


def test_eager_and_the_default_are_measured_in_every_round_beside_the_finalists() -> None:
    log: list[str] = []
    finalists = [_finalist(log, "a", [1.0] * 9, trial=1.0), _finalist(log, "d", [2.0] * 9, trial=2.0, default=True)]

    def eager() -> TimeStats:
        log.append("eager")
        return _stats(4.0)

    conf = confirm(finalists, str, eager=eager)
    assert conf.rounds == CONFIRM_ROUNDS and conf.measured == 3 * CONFIRM_ROUNDS
    rounds = [log[i:i + 3] for i in range(0, len(log), 3)]
    assert all(sorted(r) == ["a", "d", "eager"] for r in rounds)  # each round holds each of them once ...
    assert len({tuple(r) for r in rounds}) == len(rounds)  # ... in a rotating order
    assert conf.results[conf.winner][0] == "a" and conf.eager.median == 4.0 and not conf.doubt


def test_rounds_stop_at_the_bound_when_the_leader_never_agrees_with_its_trial() -> None:
    log: list[str] = []
    conf = confirm([_finalist(log, "a", [10.0] * 20, trial=1.0)], str)
    assert conf.rounds == MAX_ROUNDS and len(log) == MAX_ROUNDS and "search trial" in conf.doubt


def test_the_smallest_round_median_is_the_time_and_a_tie_goes_to_the_default() -> None:
    assert robust_time([_stats(3.0), _stats(1.0), _stats(2.0)]).median == 1.0
    log: list[str] = []
    finalists = [_finalist(log, "a", [0.999, 5.0, 5.0]), _finalist(log, "z-default", [5.0, 1.0, 5.0], default=True)]
    conf = confirm(finalists, str)
    assert conf.results[conf.winner][0] == "z-default"  # 0.999 vs 1.0 is within the tie tolerance


def test_torch_compile_is_a_baseline_of_every_round_and_its_time_reaches_every_record() -> None:
    from kernelgen.tune.confirm import commit_confirmation
    from kernelgen.ir.values import Reference

    log: list[str] = []
    finalists = [_finalist(log, "a", [1.0] * 9, trial=1.0), _finalist(log, "d", [2.0] * 9, trial=2.0, default=True)]

    def baseline(name: str, times):
        it = iter(times)

        def run() -> TimeStats | None:
            log.append(name)
            t = next(it)
            return None if t is None else _stats(t)
        return run

    # torch.compile's second round was disturbed (None): it misses that round, and keeps the fastest of the rest
    conf = confirm(finalists, str, eager=baseline("eager", [4.0, 4.2, 4.1]),
                   references={"torch.compile": baseline("torch.compile", [0.9, None, 0.8])})
    rounds = [log[i:i + 4] for i in range(0, len(log), 4)]
    assert len(rounds) == CONFIRM_ROUNDS and all(sorted(r) == ["a", "d", "eager", "torch.compile"] for r in rounds)
    assert conf.measured == 4 * CONFIRM_ROUNDS
    by_name = {r.name: r for r in conf.references}
    assert list(by_name) == ["eager", "torch.compile"] and conf.eager.median == 4.0
    assert by_name["torch.compile"].time.median == 0.8 and by_name["torch.compile"].message == ""
    records = commit_confirmation(conf, True, lambda item, m, evidence: m, "test")
    assert all(m.references == conf.references for m in records)  # the report reads them off the verdict
    assert all(isinstance(r, Reference) for r in records[0].references)


def test_a_baseline_that_cannot_compile_is_skipped_with_its_reason_and_the_rounds_go_on() -> None:
    from kernelgen.check.baselines import ReferenceSkipped

    log: list[str] = []
    calls = []

    def broken() -> TimeStats:
        calls.append(1)
        raise ReferenceSkipped("torch.compile failed: InductorError: no C++ compiler")

    conf = confirm([_finalist(log, "a", [1.0] * 9, trial=1.0)], str, references={"torch.compile": broken})
    assert len(calls) == 1 and len(log) == CONFIRM_ROUNDS  # tried once, then left out of the later rounds
    (ref,) = conf.references
    assert ref.time is None and ref.message == "torch.compile failed: InductorError: no C++ compiler"
    assert conf.results[conf.winner][0] == "a" and not conf.doubt


def test_a_winner_within_the_rounds_spread_of_the_default_leaves_the_default() -> None:
    """3% faster at its best round, but its two best rounds are 4% apart: more rounds, then the default is the
    verdict."""
    from kernelgen.tune.confirm import round_spread

    log: list[str] = []
    noisy = [0.97, 1.03, 1.01, 1.05, 1.02, 1.04]
    finalists = [_finalist(log, "tuned", noisy, trial=1.0),
                 _finalist(log, "default", [1.00, 1.06, 1.02, 1.08, 1.04, 1.01], trial=1.0, default=True)]
    conf = confirm(finalists, str)
    assert round_spread([Measurement(Config(), Status.OK, _stats(t)) for t in noisy]) > 1.00 / 0.97 - 1
    assert conf.rounds == MAX_ROUNDS  # more rounds were taken before giving up on the margin
    assert conf.results[conf.winner][0] == "default" and not conf.doubt
    assert "the default stays" in conf.caveat


def test_a_winner_clearly_beyond_the_spread_replaces_the_default() -> None:
    log: list[str] = []
    finalists = [_finalist(log, "tuned", [0.50, 0.53, 0.51] * 2, trial=0.5),
                 _finalist(log, "default", [1.00, 1.06, 1.02] * 2, trial=1.0, default=True)]
    conf = confirm(finalists, str)
    assert conf.rounds == CONFIRM_ROUNDS and conf.results[conf.winner][0] == "tuned" and not conf.caveat


def test_aten_as_a_default_of_the_showdown_is_kept_against_a_kernel_within_the_spread() -> None:
    """In the verdict's rounds the graph's ATen ops are a default too (their one config): a kernel replaces them only
    by a margin the rounds can show."""
    log: list[str] = []
    finalists = [_finalist(log, "pointwise", [0.98, 1.05, 1.04, 1.06, 1.01, 1.05], trial=1.0),
                 _finalist(log, "aten", [1.00, 1.02, 1.05, 1.03, 1.01, 1.04], trial=1.0, default=True)]
    conf = confirm(finalists, str)
    assert conf.results[conf.winner][0] == "aten"
