"""``torch.compile(model, backend="kernelgen")``: Dynamo's graph, through AOTAutograd and torch's
decompositions, partitioned into kernelgen regions (``kernelgen::region`` calls), the rest left to ATen.

The backend is registered under the name ``kernelgen`` through the ``torch_dynamo_backends`` entry point
(and by ``register()``). Options are ``kernelgen.compile``'s keywords, applied to every region:
``torch.compile(m, backend="kernelgen", options={"backend": "triton", "tune": "auto", "trials": 20})``
(``backend``: ``auto`` (by the inputs' device), ``cpp`` or ``triton``; ``tune``, ``db``, ``team_db``,
``trials``, ``seconds`` as in ``kernelgen.compile``). ``cudagraphs`` (``options={"cudagraphs": True}``, or
``mode="reduce-overhead"``) is the graph's own: each compiled graph runs through CUDA graph trees after its first
call, where capture is safe (``kernelgen.frontend.cuda_graphs``; off by default).

Coverage statistics for each compiled graph: ``stats()`` (every graph since ``reset_stats()``) or
``with collect() as graphs: ...`` (the graphs compiled inside the block).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.frontend.attention_pattern import fuse_written_attention, read_kv_groups
from kernelgen.frontend.cleanup import aten_conversions, drop_noop_conversions, fold_constants
from kernelgen.frontend.decompositions import decompositions
from kernelgen.frontend.fx_nodes import CONSTANT_INPUT, is_symbolic, is_view
from kernelgen.frontend.partition import folded, partition
from kernelgen.frontend import cuda_graphs, region_op
from kernelgen.frontend.region_op import install
from kernelgen.frontend.sink_views import sink_views
from kernelgen.backends import default_backend, get_backend
from kernelgen.runtime import memory, step_verdicts, threads
from kernelgen.runtime.records import shared_db

log = logging.getLogger("kernelgen")
NAME = "kernelgen"
OPTIONS = ("backend", "tune", "db", "team_db", "trials", "seconds")  # kernelgen.compile's keywords
GRAPH_OPTIONS = ("cudagraphs",)  # the compiled graph's own options, not the regions'
_STATS: list["GraphStats"] = []
_COLLECTORS: list[list["GraphStats"]] = []
_LOCK = threading.Lock()


@dataclass
class GraphStats:
    """One compiled ATen graph: ``aten_ops`` compute nodes (views and tuple projections not counted),
    ``fused_ops`` of them inside kernelgen ``regions``; ``left`` maps each op left to ATen to the reason;
    ``runs`` counts region runs that launched a kernel (``kernel``), ran the region's ATen ops by choice
    (``aten``: a record measured them fastest, or the region is too small to win, ``kernelgen.runtime.aten``)
    or replayed ATen because no kernel could run (``eager``)."""

    name: str
    aten_ops: int = 0
    fused_ops: int = 0
    regions: int = 0
    templates: Counter = field(default_factory=Counter)
    views: int = 0
    left: dict[str, str] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)  # its regions (``region_op.kernel_of``), in graph order
    plain: Any = field(default=None, repr=False)  # the graph without its regions (``plain_when_every_region_fails``)
    step: Any = None  # the Dynamo graph it came from (``runtime.step_verdicts.StepKey``): its whole-step verdict's key

    @property
    def coverage(self) -> float:
        return self.fused_ops / self.aten_ops if self.aten_ops else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "aten_ops": self.aten_ops, "fused_ops": self.fused_ops, "regions": self.regions,
                "templates": dict(self.templates), "views": self.views, "coverage": self.coverage,
                "left": dict(self.left), "kernel_runs": self.runs.get("kernel", 0),
                "aten_runs": self.runs.get("aten", 0), "eager_runs": self.runs.get("eager", 0)}


def stats() -> list[GraphStats]:
    """Statistics of every graph this backend compiled in this process (since ``reset_stats()``)."""
    with _LOCK:
        return list(_STATS)


def reset_stats() -> None:
    with _LOCK:
        _STATS.clear()


@contextlib.contextmanager
def collect() -> Iterator[list[GraphStats]]:
    """``with collect() as graphs:`` fills ``graphs`` with the statistics of graphs compiled in the block
    (their run counters keep counting after it)."""
    graphs: list[GraphStats] = []
    with _LOCK:
        _COLLECTORS.append(graphs)
    try:
        yield graphs
    finally:
        with _LOCK:
            _COLLECTORS.remove(graphs)


def compile_graph(gm: Any, name: str = "graph", options: dict | None = None, direct: bool = False) -> GraphStats:
    """Partition ATen graph ``gm`` (nodes carrying ``meta['val']``) and install its regions in place (as
    ``kernelgen::region`` calls, or with ``direct`` as plain calls for a graph that is only executed)."""
    record, found = plan(gm, name)
    # the graph as ATen ops alone, cleaned up: what runs if no region's kernel can (plain_when_every_region_fails)
    record.plain = _plain_copy(gm) if found.regions and not _symbolic(gm) else None
    record.keys = install(gm, found.regions, options, record.runs, direct)
    for reason in sorted(set(record.left.values())):
        log.info("kernelgen %s graph: ATen runs ops because %s", name, reason)
    _register(record)
    return record


def _register(record: GraphStats) -> None:
    """``record`` in ``stats()`` and in every open ``collect()``."""
    with _LOCK:
        _STATS.append(record)
        for graphs in _COLLECTORS:
            graphs.append(record)


def plan(gm: Any, name: str = "graph") -> tuple[GraphStats, Any]:
    """``gm`` cleaned up and rewritten in place (still plain ATen ops), its partition and its statistics: what
    ``compile_graph`` installs, without installing it (``benchmarks/model_coverage.py`` reads a model's coverage
    from it without building a kernel). Nothing is recorded in ``stats()``."""
    import operator

    drop_noop_conversions(gm)  # float32 -> float32 upcasts of the decompositions: no op, no region needed
    aten_conversions(gm)  # the others as ATen's C++ op: a prim left to ATen runs torch's Python reference
    fold_constants(gm)  # position ids, a causal mask's iota: computed once, not every step
    sink_views(gm)  # a Linear's epilogue on [B, T, N] then reads the GEMM's [B*T, N] output directly
    fuse_written_attention(gm)  # softmax(q @ kᵀ * c [+ mask]) @ v as the flash op: one attention region
    read_kv_groups(gm)  # grouped-query attention reads its key/value heads, not repeat_kv's copies of them
    found = partition(gm)
    record = GraphStats(name)
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if is_view(node):
            record.views += 1
        else:
            record.aten_ops += 1
    gone = folded(found.regions)  # constants only regions read: folded into each, made by nobody
    for node, reason in found.left.items():
        if not is_view(node) and node not in gone:
            record.left[f"{node.name} ({node.target})"] = reason
    record.fused_ops += len(gone)
    for region in found.regions:
        record.fused_ops += sum(1 for n in region.nodes if n.target is not operator.getitem)
        record.templates[region.template] += 1
    record.regions = len(found.regions)
    return record, found


def plain_when_every_region_fails(gm: Any, record: GraphStats) -> Any:
    """``gm``'s forward, which after its first call becomes the graph as plain ATen ops (``record.plain``) when
    every region of it replayed its ATen ops because no kernel could run there (each candidate failed its check,
    or the backend refused the inputs): a region that replays costs a call and a sub-graph's interpretation
    beyond its ops (~10 us a region on a CPU; ~50 regions in a GPT-2 step), so a graph of failed regions cost
    more than eager. One flag read per call after the first. Static graphs only (``record.plain`` is None for a
    dynamic one: another size may pass its checks)."""
    forward = gm.forward
    if record.plain is None:
        return forward
    chosen: list[Any] = []

    def run(*args: Any) -> Any:
        if chosen:
            return chosen[0](*args)
        out = forward(*args)
        kernels = [region_op.kernel_of(key) for key in record.keys]
        if kernels and all(k.failed is not None or k.impl == "eager" for k in kernels):
            log.warning("kernelgen %s graph: none of its %d regions could run a kernel here (see the warnings "
                        "above); it runs as plain ATen ops from now on", record.name, len(kernels))
            chosen.append(record.plain.forward)
        else:
            chosen.append(forward)
        return out

    return run


def _plain_copy(gm: Any) -> Any:
    """A GraphModule running ``gm``'s graph as it is now, sharing its attributes. Not ``copy.deepcopy``: that copies
    each node's fake tensor (``meta['val']``), which a model's graph refuses (a fake tensor's storage set across
    devices); the copy's nodes share the meta instead."""
    import torch.fx

    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def _symbolic(gm: Any) -> bool:
    return any(is_symbolic(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder")


def kernelgen_backend(gm: Any, example_inputs: list, options: dict | None = None, mode: str | None = None) -> Any:
    """The Dynamo backend: AOTAutograd with a forward and a backward compiler that partition each graph.
    ``options`` (from ``torch.compile(..., options=...)``): ``kernelgen.compile``'s keywords and ``cudagraphs``
    (see the module); ``mode``: ``default`` or ``reduce-overhead`` (``cudagraphs``)."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.utils import count_tangents, num_fw_fixed_arguments

    options = dict(options or {})
    threads.start()  # kernels follow the machine's load from now on (kernelgen.runtime.threads)
    memory.keep_freed_memory()  # no page faults on every step's activations (kernelgen.runtime.memory)
    unknown = sorted(set(options) - set(OPTIONS) - set(GRAPH_OPTIONS))
    if unknown or (mode is not None and mode not in cuda_graphs.MODES):
        raise KernelgenError(f"kernelgen backend options {unknown} / mode={mode!r} are not understood; "
                             f"options are {', '.join(OPTIONS + GRAPH_OPTIONS)} (kernelgen.compile's keywords and "
                             f"the graph's), modes {', '.join(cuda_graphs.MODES)}")
    capture = bool(options.pop("cudagraphs", False)) or cuda_graphs.MODES.get(mode or "default", False)
    key = step_verdicts.graph_key(gm, example_inputs, torch.is_grad_enabled())
    eager = _eager_by_verdict(gm, key, example_inputs, options)
    if eager is not None:
        return eager
    step = cuda_graphs.Step()  # this Dynamo graph's forward and backward

    def compiler(name: str) -> Any:
        def compile_one(graph_module: Any, inputs: list) -> Any:
            if name == "inference":
                mark_constant_inputs(graph_module)
            record = compile_graph(graph_module, name, options, direct=True)
            record.step = key
            # its ATen ops take as few threads as its kernels while other processes load the CPUs
            run = make_boxed_func(threads.following_load(plain_when_every_region_fails(graph_module, record)))
            if not capture:
                return run
            fixed = count_tangents(graph_module) if name == "backward" else \
                num_fw_fixed_arguments(len(example_inputs), len(inputs))
            return cuda_graphs.wrap(run, graph_module, fixed, name, step)

        return compile_one

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"),
                        decompositions=decompositions())(gm, example_inputs)


def _eager_by_verdict(gm: Any, key: Any, example_inputs: list, options: dict) -> Any:
    """``gm``'s own forward (eager's ops and autograd) where the tuning database's whole-step verdict says this
    graph runs faster eagerly on this target (``kernelgen.runtime.step_verdicts``), else None. The graph is
    recorded in ``stats()`` with every op left to ATen and the reason."""
    import torch

    devices = {v.device.type for v in example_inputs if isinstance(v, torch.Tensor)}
    name = options.get("backend") or "auto"
    try:
        backend = default_backend(next(iter(devices)) if len(devices) == 1 else None) if name == "auto" \
            else get_backend(name)
        db = shared_db(options.get("db"), options.get("team_db"))
    except KernelgenError as exc:
        log.debug("kernelgen: no whole-step verdict read for graph %s (%s)", key.key[:12], exc)
        return None
    verdict = step_verdicts.runs_eagerly(key, backend.target(), db)
    if verdict is None:
        return None
    record = GraphStats("eager", step=key)
    why = f"the whole-step check measured this graph faster eagerly ({verdict.measurement.message})"
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            record.aten_ops += 1
            record.left[f"{node.name} ({node.target})"] = why
    log.info("kernelgen: a graph of %d ops runs eagerly: %s", record.aten_ops, why)
    _register(record)
    return gm.forward


def mark_constant_inputs(gm: Any) -> int:
    """Mark the placeholders of inference graph ``gm`` that are the model's parameters and buffers
    (``fx_nodes.CONSTANT_INPUT``), so a region may prepare them once (a convolution's packed weight,
    ``kernelgen.templates.vendor_conv``); returns how many. AOTAutograd lists them in the tracing context's
    ``fw_metadata.static_input_indices`` (torch 2.13: the lifted parameters and buffers, and the Dynamo inputs it
    marked static, an inlined module's parameters and buffers among them; indices of the compiled graph's
    placeholders, effect tokens counted, as Inductor's ``get_static_input_idxs`` reads them). Only an inference
    graph: a training graph's parameters change every step, and its regions' keys stay apart from these."""
    import torch._guards

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    indices = set(getattr(meta, "static_input_indices", None) or ())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    marked = 0
    for index, node in enumerate(placeholders):
        if index in indices and isinstance(node.meta.get("val"), torch.Tensor):
            node.meta[CONSTANT_INPUT] = True
            marked += 1
    return marked


def register() -> None:
    """Register the backend with Dynamo under ``"kernelgen"`` (a no-op when it already is)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if NAME not in _COMPILER_FNS:
        register_backend(name=NAME)(kernelgen_backend)


__all__ = ["GRAPH_OPTIONS", "GraphStats", "NAME", "OPTIONS", "collect", "compile_graph", "kernelgen_backend",
           "mark_constant_inputs", "plan",
           "register", "reset_stats", "stats"]
