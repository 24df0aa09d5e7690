"""Every implementation of a graph on a backend: the templates' first, then the registered custom calls.

The one catalogue dispatch, shape families and the tuner draw from (``candidates_for`` adds the graph's own
ATen ops as a candidate); ``resolve`` finds one by name.
"""

from __future__ import annotations

from kernelgen.custom_calls.candidates import candidates as custom_call_candidates
from kernelgen.runtime.aten import AtenImplementation, covers
from kernelgen.errors import NoTemplateError
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.templates.candidates import template_implementations


def implementations_for(graph: Graph, backend: str) -> list[Implementation]:
    """Every implementation of ``graph`` on ``backend``, the untuned choice first (dispatch runs the first
    one's default config when the database has no record): the templates' (``template_implementations``:
    ATen's matmul with a kernelgen epilogue and the generated GEMM for a matmul-like graph, else the matching
    template), then the registered custom calls."""
    return [*template_implementations(graph, backend), *custom_call_candidates(graph, backend)]


def candidates_for(graph: Graph, backend: str, *, aten_first: bool = False) -> list[Implementation]:
    """What the tuner measures and dispatch chooses from: ``implementations_for`` plus the graph's own ATen ops
    (``kernelgen.runtime.aten``), last, or first with ``aten_first`` (a model's region too small to win:
    ``kernelgen.runtime.aten.aten_first``).
    Empty when no kernel implements the graph: ATen alone is not a choice, it is what runs anyway."""
    kernels = implementations_for(graph, backend)
    if not kernels or not covers(graph):
        return kernels
    aten = AtenImplementation(graph, backend)
    return [aten, *kernels] if aten_first else [*kernels, aten]


def resolve(graph: Graph, name: str, backend: str) -> Implementation:
    """The implementation called ``name`` for ``graph`` on ``backend``."""
    for impl in candidates_for(graph, backend):
        if impl.name == name:
            return impl
    raise NoTemplateError(f"no implementation named {name!r} covers this graph on backend {backend!r}")


__all__ = ["candidates_for", "implementations_for", "resolve"]
