"""What ``kernelgen.compile`` accepts, as one ``Callee``: functions, ``nn.Module``s, bound methods,
``functools.partial`` objects and callable objects. Anything else is refused with a ``KernelgenError``.

A module's parameters and buffers are graph inputs read at call time (``Callee.read_state``), so an
optimizer step or any in-place update is seen by the next call, and a replaced parameter too. Its
train/eval mode is part of the signature; other Python attributes (``self.eps``) are read when a signature
is first traced, like any constant.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelgen.errors import InputMismatchError, KernelgenError


@dataclass
class Callee:
    """One compiled callable. ``state`` holds ``(owner module, slot dict name, attribute)`` per parameter
    and buffer of ``module`` (in ``named_parameters`` then ``named_buffers`` order, shared ones once)."""

    fn: Callable[..., Any]
    name: str
    signature: inspect.Signature | None
    arity: int | None  # positional parameters (defaults included) when no binding is ever needed, else None
    module: Any = None
    state: tuple[tuple[Any, str, str], ...] = ()
    state_names: tuple[str, ...] = ()
    submodules: tuple = ()

    @property
    def workload_name(self) -> str:
        """The name tuning records of it carry: the innermost function's ``module.qualname``."""
        inner = innermost(self.fn)
        qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
        module = getattr(inner, "__module__", None)
        return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)

    def modes(self) -> tuple:
        """The ``training`` flag of the module and each submodule now."""
        return tuple([m.training for m in self.submodules])

    def read_state(self) -> tuple:
        """The module's parameters and buffers now (cheap: one dict lookup each)."""
        return tuple([getattr(owner, slots)[attr] for owner, slots, attr in self.state])

    def bind(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple[int, tuple[str, ...]] | None]:
        """``(values, layout)``: the arguments with defaults applied, positional ones first, then keyword
        ones; ``layout`` is ``(number of positional values, keyword names)`` or None for a plain call."""
        if not kwargs and len(args) == self.arity:
            return args, None  # nothing to bind: skip inspect's ~5 µs
        if self.signature is None:
            if kwargs:
                return args + tuple(kwargs.values()), (len(args), tuple(kwargs))
            return args, None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            params = ", ".join(self.signature.parameters)
            raise InputMismatchError(f"{self.name} takes ({params}); got {len(args)} positional and "
                                     f"{sorted(kwargs)} keyword arguments: {exc}") from None
        bound.apply_defaults()
        positional, keywords = bound.args, bound.kwargs
        if not keywords and self.arity is not None and len(positional) == self.arity:
            return tuple(positional), None
        return tuple(positional) + tuple(keywords.values()), (len(positional), tuple(keywords))

    def call(self, values: tuple, layout: tuple[int, tuple[str, ...]] | None, fn: Any = None) -> Any:
        """Run the callable (or ``fn``, a compiled stand-in for it) eagerly on bound values."""
        fn = self.fn if fn is None else fn
        if layout is None:
            return fn(*values)
        n, names = layout
        return fn(*values[:n], **dict(zip(names, values[n:])))


def describe(fn: Any) -> Callee:
    """A ``Callee`` for ``fn``, or a ``KernelgenError`` that says what to pass instead."""
    import torch  # deferred: importing kernelgen stays free of torch until something is compiled

    if isinstance(getattr(fn, "callee", None), Callee):  # a CompiledFunction: compiling twice is compiling once
        fn = fn.callee.fn
    if inspect.isclass(fn):
        raise KernelgenError(f"kernelgen.compile got the class {fn.__name__}; pass an instance "
                             f"(kernelgen.compile({fn.__name__}(...))) or a function")
    if not callable(fn):
        raise KernelgenError(f"kernelgen.compile needs a callable (function, nn.Module, bound method, "
                             f"functools.partial); got {type(fn).__name__} {_short(fn)}")
    inner = innermost(fn)
    if inspect.isgeneratorfunction(inner) or inspect.isasyncgenfunction(inner) or inspect.iscoroutinefunction(inner):
        raise KernelgenError(f"kernelgen.compile got {_name(fn)}, a generator or async function; compile a "
                             "plain function that returns tensors")
    module = None
    if isinstance(fn, torch.nn.Module):
        module = fn
    elif inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        module = fn.__self__
    signature = _signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    callee = Callee(fn, _name(fn), signature, _arity(signature), module)
    if module is not None:
        callee.state, callee.state_names = _state_slots(module)
        callee.submodules = tuple(module.modules())
    return callee


def innermost(fn: Any) -> Any:
    """The plain function a callable runs: through partials, bound methods, a module's ``forward`` and a
    callable object's ``__call__`` (what names it and what its source module is)."""
    import torch  # deferred: importing kernelgen stays free of torch until something is compiled

    while True:
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif isinstance(fn, torch.nn.Module):
            fn = type(fn).forward
        elif not inspect.isfunction(fn) and not inspect.isbuiltin(fn) and hasattr(type(fn), "__call__") \
                and inspect.isfunction(type(fn).__call__):
            fn = type(fn).__call__
        else:
            return fn


def _name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        return f"partial({_name(fn.func)})"
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: calls are passed through as given
        return None


def _arity(signature: inspect.Signature | None) -> int | None:
    """Positional parameter count when ``fn(*args)`` with that many tensors needs no binding, else None."""
    if signature is None:
        return None
    count = 0
    for p in signature.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def _state_slots(module: Any) -> tuple[tuple[tuple[Any, str, str], ...], tuple[str, ...]]:
    slots, names, seen = [], [], set()
    for kind, items in (("_parameters", module.named_parameters()), ("_buffers", module.named_buffers())):
        for name, tensor in items:
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            slots.append((owner, kind, attr))
            names.append(name)
    return tuple(slots), tuple(names)


__all__ = ["Callee", "describe", "innermost"]
