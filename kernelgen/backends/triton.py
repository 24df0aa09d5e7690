"""The Triton backend: compile rendered ``@triton.jit`` source and launch it on a GPU, or on torch CPU
tensors under ``TRITON_INTERPRET=1`` where there is no GPU (correctness only: interpreter timings are
meaningless).

A rendered Triton ``Source`` carries its launch facts in ``meta``: ``signature`` (JSON list of the
TensorSpecs of inputs then outputs), ``grid`` (JSON list of ints), ``constexprs`` (JSON object passed as
keyword arguments), ``num_warps`` and ``num_stages``. The text is written to the kernel cache and
imported as a module: it is our own generated code, never a user's file.

A shape-generic kernel also carries ``dynamic`` (the tensor whose dim 0 is the run-time batch size ``n0``),
``sentinel`` (the dim-0 size of its specs) and ``grid_per_n0`` (``[axis, units, per_program, times]``: grid
dim ``axis`` is ``ceil(n0 * units / per_program) * times``); ``n0`` is passed after the tensors as a plain int, which Triton
specialises on divisibility by 16 as it does every integer argument.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from kernelgen.backends.base import Backend, Kernel
from kernelgen.backends.cpp import specialise
from kernelgen.errors import CompileError, InputMismatchError, ToolchainUnavailableError
from kernelgen.ir.target import Target
from kernelgen.ir.values import Source, TensorSpec
from kernelgen.paths import atomic_write_text, cache_dir

_TRUE = ("1", "true", "yes", "on")
_CACHE_VERSION = "1"  # bump when write_module's layout or the launch convention changes
log = logging.getLogger(__name__)
_WHERE = {"cpu": "CPU (Triton interpreter)", "cuda": "GPU"}


def interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRUE


def interpreter_active() -> bool:
    """True when Triton runs kernels in its interpreter in this process.

    Triton decides at import time (``tl.sum`` and friends are decorated then), so the environment
    variable must be set before the first ``import triton``.
    """
    if not interpreter_requested():
        return False
    if "triton" not in sys.modules:
        return True
    import triton.language as tl

    return type(tl.sum).__name__ == "InterpretedFunction"


def launch_meta(source: Source) -> tuple[tuple[TensorSpec, ...] | None, tuple[int, ...], dict[str, Any], int, int]:
    """``(specs, grid, constexprs, num_warps, num_stages)`` from a rendered source's meta."""
    meta = source.meta
    signature = meta.get("signature")
    specs = tuple(TensorSpec.from_json(s) for s in json.loads(signature)) if signature else None
    grid = tuple(int(g) for g in json.loads(meta.get("grid", "[1]")))
    constexprs = json.loads(meta.get("constexprs", "{}"))
    return specs, grid, constexprs, int(meta.get("num_warps", 4)), int(meta.get("num_stages", 2))


def write_module(source: Source) -> Path:
    """The cached file holding ``source.text`` (written atomically once per source hash)."""
    path = cache_dir() / "triton" / source.hash[:2] / f"{source.entry}_{source.hash}.py"
    if path.exists():
        log.debug("triton cache hit: %s", path)
    else:
        atomic_write_text(path, source.text)
    return path


@functools.lru_cache(maxsize=None)
def _triton_version() -> str:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "absent"


def _current_gpu() -> int:
    import torch

    return torch.cuda.current_device()


def compile_options(gpu_kind: str | None) -> dict[str, Any]:
    """Triton compile options beyond warps and stages for a GPU of ``gpu_kind`` ("cuda", "hip"; None under the
    interpreter). On NVIDIA GPUs libdevice and Triton's float math default to flushing subnormals to zero
    (``nvvm-reflect-ftz``), which eager's CUDA kernels do not: on an H100 floor(-1e-39) gave -0.0 and
    sqrt(-1e-39) gave -0.0 where eager gives -1 and NaN. ROCm's options have no such field."""
    return {"enable_reflect_ftz": False} if gpu_kind == "cuda" else {}


def _gpu_kind() -> str:
    import torch

    return "hip" if getattr(torch.version, "hip", None) else "cuda"


class TritonKernel(Kernel):
    """A ``@triton.jit`` function with its grid, launch options and the tensor specs it was rendered for."""

    def __init__(self, source: Source, fn: Any, path: Path, device: str) -> None:
        self.source = source
        self.path = path
        self.fn = fn
        self.device = device  # "cpu" under the interpreter, else "cuda" (ROCm also reports cuda)
        self.specs, self.grid, self.constexprs, self.num_warps, self.num_stages = launch_meta(source)
        self.options = {"num_warps": self.num_warps, "num_stages": self.num_stages,
                        **compile_options(None if device == "cpu" else _gpu_kind()), **self.constexprs}
        meta = source.meta
        self.dynamic = int(meta["dynamic"]) if meta.get("dynamic") not in (None, "") else None
        self.grid_per_n0 = tuple(json.loads(meta.get("grid_per_n0", "[0, 1, 1, 1]")))

    def _launch_grid(self, tensors: tuple[Any, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, extra scalar arguments) of a launch on ``tensors``."""
        if self.dynamic is None:
            return self.grid, ()
        n0 = int(tensors[self.dynamic].shape[0])
        axis, units, per, times = self.grid_per_n0
        grid = list(self.grid)
        grid[axis] = -(-n0 * units // per) * times
        return tuple(grid), (n0,)

    @property
    def source_file(self) -> Path:
        return self.path

    def check(self, tensors: tuple[Any, ...]) -> None:
        """Raise ``InputMismatchError`` unless ``tensors`` match the specs of this kernel and share a device
        it can reach."""
        if self.specs is not None and len(tensors) != len(self.specs):
            raise InputMismatchError(f"kernel {self.source.entry} takes {len(self.specs)} tensors "
                                     f"(inputs then outputs), got {len(tensors)}")
        for i, t in enumerate(tensors):
            if not hasattr(t, "stride") or not hasattr(t, "device"):
                raise InputMismatchError(f"argument {i} of {self.source.entry} is a {type(t).__name__}, not a "
                                         f"torch tensor on the {_WHERE[self.device]}")
        self.device_of(tensors)
        n0 = self._launch_grid(tensors)[1]
        for i, (t, spec) in enumerate(zip(tensors, self.specs or ())):
            actual = TensorSpec.of(t)
            if n0:
                spec = specialise(spec, self.source.meta["sentinel"], n0[0])
            if actual != spec:
                raise InputMismatchError(f"argument {i} is {actual.dtype}{list(actual.shape)} strides "
                                         f"{list(actual.effective_strides())}; the kernel was built for "
                                         f"{spec.dtype}{list(spec.shape)} strides {list(spec.effective_strides())}")

    def device_of(self, tensors: tuple[Any, ...]) -> Any:
        """The one device every tensor is on, or ``InputMismatchError`` naming the fix.

        Outputs must live where the inputs do (a kernel writes through raw pointers). On a GPU that device
        must be a GPU; the interpreter copies tensors of any single device through the host.
        """
        if not tensors:
            return None
        device = tensors[0].device
        for i, t in enumerate(tensors):
            if t.device != device:
                raise InputMismatchError(
                    f"argument {i} of {self.source.entry} is on {t.device} but argument 0 is on {device}; a "
                    f"Triton kernel reads and writes all its tensors on one device: move them with .to('{device}')")
        if self.device != "cpu" and device.type == "cpu":
            raise InputMismatchError(
                f"the tensors of {self.source.entry} are on the CPU; Triton runs on the GPU: move them with "
                ".cuda(), or set TRITON_INTERPRET=1 before importing triton to run on the CPU (slow)")
        return device

    def launch(self, *tensors: Any) -> None:
        """Launch without the spec checks (the caller's signature key did them), but on the tensors' device:
        mixed devices raise ``InputMismatchError``, and a GPU launch runs on the GPU holding the tensors, not
        on the current one. Triton compiles on the first launch, so compile failures surface here."""
        grid, extra = self._launch_grid(tensors)
        if any(g == 0 for g in grid):
            return  # empty problem
        device = self.device_of(tensors)
        try:
            if self.device != "cpu" and device is not None and device.index is not None \
                    and device.index != _current_gpu():
                import torch

                with torch.cuda.device(device):
                    self.fn[grid](*tensors, *extra, **self.options)
            else:
                self.fn[grid](*tensors, *extra, **self.options)
        except Exception as exc:
            from triton.compiler.errors import CompilationError
            from triton.runtime.errors import InterpreterError

            # The interpreter reports what the compiler would reject (bad shapes, types) as InterpreterError.
            if isinstance(exc, (CompilationError, InterpreterError)):
                raise CompileError(f"triton failed on {self.path}: {' '.join(str(exc).split())[:500]}") from exc
            raise

    def __call__(self, *tensors: Any) -> None:
        self.check(tensors)
        self.launch(*tensors)


class TritonBackend(Backend):
    """Triton on a CUDA/ROCm GPU, or Triton's interpreter on torch CPU tensors (no GPU)."""

    name = "triton"
    language = "triton"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[str, TritonKernel] = {}

    def is_available(self) -> bool:
        try:
            import triton  # noqa: F401
        except ImportError:
            return False
        return self.has_gpu() or interpreter_active()

    def unavailable_reason(self) -> str:
        try:
            import triton  # noqa: F401
        except ImportError:
            return "triton is not installed: pip install triton"
        if self.has_gpu() or interpreter_active():
            return ""
        if interpreter_requested():
            return ("TRITON_INTERPRET=1 was set after triton was imported; set it before the first "
                    "`import triton` (e.g. in the shell: TRITON_INTERPRET=1 python ...)")
        return ("no CUDA/ROCm GPU: to run Triton kernels on the CPU set TRITON_INTERPRET=1 before triton is "
                "imported (slow, for correctness only)")

    def has_gpu(self) -> bool:
        try:
            import torch
        except ImportError:
            return False
        return torch.cuda.is_available()

    def target(self) -> Target:
        return Target.current("triton")

    def recipe(self) -> dict[str, Any]:
        """Triton compiles (and caches) its own binaries keyed by its version; ours is the module file."""
        return {"backend": "triton", "triton": _triton_version(), "cache_format": _CACHE_VERSION}

    def tensor_device(self) -> str:
        """Where this backend's kernels read and write tensors: ``"cuda"`` on a GPU (ROCm too), ``"cpu"``
        under the interpreter. Callers allocating inputs or outputs for a kernel allocate them here."""
        return "cuda" if self.has_gpu() and not interpreter_active() else "cpu"

    def compile(self, source: Source) -> TritonKernel:
        if source.language != "triton":
            raise CompileError(f"the Triton backend cannot compile {source.language!r} source {source.entry}")
        reason = self.unavailable_reason()
        if reason:
            raise ToolchainUnavailableError(reason)
        with self._lock:
            cached = self._kernels.get(source.hash)
        if cached is not None:
            return cached
        started = time.perf_counter()
        path = write_module(source)
        fn = load_entry(path, source.entry)  # Triton compiles it (with its own cache) at the first launch
        log.info("loaded Triton kernel %s from %s in %.2f s", source.entry, path, time.perf_counter() - started)
        kernel = TritonKernel(source, fn, path, self.tensor_device())
        with self._lock:
            self._kernels[source.hash] = kernel
        return kernel

    def synchronize(self) -> None:
        if self.has_gpu() and not interpreter_active():
            import torch

            torch.cuda.synchronize()


def load_entry(path: Path, entry: str) -> Any:
    """Import the generated module at ``path`` and return its ``entry`` function."""
    name = f"kernelgen_triton_{path.stem}"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # triton reads the function's source through its module
        spec.loader.exec_module(module)
        return getattr(module, entry)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CompileError(f"cannot load Triton source {path}: {type(exc).__name__}: {exc}") from exc
