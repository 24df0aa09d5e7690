"""The Implementation seam: one way to compute a graph on one backend, tunable over a search space.

Templates (with the problem they matched) and registered custom calls both appear as
``Implementation``s, so the tuner, the measurement worker and the dispatcher treat them alike. An
implementation is rebuilt in another process from ``(graph, name, backend)`` with ``resolve``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from kernelgen.errors import KernelgenError, NoTemplateError
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
    """

    name: str  # "pointwise", "gemm", "custom:rms_norm/cpp"
    backend: str
    graph: Graph

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
        """``(rtol, atol)`` its outputs of ``dtype`` are checked with against the reference: the shared
        table of ``kernelgen.check`` unless the implementation says otherwise (a custom call's ``tolerance=``)."""
        from kernelgen.check import tolerance

        return tolerance(dtype)

    def note_verdict(self, config: Config, verdict: Any) -> None:
        """Told the outcome of each first check of ``config`` (a ``kernelgen.tune.checked.Verdict``)."""

    def shape_generic(self, target: Target) -> bool:
        """Whether one built kernel of this implementation serves every batch size of its graph (a graph with
        ``graph.dynamic`` set, ``kernelgen.frontend.dynamic``), reading the size from its inputs at each call:
        what makes it a member of a shape family. False unless an implementation says so."""
        return False


class TemplateImplementation(Implementation):
    """A template family applied to the problem it matched."""

    def __init__(self, template: Any, problem: Any, backend: str) -> None:
        self.template = template
        self.problem = problem
        self.backend = backend
        self.graph = problem.graph
        self.name = template.name

    def source_hash(self) -> str:
        return self.template.source_hash(self.backend)

    def space(self, target: Target) -> SearchSpace:
        return self.template.space(self.problem, target)

    def render(self, config: Config, target: Target) -> Any:
        return self.template.render(self.problem, config, target)

    def build(self, config: Config, target: Target) -> Launcher:
        from kernelgen.backends import get_backend

        return get_backend(self.backend).compile(self.render(config, target))

    def shape_generic(self, target: Target) -> bool:
        """True when the template renders the batch size as a kernel argument on this backend (its source
        says so in ``meta["dynamic"]``); a template that bakes it in, or fails to render, is not generic."""
        if not self.graph.dynamic:
            return False
        try:
            return "dynamic" in self.render(self.default_config(target), target).meta
        except Exception:  # noqa: BLE001 - a renderer bug on this graph: the caller compiles per size instead
            return False

    def __repr__(self) -> str:
        return f"TemplateImplementation({self.name!r}, backend={self.backend!r})"


def _custom_call_candidates(graph: Graph, backend: str) -> list[Implementation]:
    """Registered custom calls that implement ``graph`` on ``backend`` (empty when the registry has none)."""
    try:
        from kernelgen import registry
    except ModuleNotFoundError as exc:
        if exc.name != "kernelgen.registry":
            raise
        return []
    return list(registry.candidates(graph, backend))


def implementations_for(graph: Graph, backend: str) -> list[Implementation]:
    """Every implementation of ``graph`` on ``backend``, the untuned choice first (dispatch runs the first
    one's default config when the database has no record): for a matmul-like graph ATen's matmul with a
    kernelgen epilogue (``aten_gemm``, what eager runs) and the generated GEMM, in the order
    ``_vendor_gemm_first`` says; for other graphs the matching template; then custom calls."""
    from kernelgen.templates import match

    found: list[Implementation] = []
    matched = match(graph)
    if matched is not None and backend in matched[0].backends:
        generated = TemplateImplementation(matched[0], matched[1], backend)
        if matched[0].name == "gemm":
            from kernelgen.templates.vendor_gemm import VendorGemmImplementation

            vendor = VendorGemmImplementation(matched[1], backend)
            found.extend([vendor, generated] if _vendor_gemm_first(matched[1], backend) else [generated, vendor])
        else:
            found.append(generated)
    found.extend(_custom_call_candidates(graph, backend))
    return found


def _vendor_gemm_first(problem: Any, backend: str) -> bool:
    """Untuned, does ATen's matmul run before the generated GEMM? Tuning measures both and declares the
    faster; this only orders them when nothing was measured. The generated C++ GEMM computes float32/float64
    with the same FMA units as MKL/oneDNN and beat them from 32 rows up on this project's CPU
    (``benchmarks/bench_mlp_vendor.py``: MLP block 1.97x eager generated-first vs 1.29x vendor-first), while it
    widens float16/bfloat16 to float32, where oneDNN's native bf16 dot instructions were 2-3x faster
    (0.76x vs 1.26x eager). On GPUs cuBLAS is the known floor; the Triton GEMM has to be tuned to beat it."""
    return backend != "cpp" or problem.a.dtype not in ("float32", "float64")


def resolve(graph: Graph, name: str, backend: str) -> Implementation:
    """The implementation called ``name`` for ``graph`` on ``backend`` (used to rebuild it in a worker)."""
    for impl in implementations_for(graph, backend):
        if impl.name == name:
            return impl
    raise NoTemplateError(f"no implementation named {name!r} covers this graph on backend {backend!r}")


def allocate_outputs(graph: Graph, device: Any = "cpu") -> list[Any]:
    """Fresh contiguous tensors for the graph's outputs on ``device`` (the inputs' device: a Triton kernel on a
    GPU writes GPU memory)."""
    import torch

    return [torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=device) for spec in graph.output_specs]


__all__ = ["Implementation", "Launcher", "TemplateImplementation", "allocate_outputs", "implementations_for",
           "resolve", "KernelgenError"]
