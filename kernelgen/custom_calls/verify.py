"""What ``kernelgen registry list`` and ``check`` report: an entry's description and status here, and a
check of one entry (run its examples against the reference in an isolated worker with a timeout where it
can run, compile where it can only compile, skip with the reason otherwise)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgen.check import verdicts
from kernelgen.custom_calls import checks, get_language
from kernelgen.custom_calls.base import COMPILE_ONLY, RUNNABLE, backend_for
from kernelgen.custom_calls.implementation import CustomCallImplementation
from kernelgen.errors import KernelgenError, ToolchainUnavailableError
from kernelgen.ir.graph import Graph, Node
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, TensorSpec


def call_graph(entry: Any, specs: Sequence[TensorSpec]) -> Graph:
    """The graph ``custom_call(entry.name, *inputs)`` traces to (inputs, then one custom_call node)."""
    import torch

    metas = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta") for s in specs]
    try:
        out = entry.reference(*metas)
    except Exception as exc:  # the reference is the author's code
        raise KernelgenError(f"reference of {entry.name!r} fails on meta tensors {[s.to_json() for s in specs]}: "
                             f"{type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor):
        raise KernelgenError(f"reference of {entry.name!r} must return one tensor, got {type(out).__name__}")
    nodes = [Node("input", (), (("index", i),), s) for i, s in enumerate(specs)]
    nodes.append(Node("custom_call", tuple(range(len(specs))), (("name", entry.name),),
                      TensorSpec(tuple(out.shape), str(out.dtype).removeprefix("torch."))))
    return Graph(tuple(nodes), (len(specs),))


def describe(entry: Any) -> dict[str, Any]:
    """One row of ``kernelgen registry list``."""
    availability = get_language(entry.language).availability(entry)
    recorded = checks.last_checks(entry)
    last = recorded["last"]
    if last is None:
        check = "never checked"
    elif last["ok"]:
        check = "passed"
    else:
        check = f"failed: {last['message']}"
    return {
        "implementation": entry.implementation_name, "name": entry.name, "language": entry.language,
        "variant": entry.variant, "platforms": list(entry.platforms),
        "params": {p.name: list(p.choices) for p in entry.params},
        "replaces": getattr(entry.replaces, "__qualname__", None) if entry.replaces else None,
        "status": availability.state, "reason": availability.reason, "platform": availability.platform,
        "source": str(entry.source_path or entry.library or "<inline>"), "source_hash": entry.source_hash(),
        "origin": entry.origin, "check": check,
        "rejected": [{"specs": f["specs"], "config": f["config"], "message": f["message"]}
                     for f in recorded["failures"]],
    }


def check_entry(entry: Any, all_configs: bool = False, timeout: float | None = None) -> list[dict[str, Any]]:
    """Check one entry here; each result has ``status`` passed | failed | compiled | skipped and a message.

    A run check happens in a worker process bounded by ``timeout`` seconds per build and per run (default:
    ``kernelgen.check.verdicts.check_timeout()``); a failed one also has ``outcome``, the exact status
    (wrong_result, runtime_error, timeout, compile_error).
    """
    name = entry.implementation_name
    availability = get_language(entry.language).availability(entry)
    if availability.state == COMPILE_ONLY:
        try:
            what = get_language(entry.language).compile_check(entry)
        except KernelgenError as exc:
            return [{"implementation": name, "status": "failed", "message": str(exc)}]
        return [{"implementation": name, "status": "compiled", "message": f"{what} ({availability.reason})"}]
    if availability.state != RUNNABLE:
        return [{"implementation": name, "status": "skipped", "message": availability.reason}]
    if not entry.examples:  # nothing to run: the source must still build (a broken kernel fails here too)
        try:
            what = get_language(entry.language).compile_check(entry)
        except ToolchainUnavailableError:
            return [{"implementation": name, "status": "skipped",
                     "message": "no examples= to run; register input shapes to check it"}]
        except KernelgenError as exc:
            return [{"implementation": name, "status": "failed", "message": str(exc)}]
        return [{"implementation": name, "status": "compiled",
                 "message": f"{what}; no examples= to run: register input shapes to check its results"}]
    backend = backend_for(entry.language, availability.platform)
    target = Target.current(backend)
    results = []
    for specs in entry.examples:
        shapes = " ".join(f"{s.dtype}{list(s.shape)}" for s in specs)
        try:
            impl = CustomCallImplementation(entry, call_graph(entry, specs), backend, availability.platform)
            space = impl.space(target)
            configs: list[Config] = list(space) if all_configs else [space.default()]
        except (KernelgenError, ValueError) as exc:
            results.append({"implementation": name, "status": "failed", "message": f"{shapes}: {exc}"})
            continue
        for config in configs:
            verdict = verdicts.check(impl, config, target, timeout=timeout, quiet=True)  # reported here
            if verdict.ok:
                results.append({"implementation": name, "status": "passed",
                                "message": f"{shapes} config {dict(config)} matches the reference"})
            else:
                results.append({"implementation": name, "status": "failed", "outcome": verdict.status.value,
                                "message": f"{shapes} config {dict(config)}: {verdict.message}"})
    return results
