"""Rebuilding a custom-call ``Implementation`` inside an isolated tuning worker.

The worker rebuilds an implementation from ``worker_factory = "module:callable"``. A custom call may have
been registered by a module the worker never imported, or from a folder loaded with ``load_folder``, so
the callable's name carries where the registration came from (``r_<hex JSON>``, made by
``kernelgen.custom_calls.implementation.factory_for``, decoded by this module's ``__getattr__``). The worker
loads that origin, then picks the implementation by name.
"""

from __future__ import annotations

import functools
import importlib
import json
from typing import Any

from kernelgen.custom_calls.candidates import candidates
from kernelgen.errors import NoTemplateError
from kernelgen.registry import add_pattern_tracer, default_registry


def __getattr__(name: str) -> Any:
    if not name.startswith("r_"):
        raise AttributeError(name)
    try:
        spec = json.loads(bytes.fromhex(name[2:]))
    except ValueError:
        raise AttributeError(name) from None
    return functools.partial(_rebuild, spec)


def _rebuild(spec: dict[str, Any], graph: Any, backend: str) -> Any:
    for name in spec.get("tracers", ()):  # a region's ATen form, when the parent matched the pattern in it
        module, _, attr = name.partition(":")
        add_pattern_tracer(getattr(importlib.import_module(module), attr))

    def find() -> list[Any]:
        return [c for c in candidates(graph, backend) if c.name == spec["impl"]]

    found = find()  # the default registries (project, KERNELGEN_REGISTRY_PATH, entry points)
    if not found and "folder" in spec:
        default_registry().load_folder(spec["folder"])
        found = find()
    elif not found and "module" in spec:
        importlib.import_module(spec["module"])
        found = find()
    if not found:
        where = spec.get("folder") or spec.get("module") or "__main__"
        raise NoTemplateError(
            f"the tuning worker cannot find custom call {spec['impl']} (registered in {where}); register it in "
            "an importable module or a registry folder, or tune with isolate=False")
    return found[0]
