"""Runtime dispatch: ``compile(fn)`` returns a callable that runs the best known kernel for each input signature.

Per new signature (shapes, strides, dtypes, device of the arguments) it traces ``fn``, finds the
implementations of the graph, looks up the best tuning record (local database over the team one), builds
that config or the implementation's default, and caches the launcher in memory. Later calls cost one
dict lookup on a tuple key. A graph nothing implements runs eagerly (the reason is logged once).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from kernelgen.errors import InputMismatchError, KernelgenError, TraceError, UnsupportedOpError
from kernelgen.values import SUPPORTED_DTYPES, TensorSpec

log = logging.getLogger("kernelgen")
_DBS: dict[tuple, Any] = {}  # open databases by (url, team url): opening one costs ~30 ms
_DB_LOCK = threading.Lock()


class _Entry:
    """What one input signature runs: a launcher and its output layout, or the eager function."""

    __slots__ = ("launch", "outputs", "single", "eager", "impl", "config", "source", "huge")

    def __init__(self, launch: Callable[..., None] | None, outputs: tuple, single: bool, eager: bool = False,
                 impl: str = "", config: Any = None, source: str = "") -> None:
        self.launch = launch
        self.outputs = outputs  # ((shape, torch dtype), ...) of each output
        self.single = single
        self.eager = eager
        self.impl = impl
        self.config = config
        self.source = source  # "db", "tuned", "default" or "eager"
        self.huge = [False] * len(outputs)  # outputs big enough to ask for transparent huge pages


def _lazy_torch() -> None:
    global _empty, _Tensor
    import torch

    _empty, _Tensor = torch.empty, torch.Tensor


_empty: Any = None
_Tensor: Any = None


_HUGE_PAGE = 1 << 21
_HUGE_MIN_BYTES = 8 << 20


def _huge_page_advice() -> Any:
    """``madvise(MADV_HUGEPAGE)`` when transparent huge pages are opt-in (``[madvise]``), else None.

    Why: a fresh 128 MiB output costs ~32k page faults on first touch, about twice the kernel itself;
    with 2 MiB pages it costs 64. Only the pages of the fresh output are advised (advice, not a mapping
    change), so torch's other memory is untouched.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as handle:
            if "[madvise]" not in handle.read():
                return None
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


_HUGE_ADVICE = _huge_page_advice()


def _advise_huge(tensor: Any) -> None:
    start = tensor.data_ptr()
    lo = (start + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1)
    hi = (start + tensor.nbytes) & ~(_HUGE_PAGE - 1)
    if hi > lo:
        _HUGE_ADVICE(lo, hi - lo, 14)  # MADV_HUGEPAGE; failure only means small pages


def _signature_key(args: tuple) -> tuple:
    """Everything a kernel is specialised on, cheaply: dtype, shape, strides and device class per tensor,
    in one flat tuple. Calls with one to four tensors use the unrolled twins below, which skip the loop
    and the per-tensor tuples (about 1 µs of a 5 µs dispatch budget with three tensors)."""
    return tuple([v for a in args for v in (a.dtype, a.shape, a.stride(), a.is_cpu)])


def _key1(args: tuple) -> tuple:
    (a,) = args
    return (a.dtype, a.shape, a.stride(), a.is_cpu)


def _key2(args: tuple) -> tuple:
    a, b = args
    return (a.dtype, a.shape, a.stride(), a.is_cpu, b.dtype, b.shape, b.stride(), b.is_cpu)


def _key3(args: tuple) -> tuple:
    a, b, c = args
    return (a.dtype, a.shape, a.stride(), a.is_cpu, b.dtype, b.shape, b.stride(), b.is_cpu,
            c.dtype, c.shape, c.stride(), c.is_cpu)


def _key4(args: tuple) -> tuple:
    a, b, c, d = args
    return (a.dtype, a.shape, a.stride(), a.is_cpu, b.dtype, b.shape, b.stride(), b.is_cpu,
            c.dtype, c.shape, c.stride(), c.is_cpu, d.dtype, d.shape, d.stride(), d.is_cpu)


_KEYS = (_signature_key, _key1, _key2, _key3, _key4)


class CompiledFunction:
    """``fn`` compiled by kernelgen: call it like ``fn``, optionally with ``out=`` (a tensor or a tuple).

    Thread-safe: the per-signature cache is filled under a lock; the hot path only reads it.
    """

    def __init__(self, fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
                 team_db: str | None = None, trials: int | None = None, seconds: float | None = None) -> None:
        if tune not in (False, True, "auto"):
            raise KernelgenError(f"tune={tune!r} is not understood; use False or 'auto' (tune on first call)")
        self.fn = fn
        self.backend_name = backend
        self.tune = bool(tune)
        self.db_arg, self.team_db, self.trials, self.seconds = db, team_db, trials, seconds
        self._params = _positional_params(fn)
        _lazy_torch()
        self._cache: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        functools.update_wrapper(self, fn)

    # -- hot path ---------------------------------------------------------------------------------------
    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if kwargs:
            args = self._bind(args, kwargs)
        try:
            key = (_KEYS[len(args)] if len(args) < 5 else _signature_key)(args)
            entry = self._cache[key]
        except KeyError:
            entry = self._prepare(args, key)
        except AttributeError:
            raise InputMismatchError(self._not_tensors(args)) from None
        if entry.eager:
            return self._run_eager(args, out)
        if entry.single:
            shape, dtype = entry.outputs[0]
            if out is None:
                out = _empty(shape, dtype=dtype)
                if entry.huge[0]:
                    _advise_huge(out)
            elif out.__class__ is not _Tensor or out.shape != shape or out.dtype != dtype \
                    or not out.is_contiguous() or not out.is_cpu:
                self._check_out(entry, out)  # raises with the reason
            entry.launch(*args, out)
            return out
        if out is None:
            outs = tuple(_empty(shape, dtype=dtype) for shape, dtype in entry.outputs)
            for o, huge in zip(outs, entry.huge):
                if huge:
                    _advise_huge(o)
        else:
            outs = self._check_out(entry, out)
        entry.launch(*args, *outs)
        return outs

    # -- helpers ----------------------------------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise InputMismatchError(f"{self.__name__}: {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _not_tensors(self, args: tuple) -> str:
        import torch

        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                return (f"argument {i} of {self.__name__} is {type(a).__name__}, not a torch tensor; compiled functions "
                        "take tensors only (close over Python constants instead)")
        return f"the arguments of {self.__name__} are not all torch tensors"

    def _check_out(self, entry: _Entry, out: Any) -> tuple:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(entry.outputs):
            raise InputMismatchError(f"out= has {len(outs)} tensors; {self.__name__} returns {len(entry.outputs)}")
        for i, (o, (shape, dtype)) in enumerate(zip(outs, entry.outputs)):
            if not isinstance(o, _Tensor) or o.shape != shape or o.dtype != dtype or not o.is_contiguous() or not o.is_cpu:
                raise InputMismatchError(
                    f"out[{i}] is {getattr(o, 'dtype', type(o).__name__)}{list(getattr(o, 'shape', []))}; "
                    f"expected a contiguous CPU {str(dtype).removeprefix('torch.')}{list(shape)}")
        return tuple(outs)

    def _run_eager(self, args: tuple, out: Any) -> Any:
        result = self.fn(*args)
        if out is None:
            return result
        results = result if isinstance(result, tuple) else (result,)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(results):
            raise InputMismatchError(f"out= has {len(outs)} tensors; {self.__name__} returns {len(results)}")
        for o, r in zip(outs, results):
            if o.shape != r.shape or o.dtype != r.dtype:
                raise InputMismatchError(f"out= tensor {o.dtype}{list(o.shape)} does not fit the result "
                                         f"{r.dtype}{list(r.shape)}")
            o.copy_(r)
        return out

    def _log_once(self, reason: str) -> None:
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning("%s runs eagerly: %s", self.__name__, reason)

    # -- first call of a signature ----------------------------------------------------------------------
    def _prepare(self, args: tuple, key: tuple) -> _Entry:
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._build(args)
                self._cache[key] = entry
        return entry

    def _build(self, args: tuple) -> _Entry:
        from kernelgen.backends import default_backend, get_backend
        from kernelgen.implementation import implementations_for
        from kernelgen.ir import trace

        backend = default_backend() if self.backend_name == "auto" else get_backend(self.backend_name)
        if self._params is not None and len(args) != self._params:
            raise InputMismatchError(f"{self.__name__} takes {self._params} tensors, got {len(args)}")
        specs = [self._spec(i, a, backend.name) for i, a in enumerate(args)]
        try:
            graph = trace(self.fn, *specs)
        except UnsupportedOpError as exc:
            self._log_once(str(exc))
            return _Entry(None, (), False, eager=True, source="eager")
        except TraceError as exc:
            return self._eager_after_trace_error(args, exc)
        impls = implementations_for(graph, backend.name)
        if not impls:
            self._log_once(f"no template or custom call covers ops {sorted(graph.ops())} on backend {backend.name!r}")
            return _Entry(None, (), False, eager=True, source="eager")
        target = backend.target()
        impl, config, source = self._choose(graph, impls, backend.name, target)
        # Whatever the database says, a config runs here only once it passed a check in a worker process.
        from kernelgen.tune.checked import build_checked, candidates_after

        picked = build_checked(candidates_after((impl, config), impls, target), target)
        if picked is None:
            self._log_once(f"no implementation of it passed its check here ({', '.join(i.name for i in impls)})")
            return _Entry(None, (), False, eager=True, source="eager")
        impl, config, launcher, source = picked.impl, picked.config, picked.launcher, \
            "default" if picked.fallback else source
        import torch

        outputs = tuple((torch.Size(s.shape), getattr(torch, s.dtype)) for s in graph.output_specs)
        launch = getattr(launcher, "launch", launcher)  # CppKernel.launch skips the per-call check: the key did it
        entry = _Entry(launch, outputs, len(outputs) == 1, impl=impl.name, config=config, source=source)
        entry.huge = [_HUGE_ADVICE and s.numel * s.itemsize >= _HUGE_MIN_BYTES for s in graph.output_specs]
        return entry

    def _spec(self, i: int, a: Any, backend: str) -> TensorSpec:
        dtype = str(a.dtype).removeprefix("torch.")
        if dtype not in SUPPORTED_DTYPES:
            raise InputMismatchError(f"argument {i} of {self.__name__} has dtype {dtype}; kernelgen supports "
                                     f"{', '.join(SUPPORTED_DTYPES)}")
        if backend == "cpp" and not a.is_cpu:
            raise InputMismatchError(f"argument {i} of {self.__name__} is on {a.device}; the C++ backend needs CPU "
                                     "tensors (move it with .cpu() or compile with backend='triton')")
        return TensorSpec.of(a)

    def _eager_after_trace_error(self, args: tuple, exc: TraceError) -> _Entry:
        """Untraceable for these inputs: if eager fails too the inputs are wrong, else run eagerly."""
        try:
            self.fn(*args)
        except Exception as eager_exc:
            shown = ", ".join(str(a.dtype).removeprefix("torch.") + str(list(a.shape)) for a in args)
            raise InputMismatchError(f"{self.__name__} cannot run on inputs ({shown}): {eager_exc}") from None
        self._log_once(str(exc))
        return _Entry(None, (), False, eager=True, source="eager")

    def _choose(self, graph: Any, impls: list, backend: str, target: Any) -> tuple[Any, Any, str]:
        """The best recorded (implementation, config), tuning first when asked; else the first default."""
        record = self._lookup(graph, impls, target)
        if record is None and self.tune:
            record = self._tune(graph, backend)
            source = "tuned"
        else:
            source = "db"
        if record is not None:
            for impl in impls:
                if impl.name == record.implementation and impl.space(target).is_valid(record.config):
                    return impl, record.config, source
        return impls[0], impls[0].default_config(target), "default"

    def _open_db(self) -> Any:
        """The database object the caller passed, or one opened once per process per URL pair."""
        if self.db_arg is not None and not isinstance(self.db_arg, str):
            return self.db_arg
        from kernelgen.db import TEAM_DB_ENV, open_db

        key = (self.db_arg or os.environ.get("KERNELGEN_DB"), self.team_db or os.environ.get(TEAM_DB_ENV))
        with _DB_LOCK:
            if key not in _DBS:
                _DBS[key] = open_db(self.db_arg, team_url=self.team_db)
            return _DBS[key]

    def _lookup(self, graph: Any, impls: list, target: Any) -> Any:
        try:
            db = self._open_db()
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kernelgen.db"):
                return None
            raise
        except KernelgenError as exc:
            self._log_once(f"tuning database unavailable ({exc}); using default configs")
            return None
        try:
            return db.best(graph.workload_key, target.fingerprint,
                           implementations={impl.name: impl.source_hash() for impl in impls})
        except KernelgenError as exc:
            self._log_once(f"tuning database lookup failed ({exc}); using default configs")
            return None

    def _tune(self, graph: Any, backend: str) -> Any:
        from kernelgen.tune.tuner import tune_graph

        seconds = self.seconds if self.seconds is not None or self.trials is not None else 60.0
        return tune_graph(graph, backend=backend, db=self._open_db(), trials=self.trials, seconds=seconds).best

    # -- introspection ----------------------------------------------------------------------------------
    def explain(self, *args: Any) -> dict[str, Any]:
        """What runs for these inputs: implementation, config and where the config came from."""
        key = _signature_key(args)
        entry = self._cache.get(key) or self._prepare(args, key)
        return {"implementation": entry.impl or "eager", "config": None if entry.config is None else dict(entry.config),
                "source": entry.source}


def _positional_params(fn: Callable[..., Any]) -> int | None:
    """How many tensors ``fn`` takes, or None when it takes ``*args``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def compile(fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
            team_db: str | None = None, trials: int | None = None, seconds: float | None = None) -> CompiledFunction:
    """Compile ``fn`` (a plain PyTorch function of tensors) into a kernelgen-dispatched callable.

    ``db``: a database URL or an open database (default: ``KERNELGEN_DB`` or the per-user SQLite file),
    layered over ``team_db`` (default: ``KERNELGEN_TEAM_DB``). ``tune="auto"`` tunes each new signature
    that has no record on first call, within ``trials`` / ``seconds`` (default 60 s). Calls accept
    ``out=`` (a preallocated output or tuple of outputs) and raise ``InputMismatchError`` for inputs that
    cannot run (wrong count, dtype, device, or shapes the function rejects).
    """
    return CompiledFunction(fn, backend, tune=tune, db=db, team_db=team_db, trials=trials, seconds=seconds)


__all__ = ["CompiledFunction", "compile"]
