"""The one timing loop: warm-ups, repeat counts, minimum time, and untimed steps before each run."""

from __future__ import annotations

from kernelgen.backends import get_backend
from kernelgen.backends.timing import interleaved, repeat


class FakeStopwatch:
    """Each run 'takes' ``step`` seconds; records what happened between start and stop."""

    def __init__(self, log: list[str], step: float = 0.01) -> None:
        self.log, self.step = log, step

    def start(self) -> None:
        self.log.append("start")

    def stop(self) -> float:
        self.log.append("stop")
        return self.step


def test_warmups_then_repeats_until_min_repeats_and_min_time():
    log: list[str] = []
    stats = repeat(lambda: log.append("run"), FakeStopwatch(log), min_time=0.05, warmup=2, min_repeats=3,
                   max_repeats=100)
    assert log[:2] == ["run", "run"]  # warm-ups are not timed
    assert stats.repeats == 5  # 3 repeats are not 0.05 s yet; 5 are
    assert log[2:5] == ["start", "run", "stop"]


def test_max_repeats_bounds_the_loop_and_before_runs_untimed():
    log: list[str] = []
    stats = repeat(lambda: log.append("run"), FakeStopwatch(log, step=1e-9), min_time=10.0, warmup=1,
                   min_repeats=1, max_repeats=4, before=lambda: log.append("restore"))
    assert stats.repeats == 4
    assert log[:2] == ["restore", "run"]
    timed = log[2:]
    assert timed == ["restore", "start", "run", "stop"] * 4  # the restore is outside start..stop


def test_interleaved_takes_one_run_of_each_variant_per_round():
    log: list[str] = []
    samples = interleaved({"a": lambda: log.append("a"), "b": lambda: log.append("b")}, 3, FakeStopwatch(log))
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    runs = [e for e in log if e in ("a", "b")]
    assert runs == ["a", "b"] * 4  # one warm-up each, then rounds in turn


def test_the_cpu_backend_times_with_the_shared_loop():
    calls: list[int] = []
    stats = get_backend("cpp").benchmark(lambda: calls.append(1), min_time=0.0, warmup=2, min_repeats=7,
                                         max_repeats=7, before=lambda: calls.append(0))
    assert stats.repeats == 7 and calls.count(1) == 9 and calls.count(0) == 9
