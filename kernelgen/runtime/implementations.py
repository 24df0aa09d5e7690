"""Every implementation of a graph on a backend: the templates' first, then the registered custom calls.

The one catalogue dispatch, shape families and the tuner draw from; ``resolve`` finds one by name.
"""

from __future__ import annotations

from kernelgen.custom_calls.candidates import candidates as custom_call_candidates
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


def resolve(graph: Graph, name: str, backend: str) -> Implementation:
    """The implementation called ``name`` for ``graph`` on ``backend``."""
    for impl in implementations_for(graph, backend):
        if impl.name == name:
            return impl
    raise NoTemplateError(f"no implementation named {name!r} covers this graph on backend {backend!r}")


__all__ = ["implementations_for", "resolve"]
