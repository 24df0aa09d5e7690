"""The custom-call registry: ``register_custom_call`` puts hand-written kernels (C++, Triton, CUDA, HIP,
SYCL) beside the generated templates; ``kernelgen.custom_calls.candidates`` offers them to the tuner and the
dispatcher as ``Implementation``s.

A call implements a name the user's function invokes (``custom_call("rms_norm", x, w)``, traced as one
opaque node) and/or a subgraph pattern (``replaces=fn``: graphs structurally equal to ``fn`` traced at
their own input specs, by the pattern tracers the front end adds with ``add_pattern_tracer``). Registrations
are validated eagerly; toolchains are probed lazily.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kernelgen.custom_calls import loading
from kernelgen.custom_calls.entry import make_entry
from kernelgen.errors import RegistryError
from kernelgen.ir.graph import Graph
from kernelgen.ir.values import TensorSpec

_Launcher = Callable[..., None]


class Registry:
    """Registered custom calls, keyed by (name, language, variant). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, str, str], Any] = {}
        self._matches: dict[tuple, bool] = {}  # (replaces fn, workload key) -> does the pattern match
        self._folders: set[Path] = set()
        self._defaults_loaded = False
        self._load_error: RegistryError | None = None

    def add(self, entry: Any) -> None:
        """Add a validated entry; ``RegistryError`` on a duplicate or an inconsistent same-name call."""
        with self._lock:
            for other in self._entries.values():
                if other.key == entry.key and set(other.platforms) & set(entry.platforms):
                    shared = sorted(set(other.platforms) & set(entry.platforms))
                    raise RegistryError(
                        f"custom call {entry.name!r} is already registered for language {entry.language!r} on "
                        f"{shared} (by {other.origin}); pass variant='...' to register another version")
                if other.name == entry.name and other.arity != entry.arity:
                    raise RegistryError(f"custom call {entry.name!r} ({entry.language}) takes {entry.arity} inputs "
                                        f"but its {other.language} version takes {other.arity}")
            self._entries[entry.key] = entry

    def entries(self) -> list[Any]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: (e.name, e.language, e.variant))

    def names(self) -> list[str]:
        return sorted({e.name for e in self.entries()})

    def reference_for(self, name: str) -> Callable[..., Any]:
        for entry in self.entries():
            if entry.name == name:
                return entry.reference
        known = ", ".join(self.names()) or "none"
        raise RegistryError(f"no custom call named {name!r} is registered; registered: {known}. "
                            "Register it with @kernelgen.register_custom_call or add its folder to "
                            "KERNELGEN_REGISTRY_PATH")

    def load_defaults(self) -> None:
        """Load the project's ``registry/``, ``$KERNELGEN_REGISTRY_PATH`` folders and entry points, once."""
        global _active
        with self._lock:
            if not self._defaults_loaded:
                self._defaults_loaded = True
                with _active_lock:  # registrations made while loading land in this registry
                    previous, _active = _active, self
                try:
                    folders = [f for f in [loading.project_registry()] if f is not None] + loading.env_folders()
                    for folder in folders:
                        self.load_folder(folder)
                    loading.load_entry_points()
                except RegistryError as exc:
                    self._load_error = exc
                finally:
                    with _active_lock:
                        _active = previous
            if self._load_error is not None:
                raise self._load_error

    def load_folder(self, folder: str | Path) -> list[Path]:
        """Import a registry folder into this registry, once; returns the files imported."""
        global _active
        resolved = Path(folder).expanduser().resolve()
        with self._lock:
            if resolved in self._folders:
                return []
            with _active_lock:
                previous, _active = _active, self
            try:
                return loading.load_folder(resolved)
            finally:
                self._folders.add(resolved)  # never twice: a retry would re-register what did load
                with _active_lock:
                    _active = previous

    def implements(self, entry: Any, graph: Graph) -> bool:
        """True when ``entry`` computes ``graph``: the graph is exactly its named call, or its pattern."""
        if not entry.accepts(graph.signature) or any(not s.is_contiguous for s in graph.output_specs):
            return False
        if _is_call_of(graph, entry.name):
            return True
        if entry.replaces is None or "custom_call" in graph.ops():
            return False
        key = (entry.replaces, graph.workload_key)  # one trace serves every language of a pattern
        with self._lock:
            if key in self._matches:
                return self._matches[key]
        found = False
        for tracer in tuple(_TRACERS):  # cheapest first: the plain trace, then the ATen form regions have
            traced = tracer(entry.replaces, graph.signature)
            if traced is not None and traced.workload_key == graph.workload_key:
                found = True
                break
        with self._lock:
            self._matches[key] = found
        return found


def _is_call_of(graph: Graph, name: str) -> bool:
    """The graph is its inputs and one ``custom_call(name)`` of them, in order, as its only output."""
    body = [i for i, n in enumerate(graph.nodes) if n.op != "input"]
    if len(body) != 1 or graph.outputs != (body[0],):
        return False
    node = graph.nodes[body[0]]
    return node.op == "custom_call" and node.attr("name") == name and node.inputs == graph.input_ids


PatternTracer = Callable[[Callable[..., Any], Sequence[TensorSpec]], "Graph | None"]
"""``tracer(fn, specs)``: the ``Graph`` of the plain torch function ``fn`` at input specs ``specs`` as one way of
compiling sees it, or None when it does not trace that way."""
_TRACERS: list[PatternTracer] = []


def add_pattern_tracer(tracer: PatternTracer) -> None:
    """Teach the registry one more form a ``replaces=`` pattern may take: a graph ``tracer`` gives for it is
    matched against the graphs dispatch asks about. The front end adds its plain trace (what
    ``kernelgen.compile`` traces) and, once regions exist, the ATen form a ``torch.compile`` region has, so
    plain ``kernelgen.compile`` calls never pay for the ATen trace. Adding one twice is a no-op."""
    with _active_lock:
        if tracer not in _TRACERS:
            _TRACERS.append(tracer)


def pattern_tracer_names() -> list[str]:
    """Each pattern tracer added so far as ``"module:qualname"``: a measurement worker adds the same ones
    (``kernelgen.custom_calls.rebuild``), so a pattern matches a region's ATen graph there as it does here."""
    with _active_lock:
        return [f"{t.__module__}:{t.__qualname__}" for t in _TRACERS]


_active = Registry()
_active_lock = threading.Lock()


def default_registry() -> Registry:
    return _active


@contextlib.contextmanager
def use_registry(registry: Registry | None = None, *, load_defaults: bool = False) -> Iterator[Registry]:
    """Make ``registry`` (default: a new, empty one) the active registry inside the block (tests, tools)."""
    global _active
    registry = registry if registry is not None else Registry()
    if not load_defaults:
        registry._defaults_loaded = True
    with _active_lock:
        previous, _active = _active, registry
    try:
        yield registry
    finally:
        with _active_lock:
            _active = previous


def register_custom_call(name: str, *, language: str, platforms: Sequence[str] | None = None,
                         params: Mapping[str, Sequence[Any]] | None = None, constraints: Any = None,
                         reference: Callable[..., Any] | None = None, source: Any = None,
                         library: str | Path | None = None, symbol: str | None = None,
                         replaces: Callable[..., Any] | None = None, variant: str = "",
                         inputs: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
                         examples: Sequence[Sequence[Any]] | None = None, default: Mapping[str, Any] | None = None,
                         tolerance: float | None = None, options: Sequence[str] = (),
                         defines: Sequence[str] | bool = ()) -> Callable[[_Launcher], _Launcher]:
    """Decorate a launcher ``(inputs, outputs, config[, kernel]) -> None`` to register a custom call.

    ``language``: cpp | triton | cuda | hip | sycl. ``source``: a file (relative to the registering module's file)
    or source text (or a ``@triton.jit`` kernel); ``library`` + ``symbol``: a prebuilt shared library.
    ``params``: name -> choices, tuned like a template's; ``constraints``: functions of param names (and
    ``specs``, ``target``) that must hold; ``defines``: params compiled in as ``-DNAME=value`` (True: all).
    ``reference``: a torch function of the inputs (defaults to ``replaces``). ``examples``: input specs
    ``kernelgen registry check`` runs. ``variant`` distinguishes versions of one (name, language).
    Raises ``RegistryError`` for an invalid registration; a missing toolchain only marks it unavailable.
    """
    def decorate(launcher: _Launcher) -> _Launcher:
        caller = sys._getframe(1).f_globals  # the registering module: relative sources and worker imports
        entry = make_entry(launcher, module=caller.get("__name__"), module_file=caller.get("__file__"), name=name, language=language, platforms=platforms, params=params,
                           constraints=constraints, reference=reference, source=source, library=library,
                           symbol=symbol, replaces=replaces, variant=variant, inputs=inputs, dtypes=dtypes,
                           examples=examples, default=default, tolerance=tolerance, options=options,
                           defines=defines)
        default_registry().add(entry)
        return launcher

    return decorate


def custom_call(name: str, *tensors: Any) -> Any:
    """Invoke the registered custom call ``name``: its reference when run eagerly (or on meta tensors),
    one opaque ``custom_call`` node when traced."""
    import torch.fx

    proxy = next((t for t in tensors if isinstance(t, torch.fx.Proxy)), None)
    if proxy is not None:
        return proxy.tracer.create_proxy("call_function", custom_call, (name, *tensors), {})
    return reference_for(name)(*tensors)


custom_call._kernelgen_custom_call = True  # type: ignore[attr-defined]  # lowering maps it to the IR op


def load_default_registries() -> None:
    """Load the default registry folders and entry points into the active registry (once)."""
    default_registry().load_defaults()


def load_folder(folder: str | Path) -> list[Path]:
    """Import a team's registry folder now (beside ``KERNELGEN_REGISTRY_PATH``); returns the files loaded."""
    return default_registry().load_folder(folder)


def reference_for(name: str) -> Callable[..., Any]:
    """The reference function of the custom call ``name`` (what ``reference.evaluate`` runs for it)."""
    registry = default_registry()
    try:
        return registry.reference_for(name)
    except RegistryError:
        registry.load_defaults()
        return registry.reference_for(name)



def entries() -> list[Any]:
    load_default_registries()
    return default_registry().entries()



__all__ = ["PatternTracer", "Registry", "RegistryError", "add_pattern_tracer", "pattern_tracer_names", "custom_call", "default_registry", "entries",
           "load_default_registries", "load_folder", "reference_for", "register_custom_call", "use_registry"]
