"""Runtime dispatch: ``compile(fn)`` returns a callable that runs the best known kernel for each input signature.

Per new signature (shapes, strides, dtypes, device and requires_grad of the tensors, values of Python
constants) it traces ``fn`` (``kernelgen.frontend``), finds the implementations of the graph, looks up the
best tuning record (local database over the team one), builds that config or the implementation's
default, and caches the launcher in memory. Later calls of tensors only cost one dict lookup on a tuple
key. A graph nothing implements, or that kernelgen fails on, runs eagerly (the reason is logged once).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from kernelgen.errors import InputMismatchError, KernelgenError, ShapePropagationError, TraceError
from kernelgen.frontend.outputs import fill_out
from kernelgen.frontend.signature import KEYS, NotAConstant, describe_values, signature_key, value_key
from kernelgen.ir.values import SUPPORTED_DTYPES

log = logging.getLogger(__name__)
_DBS: dict[tuple, Any] = {}  # open databases by (url, team url): opening one costs ~30 ms
_DB_LOCK = threading.Lock()


class _Entry:
    """What one call signature runs: a launcher, its outputs and the result's layout, or eager.

    ``single`` / ``flat`` (the result is one kernel output, or a tuple of them) with no input picking
    and no autograd run on the hot path; every other entry has ``slow`` set and goes through ``_run``.
    """

    __slots__ = ("launch", "outputs", "single", "flat", "slow", "eager", "check", "grad", "plan", "picks",
                 "device", "cpu", "replay", "run", "impl", "config", "source", "huge", "path", "hash", "reason",
                 "family", "bucket")

    def __init__(self, launch: Callable[..., None] | None = None, outputs: tuple = (), *, eager: bool = False,
                 check: bool = False, plan: Any = None, picks: tuple | None = None, device: Any = None,
                 grad: bool = False, replay: Any = None, impl: str = "", config: Any = None,
                 source: str = "eager", path: Any = None, digest: str | None = None, reason: str = "") -> None:
        self.launch = launch
        self.outputs = outputs  # ((shape, torch dtype), ...) of each kernel output
        self.eager = eager
        self.check = check  # eager because meta shapes failed: an eager failure means bad inputs
        self.plan = plan
        self.picks = picks  # graph inputs as indices into the call values + module state; None: all, in order
        self.device = device  # outputs are allocated here: the inputs' device
        self.cpu = device is not None and device.type == "cpu"  # the hot path's cheap out= device check
        self.grad = grad  # some input requires grad: autograd when grad mode is on
        self.replay = replay
        self.flat = plan is not None and (plan.is_single or plan.is_flat_tuple)
        self.single = self.flat and plan.is_single
        self.slow = eager or grad or picks is not None or not self.flat
        self.impl = impl
        self.config = config
        self.source = source  # "db", "tuned", "default" or "eager"
        self.path = path  # the generated source file in the kernel cache (explain shows it)
        self.hash = digest  # the implementation hash its tuning records carry
        self.reason = reason  # why it runs eagerly, or why this config was chosen
        self.huge = [False] * len(outputs)  # outputs big enough to ask for transparent huge pages
        self.family: str | None = None  # the shape family whose generic kernel runs, for explain()
        self.bucket: int | None = None
        self.run = self._fresh

    def _fresh(self, inputs: tuple) -> tuple:
        """Launch into freshly allocated outputs on the inputs' device."""
        outs = tuple([_empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.outputs])
        if _HUGE_ADVICE:
            for o, huge in zip(outs, self.huge):
                if huge:
                    _advise_huge(o)
        self.launch(*inputs, *outs)
        return outs


def _lazy_torch() -> None:
    global _empty, _Tensor, _grad_enabled
    import torch

    _empty, _Tensor, _grad_enabled = torch.empty, torch.Tensor, torch.is_grad_enabled


_empty: Any = None
_Tensor: Any = None
_grad_enabled: Any = None


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


class CompiledFunction:
    """``fn`` compiled by kernelgen: call it like ``fn``, optionally with ``out=`` (a tensor or a tuple).

    ``fn`` is a function, an ``nn.Module`` (its parameters and buffers are read at each call), a bound
    method, a ``functools.partial`` or a callable object. Results have eager's structure; when grad mode
    is on and an input requires grad they carry eager's gradients. Thread-safe: the per-signature cache
    is filled under a lock; the hot path only reads it.
    """

    def __init__(self, fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
                 team_db: str | None = None, trials: int | None = None, seconds: float | None = None,
                 dynamic: Any = None, max_variants: int | None = None, partition: bool = True) -> None:
        import inspect

        from kernelgen.frontend import dynamic as dyn
        from kernelgen.frontend.callables import describe

        if tune not in (False, True, "auto"):
            raise KernelgenError(f"tune={tune!r} is not understood; use False or 'auto' (tune on first call)")
        self.callee = describe(fn)
        self.fn = self.callee.fn
        self.backend_name = backend
        self.tune = bool(tune)
        self.db_arg, self.team_db, self.trials, self.seconds = db, team_db, trials, seconds
        # A module's state and train/eval mode join every call, so its calls always take the general path.
        self._general = self.callee.module is not None
        _lazy_torch()
        self._cache: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        try:
            names = list(inspect.signature(self.callee.fn).parameters)
        except (TypeError, ValueError):
            names = []
        self.dynamic = dyn.parse(dynamic, names)
        self.max_variants = _max_variants(max_variants)
        # A graph no single template covers goes through torch.compile with the kernelgen backend: Dynamo,
        # AOTAutograd, the partitioner; its regions run kernelgen kernels (each region is a CompiledFunction
        # with partition=False), the rest ATen. Built on first need, shared by every such signature.
        self.partition = bool(partition)
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
                    _advise_huge(out)
            elif out.__class__ is not _Tensor or out.shape != shape or out.dtype != dtype or not out.is_contiguous() \
                    or (not out.is_cpu if entry.cpu else out.device != entry.device):
                self._check_out(entry, out)  # raises with the reason
            entry.launch(*args, out)
            return out
        if out is None:
            outs = tuple(_empty(shape, dtype=dtype, device=entry.device) for shape, dtype in entry.outputs)
            for o, huge in zip(outs, entry.huge):
                if huge:
                    _advise_huge(o)
        else:
            outs = self._check_out(entry, out)
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

    def _run(self, entry: "_Entry", values: tuple, full: tuple, layout: Any, out: Any) -> Any:
        if entry.eager:
            return self._run_eager(entry, values, layout, out)
        inputs = full if entry.picks is None else tuple([full[i] for i in entry.picks])
        if entry.grad and _grad_enabled():
            if out is not None:
                raise InputMismatchError(f"out= cannot hold results that require grad (an input of {self.__name__} "
                                         "requires grad); call without out= or under torch.no_grad()")
            from kernelgen.frontend import autograd

            outs = autograd.apply(entry.run, entry.replay, inputs)
        elif out is None:
            outs = entry.run(inputs)
        elif entry.flat:
            outs = self._check_out(entry, out)
            entry.launch(*inputs, *outs)
            return out if entry.single else outs
        else:
            return fill_out(entry.plan.build(entry.run(inputs), inputs), out, self.__name__)
        if entry.flat:  # skip pytree for the common layouts
            return outs[0] if entry.single else outs
        return entry.plan.build(outs, inputs)

    def _run_eager(self, entry: "_Entry", values: tuple, layout: Any, out: Any) -> Any:
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
    def _check_out(self, entry: "_Entry", out: Any) -> tuple:
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

    def _run_graph(self, entry: "_Entry", values: tuple, layout: Any, out: Any) -> Any:
        """A call of a signature no single template covers, through the kernelgen torch.compile backend. If
        that fails where eager does not (Dynamo or the backend cannot take the function), the signature runs
        eagerly from then on, with the reason logged; an error eager raises too is the caller's.

        The signature's first successful call runs eagerly: decompositions accept inputs eager rejects
        (``gelu`` of an int64 tensor decomposes into ops that take integers), and eager's error is the
        contract. Until a call succeeds, each call runs eagerly and raises what eager raises."""
        if entry.check:
            result = self.callee.call(values, layout)
            entry.check = False
            return result if out is None else fill_out(result, out, self.__name__)
        try:
            result = self.callee.call(values, layout, fn=self._graph_callable())
        except Exception as exc:  # noqa: BLE001 - decided below by running eager
            result = self.callee.call(values, layout)  # raises when the inputs are wrong for eager too
            entry.source, entry.impl = "eager", ""
            entry.reason = f"{entry.reason}; torch.compile with the kernelgen backend failed " \
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            self._log_once(entry.reason)
        return result if out is None else fill_out(result, out, self.__name__)

    def _graph_callable(self) -> Any:
        """``torch.compile(fn, backend=kernelgen)`` with this function's options, made once."""
        if self._graph_fn is None:
            import functools

            import torch

            from kernelgen.frontend.dynamo_backend import kernelgen_backend

            options = {"backend": self.backend_name, "tune": "auto" if self.tune else False, "db": self.db_arg,
                       "team_db": self.team_db, "trials": self.trials, "seconds": self.seconds}
            backend = functools.partial(kernelgen_backend, options={k: v for k, v in options.items() if v is not None})
            self._graph_fn = torch.compile(self.fn, backend=backend, dynamic=self.dynamic if isinstance(self.dynamic, bool)
                                           else None)
        return self._graph_fn

    def _partitioned(self, reason: str) -> "_Entry":
        """The entry of a signature no single kernelgen template covers: partitioned into regions through
        the torch.compile backend (``partition=True``), else eager."""
        if not self.partition:
            return self._eager(reason)
        log.info("%s: %s; torch.compile with the kernelgen backend partitions it into regions", self.__name__, reason)
        entry = _Entry(eager=True, check=True, source="graph", impl="graph",
                       reason=f"{reason}: it runs as regions of kernelgen kernels and ATen ops (torch.compile with "
                              "the kernelgen backend)")
        return entry

    def _eager(self, reason: str, check: bool = False) -> "_Entry":
        if not check:
            self._log_once(reason)
        return _Entry(eager=True, check=check, reason=reason)

    # -- first call of a signature ----------------------------------------------------------------------
    def _prepare(self, full: tuple, layout: Any, key: tuple, n_values: int) -> "_Entry":
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._build(full, layout, n_values)
                self._cache[key] = entry
        return entry

    def _build(self, full: tuple, layout: Any, n_values: int) -> "_Entry":
        from kernelgen.backends import default_backend, get_backend

        tensors = [(i, a) for i, a in enumerate(full) if isinstance(a, _Tensor)]
        if self.backend_name == "auto":
            backend = default_backend(tensors[0][1].device.type if tensors else None)
        else:
            backend = get_backend(self.backend_name)
        for i, a in tensors:
            self._check_tensor(i, a, backend.name)
        if len({a.device for _, a in tensors}) > 1:
            return self._eager(f"inputs on several devices ({_describe_devices(tensors)})")
        if any(a.numel() == 0 for _, a in tensors):
            return self._eager("an input is empty (numel 0); eager handles empty tensors")
        try:
            if self.dynamic is not False:
                entry = self._family_entry(full, layout, n_values, backend)
                if entry is not None:
                    return entry
            if self.variants >= self.max_variants:
                return self._over_limit()
            entry = self._build_kernel(full, layout, n_values, backend)
            # a custom call's library serves every shape (built once per source): not a shape variant
            self.variants += not entry.eager and not entry.impl.startswith("custom:")
            return entry
        except KernelgenError:
            raise
        except Exception as exc:  # a kernelgen bug on this graph must cost speed, never the caller's call
            return self._eager(f"compiling it failed with {type(exc).__name__}: {exc}")

    def _build_kernel(self, full: tuple, layout: Any, n_values: int, backend: Any) -> "_Entry":
        from kernelgen.frontend.capture import capture
        from kernelgen.runtime.implementations import implementations_for

        try:
            cap = capture(self.callee, full[:n_values], layout, full[n_values:])
        except ShapePropagationError as exc:
            log.debug("%s: %s", self.__name__, exc)
            return self._eager(str(exc), check=True)
        except TraceError as exc:  # UnsupportedOpError included
            return self._partitioned(str(exc))
        graph = cap.graph
        if not graph.outputs:
            return self._eager("it returns no tensor computed from its inputs")
        if any(s.numel == 0 for s in graph.output_specs):
            return self._eager("an output is empty (numel 0); eager handles empty tensors")
        impls = implementations_for(graph, backend.name)
        if not impls:
            return self._partitioned(f"no template or custom call covers ops {sorted(graph.ops())} on backend "
                                     f"{backend.name!r}")
        target = backend.target()
        log.debug("%s: traced %d nodes (ops %s), workload %s; candidates %s", self.__name__, len(graph.nodes),
                  sorted(graph.ops() - {"input"}), graph.workload_key[:12], [i.name for i in impls])
        impl, config, source = self._choose(graph, impls, backend.name, target)
        # Whatever the database says, a config runs here only once it passed a check in a worker process.
        from kernelgen.check.verdicts import build_checked, candidates_after

        picked = build_checked(candidates_after((impl, config), impls, target), target)
        if picked is None:
            return self._eager(f"no implementation of it passed its check here ({', '.join(i.name for i in impls)})")
        impl, config, launcher, source = picked.impl, picked.config, picked.launcher, \
            "default" if picked.fallback else source
        path = getattr(launcher, "source_file", None)
        reason = _REASONS[source] + (" (the first choice failed its check)" if picked.fallback else "")
        log.info("%s: %s %s on %s, config %s: %s; source %s", self.__name__, impl.name, impl.source_hash(),
                 backend.name, dict(config), reason, path)
        import torch

        from kernelgen.bounds import guarded, index_checks

        outputs = tuple((torch.Size(s.shape), getattr(torch, s.dtype)) for s in graph.output_specs)
        picks = None if cap.picks == tuple(range(len(full))) else cap.picks
        inputs = [full[i] for i in cap.picks]
        device = next((a.device for a in inputs if isinstance(a, _Tensor)), torch.device("cpu"))
        entry = _Entry(guarded(getattr(launcher, "launch", launcher), index_checks(graph)), outputs, plan=cap.plan, picks=picks, device=device,
                       grad=any(a.requires_grad for a in inputs), replay=cap.replay, impl=impl.name, config=config,
                       source=source, path=path, digest=impl.source_hash(), reason=reason)
        entry.huge = [bool(_HUGE_ADVICE) and s.numel * s.itemsize >= _HUGE_MIN_BYTES for s in graph.output_specs]
        return entry

    # -- shape families ---------------------------------------------------------------------------------
    def _over_limit(self) -> "_Entry":
        self._log_once(f"new shapes past its limit of {self.max_variants} compiled shape variants (raise "
                       f"max_variants= or {VARIANTS_ENV}); sizes a shape family serves still run its kernel")
        return _Entry(eager=True)

    def _family_entry(self, full: tuple, layout: Any, n_values: int, backend: Any) -> "_Entry | None":
        """The entry of a call served by a shape family's generic kernel (creating the family when this
        call makes its dims dynamic), or None: compile for the exact shapes."""
        from kernelgen.frontend import dynamic as dyn

        dims = dyn.dynamic_dims(full[:n_values], None if self.dynamic in (None, True) else self.dynamic)
        if not dims:
            return None
        # Several dims of one size may be one batch (q, k, v) or meet by chance (x [n, k] and a weight
        # [n, k]): try them together, then the first alone.
        for choice in ((dims, dims[:1]) if len(dims) > 1 else (dims,)):
            entry = self._family_member(full, layout, n_values, choice, backend)
            if entry is not None:
                return entry
        return None

    def _family_member(self, full: tuple, layout: Any, n_values: int, dims: tuple, backend: Any) -> "_Entry | None":
        from kernelgen.frontend import dynamic as dyn

        n = full[dims[0]].shape[0]
        fkey = (layout, backend.name, dyn.family_key(full, dims), self.callee.modes() if self._general else None)
        if fkey not in self._families:
            seen = self._sizes.setdefault(fkey, set())
            seen.add(n)
            if self.dynamic is None and len(seen) < 2:  # as torch.compile: dynamic from the second size
                return None
            if self.variants >= self.max_variants:
                return None
            self._families[fkey] = self._new_family(full, layout, n_values, dims, backend)
            if self._families[fkey] is not None:
                self.variants += 1
        family = self._families[fkey]
        if family is None:
            return None
        # A family's first kernel is the variant its creation counted; each further (implementation, config)
        # it builds (a bucket's tuned config) is one more, under the same cap. Past the cap a size runs a
        # kernel the family has, untuned for its bucket.
        before = len(family.kernels)
        may_build = self.variants < self.max_variants
        served = family.at(n, may_build=may_build)
        if served is None:
            return None
        self.variants += max(0, len(family.kernels) - max(1, before))
        if served.capped and "cap:" + family.key not in self._logged:
            self._logged.add("cap:" + family.key)
            log.warning("%s: at its limit of %d compiled shape variants (raise max_variants= or %s); new size "
                        "buckets of shape family %s run a kernel it already has, not their own tuned or recorded "
                        "config", self.__name__,
                        self.max_variants, VARIANTS_ENV, family.key)
        import torch

        inputs = [full[i] for i in family.cap.picks]
        picks = None if family.cap.picks == tuple(range(len(full))) else family.cap.picks
        device = next((a.device for a in inputs if isinstance(a, _Tensor)), torch.device("cpu"))
        entry = _Entry(served.launch, served.outputs, plan=family.cap.plan, picks=picks, device=device,
                       grad=any(a.requires_grad for a in inputs if isinstance(a, _Tensor)), replay=family.cap.replay,
                       impl=served.impl.name, config=served.config, source=served.source, path=served.path,
                       digest=served.impl.source_hash(), reason=_REASONS[served.source])
        entry.family, entry.bucket = family.key, served.bucket
        entry.huge = [bool(_HUGE_ADVICE) and shape.numel() * dtype.itemsize >= _HUGE_MIN_BYTES
                      for shape, dtype in served.outputs]
        return entry

    def _new_family(self, full: tuple, layout: Any, n_values: int, dims: tuple, backend: Any) -> Any:
        from kernelgen.families import Family
        from kernelgen.frontend import dynamic as dyn
        from kernelgen.frontend.capture import capture

        got = dyn.family_graph(lambda vals: capture(self.callee, vals[:n_values], layout, vals[n_values:]),
                               full, dims)
        family = None if got is None else Family.create(got[0], got[1], backend, self._lookup,
                                                        tuner=self._tune_bucket if self.tune else None)
        if family is not None:
            family.known = self._known_keys(family)
        if family is None:
            log.info("%s: no shape-generic kernel for its inputs (%s); each batch size compiles", self.__name__,
                     describe_values(full[:n_values]))
        return family

    def _known_keys(self, family: Any) -> frozenset | None:
        """Workload keys of the family's graph with an ok record on this target (one query per family)."""
        try:
            graph = family.static_graph(family.sentinel)
            groups = self._open_db().nearest_groups(
                workload_key="", workload_family=graph.family_key, target_fingerprint=family.target.fingerprint,
                target_family=family.target.family,
                implementation=None if family.rivals or len(family.impls) > 1 else family.impl.name)
        except (KernelgenError, ModuleNotFoundError, AttributeError):
            return None
        return frozenset(groups.neighbours)

    def _check_tensor(self, i: int, a: Any, backend: str) -> None:
        dtype = str(a.dtype).removeprefix("torch.")
        if dtype not in SUPPORTED_DTYPES:
            raise InputMismatchError(f"argument {i} of {self.__name__} has dtype {dtype}; kernelgen supports "
                                     f"{', '.join(SUPPORTED_DTYPES)}")
        if backend == "cpp" and not a.is_cpu:
            raise InputMismatchError(f"argument {i} of {self.__name__} is on {a.device}; the C++ backend needs CPU "
                                     "tensors (move it with .cpu() or compile with backend='triton')")

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
            log.info("%s: the recorded %s %s is not valid here; using the default config", self.__name__,
                     record.implementation, dict(record.config))
        else:
            log.debug("%s: no tuning record for workload %s on %s", self.__name__, graph.workload_key[:12],
                      target.fingerprint[:12])
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
        log.info("%s: no tuning record for this signature; tuning it now (trials %s, seconds %s; one line per trial "
                 "at INFO)", self.__name__, self.trials, seconds)
        return tune_graph(graph, backend=backend, db=self._open_db(), trials=self.trials, seconds=seconds,
                          name=self.workload_name).best

    def _tune_bucket(self, graph: Any, impls: tuple, size: int) -> Any:
        """tune="auto" for a shape family: tune its generic implementations at the size bucket ``size`` (``graph``
        is the static graph at that batch size); the declared best record, or None when tuning failed."""
        from kernelgen.tune.bucket import tune_bucket

        seconds = self.seconds if self.seconds is not None or self.trials is not None else 60.0
        log.info("%s: no tuning record for size bucket %s of its shape family; tuning %s at batch size %s now, "
                 "once for every size of the bucket (trials %s, seconds %s)", self.__name__, size,
                 ", ".join(i.name for i in impls), size, self.trials, seconds)
        try:
            return tune_bucket(impls, graph, backend=impls[0].backend, db=self._open_db(), trials=self.trials,
                               seconds=seconds, name=self.workload_name)
        except KernelgenError as exc:  # the bucket runs its default instead; the next process tries again
            log.warning("%s: tuning size bucket %s failed (%s); it runs the default config", self.__name__, size, exc)
            return None

    @property
    def workload_name(self) -> str:
        """The name its tuning records carry: the compiled function's ``module.qualname``."""
        from kernelgen.frontend.callables import _innermost

        inner = _innermost(self.fn)
        qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
        module = getattr(inner, "__module__", None)
        return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)

    # -- introspection ----------------------------------------------------------------------------------
    def explain(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """What runs for these inputs: ``implementation``, ``config``, ``source`` (where the config came
        from: db, bucket, tuned, default or eager), ``reason`` (why, in words), ``implementation_hash`` (the hash
        its tuning records carry) and ``source_path`` (the generated C++/Triton file; None when eager); when a
        shape family's generic kernel serves them, also ``family`` (its key), ``bucket`` (the size bucket
        whose config runs), ``family_kernels`` (the (implementation, config) kernels the family has built: one
        per distinct bucket config) and ``variants`` (this function's compiled shape variants, which those count
        in, against ``max_variants``)."""
        values, layout = self.callee.bind(args, kwargs)
        full = values + self.callee.read_state() if self.callee.state else values
        try:
            key = self._key(values, layout, full)
        except NotAConstant as exc:
            return {"implementation": "eager", "config": None, "source": "eager", "reason": str(exc),
                    "implementation_hash": None, "source_path": None}
        entry = self._cache.get(key) or self._prepare(full, layout, key, len(values))
        what = {"implementation": entry.impl or "eager", "config": None if entry.config is None else dict(entry.config),
                "source": entry.source, "reason": entry.reason, "implementation_hash": entry.hash,
                "source_path": None if entry.path is None else str(entry.path)}
        if entry.family is not None:
            family = next((f for f in self._families.values() if f is not None and f.key == entry.family), None)
            what.update(family=entry.family, bucket=entry.bucket,
                        family_kernels=None if family is None else len(family.kernels), variants=self.variants)
        return what


_REASONS = {"db": "the best record in the tuning database", "tuned": "tuned on first call (tune='auto')",
            "bucket": "the best record of this size's bucket (or a neighbouring bucket) in the tuning database",
            "default": "the implementation's default config (no usable tuning record)"}


def _describe_devices(tensors: list) -> str:
    return ", ".join(f"argument {i} on {a.device}" for i, a in tensors)


VARIANTS_ENV = "KERNELGEN_MAX_VARIANTS"


def _max_variants(value: int | None) -> int:
    if value is None:
        raw = os.environ.get(VARIANTS_ENV, "8")
        if not raw.strip().isdigit():
            raise KernelgenError(f"{VARIANTS_ENV}={raw!r} is not a count; set it to a whole number such as 8")
        value = int(raw)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KernelgenError(f"max_variants={value!r} must be a whole number >= 1 (default 8)")
    return value


def compile(fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
            team_db: str | None = None, trials: int | None = None, seconds: float | None = None,
            dynamic: Any = None, max_variants: int | None = None, partition: bool = True) -> CompiledFunction:
    """Compile ``fn`` into a kernelgen-dispatched callable with eager PyTorch's results and gradients.

    ``fn``: a function of tensors (Python constants as arguments are part of the signature), an
    ``nn.Module`` (parameters and buffers read at each call), a bound method, a ``functools.partial`` or a
    callable object; anything else raises ``KernelgenError``.

    ``db``: a database URL or an open database (default: ``KERNELGEN_DB`` or the per-user SQLite file),
    layered over ``team_db`` (default: ``KERNELGEN_TEAM_DB``). ``tune="auto"`` tunes each new signature
    that has no record on first call, within ``trials`` / ``seconds`` (default 60 s); a shape family is
    tuned once per size bucket instead, on its generic kernels at the bucket's size. Calls accept
    ``out=`` (a preallocated output, or a sequence of them in the result's flattened order) and raise
    ``InputMismatchError`` for inputs that cannot run (wrong count, dtype, device, or shapes the function
    rejects). A graph kernelgen cannot run exactly as eager runs eagerly (the reason is logged once).

    ``dynamic``: which batch dims vary at run time, so one generic kernel serves every size (no compile at
    a new size): None (default) makes dim 0 dynamic once a second size is seen, True from the first call,
    False never, ``{"x": [0]}`` for named arguments (see ``kernelgen.frontend.dynamic``). ``max_variants``
    caps the shape variants compiled (default ``KERNELGEN_MAX_VARIANTS`` or 8): static kernels and each kernel
    a shape family builds (one per distinct bucket choice); past it, new shapes run eagerly and a family's
    new buckets run a kernel it has, with a warning logged once.

    ``partition``: a function no single template covers (a whole model, an op kernelgen does not lower) runs
    through ``torch.compile`` with the kernelgen backend: Dynamo, AOTAutograd, the partitioner, kernelgen
    kernels for its regions and ATen for the rest (True, default); False runs such a function eagerly.
    A function one template covers keeps the direct path: no Dynamo guards on its calls.
    """
    return CompiledFunction(fn, backend, tune=tune, db=db, team_db=team_db, trials=trials, seconds=seconds,
                            dynamic=dynamic, max_variants=max_variants, partition=partition)


__all__ = ["CompiledFunction", "compile"]
