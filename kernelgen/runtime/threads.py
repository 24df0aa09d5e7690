"""Kernel threads under load: while other processes keep CPUs busy, kernelgen's C++ kernels launch with only as
many OpenMP threads as there are CPUs left, instead of one per CPU.

Why: an OpenMP kernel waits at every barrier for its slowest thread, and a thread that shares a CPU with another
process runs only one scheduler slice in two. On this project's 2-core machine, with both cores loaded by
other work, a region kernel of a few microseconds took milliseconds (``benchmarks/bench_models.py --hog``);
ATen's parallel ops suffer the same (eager is not changed: its threads are the user's ``torch.set_num_threads``).
The tuner already times with the free CPUs only (``kernelgen.tune.tuner``); this does the same at run time.

A daemon thread samples ``/proc/stat`` and this process's own CPU time every ``PERIOD`` seconds: the CPU time
other processes used on this process's CPUs, in CPUs, is the load elsewhere; ``free = CPUs - round(load)``
(at least 1) caps every launch (``kernelgen.backends.cpp.set_thread_cap``). It starts with the first model
compiled through the backend; ``KERNELGEN_ADAPT_THREADS=0`` turns it off. Linux only (elsewhere: no cap).

The ATen ops of a compiled graph (a CNN's convolutions, the regions a record leaves to ATen) follow the same cap
while the graph runs (``following_load``). With the kernels capped alone, every one-thread kernel let OpenMP's
second thread fall asleep and the next two-thread convolution woke it on a busy CPU: a loaded ResNet-18 inference
step took 59-66 ms against 44-55 with the whole graph capped (2-core AMD EPYC, two busy processes). Capping the
whole graph trades one CPU's share for steady steps: ``benchmarks/bench_load.py`` gave kernelgen's mean step 1.04-4.6x
eager's (whose two threads have phases of 10x slower steps), its median 0.76-1.55x.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kernelgen.backends import cpp
from kernelgen.env_flags import env_flag

log = logging.getLogger("kernelgen.runtime")

ENV = "KERNELGEN_ADAPT_THREADS"
PERIOD = 0.5  # seconds between samples: a load that lasts less than this is not worth following
_STARTED = threading.Event()


def busy_elsewhere(before: tuple[int, int, int], after: tuple[int, int, int]) -> float:
    """CPUs' worth of time other processes used between two samples ``(busy ticks of our CPUs, all ticks of our
    CPUs, this process's ticks)``: their busy time minus ours, over the elapsed time per CPU."""
    busy = after[0] - before[0]
    total = after[1] - before[1]
    ours = after[2] - before[2]
    cpus = len(_cpus())
    if total <= 0 or cpus == 0:
        return 0.0
    elapsed = total / cpus  # ticks per CPU
    return max(0.0, (busy - ours) / elapsed)


def free_threads(load: float, cpus: int) -> int:
    """Threads a kernel should use with ``load`` CPUs busy elsewhere out of ``cpus``: at least one."""
    return max(1, cpus - int(load + 0.5))


def _cpus() -> set[int]:
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def sample() -> tuple[int, int, int] | None:
    """``(busy ticks, all ticks)`` of this process's CPUs since boot and this process's user+system ticks; None
    without ``/proc``."""
    cpus = _cpus()
    try:
        with open("/proc/stat") as handle:
            lines = handle.readlines()
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    busy, total = cpu_ticks(lines, cpus)
    return busy, total, int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def cpu_ticks(stat_lines: list[str], cpus: set[int]) -> tuple[int, int]:
    """``(busy, all)`` ticks of ``cpus`` from ``/proc/stat``'s lines. Steal time (a VM guest's vCPU held by the
    hypervisor) is elapsed time but not busy: no process of this machine holds the CPU, and fewer threads do not
    get it back (a stolen vCPU stalls a one-thread kernel as much as one thread of two). Counted as busy, as it
    was, a KVM guest with half a CPU of steal launched kernelgen's kernels and its graphs' ATen ops on one thread
    while eager kept two: the same model was up to 2x slower under kernelgen on such a machine than on a quiet one
    (the 1.5x vs 1.0x eager of issue 33; docs/performance.md)."""
    busy = total = 0
    for line in stat_lines:
        name, *ticks = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in ticks[:8]] + [0] * (8 - len(ticks[:8]))
            user, nice, system, idle, iowait, irq, softirq, steal = values
            total += sum(values)
            busy += user + nice + system + irq + softirq
    return busy, total


def _watch() -> None:
    cpus = len(_cpus())
    last, cap = sample(), cpus
    while last is not None:
        time.sleep(PERIOD)
        now = sample()
        if now is None:
            return
        threads = free_threads(busy_elsewhere(last, now), cpus)
        if threads != cap:
            log.info("kernelgen: %d of %d CPUs busy with other work; kernels launch with %d thread%s", cpus - threads,
                     cpus, threads, "" if threads == 1 else "s")
            cap = threads
            cpp.set_thread_cap(None if threads >= cpus else threads)
        last = now


def start() -> None:
    """Start following the load (once per process; not with ``KERNELGEN_ADAPT_THREADS=0`` or on one CPU)."""
    if _STARTED.is_set() or not env_flag(ENV, True) or len(_cpus()) < 2 or sample() is None:
        return
    _STARTED.set()
    threading.Thread(target=_watch, name="kernelgen-threads", daemon=True).start()


def following_load(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` (a compiled graph) with its ATen ops capped at the kernels' thread count while other processes hold
    CPUs (module docstring); unchanged, one list read per call, while nothing is capped. torch keeps the count per
    thread (OpenMP's setting) once a thread has run ATen ops, so other Python threads keep theirs (a thread that
    starts inside the window takes the capped count); setting it twice costs 0.2 us."""
    import torch

    def run_following_load(*args: Any) -> Any:
        cap = cpp.THREAD_CAP[0]
        if cap >= 1 << 30:
            return run(*args)
        mine = torch.get_num_threads()
        if cap >= mine:
            return run(*args)
        torch.set_num_threads(cap)
        try:
            return run(*args)
        finally:
            torch.set_num_threads(mine)

    return run_following_load


__all__ = ["ENV", "PERIOD", "busy_elsewhere", "cpu_ticks", "following_load", "free_threads", "sample", "start"]
