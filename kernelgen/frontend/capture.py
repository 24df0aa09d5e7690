"""Trace a ``Callee`` into a ``Graph`` plus what a call needs to run it: which call values are graph
inputs, the result's structure, and the traced fx module (an exact eager replay, used for backward).

Tracing is symbolic (torch.fx); shapes and dtypes come from running the fx graph on meta tensors, then on
``FakeTensorMode`` tensors where an op has no meta kernel. User code never runs on real (or
uninitialised) data here: when neither works, ``TraceError`` sends the call to eager.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.errors import KernelgenError, ShapePropagationError, TraceError, UnsupportedOpError
from kernelgen.frontend.callables import Callee, describe, innermost
from kernelgen.frontend.fx_nodes import CONSTANT_INPUTS
from kernelgen.ir.graph import Graph, GraphBuilder, NodeRef, prune
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.lower import lower
from kernelgen.runtime.outputs import ARG, ARG_CALL, CONST, COPY, OUT, OutputPlan, plain


@dataclass(frozen=True)
class Capture:
    """``graph`` reads ``picks`` (indices into call values followed by module state) in order; ``plan``
    rebuilds the result from the kernel outputs; ``replay(*graph inputs)`` is the traced function run
    eagerly (returns the flat kernel outputs)."""

    graph: Any
    plan: OutputPlan
    picks: tuple[int, ...]
    replay: Any


_INPLACE_OPERATORS = ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor",
                      "ilshift", "irshift", "imatmul")


@functools.cache
def _tracer_class() -> type:
    import torch.fx

    class _Proxy(torch.fx.Proxy):
        """fx's Proxy has no ``__iadd__``, so ``x += y`` would silently trace as ``x = x + y`` and lose eager's
        write into ``x``; these record the in-place operator so the mutation check can see it."""

        def __setitem__(self, index: Any, value: Any) -> None:
            self.tracer.create_proxy("call_function", operator.setitem, (self, index, value), {})

    for name in _INPLACE_OPERATORS:
        def inplace(self: Any, other: Any, op: Any = getattr(operator, name)) -> Any:
            return self.tracer.create_proxy("call_function", op, (self, other), {})

        setattr(_Proxy, f"__{name}__", inplace)

    class _Tracer(torch.fx.Tracer):
        """Inlines every submodule (its parameters become ``get_attr`` nodes) and lets the caller make the
        placeholders: values that are not tensors are passed to the function as they are."""

        proxy_buffer_attributes = True

        def __init__(self, call: Any, autowrap: Sequence[Any]) -> None:
            super().__init__()
            self._call = call
            self._autowrap_search.extend(autowrap)  # math.* on traced sizes inside the user's module

        def proxy(self, node: Any) -> Any:
            return _Proxy(node, self)

        def is_leaf_module(self, m: Any, module_qualified_name: str) -> bool:
            return False

        def create_args_for_root(self, root_fn: Any, is_module: bool, concrete_args: Any = None) -> Any:
            return (lambda *_: self._call(self)), ([self.root] if is_module else [])

    return _Tracer


def capture(callee: Callee, values: Sequence[Any], layout: Any = None, state: Sequence[Any] = ()) -> Capture:
    """Trace ``callee`` called with ``values`` (bound as ``layout`` says, see ``Callee.bind``): tensors or
    ``TensorSpec``s are inputs, anything else a constant of the trace. ``state`` are the module's
    parameters and buffers (``Callee.read_state()``); those the function reads become inputs after the
    tensor arguments.

    Raises ``UnsupportedOpError`` for an op kernelgen cannot lower and ``TraceError`` when the function
    cannot be traced symbolically or its shapes cannot be propagated on meta tensors.
    """
    import torch
    import torch.fx

    def is_input(v: Any) -> bool:
        return isinstance(v, (torch.Tensor, TensorSpec))

    def call(tracer: Any) -> Any:
        proxies = [tracer.create_proxy("placeholder", f"arg{i}", (), {}) if is_input(v) else v
                   for i, v in enumerate(values)]
        return callee.call(tuple(proxies), layout)

    inner = _module_of(callee.fn)
    root = callee.fn if inspect.isfunction(callee.fn) else _holder(callee.module)
    tracer = _tracer_class()(call, [inner] if inner is not None else [])
    try:
        fx_graph = tracer.trace(root)
    except Exception as exc:  # fx raises many types; they all mean "not traceable"
        raise TraceError(f"cannot trace {callee.name} with torch.fx: {type(exc).__name__}: {exc}; remove "
                         "data-dependent control flow from the function") from exc
    picks = [i for i, v in enumerate(values) if is_input(v)]
    _state_to_placeholders(fx_graph, tracer.root, callee, state, len(values), picks)
    functional = refuse_observable_mutation(fx_graph, callee.name)
    gm = torch.fx.GraphModule(tracer.root, fx_graph)
    full = list(values) + list(state)
    specs = [v if isinstance(v, TensorSpec) else TensorSpec.of(v) for v in (full[i] for i in picks)]
    propagate_meta(gm, specs)
    constant = getattr(callee.fn, CONSTANT_INPUTS, frozenset())  # a region's parameters in inference
    graph, plan = _lower(gm, specs, functional, frozenset(k for k, i in enumerate(picks) if i in constant))
    return Capture(graph, plan, tuple(picks), _replay(gm, plan))


def trace(fn: Callable[..., Any], *example_inputs: Any) -> Graph:
    """Trace ``fn`` into a ``Graph``. Inputs are torch tensors or ``TensorSpec``s (nothing is computed);
    other values are constants of the trace. ``fn`` may be anything ``kernelgen.compile`` accepts; an
    ``nn.Module``'s parameters and buffers that it reads become inputs after the arguments.

    Raises ``UnsupportedOpError`` naming the op and where it is when ``fn`` uses an op kernelgen cannot
    lower, and ``TraceError`` when fn cannot be traced symbolically (for example data-dependent control
    flow) or its shapes do not propagate.
    """
    callee = describe(fn)
    try:
        values, layout = callee.bind(tuple(example_inputs), {})
    except KernelgenError as exc:
        wanted = f"takes {callee.arity} tensors but" if callee.arity is not None else "cannot take"
        raise TraceError(f"{callee.name!r} {wanted} {len(example_inputs)} example inputs ({exc})") from None
    return capture(callee, values, layout, callee.read_state()).graph


def trace_pattern(fn: Callable[..., Any], specs: Sequence[TensorSpec]) -> Graph | None:
    """``fn`` traced at ``specs`` as ``kernelgen.compile`` traces it, or None when it does not trace: how the
    registry matches a custom call's ``replaces=`` pattern against the graphs dispatch asks about."""
    try:
        return trace(fn, *specs)
    except KernelgenError:
        return None


def _module_of(fn: Any) -> Any:
    return sys.modules.get(getattr(innermost(fn), "__module__", None) or "")


@functools.cache
def _holder_class() -> type:
    import torch

    class _Holder(torch.nn.Module):
        def forward(self, *args: Any) -> Any:  # never run: the tracer calls the callee directly
            raise AssertionError("kernelgen's tracing root is not callable")

    return _Holder


def _holder(module: Any) -> Any:
    """A root module for tracing a non-function: it owns the user's module, so its parameters are found."""
    holder = _holder_class()()
    if module is not None:
        holder.module = module
    return holder


def _state_to_placeholders(fx_graph: Any, root: Any, callee: Callee, state: Sequence[Any], offset: int,
                           picks: list[int]) -> None:
    """Replace each ``get_attr`` of a module parameter or buffer by a placeholder after the arguments,
    so the kernel reads the live tensor each call; other attributes (closed-over tensors) are refused."""
    index = {id(t): i for i, t in enumerate(state)}
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    last = placeholders[-1] if placeholders else None
    made: dict[int, Any] = {}
    for node in list(fx_graph.nodes):
        if node.op != "get_attr":
            continue
        value = root
        for atom in str(node.target).split("."):
            value = getattr(value, atom)
        slot = index.get(id(value))
        if slot is None or not str(node.target).startswith("module."):
            raise UnsupportedOpError(f"{callee.name} reads the tensor {node.target!r} that is not one of its "
                                     "arguments; pass it as an argument (or compile the nn.Module that owns it)")
        if slot not in made:
            if last is None:
                ph = fx_graph.inserting_before(next(iter(fx_graph.nodes)))
            else:
                ph = fx_graph.inserting_after(last)
            with ph:
                last = made[slot] = fx_graph.placeholder(f"state{slot}")
            picks.append(offset + slot)
        node.replace_all_uses_with(made[slot])
        fx_graph.erase_node(node)


# Ops whose result may share memory with their (first) tensor argument.
_ALIASING = frozenset({
    "view", "view_as", "reshape", "reshape_as", "t", "T", "mT", "H", "mH", "transpose", "swapaxes", "swapdims",
    "permute", "movedim", "squeeze", "unsqueeze", "expand", "expand_as", "flatten", "unflatten", "narrow", "select",
    "getitem", "getattr", "contiguous", "detach", "as_strided", "unbind", "split", "chunk", "tensor_split",
    "diagonal", "real", "imag", "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long",
    "bool", "cpu", "cuda", "data", "unfold", "view_as_real", "view_as_complex", "alias", "broadcast_to",
})


def _op_name(node: Any) -> str:
    return str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))


def refuse_observable_mutation(fx_graph: Any, name: str) -> dict[Any, tuple[Any, dict]]:
    """A kernel writes fresh outputs only, so an in-place op is allowed only where eager's mutation cannot be
    seen: on a fresh intermediate that nothing else reads (``nn.ReLU(inplace=True)`` after a linear). An
    in-place write to an input, to a view of one, or to a value read elsewhere raises ``UnsupportedOpError``
    (the call runs eagerly, so the mutation happens as in eager). Returns the allowed in-place nodes with
    the (target, kwargs) of their out-of-place twins, for the lowering."""
    import torch.fx

    functional: dict[Any, tuple[Any, dict]] = {}
    may_alias_input = {n for n in fx_graph.nodes if n.op == "placeholder"}
    for node in fx_graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        op = _op_name(node)
        # operator.and_ / or_ (`a & b`) are named like in-place methods but return a new tensor
        out_of_place = node.op == "call_function" and node.target in (operator.and_, operator.or_)
        mutates = (op.endswith("_") and not op.endswith("__") and not out_of_place) or op in _INPLACE_OPERATORS \
            or op == "setitem" \
            or node.kwargs.get("inplace") is True or "out" in node.kwargs
        if mutates:
            target = node.args[0] if node.args else None
            if not isinstance(target, torch.fx.Node) or target in may_alias_input or len(target.users) > 1:
                raise UnsupportedOpError(f"{name} writes in place at `{node.format_node()}`, a change eager makes "
                                         "visible to the caller; such functions run eagerly")
            # An unseen write to a fresh value: the out-of-place twin is exact once it is rounded to the written
            # value's dtype, which the lowering takes from the node's meta (propagated on the in-place graph).
            # The fx graph itself keeps the in-place op, so the autograd replay runs what eager runs.
            if op in _INPLACE_OPERATORS:
                functional[node] = (getattr(operator, op[1:]), node.kwargs)
            elif node.kwargs.get("inplace") is True:
                functional[node] = (node.target, {**node.kwargs, "inplace": False})
            elif node.op == "call_method" and op.endswith("_") and "out" not in node.kwargs:
                functional[node] = (op[:-1], node.kwargs)
        elif op in _ALIASING and any(a in may_alias_input for a in node.all_input_nodes):
            may_alias_input.add(node)
    return functional


def propagate_meta(gm: Any, specs: Sequence[TensorSpec]) -> None:
    """Record each fx node's output spec (``node.meta['kernelgen_spec']``) by running the graph on meta
    tensors, or on fake tensors where an op has no meta kernel; never on real or uninitialised memory."""
    import torch
    import torch.fx

    class _Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            result = super().run_node(n)
            if isinstance(result, torch.Tensor):
                n.meta["kernelgen_spec"] = TensorSpec(tuple(result.shape), str(result.dtype).removeprefix("torch."))
            elif isinstance(result, tuple) and result and all(isinstance(r, torch.Tensor) for r in result):
                n.meta["kernelgen_container"] = type(result)  # var_mean's tuple, max(dim)'s torch.return_types.max
            return result

    def make(spec: TensorSpec, device: str) -> Any:
        return torch.empty_strided(spec.shape, spec.effective_strides(), dtype=getattr(torch, spec.dtype),
                                   device=device)

    def on_meta() -> None:
        _Recorder(gm).run(*[make(s, "meta") for s in specs])

    def on_fake() -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_fallback_kernels=False):  # no real kernel on stand-in data
            _Recorder(gm).run(*[make(s, device) for s in specs])

    # A graph that makes a tensor on a named device (AOTAutograd's ``new_full(..., device=cpu)`` in a rotary
    # embedding's backward) cannot mix it with meta inputs: fake tensors on that device can.
    devices = {str(n.kwargs["device"]) for n in gm.graph.nodes if n.op in ("call_function", "call_method")
               and n.kwargs.get("device") is not None}
    named = bool(devices)
    device = devices.pop() if len(devices) == 1 else "cpu"
    try:
        with torch.no_grad():
            on_meta()
        return
    except NotImplementedError as exc:  # an op without a meta kernel: fake tensors may still know its shapes
        error: Exception = exc
    except Exception as exc:  # the shapes or dtypes do not fit the function (fake tensors would say the same)
        error = exc
    if isinstance(error, NotImplementedError) or named:
        try:
            with torch.no_grad():
                on_fake()
            return
        except Exception as exc:
            error = exc
    raise ShapePropagationError(f"running the function on meta tensors {[s.to_json() for s in specs]} failed "
                                f"({type(error).__name__}: {error}); check that the shapes and dtypes fit the function")


def _lower(gm: Any, specs: Sequence[TensorSpec], functional: dict[Any, tuple[Any, dict]],
           constant: frozenset[int] = frozenset()) -> tuple[Any, OutputPlan]:
    import torch.fx
    from torch.utils._pytree import tree_flatten, tree_map


    builder = GraphBuilder()
    env: dict[Any, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index, (node, spec) in enumerate(zip(placeholders, specs)):
        env[node] = NodeRef(builder.add("input", (), spec, index=index))
    leaves: list[tuple[str, Any]] = []
    outputs: list[int] = []
    spec_tree: Any = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            result = tree_map(lambda n: _unpack(n, env) if isinstance(n, torch.fx.Node) else n, plain(node.args[0]))
            flat, spec_tree = tree_flatten(result)
            first_fx: dict[int, Any] = {}  # IR node -> the fx node that first returned it
            for item in flat:
                value = env.get(item) if isinstance(item, torch.fx.Node) else item
                if not isinstance(value, NodeRef):
                    leaves.append((CONST, value))
                elif builder.nodes[int(value)].op == "input" and \
                        _returned_input(item, specs[builder.nodes[int(value)].attr("index")]) != "clone":
                    index = builder.nodes[int(value)].attr("index")
                    how = _returned_input(item, specs[index])
                    leaves.append((ARG, index) if how == "self" else (ARG_CALL, (index, how)))
                elif builder.nodes[int(value)].op == "input":  # eager's fresh copy of an input: a copy kernel
                    leaves.append((OUT, len(outputs)))
                    spec = builder.spec(int(value))  # (an output is contiguous whatever the input's strides)
                    outputs.append(builder.add("clone", (int(value),), TensorSpec(spec.shape, spec.dtype)))
                elif int(value) not in first_fx:
                    first_fx[int(value)] = item
                    leaves.append((OUT, len(outputs)))
                    outputs.append(int(value))
                else:  # the same fx value twice is one object in eager too; two merged by CSE are two
                    k = outputs.index(int(value))
                    leaves.append((OUT, k) if first_fx[int(value)] is item else (COPY, k))
            continue
        target, fx_kwargs = functional.get(node, (node.target, node.kwargs))
        where = f"{node.name} = {getattr(target, '__name__', target)}(...)"
        args = torch.fx.node.map_arg(node.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(fx_kwargs, lambda a: env[a])
        env[node] = lower(builder, node.op, target, args, kwargs, node.meta.get("kernelgen_spec"), where)
    builder.mark_constants(constant)
    return prune(Graph(tuple(builder.nodes), tuple(outputs))), OutputPlan(spec_tree, tuple(leaves))


# Methods that return their very tensor when they convert nothing (``x.float()`` of a float32 ``x``).
_RETURNS_SELF = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "short",
                           "char", "byte", "bool", "cpu", "cuda"})


def _returned_input(item: Any, spec: TensorSpec) -> str:
    """How eager's result of fx value ``item``, which lowered to an input (of ``spec``) unchanged, relates to
    that input: ``"self"``, the very object (the placeholder itself, ``x.float()`` of a float ``x``,
    ``x.contiguous()`` of a contiguous one); ``"detach"``, an alias without autograd history; or ``"clone"``, a
    fresh tensor of the input's values (``x.clone()``, a cumsum over a size-1 dim, ``x.contiguous()`` of a
    strided ``x``), which a copy kernel writes."""
    import torch.fx

    if not isinstance(item, torch.fx.Node) or item.op == "placeholder":
        return "self"
    op = _op_name(item)
    if op in _RETURNS_SELF and not item.kwargs.get("copy"):
        return "self"
    if op == "contiguous":
        dense = all(size == 1 or st == want for size, st, want in
                    zip(spec.shape, spec.effective_strides(), spec.contiguous_strides()))
        return "self" if dense else "clone"
    return "detach" if op == "detach" else "clone"


def _unpack(node: Any, env: dict) -> Any:
    """An fx output value as the kernel outputs it holds: a tensor's node itself, or a tuple-valued op
    (``var_mean``, ``max(dim)``) rebuilt in eager's container type around its lowered values."""
    value = env.get(node)
    if not isinstance(value, tuple):
        return node
    kind = node.meta.get("kernelgen_container")
    if kind is None or any(v is None for v in value):  # e.g. max(dim) of bool: no lowered indices
        raise UnsupportedOpError(f"{node} returns a tuple kernelgen cannot rebuild as eager does; index it (`[0]`)")
    return kind(list(value))


def _replay(gm: Any, plan: OutputPlan) -> Any:
    """The traced function as eager code returning the kernel outputs in order: the backward's forward."""
    from torch.utils._pytree import tree_leaves

    firsts: dict[int, int] = {}
    for i, (kind, value) in enumerate(plan.leaves):
        if kind == OUT and value not in firsts:
            firsts[value] = i
    order = [firsts[k] for k in range(len(firsts))]

    def replay(*inputs: Any) -> tuple:
        leaves = tree_leaves(gm(*inputs))
        return tuple(leaves[i] for i in order)

    return replay


__all__ = ["Capture", "capture", "propagate_meta", "trace", "trace_pattern"]
