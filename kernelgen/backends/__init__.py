"""Backends by name: a registry with lazy imports and the ``kernelgen.backends`` entry-point group.

``get_backend("cpp")`` imports ``kernelgen.backends.cpp`` only when asked; third-party backends join by
declaring an entry point ``name = "package.module:BackendClass"`` in that group. No if/elif chains.
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata

from kernelgen.backends.base import Backend, Kernel
from kernelgen.errors import KernelgenError

_BUILTIN = {
    "cpp": "kernelgen.backends.cpp:CppBackend",
    "triton": "kernelgen.backends.triton:TritonBackend",
}


def _entry_points() -> dict[str, str]:
    found = {}
    for ep in metadata.entry_points(group="kernelgen.backends"):
        found[ep.name] = ep.value
    return found


def backend_names() -> tuple[str, ...]:
    return tuple(sorted({**_BUILTIN, **_entry_points()}))


@functools.lru_cache(maxsize=None)
def get_backend(name: str) -> Backend:
    """The backend instance called ``name``; raises ``KernelgenError`` listing the known names."""
    spec = {**_entry_points(), **_BUILTIN}.get(name)
    if spec is None:
        raise KernelgenError(f"unknown backend {name!r}; known backends: {', '.join(backend_names())}")
    module_name, _, attr = spec.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    return cls()


def default_backend(device_type: str | None = None) -> Backend:
    """The backend ``backend="auto"`` means for tensors on ``device_type``: Triton for GPU tensors ("cuda", as
    ROCm's torch also calls them), C++/OpenMP for CPU tensors, also on a machine that has a GPU (an H100 run
    found CPU models there handed to Triton, which refused their tensors). Without a device: Triton where a GPU
    is present, else C++/OpenMP."""
    if device_type == "cpu":
        return get_backend("cpp")
    triton = get_backend("triton")
    if device_type is not None or triton.has_gpu():
        return triton
    return get_backend("cpp")


__all__ = ["Backend", "Kernel", "backend_names", "default_backend", "get_backend"]
