"""The baselines timed beside a tuning's finalists: eager PyTorch and torch.compile (Inductor) of the same graph.

Both run on the inputs the kernels are timed on, in the same confirmation rounds (``kernelgen.tune.confirm``),
so "vs eager" and "vs torch.compile" compare like with like. torch.compile is compiled and checked against
the eager reference once, before its first timing; when Inductor cannot compile the graph or disagrees with
eager, the baseline is skipped and ``ReferenceSkipped`` carries the reason into the records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.check.compare import compare
from kernelgen.ir.graph import Graph
from kernelgen.ir.reference import evaluate
from kernelgen.ir.values import TimeStats

EAGER = "eager"
COMPILED = "torch.compile"
# A cold Inductor compile of a small graph takes 5-20 s on a loaded two-core machine; the worker's per-request
# timeout (60 s by default) is for kernels, so compiling gets at least this long.
COMPILE_TIMEOUT = 300.0


class ReferenceSkipped(Exception):
    """A baseline that cannot be timed here (Inductor failed, the worker died): ``str(exc)`` says why."""


def compile_reference(graph: Graph, inputs: Sequence[Any], expected: Sequence[Any]) -> Callable[[], Any]:
    """torch.compile of the graph's eager reference, compiled now (outside any timed region) and checked
    against ``expected``: a no-argument callable that runs it on ``inputs``. Raises ``ReferenceSkipped``."""
    import torch


    args = list(inputs)
    try:
        # An ATen graph of its own per workload: Dynamo caches compiled code per code object, so compiling
        # ``evaluate`` itself for one graph after another (a pooled worker serves many) would hit its
        # recompile limit and silently run eager, timing eager under torch.compile's name.
        from torch.fx.experimental.proxy_tensor import make_fx

        traced = make_fx(lambda *xs: evaluate(graph, xs))(*args)
        compiled = torch.compile(traced)
        outputs = compiled(*args)
    except Exception as exc:  # Inductor's failures are many types (BackendCompilerFailed, InductorError, ...)
        raise ReferenceSkipped(f"torch.compile failed: {type(exc).__name__}: {_one_line(exc)}") from None
    for i, (out, exp, spec) in enumerate(zip(outputs, expected, graph.output_specs)):
        problem = compare(out.to(exp.device), exp, spec.dtype)
        if problem is not None:
            raise ReferenceSkipped(f"torch.compile disagrees with eager: output {i}: {problem}")
    return lambda: compiled(*args)


def contestants(measurer: Any) -> dict[str, Callable[[], TimeStats | None]]:
    """The baselines a measurer can time, by name: eager always, torch.compile when it has ``compiled``."""
    out: dict[str, Callable[[], TimeStats | None]] = {EAGER: measurer.eager}
    compiled = getattr(measurer, "compiled", None)
    if compiled is not None:
        out[COMPILED] = compiled
    return out


def _one_line(exc: BaseException) -> str:
    # Inductor's messages span lines ("backend='inductor' raised:" then the cause): keep them, on one line.
    return " ".join(str(exc).split())[:500] or "(no message)"


__all__ = ["COMPILED", "COMPILE_TIMEOUT", "EAGER", "ReferenceSkipped", "compile_reference", "contestants"]
