"""The Implementation seam: one way to compute a graph on one backend, tunable over a search space.

Templates (with the problem they matched, ``kernelgen.templates.implementation``) and registered custom calls
(``kernelgen.custom_calls.implementation``) both appear as ``Implementation``s, so the tuner, the
measurement worker and the dispatcher treat them alike. An implementation names how a worker process rebuilds
it from its graph (``worker_factory``), so the checking layer never needs to know where implementations
come from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import Graph
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config

Launcher = Callable[..., None]
"""Called with the graph's inputs then its preallocated outputs, in order; writes the outputs."""


class Implementation(ABC):
    """A candidate implementation of one graph on one backend.

    Contract: ``space(target)`` is cheap and deterministic; ``build(config, target)`` compiles (cached)
    and returns a ``Launcher`` or raises ``CompileError`` / ``KernelgenError`` for that config — the
    tuner turns those into failed ``Measurement``s. Instances are immutable and thread-safe.

    ``worker_factory`` (``"module:callable"``) and ``worker_args`` (JSON keyword arguments) say how an
    isolated measurement worker rebuilds the implementation: ``callable(graph, backend, **worker_args)``.
    """

    name: str  # "pointwise", "gemm", "custom:rms_norm/cpp"
    backend: str
    graph: Graph
    worker_factory: str | None = None
    worker_args: dict[str, Any] | None = None
    # A kernel kernelgen did not write (a custom call) is checked on the value classes real inputs hold
    # (zeros, large, NaN/Inf; a call's own data where safe), not only on random normals, before it runs in
    # the caller's process: ``kernelgen.check.compare.VALUE_CLASSES``.
    check_value_classes: bool = False

    @abstractmethod
    def source_hash(self) -> str:
        """Hash of everything that shapes the generated code; part of every record's identity."""

    @abstractmethod
    def space(self, target: Target) -> SearchSpace: ...

    @abstractmethod
    def build(self, config: Config, target: Target) -> Launcher: ...

    def default_config(self, target: Target) -> Config:
        return self.space(target).default()

    def tolerance(self, dtype: str) -> tuple[float, float] | None:
        """``(rtol, atol)`` its outputs of ``dtype`` are checked with against the reference, or None for the
        shared per-dtype table of ``kernelgen.check.compare`` (an implementation overrides this only to say
        otherwise, as a custom call's registered ``tolerance=`` does)."""
        return None

    def custom_call_reference(self, name: str) -> Callable[..., Any]:
        """The eager function the graph's ``custom_call`` node ``name`` computes: what the reference runs for it.
        Only a registered custom call knows it; any other implementation raises ``KernelgenError``."""
        raise KernelgenError(f"{self.name} cannot compute the reference of custom call {name!r}: only the "
                             "custom-call registry knows it")

    def note_verdict(self, config: Config, verdict: Any) -> None:
        """Told the outcome of each first check of ``config`` (a ``kernelgen.check.verdicts.Verdict``)."""

    def shape_generic(self, target: Target) -> bool:
        """Whether one built kernel of this implementation serves every batch size of its graph (a graph with
        ``graph.dynamic`` set, ``kernelgen.runtime.dynamic``), reading the size from its inputs at each call:
        what makes it a member of a shape family. False unless an implementation says so."""
        return False


def allocate_outputs(graph: Graph, device: Any = "cpu") -> list[Any]:
    """Fresh contiguous tensors for the graph's outputs on ``device`` (the inputs' device: a Triton kernel on a
    GPU writes GPU memory)."""
    import torch  # deferred: kernelgen imports without torch until a kernel is measured

    return [torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=device) for spec in graph.output_specs]


__all__ = ["Implementation", "Launcher", "allocate_outputs"]
