"""The bandwidth floor of a memory-bound kernel: the least time any kernel can take to move the bytes it must (each
input read once, each output written once) at the device's copy bandwidth, and a measured time's share of it
(1.0: at the floor; ``benchmarks/bench_gpu.py`` prints it per memory-bound row).

The bandwidth is measured, not looked up: a large device-to-device copy in the same run, which reads and writes each
byte once, so it is what the card gives a streaming kernel today rather than the datasheet's peak.
"""

from __future__ import annotations

from kernelgen.ir.graph import Graph

# Ops whose cost is arithmetic, not bytes: a graph holding one has no bandwidth floor worth comparing with.
COMPUTE_OPS = frozenset({"matmul", "attention", "attention_lse"})


def bytes_moved(graph: Graph) -> int:
    """Bytes a kernel of ``graph`` must move at least: every input read once (a broadcast bias counts once, at its
    own size), every output written once."""
    return sum(spec.numel * spec.itemsize for spec in (*graph.signature, *graph.output_specs))


def memory_bound(graph: Graph) -> bool:
    """Whether ``graph``'s time is bounded by memory traffic (no op of ``COMPUTE_OPS``)."""
    return not any(node.op in COMPUTE_OPS for node in graph.nodes)


def copy_bandwidth(copied_bytes: int, seconds: float) -> float:
    """Bytes per second of a device-to-device copy of ``copied_bytes`` that took ``seconds`` (read + write)."""
    return 2 * copied_bytes / seconds


def floor_share(graph: Graph, seconds: float, bandwidth: float) -> float:
    """The bandwidth floor of ``graph`` over a measured ``seconds``: 1.0 at the floor, 0.5 at twice it."""
    return bytes_moved(graph) / bandwidth / seconds


__all__ = ["COMPUTE_OPS", "bytes_moved", "copy_bandwidth", "floor_share", "memory_bound"]
