"""CPU C++ custom calls: source compiled by the host compiler with the C++ backend's flags, or a prebuilt
shared library; the launcher gets a ``NativeKernel`` for the entry's C symbol."""

from __future__ import annotations

import shutil
import threading
from typing import Any

from kernelgen.backends.cpp import build_shared_library, compiler
from kernelgen.custom_calls.base import Language, NativeKernel, defines, first_config
from kernelgen.ir.values import Config


class CppLanguage(Language):
    name = "cpp"
    default_platforms = ("cpu",)
    known_platforms = ("cpu",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[tuple, NativeKernel] = {}

    def toolchain(self, entry: Any) -> tuple[bool, str]:
        if entry.library is not None:
            return True, ""
        if shutil.which(compiler()) is None:
            return False, f"C++ compiler {compiler()!r} not found: apt-get install g++ (or set CXX)"
        return True, ""

    def platform_ready(self, platform: str) -> tuple[bool, str]:
        return platform == "cpu", "" if platform == "cpu" else f"C++ custom calls run on the CPU, not {platform}"

    def load(self, entry: Any, config: Config) -> NativeKernel:
        flags = entry.options + defines(entry, config)
        key = (entry.source_hash(), flags)
        with self._lock:
            cached = self._kernels.get(key)
        if cached is not None:
            return cached
        if entry.library is not None:
            library = entry.library
        else:
            library = build_shared_library(entry.text(), flags, name=entry.name)
        kernel = NativeKernel(library, entry.symbol)
        with self._lock:
            self._kernels[key] = kernel
        return kernel

    def compile_check(self, entry: Any) -> str:
        self.load(entry, first_config(entry))
        return "compiled with the host compiler"


LANGUAGE = CppLanguage()
