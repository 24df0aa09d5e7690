"""What the runtime needs from the layers above it, as two base classes the public API fills in.

The runtime never imports the front end or the tuner. ``kernelgen.api`` installs a ``FrontEnd`` (how a
callable becomes a traced ``Graph``, and the ``torch.compile`` path for what no template covers) and a
``Tuner`` (``tune="auto"``); a ``CompiledFunction`` may also be given its own front end.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.errors import KernelgenError


class FrontEnd(ABC):
    """How the runtime gets a traced graph of a user's callable. Implementations are stateless and
    thread-safe; errors are ``KernelgenError``s (``TraceError`` sends a signature to the graph path,
    ``ShapePropagationError`` to a checked eager run)."""

    @abstractmethod
    def describe(self, fn: Any) -> Any:
        """A callee for ``fn``: an object with ``fn``, ``name``, ``arity``, ``module``, ``state``, ``bind``,
        ``call``, ``read_state``, ``modes`` and ``workload_name`` (``kernelgen.frontend.callables.Callee``);
        raises ``KernelgenError`` for something ``kernelgen.compile`` cannot take."""

    @abstractmethod
    def capture(self, callee: Any, values: Sequence[Any], layout: Any = None, state: Sequence[Any] = ()) -> Any:
        """The trace of ``callee`` on bound ``values``: an object with ``graph``, ``plan``
        (a ``kernelgen.runtime.outputs.OutputPlan``), ``picks`` and ``replay``."""

    @abstractmethod
    def compile_graph(self, fn: Any, options: dict[str, Any], dynamic: bool | None) -> Callable[..., Any]:
        """``fn`` compiled by ``torch.compile`` with the kernelgen backend, whose regions are compiled with
        ``options`` (``kernelgen.compile``'s keywords)."""


class Tuner(ABC):
    """``tune="auto"``: tune a graph on first call. Both methods commit every trial to ``db`` and return the
    declared best ``TuningRecord``, or None; per-config failures are records, never exceptions."""

    @abstractmethod
    def tune_graph(self, graph: Any, *, backend: str, db: Any, trials: int | None, seconds: float | None,
                   name: str | None) -> Any:
        """Tune every implementation of ``graph`` on ``backend`` within the budget."""

    @abstractmethod
    def tune_bucket(self, generic: Sequence[Any], graph: Any, *, backend: str, db: Any, trials: int | None,
                    seconds: float | None, name: str | None) -> Any:
        """Tune a shape family's generic implementations at the static graph ``graph`` of one size bucket."""


_LOCK = threading.Lock()
_INSTALLED: dict[str, Any] = {}


def install(front_end: FrontEnd | None = None, tuner: Tuner | None = None) -> None:
    """Install the front end and/or the tuner every later ``CompiledFunction`` uses (``kernelgen.api`` does,
    on import)."""
    with _LOCK:
        if front_end is not None:
            _INSTALLED["front_end"] = front_end
        if tuner is not None:
            _INSTALLED["tuner"] = tuner


def installed_front_end() -> FrontEnd:
    """The installed front end; ``KernelgenError`` when none is (kernelgen's package root installs one)."""
    return _installed("front_end", "no front end is installed in the runtime: import kernelgen (kernelgen.api "
                                   "installs it) or pass front_end= to CompiledFunction")


def installed_tuner() -> Tuner:
    """The installed tuner; ``KernelgenError`` when none is."""
    return _installed("tuner", "tune='auto' needs a tuner installed in the runtime: import kernelgen "
                               "(kernelgen.api installs kernelgen.tune's)")


def _installed(kind: str, missing: str) -> Any:
    found = _INSTALLED.get(kind)
    if found is None:
        raise KernelgenError(missing)
    return found


__all__ = ["FrontEnd", "Tuner", "install", "installed_front_end", "installed_tuner"]
