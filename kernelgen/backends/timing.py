"""The one timing loop: warm up, then repeat a callable until a minimum total time and repeat count.

The device the timed tensors live on supplies the clock (``kernelgen.backends.clocks``: wall clock on the CPU,
CUDA events on a GPU) and what must happen untimed before each run (flushing a GPU's L2); callers add their own untimed step (restoring the inputs of a kernel that writes them). Everything
that times a kernel (tuning trials, confirmation rounds, eager baselines, ``Backend.benchmark``) comes here;
``interleaved`` is the same clock taking one run of each variant per round, for side-by-side benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernelgen.ir.values import TimeStats


class Stopwatch:
    """Wall-clock seconds of the code between ``start()`` and ``stop()``, with queued device work
    synchronised on both sides (``synchronize`` is a no-op on the CPU)."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None) -> None:
        self._synchronize = synchronize
        self._started = 0.0

    def start(self) -> None:
        self._synchronize()
        self._started = time.perf_counter()

    def stop(self) -> float:
        self._synchronize()
        return time.perf_counter() - self._started


def repeat(fn: Callable[[], Any], stopwatch: Stopwatch, *, min_time: float = 0.1, warmup: int = 2,
           min_repeats: int = 5, max_repeats: int = 200, before: Callable[[], None] | None = None) -> TimeStats:
    """Run ``fn`` ``warmup`` times, then time it until ``min_repeats`` runs and ``min_time`` seconds have
    passed (at most ``max_repeats`` runs). ``before`` runs untimed before every run, warm-ups included."""
    for _ in range(warmup):
        if before is not None:
            before()
        fn()
    samples: list[float] = []
    total = 0.0
    while len(samples) < max_repeats and (len(samples) < min_repeats or total < min_time):
        if before is not None:
            before()
        stopwatch.start()
        fn()
        elapsed = stopwatch.stop()
        samples.append(elapsed)
        total += elapsed
    return TimeStats.from_samples(samples)


def interleaved(variants: dict[str, Callable[[], Any]], rounds: int, stopwatch: Stopwatch) -> dict[str, list[float]]:
    """Seconds of ``rounds`` runs of each variant, one run of each per round in turn, so every variant sees
    the same machine load (benchmarks comparing kernelgen with eager and torch.compile). Each is warmed once."""
    for fn in variants.values():
        fn()
    samples: dict[str, list[float]] = {key: [] for key in variants}
    for _ in range(rounds):
        for key, fn in variants.items():
            stopwatch.start()
            fn()
            samples[key].append(stopwatch.stop())
    return samples


__all__ = ["Stopwatch", "interleaved", "repeat"]
