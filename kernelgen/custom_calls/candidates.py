"""The registered custom calls that implement a graph on a backend, as ``Implementation``s (what dispatch and the
tuner offer beside the templates)."""

from __future__ import annotations

from typing import Any

from kernelgen.custom_calls import get_language
from kernelgen.custom_calls.base import backend_for
from kernelgen.custom_calls.implementation import CustomCallImplementation
from kernelgen.ir.graph import Graph
from kernelgen.ir.target import Target
from kernelgen.registry import default_registry, load_default_registries

def candidates(graph: Graph, backend: str) -> list[Any]:
    """Custom-call ``Implementation``s of ``graph`` runnable here on ``backend``, in registration-key order.

    Only entries that can run here on a platform served by ``backend`` and have a valid config for the
    graph's inputs are offered; each is checked against the reference on first build.
    """
    load_default_registries()
    registry = default_registry()
    found = []
    for entry in registry.entries():
        if not registry.implements(entry, graph):
            continue
        availability = get_language(entry.language).availability(entry)
        if not availability.runnable or backend_for(entry.language, availability.platform) != backend:
            continue
        impl = CustomCallImplementation(entry, graph, backend, availability.platform)
        try:
            impl.space(Target.current(backend)).default()
        except ValueError:  # no config fits these inputs (constraints over `specs`)
            continue
        found.append(impl)
    return found


__all__ = ["candidates"]
