"""The backend contract: compile a rendered ``Source`` into a launchable ``Kernel`` and time it.

A ``Kernel`` is called with torch tensors: the graph's inputs in argument order, then its outputs
(preallocated by the caller). Sizes are baked into the source at render time (the workload key includes
every shape), so a launch passes pointers only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from kernelgen.backends.clocks import HostClock, clock_for
from kernelgen.ir.target import Target
from kernelgen.ir.values import Source, TimeStats


class Kernel(ABC):
    """A compiled, launchable kernel. Calling it is thread-safe unless the backend says otherwise."""

    source: Source

    @property
    def source_file(self) -> Path | None:
        """The file the backend compiled (in the kernel cache), for ``explain`` and error messages."""
        return None

    @abstractmethod
    def __call__(self, *tensors: Any) -> None:
        """Launch on ``inputs... , outputs...``; raises ``InputMismatchError`` for tensors it cannot take."""


class Backend(ABC):
    """Compiles and runs kernels for one kind of device.

    Contract:
    - ``is_available()`` never raises; ``unavailable_reason()`` says what to install when it is False.
    - ``compile(source)`` returns a ``Kernel`` or raises ``CompileError`` whose message holds the path of
      the rendered source. Results are cached; compiling the same source twice is cheap.
    - ``benchmark(fn)`` times a zero-argument callable and returns ``TimeStats`` in seconds, with the one
      timing loop (``kernelgen.backends.timing``) on the clock of the backend's tensor device (``clock()``,
      ``kernelgen.backends.clocks``).
    - ``recipe()`` is everything besides the source text that shapes a compiled kernel (compiler, version,
      flags, cache format); it is part of every implementation hash.
    Instances are process-wide singletons (``kernelgen.backends.get_backend``) and thread-safe.
    """

    name: ClassVar[str]
    language: ClassVar[str]

    @abstractmethod
    def is_available(self) -> bool: ...

    def unavailable_reason(self) -> str:
        return ""

    def has_gpu(self) -> bool:
        return False

    @abstractmethod
    def target(self) -> Target: ...

    @abstractmethod
    def compile(self, source: Source) -> Kernel: ...

    def recipe(self) -> dict[str, Any]:
        """Everything besides the source text that shapes a compiled kernel: compiler and its version,
        flags, cache format. JSON-able and cheap (cached by the backend); part of every implementation
        hash, so a change of toolchain or flags is a new tuning key, never a reuse of old records."""
        return {"backend": self.name}

    def synchronize(self) -> None:
        """Wait for queued work (no-op on the CPU)."""

    def tensor_device(self) -> str:
        """The torch device type this backend's kernels read and write tensors on (the CPU unless a backend
        says otherwise)."""
        return "cpu"

    def clock(self) -> HostClock:
        """How kernels on this backend's tensors are timed (``kernelgen.backends.clocks``: by device, so every
        candidate on one device gets the same clock, whichever backend built it)."""
        return clock_for(self.tensor_device())

    def stopwatch(self) -> Any:
        """The clock of ``kernelgen.backends.timing``: wall time on the CPU, CUDA events on a GPU."""
        return self.clock().stopwatch()

    def cold_cache(self) -> Callable[[], None] | None:
        """What runs untimed before each timed run so every run starts alike (a GPU's L2 flush), or None."""
        return self.clock().cold_cache()

    def benchmark(self, fn: Callable[[], Any], *, min_time: float = 0.1, warmup: int = 2,
                  min_repeats: int = 5, max_repeats: int = 200, before: Callable[[], None] | None = None) -> TimeStats:
        """Time ``fn`` with the one timing loop on this backend's clock; ``before`` runs untimed before every
        run (after the clock's own ``cold_cache`` step)."""
        return self.clock().time(fn, min_time=min_time, warmup=warmup, min_repeats=min_repeats,
                                 max_repeats=max_repeats, before=before)
