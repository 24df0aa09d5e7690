"""ATen as a candidate: a graph's own ATen ops (what runs without kernelgen) as an ``Implementation`` that the
tuner measures beside the templates, the vendor GEMM and the custom calls, in the same confirmation rounds.

When its record wins, dispatch runs the ATen ops themselves: a region replays its ATen sub-graph, a
``kernelgen.compile`` function runs eagerly (``kernelgen.runtime.direct``); ``build`` (the graph's eager
evaluation copied into the outputs) exists for the measurement worker only. Its search space has one config.

Untuned, a model's region runs its ATen ops first when it is too small to win (``aten_first``), by this rule,
measured with ``benchmarks/bench_regions.py`` on a 2-core AMD EPYC: a region call costs ~4 us (signature key,
output allocation, the C++ launch; ``docs/ARCHITECTURE.md``) where one ATen op on a small tensor costs ~1-3 us, and
a region earns that back only by saving memory traffic, i.e. by fusing ops. A lone op gains nothing from fusion
and ATen's kernel for it is as vectorised and threaded as ours: at 64 to 256Ki elements a one-op region took
2-4x eager's time (0.23x, 0.47x, 0.51x eager at 64, 64Ki, 256Ki). Two ops broke even from about 1Ki elements
(0.38x at 64, 0.95x at 1Ki), three won from the smallest size (2.2x at 64, 1.4x at 16Ki). So: a region of one
ATen op, or of two producing fewer than ``TWO_OP_ELEMENTS`` elements, runs ATen first; a GEMM or attention
region never does (the generated GEMM can beat ATen's alone; the GEMM order is the records' business,
``kernelgen.runtime.records``). Those figures were taken under a load average of ~5 on the shared machine: the
ratios, not the microseconds, are the evidence, and tuning measures every region anyway.

A region holding one of eager's fused GPU attention kernels (``EAGER_FIRST``) also runs its ATen ops first,
untuned: on the GPUs measured so far eager's kernel beat kernelgen's attention template, so a model's attention
never runs slower than eager's until a tuning record on that device says the template won.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.code_hash import combine
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.reference import evaluate
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config
from kernelgen.runtime.aten_program import compile_program

NAME = "aten"
ENABLED = True  # the untuned rule (tests of the kernels themselves turn it off)
TWO_OP_ELEMENTS = 4096  # below this, two fused ops are still cheaper as ATen's calls than as one region call
_GEMM_OPS = ("matmul", "attention", "attention_lse")


# A region's own ATen ops by workload key (``kernelgen.runtime.aten_program``), remembered by the front end as
# regions are made: the ATen candidate of that workload runs them, not the IR's primitives.
PROGRAMS: dict[str, dict[str, Any]] = {}
_PROGRAMS_LOCK = threading.Lock()


def remember_program(workload_key: str, make: Callable[[], dict[str, Any] | None]) -> None:
    """Keep the ATen program of a region's workload (``make()``, run only for a key not seen yet)."""
    if workload_key in PROGRAMS:
        return
    program = make()
    if program is not None:
        with _PROGRAMS_LOCK:
            PROGRAMS.setdefault(workload_key, program)


class AtenImplementation(Implementation):
    """The graph's own ATen ops. Dispatch never builds it (it runs the ATen ops directly); a measurement
    worker does, to time it beside the kernels: the region's ATen program when one is known (``PROGRAMS``),
    else the graph's eager evaluation. Its outputs are copied into the measurer's buffers only when they may
    differ from the last copy (``AtenLauncher``), so its time is eager's."""

    name = NAME
    worker_factory = "kernelgen.runtime.aten:rebuild"

    def __init__(self, graph: Graph, backend: str, program: dict[str, Any] | None = None) -> None:
        self.graph = graph
        self.backend = backend
        program = program if program is not None else PROGRAMS.get(graph.workload_key)
        # (a program whose inputs or outputs do not line up with the graph's, e.g. an input only the IR dropped,
        # is not this graph's: the IR is evaluated instead)
        fits = program is not None and program.get("inputs") == len(graph.input_ids) == len(graph.signature) \
            and len(program.get("outputs", ())) == len(graph.outputs)
        self.program = program if fits else None
        self.worker_args: dict[str, Any] = {} if self.program is None else {"program": self.program}

    def source_hash(self) -> str:
        import torch  # deferred: the hash names the torch whose ATen kernels run

        return combine("aten", {"torch": torch.__version__, "backend": self.backend})

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace(())

    def build(self, config: Config, target: Target) -> Launcher:
        return AtenLauncher(self.graph, target.tensor_device, self.program)


class AtenLauncher:
    """The region's ATen program (else the graph's eager evaluation) with its results copied into the outputs,
    on ``device``: the tensors' device the measurer places its inputs on. Without it (a bare function) the
    measurer kept ATen's inputs on the CPU while every other candidate ran on the GPU: on an H200 the ATen
    candidate of bias_gelu [8192, 4096] float32 was recorded at 38.8 ms, the host's 15 threads evaluating it,
    where eager's CUDA kernel takes 0.17 ms.

    The copy is skipped when the inputs and output buffers are the very tensors of the last call, unchanged
    since (data pointers and version counters): the results would be the same values, and eager writes its
    results once, where its ops put them. The timing loop's repeats are such calls; a check's first call, or
    buffers someone wrote to, are not."""

    def __init__(self, graph: Graph, device: str, program: dict[str, Any] | None = None) -> None:
        self.graph, self.device = graph, device
        self._inputs = len(graph.input_ids)
        self._run = None if program is None else compile_program(program)
        self._copied: tuple | None = None

    def __call__(self, *tensors: Any) -> None:
        n = self._inputs
        inputs, outs = tensors[:n], tensors[n:]
        values = self._run(inputs) if self._run is not None else evaluate(self.graph, inputs)
        if self._copied is not None and self._copied == _identity(tensors):
            return
        for out, value in zip(outs, values):
            out.copy_(value)
        self._copied = _identity(tensors)


def _identity(tensors: tuple) -> tuple:
    return tuple((t.data_ptr(), t._version) if hasattr(t, "_version") else id(t) for t in tensors)


def covers(graph: Graph) -> bool:
    """Whether ATen can compute ``graph`` as a candidate (a custom call inside it has no ATen ops of its own)."""
    return all(node.op != "custom_call" for node in graph.nodes)


# Lone ops whose kernelgen kernel beats ATen's own kernel for that op (``benchmarks/bench_ops.py``, 2-core AMD EPYC,
# quiet, 2026-11-27; ATen's time / kernelgen's): max pool forward 3.95x, average pool forward 3.74x and backward
# 2.04x, scatter_add 2.08x, index_put with accumulate 3.33x (and embedding's backward, an index_put, 2.64x). Not
# listed because ATen's kernel was as fast or faster: max pool's backward (0.91x), sort (0.91x), bucketize (0.93x),
# and every pointwise op and reduction (the module docstring). Keyed by IR op and its ``reduce`` attribute (None:
# any). A region of one such op runs its kernel first from ``TWO_OP_ELEMENTS`` elements up (below, the call
# costs more than ATen's kernel loses).
KERNEL_FIRST: dict[tuple[str, Any], float] = {
    ("window", "max"): 3.95, ("window", "avg"): 3.74, ("window_grad", "avg"): 2.04,
    ("scatter", None): 2.08, ("index_put", None): 3.33,
}


def _kernel_wins(graph: Graph) -> bool:
    if sum(s.numel for s in graph.output_specs) < TWO_OP_ELEMENTS:
        return False
    return any((node.op, node.attr("reduce")) in KERNEL_FIRST or (node.op, None) in KERNEL_FIRST
               for node in graph.nodes)


# ATen ops (schema names) whose eager kernel a region runs first, untuned, with the evidence. They are eager's
# fused attention kernels for GPUs (what ``scaled_dot_product_attention`` becomes on CUDA/ROCm devices), so the
# rule is per target: on CPUs the flash op (``_scaled_dot_product_flash_attention_for_cpu``) is not listed and the
# template stays first. On an H100 (docs/gpu-checks.md, ``benchmarks/bench_gpu.py``, bf16 4x16x2048x64) the
# template's default config ran at 0.79x and 0.88x eager's FlashAttention (198.7 / 177.9 us vs 156.5); cuDNN's
# kernel (eager's choice on H100/H200 in torch 2.13) and the memory-efficient one were not measured against it.
_GPU_ATTENTION = "eager's fused GPU attention beat the template untuned (0.79-0.88x eager on an H100)"
EAGER_FIRST: dict[str, str] = {
    "aten::_scaled_dot_product_cudnn_attention": _GPU_ATTENTION,
    "aten::_scaled_dot_product_flash_attention": _GPU_ATTENTION,
    "aten::_scaled_dot_product_efficient_attention": _GPU_ATTENTION,
}


def aten_first(graph: Graph, aten_ops: Sequence[str]) -> bool:
    """Untuned, do a region's ATen ops (``aten_ops``: their schema names, views not counted) run before its
    kernels? (module docstring)"""
    if not ENABLED:
        return False
    if any(op in EAGER_FIRST for op in aten_ops):
        return True
    if any(node.op in _GEMM_OPS for node in graph.nodes) or _kernel_wins(graph):
        return False
    count = len(aten_ops)
    return count <= 1 or (count == 2 and sum(s.numel for s in graph.output_specs) < TWO_OP_ELEMENTS)


def rebuild(graph: Graph, backend: str, program: dict[str, Any] | None = None) -> AtenImplementation:
    """A measurement worker's factory."""
    return AtenImplementation(graph, backend, program)


__all__ = ["AtenImplementation", "AtenLauncher", "EAGER_FIRST", "ENABLED", "KERNEL_FIRST", "NAME", "PROGRAMS",
           "TWO_OP_ELEMENTS", "aten_first", "covers", "rebuild", "remember_program"]
