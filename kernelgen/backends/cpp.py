"""The C++/OpenMP backend: compile rendered C++ with the host compiler, load it with ctypes, launch it.

Every rendered source defines ``extern "C" void <entry>(void* const* ptrs, int64_t num_threads)``:
``ptrs`` holds the data pointers of the inputs then the outputs; ``num_threads`` is the OpenMP thread
count (fixed and recorded by the tuner). For launches, the backend appends ``<entry>_kgargs(p0, ..., pN,
num_threads)`` taking the pointers as arguments: ctypes passes N pointer arguments ~1.5 µs faster than
it builds an array of them, and dispatch overhead is a budget of 5 µs per call. Objects are cached on
disk under a key of source text, flags and compiler version, written atomically, so concurrent
processes can compile the same kernel safely.

Shape-generic kernels (``Source.meta["dynamic"]`` holds the index of the tensor whose dim 0 is the run-time
batch size) take one more argument, ``int64_t n0``, after ``num_threads``; the launcher reads it from that
tensor, so a launcher is still called with tensors only and one compiled kernel serves every batch size.

Why compile and link separately: gcc links ``crtfastmath.o`` into a shared library linked with
``-ffast-math``, and loading it turns on flush-to-zero for the whole process, silently changing torch's
numerics. No flag of the recipe is a fast-math one any more (see ``compile_flags``), and the link step
stays free of them whatever ``extra_flags`` a source adds.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import logging
import threading
import time
from pathlib import Path
from typing import Any

from kernelgen.backends.base import Backend, Kernel
from kernelgen.errors import (CACHE_FIX, CompileError, InputMismatchError, ToolchainUnavailableError, compiler_failure,
                              environment_failures)
from kernelgen.ir.target import Target, host_compiler_version
from kernelgen.ir.values import Source, TensorSpec
from kernelgen.paths import atomic_write_text, cache_dir

log = logging.getLogger(__name__)
_CACHE_VERSION = "3"  # bump when the compile or link recipe changes


def compiler() -> str:
    return os.environ.get("CXX", "g++")


@functools.lru_cache(maxsize=None)
def compile_flags() -> tuple[str, ...]:
    """Flags for the host CPU, chosen by what eager guarantees. ``-mprefer-vector-width=512`` only where AVX-512
    exists.

    Eager PyTorch's IEEE division, NaN/Inf placement, signed zeros and integer wraparound are the contract, so
    no ``-ffast-math``. It broke each: reciprocal math turned ``x / y`` into ``x * (1/y)`` (22-56 of 128
    elements differed from eager for a broadcast divisor, and ``-fno-reciprocal-math`` after ``-ffast-math``
    did not stop gcc 12), reassociation turned the backward of ``(x / nz, z / nz)`` at nz = -0 into -inf where
    eager gives NaN, no-signed-zeros lost -0. What is kept: ``-fno-math-errno`` (libm calls may be vectorised
    through libmvec, declared in ``cpp_prelude``; erf/tanh/exp are inline rationals and polynomials that need
    no flag), ``-fno-trapping-math`` (no FP traps are ever enabled), ``-ffp-contract=fast`` (FMAs, as
    ``-std=c++17`` would otherwise forbid: GEMM micro-kernels depend on them), ``-fwrapv`` (signed overflow
    wraps as in torch). Sums that gcc vectorised by reassociating go through ``omp simd reduction(+:...)``
    or explicit partial sums in the templates: the only reordering left, scoped to a sum. Measured side by
    side with the old flags on ``benchmarks/bench_kernels.py``'s workloads (one process, interleaved, on a
    loaded 2-core EPYC): every pointwise and reduction row within noise or faster, GEMM and attention
    1.03-1.06x slower (their vector-extension code lost gcc's freedom to reassociate).
    """
    flags = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast", "-fwrapv",
             "-fopenmp", "-fPIC", "-std=c++17", "-fno-plt"]
    if "avx512f" in Target.current("cpp").features:
        flags.append("-mprefer-vector-width=512")
    return tuple(flags)


LINK_FLAGS = ("-shared", "-fopenmp")  # no -ffast-math: see the module docstring


def default_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, len(os.sched_getaffinity(0)))


@functools.lru_cache(maxsize=None)
def _compiler_path(cxx: str) -> str:
    return shutil.which(cxx) or cxx


def recipe() -> dict[str, Any]:
    """The compile recipe: compiler path and version, compile and link flags, cache format version."""
    cxx = compiler()
    return {"backend": "cpp", "compiler": _compiler_path(cxx), "version": host_compiler_version(cxx),
            "flags": list(compile_flags()), "link_flags": list(LINK_FLAGS), "cache_format": _CACHE_VERSION}


# The standard headers every generated kernel opens with (``kernelgen.codegen.cpp_prelude.PRELUDE`` starts with
# exactly these lines). Parsing them was most of a kernel's compile: a 200-line pointwise kernel took 0.34 s with g++
# 12 at these flags (AMD EPYC, 2026-11-29), of which <cmath> alone 0.27 s; from a precompiled header 0.11 s, with the
# same machine code (objdump -d of both objects compared). A GPT-2 model's first compile builds dozens of kernels;
# the test suite ~4000. Only sources that start with these lines use it (a custom call's own includes, or macros
# set before them, are left as they are).
PRECOMPILED_INCLUDES = "#include <cstdint>\n#include <cstring>\n#include <cmath>\n#include <omp.h>\n#include <type_traits>\n"


def _is_gcc(version: str) -> bool:
    lowered = version.lower()
    return "clang" not in lowered and ("g++" in lowered or "gcc" in lowered)


@functools.lru_cache(maxsize=None)
def precompiled_prelude(cxx: str, flags: tuple[str, ...]) -> Path | None:
    """The header of ``PRECOMPILED_INCLUDES`` with its GCC precompiled form beside it, built once per compiler and
    flags in the kernel cache (GCC uses a ``.gch`` only when its flags match; otherwise it parses the header, which
    is still correct); None when the compiler is not GCC or the build failed: kernels then parse the headers."""
    version = host_compiler_version(cxx)
    if not _is_gcc(version):
        return None
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, PRECOMPILED_INCLUDES, flags, version]).encode()).hexdigest()[:32]
    root = cache_dir() / "cpp" / "pch"
    folder = root / key
    header = folder / "kg_prelude.h"
    if (folder / "kg_prelude.h.gch").exists():
        return header
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
            staged = Path(tmp) / key
            staged.mkdir()
            (staged / "kg_prelude.h").write_text(PRECOMPILED_INCLUDES)
            proc = subprocess.run([cxx, *flags, "-x", "c++-header", str(staged / "kg_prelude.h"), "-o",
                                   str(staged / "kg_prelude.h.gch")], capture_output=True, text=True)
            if proc.returncode != 0:
                log.info("no precompiled prelude (%s): %s", Path(cxx).name, proc.stderr.strip()[:300])
                return None
            try:
                os.replace(staged, folder)  # atomic: another process sees the whole folder or none
            except OSError:
                pass  # a concurrent process put its own there first: the same header, use it
    except OSError as exc:
        log.info("no precompiled prelude: %s", exc)
        return None
    return header if (folder / "kg_prelude.h.gch").exists() else None


def build_shared_library(text: str, extra_flags: tuple[str, ...] = (), name: str = "kernel") -> Path:
    """Compile C++ ``text`` into a cached shared library and return its path.

    Raises ``ToolchainUnavailableError`` when there is no compiler and ``CompileError`` (with the path of
    the source and the first compiler error) when compilation fails.
    """
    cxx = shutil.which(compiler())
    if cxx is None:
        raise ToolchainUnavailableError(f"C++ compiler {compiler()!r} not found; install g++ "
                                        "(apt-get install g++) or set CXX")
    flags = compile_flags() + tuple(extra_flags)
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, text, flags, LINK_FLAGS,
                                     host_compiler_version(compiler())]).encode()).hexdigest()[:32]
    folder = cache_dir() / "cpp" / key[:2] / key
    library = folder / f"{name}.so"
    if library.exists():
        log.debug("cpp cache hit: %s", library)
        return library
    started = time.perf_counter()
    source_path = folder / f"{name}.cpp"
    with environment_failures(f"cannot build in the kernel cache {folder}", CACHE_FIX):
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(source_path, text)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
            obj, tmp_lib = Path(tmp) / "kernel.o", Path(tmp) / f"{name}.so"
            prelude = precompiled_prelude(cxx, flags) if text.lstrip().startswith(PRECOMPILED_INCLUDES) else None
            include = ("-include", str(prelude)) if prelude is not None else ()
            for cmd in ([cxx, *flags, *include, "-c", str(source_path), "-o", str(obj)],
                        [cxx, *LINK_FLAGS, str(obj), "-o", str(tmp_lib)]):
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise compiler_failure(Path(cmd[0]).name, source_path, proc.returncode, proc.stderr)
            os.replace(tmp_lib, library)  # atomic: a concurrent loader sees the whole library or none
    log.info("compiled %s in %.2f s (cache miss)", source_path, time.perf_counter() - started)
    return library


MAX_POINTER_ARGS = 16  # beyond this, per-argument conversion costs more than building the array


def specialise(spec: TensorSpec, sentinel: Any, n0: int) -> TensorSpec:
    """``spec`` of a shape-generic kernel's tensor at batch size ``n0``: dim 0 of the sentinel size becomes ``n0``."""
    if not spec.shape or spec.shape[0] != int(sentinel):
        return spec
    return TensorSpec((n0, *spec.shape[1:]), spec.dtype, spec.strides)


def entry_declaration(entry: str, dynamic: bool) -> str:
    """The ``extern "C"`` head every rendered C++ kernel opens with (``n0``: run-time batch size)."""
    return f'extern "C" void {entry}(void* const* ptrs, int64_t num_threads{", int64_t n0" if dynamic else ""}) {{'


def pointer_args_entry(entry: str, count: int, dynamic: bool = False) -> str:
    """C++ of ``<entry>_kgargs``: the entry point with its ``count`` pointers passed as arguments."""
    params = ", ".join(f"void* p{i}" for i in range(count))
    names = ", ".join(f"p{i}" for i in range(count))
    extra, pass_on = (", int64_t", ", n0") if dynamic else ("", "")
    return (f'\n#include <cstdint>\nextern "C" void {entry}(void* const*, int64_t{extra});\n'
            f'extern "C" void {entry}_kgargs({params}, int64_t num_threads{extra}{" n0" if dynamic else ""}) {{\n'
            f"  void* const ptrs[] = {{{names}}};\n  {entry}(ptrs, num_threads{pass_on});\n}}\n")


THREAD_CAP = [1 << 30]  # the most OpenMP threads any launch uses (a list: read on every launch, set rarely)


def set_thread_cap(threads: int | None) -> None:
    """Cap every kernel's launch at ``threads`` OpenMP threads (None: no cap). ``kernelgen.runtime.threads`` lowers
    it while other processes keep CPUs busy: a thread that shares a CPU with them makes every barrier wait."""
    THREAD_CAP[0] = (1 << 30) if threads is None else max(1, int(threads))


class CppKernel(Kernel):
    """A loaded shared library entry point plus the tensor specs it was specialised for."""

    def __init__(self, source: Source, library: Path, specs: tuple[TensorSpec, ...] | None) -> None:
        self.source = source
        self.library_path = library
        self._lib = ctypes.CDLL(str(library))
        self._fn = getattr(self._lib, source.entry)
        # the tensor whose dim 0 is the run-time batch size of a shape-generic kernel, else None
        self.dynamic = int(source.meta["dynamic"]) if source.meta.get("dynamic") not in (None, "") else None
        extra = (ctypes.c_int64,) if self.dynamic is not None else ()
        self._fn.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, *extra)
        self._fn.restype = None
        self.specs = specs
        self.num_threads = default_threads()
        self._ptr_array = ctypes.c_void_p * (len(specs) if specs else 0)
        self._args_fn = getattr(self._lib, f"{source.entry}_kgargs", None) if specs else None
        if self._args_fn is not None:
            self._args_fn.argtypes = (ctypes.c_void_p,) * len(specs) + (ctypes.c_int64, *extra)
            self._args_fn.restype = None

    @property
    def source_file(self) -> Path:
        return self.library_path.with_suffix(".cpp")

    def check(self, tensors: tuple[Any, ...]) -> None:
        """Raise ``InputMismatchError`` unless ``tensors`` match the specs this kernel was built for."""
        if self.specs is None:
            return
        if len(tensors) != len(self.specs):
            raise InputMismatchError(f"kernel {self.source.entry} takes {len(self.specs)} tensors "
                                     f"(inputs then outputs), got {len(tensors)}")
        n0 = tensors[self.dynamic].shape[0] if self.dynamic is not None and hasattr(tensors[self.dynamic], "shape") \
            else None
        for i, (t, spec) in enumerate(zip(tensors, self.specs)):
            actual = TensorSpec.of(t) if hasattr(t, "stride") else None
            if actual is None or t.device.type != "cpu":
                raise InputMismatchError(f"argument {i} must be a CPU torch tensor for the C++ backend")
            if n0 is not None:  # a shape-generic kernel: dim 0 of the sentinel size is the batch size
                spec = specialise(spec, self.source.meta["sentinel"], n0)
            if actual != spec:
                raise InputMismatchError(f"argument {i} is {actual.dtype}{list(actual.shape)} strides "
                                         f"{list(actual.effective_strides())}; the kernel was built for "
                                         f"{spec.dtype}{list(spec.shape)} strides {list(spec.effective_strides())}")

    def launch(self, *tensors: Any) -> None:
        """Launch without checks (the dispatcher checks once per signature), with at most ``THREAD_CAP[0]``
        threads (``set_thread_cap``: fewer while other processes hold CPUs)."""
        extra = () if self.dynamic is None else (tensors[self.dynamic].shape[0],)
        threads = min(self.num_threads, THREAD_CAP[0])
        if self._args_fn is not None:
            self._args_fn(*[t.data_ptr() for t in tensors], threads, *extra)
            return
        ptrs = self._ptr_array(*[t.data_ptr() for t in tensors]) if self.specs else \
            (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        self._fn(ptrs, threads, *extra)

    def __call__(self, *tensors: Any) -> None:
        self.check(tensors)
        self.launch(*tensors)


class CppBackend(Backend):
    """Host C++ compiler + OpenMP; runs at full speed on this machine."""

    name = "cpp"
    language = "cpp"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[str, CppKernel] = {}

    def is_available(self) -> bool:
        return shutil.which(compiler()) is not None

    def unavailable_reason(self) -> str:
        return "" if self.is_available() else f"{compiler()} not found: apt-get install g++ (or set CXX)"

    def target(self) -> Target:
        return Target.current("cpp")

    def recipe(self) -> dict[str, Any]:
        return recipe()

    def compile(self, source: Source) -> CppKernel:
        if source.language != "cpp":
            raise CompileError(f"the C++ backend cannot compile {source.language!r} source {source.entry}")
        with self._lock:
            cached = self._kernels.get(source.hash)
        if cached is not None:
            return cached
        signature = source.meta.get("signature")
        specs = tuple(TensorSpec.from_json(s) for s in json.loads(signature)) if signature else None
        text = source.text
        if specs and len(specs) <= MAX_POINTER_ARGS:
            text += pointer_args_entry(source.entry, len(specs), source.meta.get("dynamic") not in (None, ""))
        library = build_shared_library(text, source.options)
        kernel = CppKernel(source, library, specs)
        with self._lock:
            self._kernels[source.hash] = kernel
        return kernel
