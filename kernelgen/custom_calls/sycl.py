"""SYCL custom calls, in three forms:

- OpenCL C kernel source (a ``.cl`` file or source text) built and run through dpctl on a SYCL device
  (``cpu``: an OpenCL CPU device, e.g. ``pip install dpctl intel-opencl-rt``); the launcher gets a
  ``DpctlKernel`` that stages torch CPU tensors through USM shared memory.
- SYCL C++ source (``.cpp``) compiled by a SYCL compiler (``icpx -fsycl``, AdaptiveCpp ``acpp``, or
  ``$KERNELGEN_SYCL_CXX``) into a shared library whose ``extern "C"`` symbol takes host pointers.
- A prebuilt shared library from a SYCL compiler and a C symbol.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any

from kernelgen.custom_calls.base import (Availability, Language, NativeKernel, UNAVAILABLE, cached_build, defines,
                                         find_tool)
from kernelgen.errors import CompileError, ToolchainUnavailableError
from kernelgen.ir.values import Config

_SYCL_COMPILERS = ("icpx", "acpp", "syclcc")
_DPCTL_HINT = "dpctl not installed: pip install dpctl intel-opencl-rt (OpenCL CPU device)"


def _uses_dpctl(entry: Any) -> bool:
    if entry.library is not None:
        return False
    return entry.source_path is None or entry.source_path.suffix == ".cl"


@functools.lru_cache(maxsize=None)
def _dpctl() -> Any:
    """Import dpctl, pointing the OpenCL ICD loader at pip's intel-opencl-rt CPU runtime when present."""
    if importlib.util.find_spec("dpctl") is None:
        raise ToolchainUnavailableError(_DPCTL_HINT)
    runtime = Path(sys.prefix) / "lib" / "libintelocl.so"
    if "OCL_ICD_FILENAMES" not in os.environ and runtime.exists():
        os.environ["OCL_ICD_FILENAMES"] = str(runtime)  # pip installs the ICD file where the loader won't look
    import dpctl

    return dpctl


@functools.lru_cache(maxsize=None)
def _queue(platform: str) -> Any:
    dpctl = _dpctl()
    selector = os.environ.get("KERNELGEN_SYCL_DEVICE") or ("opencl:cpu" if platform == "cpu" else "gpu")
    try:
        return dpctl.SyclQueue(selector)
    except Exception as exc:  # dpctl raises SyclQueueCreationError and friends
        raise ToolchainUnavailableError(
            f"no SYCL device {selector!r} ({exc}); for the CPU: pip install intel-opencl-rt, or set "
            "OCL_ICD_FILENAMES to an OpenCL CPU runtime; or choose one with KERNELGEN_SYCL_DEVICE") from None


class DpctlKernel:
    """An OpenCL C kernel in a dpctl program, called with torch CPU tensors and numbers.

    ``kernel(global_size, *args, local_size=None, writes=None)``: tensors are copied to USM shared
    memory, ints pass as int64 (``long``), floats as ``float``; after the kernel, the tensors in
    ``writes`` (default: all) are copied back.
    """

    def __init__(self, queue: Any, program: Any, symbol: str) -> None:
        self.queue = queue
        self.symbol = symbol
        try:
            self._kernel = program.get_sycl_kernel(symbol)
        except Exception:
            raise CompileError(f"the OpenCL program defines no kernel {symbol!r}") from None

    def __call__(self, global_size: Any, *args: Any, local_size: Any = None, writes: Any = None) -> None:
        import dpctl.memory as dpm
        import torch

        staged, kargs = [], []
        for arg in args:
            if isinstance(arg, torch.Tensor):
                flat = arg.contiguous().view(torch.uint8).reshape(-1)
                buf = dpm.MemoryUSMShared(max(flat.numel(), 1), queue=self.queue)
                if flat.numel():
                    buf.copy_from_host(flat.numpy())
                staged.append((arg, buf))
                kargs.append(buf)
            elif isinstance(arg, (bool, int)):
                kargs.append(ctypes.c_longlong(int(arg)))
            elif isinstance(arg, float):
                kargs.append(ctypes.c_float(arg))
            else:
                kargs.append(arg)
        sizes = [int(s) for s in (global_size if isinstance(global_size, (tuple, list)) else (global_size,))]
        local = None if local_size is None else [int(s) for s in (
            local_size if isinstance(local_size, (tuple, list)) else (local_size,))]
        self.queue.submit(self._kernel, kargs, sizes, local).wait()
        for tensor, buf in staged:
            if tensor.numel() and (writes is None or any(tensor is w for w in writes)):
                data = torch.frombuffer(bytearray(buf.copy_to_host()), dtype=torch.uint8)
                tensor.view(torch.uint8).reshape(-1).copy_(data[: tensor.numel() * tensor.element_size()])


class SyclLanguage(Language):
    name = "sycl"
    default_platforms = ("cpu",)
    known_platforms = ("cpu", "gpu")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[tuple, Any] = {}

    def compiler(self) -> str | None:
        return find_tool(_SYCL_COMPILERS, "KERNELGEN_SYCL_CXX", ("/opt/intel/oneapi/compiler/latest/bin",))

    def toolchain(self, entry: Any) -> tuple[bool, str]:
        if entry.library is not None:
            return True, ""
        if _uses_dpctl(entry):
            return (True, "") if importlib.util.find_spec("dpctl") else (False, _DPCTL_HINT)
        if self.compiler() is None:
            return False, ("no SYCL compiler: install Intel oneAPI DPC++ (icpx) or AdaptiveCpp (acpp), "
                           "or set KERNELGEN_SYCL_CXX")
        return True, ""

    def platform_ready(self, platform: str) -> tuple[bool, str]:
        if importlib.util.find_spec("dpctl") is None:
            return platform == "cpu", ""  # compiled SYCL libraries pick their own device
        try:
            _queue(platform)
        except ToolchainUnavailableError as exc:
            return False, str(exc)
        return True, ""

    def availability(self, entry: Any) -> Any:
        result = super().availability(entry)
        if result.runnable and not _uses_dpctl(entry) and result.platform != "cpu":
            return Availability(UNAVAILABLE, "compiled SYCL libraries take host pointers: register them for 'cpu'")
        return result

    def load(self, entry: Any, config: Config) -> Any:
        flags = entry.options + defines(entry, config)
        platform = self.availability(entry).platform or "cpu"
        key = (entry.source_hash(), flags, platform)
        with self._lock:
            cached = self._kernels.get(key)
        if cached is not None:
            return cached
        if entry.library is not None:
            kernel: Any = NativeKernel(entry.library, entry.symbol)
        elif _uses_dpctl(entry):
            queue = _queue(platform)
            import dpctl.program as dpp

            try:
                program = dpp.create_program_from_source(queue, entry.text(), " ".join(flags))
            except Exception as exc:
                where = entry.source_path or f"the source text of {entry.name!r}"
                raise CompileError(f"building OpenCL kernel {where} on {queue.sycl_device.name} failed: {exc}") from None
            kernel = DpctlKernel(queue, program, entry.symbol)
        else:
            tool = self.compiler()
            if tool is None:
                raise ToolchainUnavailableError(self.toolchain(entry)[1])
            library = cached_build("sycl", tool, entry.text(), ".cpp", f"{entry.name}.so",
                                   ["-fsycl", "-O3", "-fPIC", "-shared", *flags, "{src}", "-o", "{out}"])
            kernel = NativeKernel(library, entry.symbol)
        with self._lock:
            self._kernels[key] = kernel
        return kernel


LANGUAGE = SyclLanguage()
