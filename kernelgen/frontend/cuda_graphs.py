"""CUDA graphs for the backend's compiled graphs: ``torch.compile(m, backend="kernelgen", mode="reduce-overhead")``
or ``options={"cudagraphs": True}``.

On a GPU a model step through the backend is mostly host work (Dynamo's guards, AOTAutograd's wrappers, one Python
call per region and per ATen op): on an H200, HF GPT-2/Llama in bf16 inference left the GPU idle ~90% of the step.
A CUDA graph replays the step's kernels with one launch. Each compiled forward/backward graph is wrapped
(``CudaGraphed``): its first call runs plainly, so every region chooses, checks (in a worker process) and builds its
kernel and Triton compiles it, none of which may happen while a stream is captured; from the second call it runs
through torch's CUDA graph trees (``torch._inductor.cudagraph_trees.cudagraphify_impl``, as Dynamo's own
``cudagraphs`` backend uses them: they warm up, record, then replay, sharing one memory pool per device).

A graph is not captured, and runs as it is with the reason logged once, when a row of ``SKIPS`` holds: Inductor's
reasons (CPU tensors in the graph, inputs it mutates, ops torch marks unsafe to capture or data-dependent sizes,
i.e. ``.item()``-like host reads) and dynamic shapes (a size that changes would record a graph per size and the
regions would build kernels per size inside the step). A backward is captured only when its forward is.

Host syncs on the region path (a captured stream fails on any): the region shortcut and the Triton launch read
only host values (shapes, strides, the signature key); the first-call work (tracing, the checked build, choosing a
record) runs in the warm-up call; the CPU thread cap (``runtime.threads``) touches no GPU; the index range checks of
gathers and scatters (``runtime.bounds``) read the index's min and max on the host, so while a stream is captured
they assert on the device instead (eager's own CUDA kernels do the same for an index out of range).

The default is off: capture is asked for. A CUDA graph tree overwrites a graph's outputs at its next replay (torch
raises on reading an overwritten output), which breaks code that keeps a step's outputs across steps, as eager
allows; whether capturing inference by default pays must be measured on a GPU (docs/gpu-checks.md, "To measure").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelgen.frontend.fx_nodes import is_symbolic

log = logging.getLogger("kernelgen")
MODES = {"default": False, "reduce-overhead": True}  # torch.compile's mode -> capture with CUDA graphs
_LOGGED: set[str] = set()
_LOCK = threading.Lock()


def _cpu_tensors(gm: Any, fixed: int) -> str | None:
    from torch._dynamo.backends.cudagraphs import get_device_node_mapping
    from torch._inductor.cudagraph_utils import check_multiple_devices_or_any_cpu_nodes

    devices = get_device_node_mapping(gm)
    if not any(d.type == "cuda" for d in devices):
        return "no CUDA tensor in the graph"
    return check_multiple_devices_or_any_cpu_nodes(devices)


def _mutated_inputs(gm: Any, fixed: int) -> str | None:
    from torch._dynamo.backends.cudagraphs import check_for_mutation_ignore_cuda_graph_managed_tensor

    return check_for_mutation_ignore_cuda_graph_managed_tensor(gm, fixed)


def _dynamic_shapes(gm: Any, fixed: int) -> str | None:
    import torch

    for node in gm.graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and (isinstance(value, torch.SymInt) or is_symbolic(value)):
            return f"dynamic shapes ({node.name}): a graph per size, and the regions build kernels per size"
    return None


def _unsafe_ops(gm: Any, fixed: int) -> str | None:
    from torch._inductor.utils import get_first_incompatible_cudagraph_node

    node = get_first_incompatible_cudagraph_node(gm)
    return None if node is None else f"an op that cannot be captured or a host read of a value ({node.name})"


# Why a graph is not captured: each row reads the compiled graph (regions installed) and how many of its leading
# inputs keep their address across calls (parameters and buffers, a backward's saved values).
SKIPS: tuple[Callable[[Any, int], str | None], ...] = (_cpu_tensors, _mutated_inputs, _dynamic_shapes, _unsafe_ops)


def skip_reason(gm: Any, fixed: int) -> str | None:
    """Why ``gm`` must run uncaptured (the first row of ``SKIPS`` that says so), or None."""
    for check in SKIPS:
        reason = check(gm, fixed)
        if reason:
            return reason
    return None


def log_once(name: str, reason: str) -> None:
    with _LOCK:
        if reason in _LOGGED:
            return
        _LOGGED.add(reason)
    log.warning("kernelgen %s graph runs without CUDA graphs: %s", name, reason)


@dataclass
class Step:
    """What the graphs of one Dynamo graph share: whether the forward was captured (its backward may be only
    then, as in torch's ``cudagraphs`` backend) and on which device."""

    forward_captured: bool = False
    device_index: int | None = None


def cudagraphify(run: Any, inputs: list, static: range, **kwargs: Any) -> Any:
    """torch's CUDA graph trees over boxed ``run`` (a seam: tests replace it)."""
    from torch._inductor.cudagraph_trees import cudagraphify_impl

    return cudagraphify_impl(run, inputs, static, **kwargs)


class CudaGraphed:
    """A compiled graph (boxed ``run``) that runs plainly on its first call and through CUDA graph trees after."""

    _boxed_call = True

    def __init__(self, run: Any, gm: Any, fixed: int, kind: str, step: Step) -> None:
        from torch._dynamo.backends.cudagraphs import find_input_mutations, get_device_index, get_stack_traces
        from torch._inductor.cudagraph_utils import get_placeholder_info

        self.run, self.fixed, self.kind, self.step = run, fixed, kind, step
        self.device_index = get_device_index(gm)
        self.graphed: Any = None
        self.warm = False
        self.details = {"stack_traces": get_stack_traces(gm), "placeholders": get_placeholder_info(gm.graph),
                        "mutated_input_idxs": find_input_mutations(gm.graph)}

    def __call__(self, args: list) -> Any:
        if self.graphed is None:
            if not self.warm:  # every region's first call: choose, check and build outside any capture
                self.warm = True
                return self.run(args)
            self.graphed = cudagraphify(self.run, args, range(self.fixed), device_index=self.device_index,
                                        is_backward=self.kind == "backward", is_inference=self.kind == "inference",
                                        **self.details)
        return self.graphed(args)


def _backward_beside_captured(run: Any, device_index: int | None) -> Any:
    """An uncaptured backward of a captured forward: the tree manager must know a backward runs (torch's
    [Backward Generation Handling])."""
    def backward(args: list) -> Any:
        from torch._inductor.cudagraph_trees import get_manager

        manager = get_manager(device_index or 0, create_if_none_exists=False)
        if manager is not None:
            manager.set_to_running_backward()
        return run(args)

    backward._boxed_call = True  # type: ignore[attr-defined]
    return backward


def wrap(run: Any, gm: Any, fixed: int, kind: str, step: Step) -> Any:
    """``run`` (graph ``gm``'s boxed callable; ``kind``: forward, backward or inference) captured after its first
    call, or ``run`` itself with the reason logged once when capture is unsafe."""
    if kind == "backward" and not step.forward_captured:
        return run  # (the forward logged why)
    reason = skip_reason(gm, fixed)
    if reason:
        log_once(kind, reason)
        return _backward_beside_captured(run, step.device_index) if kind == "backward" else run
    graphed = CudaGraphed(run, gm, fixed, kind, step)
    if kind != "backward":
        step.forward_captured, step.device_index = True, graphed.device_index
    return graphed


__all__ = ["MODES", "SKIPS", "CudaGraphed", "Step", "cudagraphify", "log_once", "skip_reason", "wrap"]
