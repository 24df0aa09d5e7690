"""Template families and matching: ``match(graph)`` picks the first template, in priority order, that covers it.

Order matters: attention (and its backward) before GEMM (attention contains matmuls), GEMM before row reduction, row
reduction before pointwise, the convolution (one ATen convolution and its pointwise epilogue) before pointwise (a pointwise chain is a reduction without reductions); the scan, the sort, the search,
the window and the scatter take only graphs with a scan, a sort, a bucketize, a window (pooling) or a write at
computed positions, which no other template matches.
"""

from __future__ import annotations

import importlib
import logging

from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import Graph
from kernelgen.templates.base import Problem, Template

log = logging.getLogger(__name__)
_FAMILIES = ("attention", "attention_grad", "gemm", "reduction", "scan", "sort", "search", "window", "scatter", "conv", "pointwise")


def templates() -> tuple[Template, ...]:
    """Every built-in template, in matching priority."""
    found = []
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"kernelgen.templates.{family}")
        except ModuleNotFoundError as exc:
            if exc.name != f"kernelgen.templates.{family}":
                raise
            continue  # family not built yet
        found.append(module.TEMPLATE)
    return tuple(found)


def get_template(name: str) -> Template:
    for template in templates():
        if template.name == name:
            return template
    raise KernelgenError(f"unknown template {name!r}; known: {', '.join(t.name for t in templates())}")


def match(graph: Graph) -> tuple[Template, Problem] | None:
    """The first template that covers ``graph`` with the problem it extracted, or None."""
    for template in templates():
        problem = template.match(graph)
        if problem is not None:
            log.debug("workload %s matched template %s", graph.workload_key[:12], template.name)
            return template, problem
    log.debug("workload %s (ops %s) matched no template", graph.workload_key[:12], sorted(graph.ops() - {"input"}))
    return None


__all__ = ["Problem", "Template", "get_template", "match", "templates"]
