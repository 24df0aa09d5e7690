"""``CompiledFunction``: the callable ``kernelgen.compile`` returns, which runs the best known kernel for each
input signature.

Per new signature (shapes, strides, dtypes, device and requires_grad of the tensors, values of Python
constants) the front end traces ``fn``, the runtime finds the implementations of the graph, looks up the
best tuning record (local database over the team one), builds that config or the implementation's
default, and caches the launcher in memory. Later calls of tensors only cost one dict lookup on a tuple
key. A graph nothing implements, or that kernelgen fails on, runs eagerly (the reason is logged once).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from kernelgen.backends import default_backend, get_backend
from kernelgen.check.budget import check_bytes, too_large
from kernelgen.errors import InputMismatchError, KernelgenError
from kernelgen.ir.values import SUPPORTED_DTYPES
from kernelgen.runtime import autograd
from kernelgen.runtime import dynamic as dyn
from kernelgen.runtime.direct import NO_KERNEL, DirectPath
from kernelgen.runtime.entry import Entry, advise_huge, bind_torch
from kernelgen.runtime.explain import Explain
from kernelgen.runtime.family_path import FamilyPath
from kernelgen.runtime.family_path import max_variants as max_variants_of
from kernelgen.runtime.graph_path import GraphPath
from kernelgen.runtime.outputs import fill_out, refuse_aliasing
from kernelgen.runtime.records import RecordChoice
from kernelgen.runtime.seams import FrontEnd, installed_front_end
from kernelgen.runtime.signature import KEYS, NotAConstant, describe_values, signature_key, value_key

log = logging.getLogger("kernelgen.runtime")


def _lazy_torch() -> None:
    global _empty, _Tensor, _grad_enabled
    _empty, _Tensor, _grad_enabled = bind_torch()


_empty: Any = None  # torch.empty, torch.Tensor, torch.is_grad_enabled: globals, the cheapest lookup on the hot path
_Tensor: Any = None
_grad_enabled: Any = None


class CompiledFunction(DirectPath, GraphPath, FamilyPath, RecordChoice, Explain):
    """``fn`` compiled by kernelgen: call it like ``fn``, optionally with ``out=`` (a tensor or a tuple).

    ``fn`` is a function, an ``nn.Module`` (its parameters and buffers are read at each call), a bound
    method, a ``functools.partial`` or a callable object. Results have eager's structure; when grad mode
    is on and an input requires grad they carry eager's gradients. Thread-safe: the per-signature cache
    is filled under a lock; the hot path only reads it.

    Its jobs live in one mixin each: the direct path (``DirectPath``), the ``torch.compile`` graph path
    (``GraphPath``), shape families (``FamilyPath``), the database lookup and tuning (``RecordChoice``) and
    ``explain`` (``Explain``); this class keeps the signature cache and the calls. ``front_end`` (default: the
    one ``kernelgen.api`` installs) describes and traces ``fn``.
    """

    def __init__(self, fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
                 team_db: str | None = None, trials: int | None = None, seconds: float | None = None,
                 dynamic: Any = None, max_variants: int | None = None, partition: bool = True,
                 front_end: FrontEnd | None = None, aten_first: bool = False) -> None:
        if tune not in (False, True, "auto"):
            raise KernelgenError(f"tune={tune!r} is not understood; use False or 'auto' (tune on first call)")
        self.front_end = front_end if front_end is not None else installed_front_end()
        # compiling twice is compiling once
        self.callee = self.front_end.describe(fn.callee.fn if isinstance(fn, CompiledFunction) else fn)
        self.fn = self.callee.fn
        self.backend_name = backend
        self.tune = bool(tune)
        self.db_arg, self.team_db, self.trials, self.seconds = db, team_db, trials, seconds
        # A module's state and train/eval mode join every call, so its calls always take the general path.
        self._general = self.callee.module is not None
        _lazy_torch()
        self._cache: dict[tuple, Entry] = {}
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        try:
            names = list(inspect.signature(self.callee.fn).parameters)
        except (TypeError, ValueError):
            names = []
        self.dynamic = dyn.parse(dynamic, names)
        self.max_variants = max_variants_of(max_variants)
        # A graph no single template covers goes through torch.compile with the kernelgen backend: Dynamo,
        # AOTAutograd, the partitioner; its regions run kernelgen kernels (each region is a CompiledFunction
        # with partition=False), the rest ATen. Built on first need, shared by every such signature.
        self.partition = bool(partition)
        # Untuned, run the graph's ATen ops first (a model's region too small to win: kernelgen.runtime.aten).
        self.aten_first = bool(aten_first)
        self._graph_fn: Any = None
        self._families: dict[tuple, Any] = {}  # family key -> Family, or None where no generic kernel serves it
        self._sizes: dict[tuple, set[int]] = {}  # family key -> batch sizes seen (dynamic=None waits for two)
        self.variants = 0  # shape variants compiled: static kernels and families
        self.__name__ = self.__qualname__ = self.callee.name
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        module = getattr(fn, "__module__", None)
        if isinstance(module, str):
            self.__module__ = module

    # -- hot path ---------------------------------------------------------------------------------------
    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if kwargs or self._general:
            return self._call_general(args, kwargs, out)
        try:
            key = (KEYS[len(args)] if len(args) < 5 else signature_key)(args)
            entry = self._cache[key]
        except KeyError:
            if len(args) != self.callee.arity and self.callee.arity is not None:
                self.callee.bind(args, kwargs)  # a wrong count raises here; Python fills defaults itself
            entry = self._prepare(args, None, key, len(args))
        except AttributeError:  # not all tensors: Python scalars are constants of the signature
            return self._call_general(args, kwargs, out)
        if entry.slow:
            return self._run(entry, args, args, None, out)
        if entry.single:
            shape, dtype = entry.outputs[0]
            if out is None:
                out = _empty(shape, dtype=dtype, device=entry.device)
                if entry.huge[0]:
                    advise_huge(out)
            else:
                if out.__class__ is not _Tensor or out.shape != shape or out.dtype != dtype or not out.is_contiguous() \
                        or (not out.is_cpu if entry.cpu else out.device != entry.device):
                    self._check_out(entry, out)  # raises with the reason
                refuse_aliasing((out,), args, self.__name__)
            entry.launch(*args, out)
            return out
        if out is None:
            outs = tuple(_empty(shape, dtype=dtype, device=entry.device) for shape, dtype in entry.outputs)
            for o, huge in zip(outs, entry.huge):
                if huge:
                    advise_huge(o)
        else:
            outs = self._check_out(entry, out)
            refuse_aliasing(outs, args, self.__name__)
        entry.launch(*args, *outs)
        return outs

    # -- every other call: keywords, defaults, constants, module state, autograd, eager -----------------
    def _call_general(self, args: tuple, kwargs: dict, out: Any) -> Any:
        values, layout = self.callee.bind(args, kwargs)
        full = values + self.callee.read_state() if self.callee.state else values
        try:
            key = self._key(values, layout, full)
        except NotAConstant as exc:
            self._log_once(f"{exc}; such calls run eagerly")
            result = self.callee.call(values, layout)
            return result if out is None else fill_out(result, out, self.__name__)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._prepare(full, layout, key, len(values))
        return self._run(entry, values, full, layout, out)

    def _key(self, values: tuple, layout: Any, full: tuple) -> tuple:
        # All tensors, positional: the hot path's flat key (a module's state count is fixed, so the length
        # of ``full`` still tells how many of them are arguments).
        if layout is None and all(isinstance(v, _Tensor) for v in full):
            key = (KEYS[len(full)] if len(full) < 5 else signature_key)(full)
        else:
            key = (layout, len(values), *[value_key(i, v) for i, v in enumerate(full)])
        if self._general:  # a trace bakes ``if self.training:`` in: train and eval are two signatures
            return (key, self.callee.modes())
        return key

    def _run(self, entry: "Entry", values: tuple, full: tuple, layout: Any, out: Any) -> Any:
        if entry.eager:
            return self._run_eager(entry, values, layout, out)
        inputs = full if entry.picks is None else tuple([full[i] for i in entry.picks])
        if entry.grad and _grad_enabled():
            if out is not None:
                raise InputMismatchError(f"out= cannot hold results that require grad (an input of {self.__name__} "
                                         "requires grad); call without out= or under torch.no_grad()")
            outs = autograd.apply(entry.run, entry.replay, inputs)
        elif out is None:
            outs = entry.run(inputs)
        elif entry.flat:
            outs = self._check_out(entry, out)
            refuse_aliasing(outs, inputs, self.__name__)
            entry.launch(*inputs, *outs)
            return out if entry.single else outs
        else:
            return fill_out(entry.plan.build(entry.run(inputs), inputs), out, self.__name__)
        if entry.flat:  # skip pytree for the common layouts
            return outs[0] if entry.single else outs
        return entry.plan.build(outs, inputs)

    def _run_eager(self, entry: "Entry", values: tuple, layout: Any, out: Any) -> Any:
        if entry.source == "graph":
            return self._run_graph(entry, values, layout, out)
        if not entry.check:
            result = self.callee.call(values, layout)
        else:  # shapes did not propagate on meta tensors: if eager rejects the inputs too, say so
            try:
                result = self.callee.call(values, layout)
            except Exception as exc:
                with self._lock:
                    self._cache = {k: e for k, e in self._cache.items() if e is not entry}
                raise InputMismatchError(f"{self.__name__} cannot run on inputs ({describe_values(values)}): "
                                         f"{type(exc).__name__}: {exc}") from exc
            entry.check = False
        return result if out is None else fill_out(result, out, self.__name__)

    # -- helpers ----------------------------------------------------------------------------------------
    def _check_out(self, entry: "Entry", out: Any) -> tuple:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(entry.outputs):
            raise InputMismatchError(f"out= has {len(outs)} tensors; {self.__name__} returns {len(entry.outputs)}")
        for i, (o, (shape, dtype)) in enumerate(zip(outs, entry.outputs)):
            if not isinstance(o, _Tensor) or o.shape != shape or o.dtype != dtype or not o.is_contiguous() \
                    or o.device != entry.device:
                raise InputMismatchError(
                    f"out[{i}] is {getattr(o, 'dtype', type(o).__name__)}{list(getattr(o, 'shape', []))}"
                    f"{' on ' + str(o.device) if isinstance(o, _Tensor) else ''}; expected a contiguous "
                    f"{str(dtype).removeprefix('torch.')}{list(shape)} on {entry.device}")
        return tuple(outs)

    def _log_once(self, reason: str) -> None:
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning("%s runs eagerly: %s", self.__name__, reason)

    def _eager(self, reason: str, check: bool = False) -> "Entry":
        if not check:
            self._log_once(reason)
        return Entry(eager=True, check=check, reason=reason)

    # -- first call of a signature ----------------------------------------------------------------------
    def _prepare(self, full: tuple, layout: Any, key: tuple, n_values: int) -> "Entry":
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._build(full, layout, n_values)
                self._cache[key] = entry
        return entry

    def _build(self, full: tuple, layout: Any, n_values: int) -> "Entry":
        tensors = [(i, a) for i, a in enumerate(full) if isinstance(a, _Tensor)]
        if self.backend_name == "auto":
            backend = default_backend(tensors[0][1].device.type if tensors else None)
        else:
            backend = get_backend(self.backend_name)
        for i, a in tensors:
            self._check_tensor(i, a, backend.name)
        if len({a.device for _, a in tensors}) > 1:
            return self._eager(f"inputs on several devices ({_describe_devices(tensors)})")
        empty = any(a.numel() == 0 for _, a in tensors)  # traced as it is: sizes 0 are specialised, no family
        # Too large to check at this shape (the worker would need several times the caller's memory): its
        # shape family's generic kernel, checked at a small batch size, serves it from the first call.
        oversized = too_large(2 * check_bytes(a.numel() * a.element_size() for _, a in tensors))  # outputs ~ inputs
        try:
            if self.dynamic is not False and not empty:
                entry = self._family_entry(full, layout, n_values, backend, force=bool(oversized))
                if entry is not None:
                    return entry
            if oversized:
                return self._eager(f"{oversized}; no shape family serves it")
            if self.variants >= self.max_variants:
                return self._over_limit()
            entry = self._build_kernel(full, layout, n_values, backend)
            # a custom call's library serves every shape (built once per source): not a shape variant; nor is a
            # graph with nothing to compute (empty results, identities: no kernel is built)
            self.variants += not entry.eager and not entry.impl.startswith("custom:") and entry.impl not in NO_KERNEL
            return entry
        except KernelgenError:
            raise
        except Exception as exc:  # a kernelgen bug on this graph must cost speed, never the caller's call
            return self._eager(f"compiling it failed with {type(exc).__name__}: {exc}")

    def _check_tensor(self, i: int, a: Any, backend: str) -> None:
        dtype = str(a.dtype).removeprefix("torch.")
        if dtype not in SUPPORTED_DTYPES:
            raise InputMismatchError(f"argument {i} of {self.__name__} has dtype {dtype}; kernelgen supports "
                                     f"{', '.join(SUPPORTED_DTYPES)}")
        if backend == "cpp" and not a.is_cpu:
            raise InputMismatchError(f"argument {i} of {self.__name__} is on {a.device}; the C++ backend needs CPU "
                                     "tensors (move it with .cpu() or compile with backend='triton')")

    def choices(self) -> list[dict[str, Any]]:
        """What each signature compiled so far runs: ``graph`` (the workload graph its tuning records are keyed
        by: what ``kernelgen tune --model`` tunes), ``implementation``, ``config`` and ``source`` (db, default,
        tuned, ...); signatures that run eagerly for want of a kernel are left out."""
        with self._lock:
            return [{"graph": e.graph, "implementation": e.impl, "config": e.config, "source": e.source}
                    for e in self._cache.values() if e.graph is not None]

    @property
    def workload_name(self) -> str:
        """The name its tuning records carry: the compiled function's ``module.qualname``."""
        return self.callee.workload_name


def _describe_devices(tensors: list) -> str:
    return ", ".join(f"argument {i} on {a.device}" for i, a in tensors)


__all__ = ["CompiledFunction"]
