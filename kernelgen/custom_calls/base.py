"""The contract of a custom-call language plugin, plus the pieces the native plugins share.

A plugin turns a registered entry (source text or file, or a prebuilt shared library and a C symbol) into
the ``kernel`` handle its launcher receives where the platform exists here, and into a compile-only
check where only the toolchain exists. Probes are lazy and never raise.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kernelgen.backends.cpp import default_threads
from kernelgen.errors import (CACHE_FIX, CompileError, KernelgenError, ToolchainUnavailableError, compiler_failure,
                              environment_failures)
from kernelgen.ir.values import Config
from kernelgen.paths import atomic_write_text, cache_dir

if TYPE_CHECKING:
    from kernelgen.custom_calls.entry import CustomCall

RUNNABLE, COMPILE_ONLY, UNAVAILABLE = "runnable", "compile-only", "unavailable"


@dataclass(frozen=True)
class Availability:
    """What an entry can do on this machine: run (on ``platform``), only compile, or nothing (``reason``)."""

    state: str
    reason: str = ""
    platform: str | None = None

    @property
    def runnable(self) -> bool:
        return self.state == RUNNABLE


@functools.lru_cache(maxsize=None)
def gpu_platform() -> str | None:
    """``"cuda"`` or ``"hip"`` when torch sees a GPU here, else None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def backend_for(language: str, platform: str) -> str:
    """The kernelgen backend whose tensors a call on ``platform`` takes: CPU tensors are the C++ backend's,
    GPU tensors (and the Triton interpreter's CPU tensors) are the Triton backend's."""
    if language == "triton" or platform in ("cuda", "hip"):
        return "triton"
    return "cpp"


class Language(ABC):
    """A custom-call language plugin.

    Contract:
    - ``toolchain()`` returns ``(True, "")`` or ``(False, what to install)``; it never raises and is cached.
    - ``platform_ready(platform)`` says whether kernels of this language can run on ``platform`` here.
    - ``load(entry, config)`` returns the handle passed to launchers as ``kernel`` (compiled and cached),
      or raises ``ToolchainUnavailableError`` / ``CompileError`` naming the source path.
    - ``compile_check(entry)`` compiles for a device that is not here (``CompileError`` on failure);
      languages that cannot compile without their device leave ``can_compile_only`` False.
    Plugins are stateless apart from caches and are safe to share between threads.
    """

    name: ClassVar[str]
    default_platforms: ClassVar[tuple[str, ...]]
    known_platforms: ClassVar[tuple[str, ...]]
    can_compile_only: ClassVar[bool] = False

    @abstractmethod
    def toolchain(self, entry: "CustomCall") -> tuple[bool, str]: ...

    @abstractmethod
    def platform_ready(self, platform: str) -> tuple[bool, str]: ...

    @abstractmethod
    def load(self, entry: "CustomCall", config: "Config") -> Any: ...

    def compile_check(self, entry: "CustomCall") -> str:
        """Compile without the device; return a short description of what was checked."""
        raise ToolchainUnavailableError(f"{self.name} kernels cannot be compiled without their device")

    def availability(self, entry: "CustomCall") -> Availability:
        if entry.library is not None and not entry.library.exists():
            return Availability(UNAVAILABLE, f"prebuilt library {entry.library} not found; build it first")
        has_tools, tool_reason = self.toolchain(entry)
        reasons = []
        for platform in entry.platforms:
            ready, why = self.platform_ready(platform)
            if ready and has_tools:
                return Availability(RUNNABLE, "", platform)
            if why:
                reasons.append(why)
        if not has_tools:
            return Availability(UNAVAILABLE, tool_reason)
        if self.can_compile_only and entry.library is None:
            return Availability(COMPILE_ONLY, "; ".join(reasons) or "platform not here")
        return Availability(UNAVAILABLE, "; ".join(reasons) or "platform not here")


# ------------------------------------------------------------------------------------- native libraries

class NativeKernel:
    """A C symbol in a loaded shared library, called with torch tensors and Python numbers.

    Tensors pass as their data pointer, ``int``/``bool`` as int64, ``float`` as double; ctypes values
    pass unchanged (use ``ctypes.c_float(eps)`` for a ``float`` parameter). With ``status=True`` the
    symbol returns an int error code (CUDA/HIP launchers) and a non-zero code raises.
    """

    def __init__(self, library: Path, symbol: str, *, status: bool = False) -> None:
        self.library_path = library
        self.symbol = symbol
        self._lib = ctypes.CDLL(str(library))
        try:
            self._fn = getattr(self._lib, symbol)
        except AttributeError:
            raise CompileError(f"{library} has no symbol {symbol!r}; declare it extern \"C\"") from None
        self._fn.restype = ctypes.c_int if status else None
        self._status = status
        self.num_threads = default_threads()

    @staticmethod
    def convert(arg: Any) -> Any:
        if hasattr(arg, "data_ptr"):
            return ctypes.c_void_p(arg.data_ptr())
        if isinstance(arg, (bool, int)):
            return ctypes.c_int64(int(arg))
        if isinstance(arg, float):
            return ctypes.c_double(arg)
        return arg

    def __call__(self, *args: Any) -> None:
        code = self._fn(*[self.convert(a) for a in args])
        if self._status and code:
            raise KernelgenError(f"{self.symbol} in {self.library_path} returned error code {code}")


def find_tool(names: tuple[str, ...], env: str | None = None, extra_dirs: tuple[str, ...] = ()) -> str | None:
    """The first of ``names`` found: ``$env`` if set, then PATH, then ``extra_dirs``."""
    if env and os.environ.get(env):
        found = shutil.which(os.environ[env])
        if found:
            return found
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    for folder in extra_dirs:
        for name in names:
            candidate = Path(folder) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"


def cached_build(kind: str, tool: str, text: str, suffix: str, product: str,
                 command: list[str], env: dict[str, str] | None = None) -> Path:
    """Run ``command`` (with ``{src}``/``{out}`` placeholders) on ``text`` once per complete key; cache the product.

    The key holds the tool, its version, the text and the command, so a change of any is a new build.
    The product is moved into place atomically, so concurrent builders never see a torn file.
    """
    key = hashlib.sha256(json.dumps([kind, tool, tool_version(tool), text, command, sorted((env or {}).items())])
                         .encode()).hexdigest()[:32]
    folder = cache_dir() / "custom_calls" / kind / key[:2] / key
    out = folder / product
    if out.exists():
        return out
    src = folder / f"kernel{suffix}"
    with environment_failures(f"cannot build in the kernel cache {folder}", CACHE_FIX):
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(src, text)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
            tmp_out = Path(tmp) / product
            cmd = [tool] + [part.replace("{src}", str(src)).replace("{out}", str(tmp_out)) for part in command]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                                      env={**os.environ, **(env or {})})
            except subprocess.TimeoutExpired:
                raise CompileError(f"{Path(tool).name} timed out on {src}") from None
            if proc.returncode != 0:
                raise compiler_failure(Path(tool).name, src, proc.returncode, proc.stderr or proc.stdout)
            if not tmp_out.exists():  # e.g. -fsyntax-only style checks produce no file
                tmp_out.write_text("ok\n")
            os.replace(tmp_out, out)
    return out


def first_config(entry: "CustomCall") -> Config:
    """The first config of an entry's params, in declaration order (what a compile-only check builds)."""
    for values in itertools.product(*(p.choices for p in entry.params)):
        return Config(dict(zip((p.name for p in entry.params), values)))
    return Config({})


def defines(entry: "CustomCall", config: Config) -> tuple[str, ...]:
    """``-DNAME=value`` for the params an entry compiles in (its ``defines``)."""
    flags = []
    for name in entry.defines:
        value = config[name]
        value = int(value) if isinstance(value, bool) else value
        flags.append(f"-D{name}={value}")
    return tuple(flags)
