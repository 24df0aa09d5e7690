"""The backend contract: compile a rendered ``Source`` into a launchable ``Kernel`` and time it.

A ``Kernel`` is called with torch tensors: the graph's inputs in argument order, then its outputs
(preallocated by the caller). Sizes are baked into the source at render time (the workload key includes
every shape), so a launch passes pointers only.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from kernelgen.target import Target
from kernelgen.values import Source, TimeStats


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
    - ``benchmark(fn)`` times a zero-argument callable and returns ``TimeStats`` in seconds.
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

    def benchmark(self, fn: Callable[[], Any], *, min_time: float = 0.1, warmup: int = 2,
                  min_repeats: int = 5, max_repeats: int = 200) -> TimeStats:
        """Warm up, then repeat ``fn`` until ``min_time`` seconds and ``min_repeats`` runs have passed."""
        for _ in range(warmup):
            fn()
        self.synchronize()
        samples: list[float] = []
        total = 0.0
        while len(samples) < max_repeats and (len(samples) < min_repeats or total < min_time):
            start = time.perf_counter()
            fn()
            self.synchronize()
            elapsed = time.perf_counter() - start
            samples.append(elapsed)
            total += elapsed
        return TimeStats.from_samples(samples)
