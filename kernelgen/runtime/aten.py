"""ATen as a candidate: a graph's own ATen ops (what runs without kernelgen) as an ``Implementation`` that the
tuner measures beside the templates, the vendor GEMM and the custom calls, in the same confirmation rounds.

When its record wins, dispatch runs the ATen ops themselves: a region replays its ATen sub-graph, a
``kernelgen.compile`` function runs eagerly (``kernelgen.runtime.direct``); ``build`` (the graph's eager
evaluation copied into the outputs) exists for the measurement worker only. Its search space has one config.

Untuned, ATen runs first for a graph too small to win (``aten_first``), by this rule, measured on a 2-core
AMD EPYC (``benchmarks/bench_dispatch.py --regions``): a region call costs the launch of one C++ kernel plus
kernelgen's call path (~5 us), while an ATen op costs ~2-4 us; a region earns that back only by saving memory
traffic, i.e. by fusing two or more ops. A graph with a single compute op (nothing fused: one ``add``, one
``relu``, one reduction) whose outputs hold fewer than ``SMALL_ELEMENTS`` elements runs ATen first; a single
op on large tensors is memory-bound either way and keeps the kernel (vectorised, threaded as tuned).
"""

from __future__ import annotations

from typing import Any

from kernelgen.code_hash import combine
from kernelgen.ir.graph import VIEW_OPS, Graph
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.reference import evaluate
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config

NAME = "aten"
SMALL_ELEMENTS = 1 << 16  # below this, one unfused op is cheaper as ATen's call than as a region's kernel call
_FREE_OPS = VIEW_OPS | {"input", "const"}


class AtenImplementation(Implementation):
    """The graph's own ATen ops. Dispatch never builds it (it runs the ATen ops directly); a measurement
    worker does, to time it beside the kernels (the outputs' copy is the only cost it adds to eager's)."""

    name = NAME
    worker_factory = "kernelgen.runtime.aten:rebuild"
    worker_args: dict[str, Any] = {}

    def __init__(self, graph: Graph, backend: str) -> None:
        self.graph = graph
        self.backend = backend

    def source_hash(self) -> str:
        import torch  # deferred: the hash names the torch whose ATen kernels run

        return combine("aten", {"torch": torch.__version__, "backend": self.backend})

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace(())

    def build(self, config: Config, target: Target) -> Launcher:
        graph, n = self.graph, len(self.graph.input_ids)

        def launch(*tensors: Any) -> None:
            for out, value in zip(tensors[n:], evaluate(graph, tensors[:n])):
                out.copy_(value)

        return launch


def covers(graph: Graph) -> bool:
    """Whether ATen can compute ``graph`` as a candidate (a custom call inside it has no ATen ops of its own)."""
    return all(node.op != "custom_call" for node in graph.nodes)


def compute_ops(graph: Graph) -> int:
    """The graph's nodes that compute (views, broadcasts, inputs and constants only address memory)."""
    return sum(1 for node in graph.nodes if node.op not in _FREE_OPS)


def aten_first(graph: Graph) -> bool:
    """Untuned, does ATen run before the kernels? For one unfused compute op on small outputs (module docstring)."""
    return compute_ops(graph) <= 1 and sum(s.numel for s in graph.output_specs) < SMALL_ELEMENTS


def rebuild(graph: Graph, backend: str) -> AtenImplementation:
    """A measurement worker's factory."""
    return AtenImplementation(graph, backend)


__all__ = ["AtenImplementation", "NAME", "SMALL_ELEMENTS", "aten_first", "compute_ops", "covers", "rebuild"]
