"""Checking a custom call against its reference, and the record of the last check of each entry.

``run_check`` runs a launcher in this process: it is called inside the isolated check worker
(``kernelgen.tune.checked``), never in the caller's process. The outcome of each first check is logged
and kept in ``<cache>/custom_calls/checks/<entry>.json`` (written atomically) so ``kernelgen registry
list`` shows why a call is never dispatched.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.paths import atomic_write_text, cache_dir
from kernelgen.values import Config, Status, TensorSpec

log = logging.getLogger("kernelgen.registry")


def random_inputs(specs: Sequence[TensorSpec], device: str = "cpu", seed: int = 0) -> list[Any]:
    """Deterministic random tensors for ``specs``: normal floats, small ints, fair bools."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in specs:
        dtype = getattr(torch, spec.dtype)
        if spec.dtype == "bool":
            t = torch.rand(spec.shape, generator=gen) > 0.5
        elif dtype.is_floating_point:
            t = torch.randn(spec.shape, generator=gen, dtype=torch.float32).to(dtype)
        else:
            t = torch.randint(-8, 8, spec.shape, generator=gen).to(dtype)
        out.append(t.to(device))
    return out


def compare(entry: Any, expected: Sequence[Any], actual: Sequence[Any]) -> str:
    """'' when ``actual`` matches ``expected`` within the entry's tolerance, else what differs."""
    import torch

    for i, (want, got) in enumerate(zip(expected, actual)):
        got = got.detach().cpu()
        want = want.detach().cpu().to(got.dtype)
        if got.shape != want.shape:
            return f"output {i} has shape {list(got.shape)}, the reference {list(want.shape)}"
        tol = entry.tolerance_for(str(got.dtype).removeprefix("torch."))
        if got.dtype.is_floating_point:
            g, w = got.double(), want.double()
            if not torch.allclose(g, w, rtol=tol, atol=tol, equal_nan=True):
                err = (g - w).abs().nan_to_num(float("inf")).max().item()
                return f"output {i} differs from the reference by up to {err:.3g} (tolerance {tol:g})"
        elif not torch.equal(got, want):
            return f"output {i} differs from the reference in {(got != want).sum().item()} elements"
    return ""


def run_check(entry: Any, graph: Any, launcher: Callable[..., None], device: str = "cpu") -> tuple[Status, str] | None:
    """Run ``launcher`` on random inputs of ``graph`` and compare with the reference with the entry's
    tolerance: None when it matches, else ``(runtime_error, ...)`` when it raised or
    ``(wrong_result, ...)``. Runs the kernel in this process: call it only inside a check worker."""
    from kernelgen.implementation import allocate_outputs
    from kernelgen.reference import evaluate
    from kernelgen.registry import reference_for

    inputs = random_inputs(graph.signature, device)
    expected = evaluate(graph, [x.cpu() for x in inputs], custom_calls=reference_for)
    outputs = allocate_outputs(graph, device)
    for t in outputs:
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))  # a kernel that skips elements must not pass on leftover memory
    try:
        launcher(*inputs, *outputs)
    except KernelgenError as exc:
        return Status.RUNTIME_ERROR, f"raised {type(exc).__name__}: {exc}"
    except Exception as exc:  # a hand-written launcher can raise anything; it is a failed check
        return Status.RUNTIME_ERROR, f"raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    problem = compare(entry, expected, outputs)
    return (Status.WRONG_RESULT, problem) if problem else None


def _record_path(entry: Any) -> Any:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", entry.implementation_name)
    return cache_dir() / "custom_calls" / "checks" / f"{safe}.json"


def record(entry: Any, workload: str, specs: Sequence[TensorSpec], config: Config, message: str) -> None:
    """Keep the outcome of one check (empty ``message`` = passed; the caller logs failures)."""
    result = {"implementation": entry.implementation_name, "source_hash": entry.source_hash(),
              "workload": workload, "specs": [s.to_json() for s in specs], "config": config.to_json(),
              "ok": not message, "message": message, "time": time.time()}
    path = _record_path(entry)
    try:
        previous = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        previous = {}
    if previous.get("source_hash") != entry.source_hash():
        previous = {}
    failures = [f for f in previous.get("failures", []) if f.get("workload") != workload or f.get("config") != result["config"]]
    if message:
        failures = ([result] + failures)[:10]
    body = {"source_hash": entry.source_hash(), "last": result, "failures": failures}
    try:
        atomic_write_text(path, json.dumps(body, indent=1, sort_keys=True))
    except OSError as exc:  # a read-only cache must not turn a check into a crash
        log.warning("could not record the check of %s in %s: %s", entry.implementation_name, path, exc)


def last_checks(entry: Any) -> dict[str, Any]:
    """``{"last": result | None, "failures": [...]}`` for the entry's current source (empty if never checked)."""
    path = _record_path(entry)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"last": None, "failures": []}
    if not isinstance(data, dict) or data.get("source_hash") != entry.source_hash():
        return {"last": None, "failures": []}
    failures = data.get("failures") if isinstance(data.get("failures"), list) else []
    last = data.get("last") if isinstance(data.get("last"), dict) else None
    return {"last": last, "failures": failures}
