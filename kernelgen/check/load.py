"""How much the machine got in the way of a timed region: the time this process's threads were ready to run
but waited for a CPU, as a fraction of the region's wall time.

On Linux the kernel keeps that figure per thread (``/proc/self/task/*/schedstat``, second field: run-queue
delay in nanoseconds), which is exactly contention and nothing else: a kernel that sleeps, waits on memory
or is merely slow adds nothing to it. Where schedstat is missing, involuntary context switches
(``getrusage``) stand in, converted with a typical scheduler time slice.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

WAIT_LIMIT = 0.05  # ready-but-waiting time above 5% of the wall time: the timing was contended
FALLBACK_SLICE = 0.003  # seconds one involuntary switch costs, roughly a CFS time slice, when schedstat is absent


def _run_queue_wait() -> float | None:
    """Seconds all threads of this process have spent waiting for a CPU so far; None without schedstat."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    seen = False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended between listdir and open
    return total / 1e9 if seen else None


def _involuntary_switches() -> int:
    try:
        import resource
    except ImportError:  # not POSIX: no signal at all
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


@dataclass
class LoadProbe:
    """``with LoadProbe() as probe: ...`` then ``probe.wait_fraction``: run-queue wait / wall time (0 = quiet).

    Summed over threads, so an OpenMP kernel whose every thread waits half the time reads ``threads * 0.5``.
    """

    wait_fraction: float = 0.0
    _wall: float = 0.0
    _wait: float | None = None
    _switches: int = 0

    def __enter__(self) -> "LoadProbe":
        self._wait = _run_queue_wait()
        self._switches = _involuntary_switches()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.perf_counter() - self._wall
        end = _run_queue_wait()
        if self._wait is not None and end is not None:
            waited = max(0.0, end - self._wait)
        else:
            waited = max(0, _involuntary_switches() - self._switches) * FALLBACK_SLICE
        self.wait_fraction = waited / wall if wall > 0 else 0.0

    @property
    def contended(self) -> bool:
        return self.wait_fraction > WAIT_LIMIT


BUSY_LIMIT = 0.5  # a CPU busy this share of a quiet moment of ours is held by other work


def _cpu_times() -> dict[int, tuple[int, int]]:
    """cpu index -> (idle, total) jiffies since boot, from ``/proc/stat``; {} where there is none."""
    out: dict[int, tuple[int, int]] = {}
    try:
        with open("/proc/stat") as f:
            lines = f.readlines()
    except OSError:
        return out
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            out[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return out


def cpus_busy_elsewhere(interval: float = 0.1) -> int:
    """How many of the CPUs this process may use were kept busy by other work during ``interval`` seconds
    in which this process sleeps (so whatever runs there is not ours). 0 where ``/proc/stat`` is missing.

    Why the tuner asks: an OpenMP kernel timed with one thread per CPU waits, at every barrier, for the
    thread that shares a CPU with another process. Under a busy loop on one of two cores every trial then
    took one scheduler slice (8 ms for 50-300 us kernels), so the search ranked noise and no verdict
    could be declared (benchmarks/bench_noise.py).
    """
    before = _cpu_times()
    time.sleep(interval)
    after = _cpu_times()
    busy = 0
    for cpu in os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ():
        if cpu in before and cpu in after:
            idle = after[cpu][0] - before[cpu][0]
            total = after[cpu][1] - before[cpu][1]
            busy += total > 0 and 1 - idle / total > BUSY_LIMIT
    return busy


__all__ = ["BUSY_LIMIT", "LoadProbe", "WAIT_LIMIT", "cpus_busy_elsewhere"]
