"""Steady-state host memory for compiled models: keep glibc's malloc from handing memory back to the kernel and
faulting it in again on every step.

Why: a compiled training step (AOTAutograd's graphs, kernelgen's or Inductor's alike) frees and allocates the
same few-MiB activations and gradients every step. glibc serves a block above its mmap threshold with a fresh
``mmap`` and returns the top of the heap past its trim threshold with ``sbrk``; both thresholds start at 128
KiB and only adapt to the largest block freed, so the next step touches fresh pages: 7,600-12,000 minor page
faults and 10-18 ms of system time per step of ResNet-18 (``examples/hf_models.py``, batch 4 at 128², train)
through ``torch.compile(backend="kernelgen")``, where eager in the same process settled at 0; a 512x512x3x3
``convolution_backward`` alone took 4.8 ms instead of 2.7 ms. With the mmap threshold at its largest (32 MiB)
and a trim threshold of 256 MiB both reached 0 faults per step (64 MiB still left 700-4,000); the step went from
70-80 ms to 58-60 ms (2-core AMD EPYC, glibc 2.36, medians of 10 steps). Inductor's own advice for CPUs is an
allocator preloaded for the same reason (jemalloc/tcmalloc); this is the in-process equivalent.

The cost: up to ``TRIM_BYTES`` of freed memory stays mapped in the process, and blocks up to 32 MiB come from
the heap (blocks above it are still mapped and unmapped per allocation, and kernelgen's own large outputs ask for
huge pages, ``kernelgen.runtime.entry``). Applied once per process when a model is compiled through the backend
(it changes the whole process's malloc, eager's ops included, the way a preloaded allocator would);
``KERNELGEN_MALLOC=0`` (or ``off``, ``false``, ``no``) leaves malloc as it is. glibc only: elsewhere (musl, macOS,
Windows) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

from kernelgen.env_flags import env_flag

log = logging.getLogger("kernelgen.runtime")

ENV = "KERNELGEN_MALLOC"
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's upper bound for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_BYTES = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
_LOCK = threading.Lock()
_APPLIED: list[bool] = []


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it: musl's mallopt does nothing useful)
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (module docstring) once per process; True when they are set now or
    were before, False when this process keeps malloc's defaults (not glibc, or ``KERNELGEN_MALLOC=0``)."""
    with _LOCK:
        if _APPLIED:
            return _APPLIED[0]
        libc = _glibc() if env_flag(ENV, True) else None
        done = False
        if libc is not None:
            libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
            libc.mallopt.restype = ctypes.c_int
            # mallopt returns 1 on success; the trim threshold first, since setting either one stops glibc
            # adapting the other
            done = bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)) and \
                bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
            log.info("kernelgen: malloc keeps up to %d MiB of freed memory and serves blocks up to %d MiB from its "
                     "heap (%s=0 leaves malloc as it is)", TRIM_BYTES >> 20, MMAP_THRESHOLD_BYTES >> 20, ENV)
        _APPLIED.append(done)
        return done


__all__ = ["ENV", "MMAP_THRESHOLD_BYTES", "TRIM_BYTES", "keep_freed_memory"]
