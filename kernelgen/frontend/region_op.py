"""Kernelgen regions inside an fx graph: the ``kernelgen::region`` custom op and the graph rewrite that calls it.

One op serves every region: ``kernelgen::region(str key, Tensor[] inputs) -> Tensor[]``; ``key`` names a
``RegionKernel`` registered in this process. The op has a fake implementation (outputs from the region's
``Graph`` specs, contiguous, on the inputs' device) and an autograd formula (the region's ATen nodes
replayed under autograd), so ``torch.library.opcheck`` holds and the op works under autograd directly.

A region runs through a ``CompiledFunction`` of its own ATen sub-graph (the one call the front end makes into
the runtime), so tuning-database lookup, the checked first run in an isolated worker, custom calls from the
registry and the eager fallback (running the region's ATen nodes) are exactly those of ``kernelgen.compile``.
Once regions exist, the registry also matches ``replaces=`` patterns in their ATen form (``patterns``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator
import threading
from collections.abc import Iterator
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.frontend.fx_nodes import CONSTANT_INPUTS, constant_value, is_constant_input, is_symbolic, is_view, op_name, spec_of
from kernelgen.frontend.patterns import aten_graph_of
from kernelgen.registry import add_pattern_tracer
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime.aten import aten_first, remember_program
from kernelgen.runtime.aten_program import encode
from kernelgen.runtime.compiled import CompiledFunction
from kernelgen.runtime.entry import bind_torch
from kernelgen.runtime.signature import KEYS, signature_key

log = logging.getLogger("kernelgen")
_REGIONS: dict[str, "RegionKernel"] = {}
_LOCK = threading.Lock()
_COUNTER = itertools.count()
_OP: Any = None
_empty: Any = None  # torch.empty, bound when the first region is made (importing kernelgen imports no torch)
_OBSERVERS: list[Any] = []  # callables told (kernel, inputs) before each region run, while ``observe`` holds them


class RegionKernel:
    """One region: its ATen sub-graph ``gm`` (the eager replay), its kernelgen ``graph`` and the compiled
    callable. ``counters`` (a dict or None) is told each run: ``kernel`` or ``eager``."""

    def __init__(self, gm: Any, graph: Any, template: str, options: dict | None = None, counters: Any = None,
                 strides: tuple | None = None, orders: tuple | None = None, dynamic: Any = None) -> None:
        global _empty
        _empty = bind_torch()[0]
        self.gm = gm
        # The outputs' layouts in the traced graph: exact strides for a static-shape graph (default:
        # contiguous), else ``orders`` (each output's dims from innermost to outermost) for symbolic shapes,
        # whose strides are only known per call.
        self.orders = orders
        self.strides = None if orders is not None else \
            strides if strides is not None else tuple(s.effective_strides() for s in graph.output_specs)
        self.graph = graph  # the region's kernelgen graph (at the trace's size hints when shapes are symbolic)
        self.template = template
        self.counters = counters
        self.options = dict(options or {})  # kernelgen.compile's keywords: backend, tune, db, trials, ...
        # ``dynamic``: the inputs whose dim 0 Dynamo made symbolic ({index: [0]}): one generic kernel serves
        # every size of them (a shape family); other symbolic dims compile per size, bounded by max_variants.
        # (it is a region already: partition=False, its fallback is its ATen nodes; untuned, a region too small
        # to win runs them too: kernelgen.runtime.aten.aten_first)
        ops = [op_name(n.target) for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
               and not is_view(n)]
        self.compiled = CompiledFunction(gm, **self.options, **({} if dynamic is None else {"dynamic": dynamic}),
                                         partition=False, aten_first=aten_first(graph, ops))
        # The ATen candidate of this region's workload runs these very ops when it is measured (not the IR's
        # primitives: ``kernelgen.runtime.aten_program``); the dispatch graph's key is added on the first call.
        remember_program(graph.workload_key, lambda: encode(gm))
        self.impl: str | None = None  # what ran on the first call: a template/custom call name, "aten" or "eager"
        self.failed: str | None = None
        self._fast: tuple | None = None  # set after the first call (``_shortcut``)

    def layouts(self, shapes: list) -> tuple:
        """The outputs' strides for outputs of ``shapes`` (the graph's layouts at these sizes)."""
        if self.orders is None:
            return self.strides
        return tuple(strides_in_order(shape, order) for shape, order in zip(shapes, self.orders))

    def run(self, inputs: list) -> list:
        if _OBSERVERS:  # a model's tuner profiling one step (``observe``)
            for observer in _OBSERVERS:
                observer(self, inputs)
        fast = self._fast
        if fast is not None and fast[0](inputs) == fast[1]:  # the signature of the first call: no dispatch
            if self.counters is not None:
                self._count(fast[4])
            return fast[2](inputs, fast[3])
        import torch

        if torch.is_grad_enabled():  # (AOTAutograd's compiled graphs already run without grad: skip the switch)
            with torch.no_grad():
                outs = self._launch(inputs)
        else:
            outs = self._launch(inputs)
        fresh = []
        for out, strides in zip(outs, self.layouts([o.shape for o in outs])):
            # A custom op's outputs never alias its inputs or each other, and they have the strides the
            # graph was traced with (eager's: an elementwise op on a transposed input keeps its layout).
            if out.stride() != strides or any(out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                                               for x in (*inputs, *fresh)):
                copy = torch.empty_strided(out.shape, strides, dtype=out.dtype, device=out.device)
                out = copy.copy_(out)
            fresh.append(out)
        if self._fast is None and self.failed is None:
            self._fast = self._shortcut(inputs)
        return fresh

    def _launch(self, inputs: list) -> tuple:
        if self.failed is None:
            try:
                outs = self.compiled(*inputs)
                if self.impl is None:
                    self.impl = self.compiled.explain(*inputs)["implementation"]
                    for choice in self.compiled.choices():
                        remember_program(choice["graph"].workload_key, lambda: encode(self.gm))
                self._count({"eager": "eager", ATEN: "aten"}.get(self.impl, "kernel"))
                return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            except KernelgenError as exc:  # e.g. inputs on a device the chosen backend cannot take
                self.failed = str(exc)
                log.warning("kernelgen region (%s) runs its ATen nodes: %s", self.template, exc)
        self._count("eager")
        return tuple(self.gm(*inputs))

    def _shortcut(self, inputs: list) -> tuple | None:
        """After the first call: ``(key function, key, run, its argument, counter)`` that later calls of the same
        signature take without the compiled function's general path (its binding, state, autograd and output
        plan cost ~5 us a call; a transformer layer has dozens of regions). Only for a static signature whose
        choice is one kernel writing fresh outputs in the traced layout, or ATen's own ops (their outputs
        have the traced layouts by construction); None otherwise, and calls keep the general path."""
        if self.orders is not None or not isinstance(self.compiled, CompiledFunction) or self.compiled.callee.state \
                or len(self.compiled._cache) != 1:
            return None
        entry = next(iter(self.compiled._cache.values()))
        key_fn = KEYS[len(inputs)] if len(inputs) < len(KEYS) else signature_key
        key = key_fn(inputs)
        if entry.eager:
            return (key_fn, key, _replay, self.gm, "aten") if entry.impl == ATEN else None
        contiguous = tuple(spec.effective_strides() for spec in self.graph.output_specs)
        # (``entry.grad`` does not matter: a region runs without grad; the plan must be the outputs in order)
        # (an entry whose ``run`` is not the plain launch, e.g. empty results made by the traced function, keeps
        # the general path)
        plain = getattr(entry.run, "__func__", None) is type(entry)._fresh
        if not plain or entry.picks is not None or entry.plan is None or self.strides != contiguous or any(entry.huge) \
                or entry.plan.leaves != tuple(("out", k) for k in range(len(entry.outputs))) \
                or len(entry.outputs) != len(self.strides):
            return None
        return key_fn, key, _launch_fresh, (entry.launch, entry.outputs, entry.device), "kernel"

    def _count(self, what: str) -> None:
        if self.counters is not None:
            self.counters[what] = self.counters.get(what, 0) + 1


def _replay(inputs: list, gm: Any) -> list:
    return list(gm(*inputs))


def _launch_fresh(inputs: list, plan: tuple) -> list:
    launch, outputs, device = plan
    outs = [_empty(shape, dtype=dtype, device=device) for shape, dtype in outputs]
    launch(*inputs, *outs)
    return outs


def kernel_of(key: str) -> RegionKernel:
    """The region registered under ``key`` (``GraphStats.keys`` lists a graph's)."""
    return _REGIONS[key]


@contextlib.contextmanager
def observe(observer: Any) -> Iterator[None]:
    """``with observe(fn):`` calls ``fn(kernel, inputs)`` before every region run in the block (a model's tuner
    times each region's ATen ops on the step's real inputs this way)."""
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


class AtenReplay:
    """A region's own ATen nodes as a run (what a model's whole-step check times as the ``aten`` variant)."""

    def __init__(self, kernel: RegionKernel) -> None:
        self.kernel = kernel

    def run(self, inputs: list) -> list:
        import torch

        if torch.is_grad_enabled():  # (as a region runs: AOTAutograd's graphs already run without grad)
            with torch.no_grad():
                return list(self.kernel.gm(*inputs))
        return list(self.kernel.gm(*inputs))


@contextlib.contextmanager
def substituted(runs: dict[str, Any]) -> Iterator[None]:
    """``with substituted({key: run}):`` the regions under those keys call ``run(inputs)`` instead of their own
    dispatch in the block (a model's whole-step check times a region's variants inside the real step this way;
    the compiled graphs call ``RegionKernel.run``, so the instance's attribute takes over without a check on
    the hot path)."""
    kernels = [(_REGIONS[key], run) for key, run in runs.items()]
    for kernel, run in kernels:
        kernel.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        for kernel, _ in kernels:
            kernel.__dict__.pop("run", None)


def register(kernel: RegionKernel) -> str:
    """Register ``kernel`` for the op; returns its key (unique in this process)."""
    with _LOCK:
        key = f"{kernel.template}_{next(_COUNTER)}_{kernel.graph.workload_key[:12]}"
        _REGIONS[key] = kernel
    return key


def region_op() -> Any:
    """``torch.ops.kernelgen.region.default``, defined on first use."""
    global _OP
    with _LOCK:
        if _OP is None:
            _OP = _define()
    return _OP


def _define() -> Any:
    import torch

    # The schema is spelled out: this module's annotations are strings (from __future__ import annotations).
    @torch.library.custom_op("kernelgen::region", mutates_args=(), schema="(str key, Tensor[] inputs) -> Tensor[]")
    def region(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return _REGIONS[key].run(inputs)

    @region.register_fake
    def _(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        device = inputs[0].device if inputs else torch.device("cpu")
        kernel = _REGIONS[key]
        if kernel.orders is not None:  # symbolic shapes: the region's ATen nodes replayed on the fake inputs
            outs = kernel.gm(*inputs)
            return [torch.empty_strided(o.shape, s, dtype=o.dtype, device=device)
                    for o, s in zip(outs, kernel.layouts([o.shape for o in outs]))]
        return [torch.empty_strided(spec.shape, strides, dtype=getattr(torch, spec.dtype), device=device)
                for spec, strides in zip(kernel.graph.output_specs, kernel.strides)]

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        key, tensors = inputs
        ctx.key = key
        ctx.save_for_backward(*tensors)

    def backward(ctx: Any, grads: list) -> tuple:
        # The region's ATen nodes replayed under autograd: eager's gradients by construction.
        inputs = ctx.saved_tensors
        needs = ctx.needs_input_grad[1]  # per tensor of the list, or one flag for all of it
        needs = list(needs) if isinstance(needs, (list, tuple)) else [bool(needs)] * len(inputs)
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(need and x.is_floating_point()) for x, need in zip(inputs, needs)]
            outs = _REGIONS[ctx.key].gm(*leaves)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        wrt = [x for x in leaves if x.requires_grad]
        found = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
                     if pairs and wrt else [None] * len(wrt))
        return None, [next(found) if x.requires_grad else None for x in leaves]

    region.register_autograd(backward, setup_context=setup_context)
    return torch.ops.kernelgen.region.default


def run_region(key: str, inputs: list) -> list:
    """A region's run without the dispatcher: what the graphs the backend hands back to AOTAutograd call.

    Those graphs are only executed, never traced again (AOTAutograd traced before the backend compiled them)
    and their backward is a graph of its own, so the custom op's autograd and fake registrations have no
    use there, while its dispatch costs about 8 us per region call on this CPU (a region of a Linear + ReLU
    at [8, 64]: 19.8 us through ``torch.ops.kernelgen.region`` vs 11.8 us direct, medians of 7 x 2000 calls)."""
    return _REGIONS[key].run(inputs)


def install(gm: Any, regions: list, options: dict | None = None, counters: Any = None,
            direct: bool = False) -> list[str]:
    """Replace each region's nodes in ``gm`` by one ``kernelgen::region`` call (``direct``: a ``run_region``
    call, for graphs that are only executed); returns the region keys. ``options`` are ``kernelgen.compile``'s
    keywords for each region (backend, tune, db, trials, seconds). Regions must be convex
    (``kernelgen.frontend.partition`` makes them so); the graph is re-sorted after."""
    from torch.fx.passes.tools_common import legalize_graph

    # Regions exist from now on: a custom call's pattern may also match them in their ATen form.
    add_pattern_tracer(aten_graph_of)
    op = run_region if direct else region_op()
    graph = gm.graph
    keys = []
    moved: dict[Any, Any] = {}  # a region output -> the getitem of its region call that replaced it
    for region in regions:
        region.inputs = [moved.get(n, n) for n in region.inputs]
        sub = _subgraph(gm, region)
        vals = [out.meta["val"] for out in region.outputs]
        if any(is_symbolic(n.meta.get("val")) for n in (*region.inputs, *region.outputs)):
            dynamic = {i: [0] for i, n in enumerate(region.inputs)
                       if is_symbolic(n.meta.get("val")) and not isinstance(n.meta["val"].shape[0], int)}
            kernel = RegionKernel(sub, region.graph, region.template, options, counters,
                                  orders=tuple(stride_order(v) for v in vals), dynamic=dynamic or False)
        else:
            kernel = RegionKernel(sub, region.graph, region.template, options, counters,
                                  tuple(tuple(v.stride()) for v in vals))
        key = register(kernel)
        keys.append(key)
        with graph.inserting_after(region.nodes[-1]):
            call = graph.call_function(op, (key, list(region.inputs)))
        with graph.inserting_after(call):
            for i, out in enumerate(region.outputs):
                item = graph.call_function(operator.getitem, (call, i))
                item.meta = dict(out.meta)
                out.replace_all_uses_with(item)
                moved[out] = item
        for node in reversed(region.nodes):
            graph.erase_node(node)
    for const in {c for r in regions for c in r.consts}:
        if not const.users:  # every reader folded it in: ATen need not make it
            graph.erase_node(const)
    legalize_graph(gm)  # sets gm.graph to a topologically sorted copy
    gm.graph.lint()
    gm.recompile()
    return keys


def stride_order(value: Any) -> tuple[int, ...]:
    """Fake tensor ``value``'s dims from innermost to outermost in memory (by its strides at their hints;
    ties, as size-1 dims give, in contiguous order)."""
    strides = spec_of(value).effective_strides()
    return tuple(sorted(range(len(strides)), key=lambda d: (strides[d], -d)))


def strides_in_order(shape: Any, order: tuple[int, ...]) -> tuple:
    """Dense strides for ``shape`` with dims laid out innermost-first as ``order`` says."""
    strides = [0] * len(shape)
    step = 1
    for d in order:
        strides[d] = step
        step = step * max(shape[d], 1) if isinstance(shape[d], int) else step * shape[d]
    return tuple(strides)


def _subgraph(gm: Any, region: Any) -> Any:
    """The region's ATen nodes as a GraphModule of (inputs) -> tuple(outputs): its eager replay."""
    import torch
    import torch.fx

    graph = torch.fx.Graph()
    env: dict[Any, Any] = {}
    for i, node in enumerate(region.inputs):
        env[node] = graph.placeholder(f"in{i}_{node.name}")
        env[node].meta = dict(node.meta)
    for node in region.consts:
        # A folded constant, made from a region input so that tracing the replay records it (a call reading no
        # proxy would run while fx traces, leaving a tensor constant the lowering refuses); dtype and device
        # are given, so the input lends nothing but a place in the graph.
        value = node.meta["val"]
        env[node] = graph.call_function(torch.ops.aten.new_full.default,
                                        (env[region.inputs[0]], list(value.shape), constant_value(node)),
                                        {"dtype": value.dtype, "layout": torch.strided, "device": value.device,
                                         "pin_memory": False})
        env[node].meta = dict(node.meta)
    for node in region.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in region.outputs))
    sub = torch.fx.GraphModule(gm, graph)
    # the inputs that are parameters or buffers of an inference graph, for the capture's graph (its placeholders
    # are traced anew, without this meta)
    setattr(sub, CONSTANT_INPUTS, frozenset(i for i, n in enumerate(region.inputs) if is_constant_input(n)))
    return sub


__all__ = ["AtenReplay", "RegionKernel", "install", "kernel_of", "observe", "region_op", "register", "run_region",
           "substituted"]
