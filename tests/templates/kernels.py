"""Run one template's kernel on a traced function, as the template tests do: trace, match, render (the space's
default config unless given), build on the backend and launch into fresh outputs filled with a marker value."""

from __future__ import annotations

from typing import Any

import torch

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.templates import match


def run_kernel(fn: Any, inputs: tuple, backend: str, template_name: str, config: Any = None,
               device: str = "cpu") -> tuple[Any, list]:
    """``(graph, outputs)`` of ``fn`` traced at ``inputs`` and run through template ``template_name``'s kernel."""
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == template_name, f"not one {template_name} kernel:\n{graph}"
    template, problem = found
    target = get_backend(backend).target()
    kernel = get_backend(backend).compile(template.render(problem, config or template.default_config(problem, target),
                                                          target))
    outs = [torch.full(s.shape, 123, device=device).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    return graph, outs


def aot_reports(cases: list, arch: str) -> tuple[int, list]:
    """Render every ``(fn, inputs)`` case's kernel for GPU ``arch`` with its space's default and compile it ahead
    of time: ``(cases rendered, resource reports or errors)``."""
    from kernelgen.backends.triton_aot import aot_results
    from kernelgen.ir.target import Target

    target = Target.gpu(arch)
    sources = []
    for fn, inputs in cases:
        template, problem = match(kernelgen.trace(fn, *inputs))
        sources.append(template.backend_module("triton").render(problem, template.space(problem, target).default(),
                                                                 target))
    return len(sources), aot_results(sources, target)


__all__ = ["aot_reports", "run_kernel"]
