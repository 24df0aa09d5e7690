"""How a kernel is timed on each kind of device: the clock, the untimed step before every run, and whether
the host's CPU load enters the figure.

One table, ``CLOCKS``, keyed by the torch device type the timed tensors live on, so every candidate on a
device is timed alike whatever implemented it: a generated template, a custom call, the vendor GEMM, or the
graph's own ATen ops (``kernelgen.runtime.aten``). Choosing the clock by backend instead let a candidate whose
tensors stayed on the host be timed with device events around host work.

- ``HostClock`` (the CPU, Triton's interpreter): wall-clock time; the run queue's wait and the thread cap
  (``kernelgen.check.load``) apply, since other processes on the CPUs slow the kernel itself.
- ``CudaClock`` (CUDA and ROCm GPUs): CUDA events around the launch, and before every run (warm-ups too)
  a write of a buffer larger than the L2 cache, so each run starts cold as a kernel inside a model does (as
  ``triton.testing.do_bench``). The host's load only delays launches, not the device time between events:
  no load rule applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kernelgen.backends.timing import Stopwatch, repeat
from kernelgen.ir.values import TimeStats

FLUSH_BYTES = 256 * 2**20  # the L2 flush buffer at least (triton.testing.do_bench's size; H100/H200 L2: 50-60 MiB)


class HostClock:
    """Wall-clock seconds on the host; the base of every clock."""

    host_bound: ClassVar[bool] = True  # the host's CPU load disturbs the figure: load probe and thread cap apply

    def stopwatch(self) -> Any:
        return Stopwatch()

    def cold_cache(self) -> Callable[[], None] | None:
        """What runs untimed before each run so that every run starts alike; None for nothing."""
        return None

    def time(self, fn: Callable[[], Any], *, min_time: float = 0.1, warmup: int = 2, min_repeats: int = 5,
             max_repeats: int = 200, before: Callable[[], None] | None = None) -> TimeStats:
        """Time ``fn`` with the one timing loop (``kernelgen.backends.timing.repeat``) on this clock; ``before``
        (the caller's untimed step, e.g. restoring inputs a kernel writes) runs after ``cold_cache``."""
        return repeat(fn, self.stopwatch(), min_time=min_time, warmup=warmup, min_repeats=min_repeats,
                      max_repeats=max_repeats, before=chain(self.cold_cache(), before))


class CudaClock(HostClock):
    """Device time between two CUDA events, L2 flushed before every run."""

    host_bound = False

    def __init__(self) -> None:
        self._flush: Any = None

    def stopwatch(self) -> Any:
        return EventStopwatch()

    def cold_cache(self) -> Callable[[], None] | None:
        if self._flush is None:
            import torch

            l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
            self._flush = torch.empty(max(FLUSH_BYTES, 2 * l2) // 4, dtype=torch.int32, device="cuda")
        return self._flush.zero_


class EventStopwatch:
    """Device seconds between two CUDA events recorded on the current stream."""

    def start(self) -> None:
        import torch

        self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


# torch device type -> the clock of tensors there (ROCm's GPUs are "cuda" to torch). One instance each per process:
# the GPU's flush buffer is allocated once.
CLOCKS: dict[str, HostClock] = {"cpu": HostClock(), "cuda": CudaClock()}


def clock_for(device: Any) -> HostClock:
    """The clock of tensors on ``device`` (a torch device or its name, ``"cuda:1"`` too); the host's for
    device types without one of their own."""
    kind = getattr(device, "type", None) or str(device).split(":", 1)[0]
    return CLOCKS.get(kind, CLOCKS["cpu"])


def chain(*steps: Callable[[], None] | None) -> Callable[[], None] | None:
    """One callable running the given steps in order (None when there are none)."""
    present = [step for step in steps if step is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def run() -> None:
        for step in present:
            step()

    return run


__all__ = ["CLOCKS", "CudaClock", "EventStopwatch", "FLUSH_BYTES", "HostClock", "chain", "clock_for"]
