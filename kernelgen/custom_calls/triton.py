"""Triton custom calls: a ``@triton.jit`` kernel (passed directly, or a ``.py`` file plus the kernel's name)
launched by the entry's launcher on GPU tensors, or on CPU tensors under ``TRITON_INTERPRET=1``.

A kernel file is imported lazily, when first loaded, so that ``TRITON_INTERPRET=1`` set by then still
turns ``@triton.jit`` into the interpreter (Triton decides at decoration time).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any

from kernelgen.custom_calls.base import Language, gpu_platform
from kernelgen.errors import CompileError, ToolchainUnavailableError
from kernelgen.ir.values import Config, content_hash


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


class TritonLanguage(Language):
    name = "triton"
    default_platforms = ("cuda", "hip", "cpu")
    known_platforms = ("cuda", "hip", "cpu")
    can_compile_only = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: dict[tuple, Any] = {}

    def toolchain(self, entry: Any) -> tuple[bool, str]:
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed: pip install triton"
        return True, ""

    def platform_ready(self, platform: str) -> tuple[bool, str]:
        if platform == "cpu":
            if interpreting():
                return True, ""
            return False, "no GPU here; set TRITON_INTERPRET=1 before importing triton to run on the CPU interpreter"
        if gpu_platform() == platform:
            return True, ""
        return False, f"no {platform.upper()} GPU here"

    def load(self, entry: Any, config: Config) -> Any:
        kernel = self._kernel(entry)
        on_cpu = gpu_platform() is None
        if on_cpu and type(kernel).__name__ != "InterpretedFunction":
            raise ToolchainUnavailableError(
                f"Triton kernel {entry.symbol or entry.name} was decorated before TRITON_INTERPRET=1 was set; "
                "set it before importing triton (or the module defining the kernel)")
        return kernel

    def _kernel(self, entry: Any) -> Any:
        if entry.source_object is not None:
            return entry.source_object
        path: Path = entry.source_path
        key = (str(path), content_hash(entry.text()), interpreting())
        with self._lock:
            module = self._modules.get(key)
            if module is None:
                name = f"_kernelgen_triton_{content_hash(list(map(str, key)), 12)}"
                spec = importlib.util.spec_from_file_location(name, path)
                if spec is None or spec.loader is None:
                    raise CompileError(f"cannot import Triton kernel file {path}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module  # triton's JIT looks kernels' globals up through the module
                try:
                    spec.loader.exec_module(module)
                except Exception as exc:
                    sys.modules.pop(name, None)
                    raise CompileError(f"importing Triton kernel file {path} failed: {type(exc).__name__}: {exc}") from exc
                self._modules[key] = module
        kernel = getattr(module, entry.symbol, None)
        if kernel is None:
            raise CompileError(f"{path} defines no {entry.symbol!r}")
        return kernel

    def compile_check(self, entry: Any) -> str:
        kernel = self._kernel(entry)
        if not hasattr(kernel, "__getitem__") or not hasattr(kernel, "fn"):
            raise CompileError(f"{entry.symbol or entry.name} in {entry.source_path} is not a @triton.jit kernel")
        return "imported; a @triton.jit kernel (running it needs a GPU or TRITON_INTERPRET=1)"


LANGUAGE = TritonLanguage()
