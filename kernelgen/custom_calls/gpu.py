"""Shared plugin for CUDA and HIP custom calls: a GPU compiler builds a shared library where the GPU is
here (the launcher gets a ``NativeKernel``), and an object file for a named architecture where only the
compiler is (the compile-only check CI runs).

Source contract: the file defines ``extern "C" int <symbol>(...)`` on the host that launches the kernel
on the stream it is given and returns the runtime's error code (0 on success).
"""

from __future__ import annotations

import os
import threading
from typing import Any, ClassVar

from kernelgen.custom_calls.base import (Language, NativeKernel, cached_build, defines, find_tool, first_config,
                                         gpu_platform)
from kernelgen.errors import ToolchainUnavailableError
from kernelgen.ir.values import Config


class GpuCompilerLanguage(Language):
    """A language compiled by one GPU compiler (nvcc, hipcc) for one GPU platform."""

    platform: ClassVar[str]
    tools: ClassVar[tuple[str, ...]]
    tool_env: ClassVar[str]  # environment variable naming the compiler
    tool_dirs: ClassVar[tuple[str, ...]]
    arch_env: ClassVar[str]  # environment variable naming the compile-only architecture
    default_arch: ClassVar[str]
    install_hint: ClassVar[str]
    compile_env: ClassVar[dict[str, str]] = {}
    can_compile_only = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[tuple, NativeKernel] = {}

    def compiler(self) -> str | None:
        return find_tool(self.tools, self.tool_env, self.tool_dirs)

    def toolchain(self, entry: Any) -> tuple[bool, str]:
        if entry.library is not None:
            return True, ""
        if self.compiler() is None:
            return False, self.install_hint
        return True, ""

    def platform_ready(self, platform: str) -> tuple[bool, str]:
        if platform != self.platform:
            return False, f"{self.name} kernels run on {self.platform} GPUs, not {platform}"
        if gpu_platform() != self.platform:
            return False, f"no {self.platform.upper()} GPU here"
        return True, ""

    def arch_flags(self, arch: str) -> list[str]:
        raise NotImplementedError

    def shared_flags(self) -> list[str]:
        raise NotImplementedError

    def _tool(self) -> str:
        tool = self.compiler()
        if tool is None:
            raise ToolchainUnavailableError(self.install_hint)
        return tool

    def load(self, entry: Any, config: Config) -> NativeKernel:
        flags = list(entry.options + defines(entry, config))
        key = (entry.source_hash(), tuple(flags))
        with self._lock:
            cached = self._kernels.get(key)
        if cached is not None:
            return cached
        library = entry.library
        if library is None:
            library = cached_build(self.name, self._tool(), entry.text(), entry.source_path.suffix
                                   if entry.source_path else f".{self.name}", f"{entry.name}.so",
                                   [*self.shared_flags(), *flags, "{src}", "-o", "{out}"], self.compile_env)
        kernel = NativeKernel(library, entry.symbol, status=True)
        with self._lock:
            self._kernels[key] = kernel
        return kernel

    def compile_check(self, entry: Any) -> str:
        """Compile to an object for ``$<arch_env>`` (default ``default_arch``), once per params' defines."""
        arch = os.environ.get(self.arch_env, self.default_arch)
        tool = self._tool()
        flags = list(entry.options + defines(entry, first_config(entry)))
        suffix = entry.source_path.suffix if entry.source_path else f".{self.name}"
        cached_build(f"{self.name}-check", tool, entry.text(), suffix, "kernel.o",
                     [*self.arch_flags(arch), "-fPIC" if self.name == "hip" else "-Xcompiler=-fPIC", *flags,
                      "-c", "{src}", "-o", "{out}"], self.compile_env)
        return f"compiled for {arch} with {os.path.basename(tool)}"
