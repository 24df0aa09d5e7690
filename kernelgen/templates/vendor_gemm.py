"""ATen's own matmul (oneDNN/MKL on CPU, cuBLAS on GPU) plus a kernelgen pointwise epilogue, as an
``Implementation`` that competes with the generated GEMM for every graph the GEMM template matches.

The matmul runs ``torch.mm`` / ``torch.matmul`` (or ``torch.addmm`` when the epilogue starts with a row
bias add) into a preallocated buffer with ``out=``; the rest of the epilogue is the GEMM problem's graph
with the matmul replaced by an input, rendered by the pointwise template for the backend. Because the
matmul is eager's own kernel and its result is stored in the graph's dtype before the epilogue reads it,
the numerics are eager's: float16/bfloat16 products are rounded once, as eager rounds them.

Shape families (``kernelgen.runtime.families``): on a shape-generic graph (``graph.dynamic`` set) the matmul reads
its sizes from the tensors it is given, the scratch buffer grows to the largest batch seen, and the epilogue
is the pointwise template's generic kernel (the batch size ``n0`` an argument), so one built implementation
serves every batch size with no compile (``shape_generic``).

Untuned, dispatch runs the first implementation's default (``kernelgen.runtime.implementations.implementations_for``
puts this one first): eager's kernel is never much slower than eager, while an untuned generated GEMM can
be (milliseconds at M=16). The generated GEMM runs only once tuning declares it faster.

``pack_weight`` (default False): where B is a 2-d weight the front end marked ``constant`` (a Linear's weight in an
inference graph, ``kernelgen.frontend.dynamo_backend``; it reaches the region as ``t(weight)``), in a static graph,
on the C++ backend on a CPU, the vendor's linear over the weight packed once (``PACKED_LINEARS``: MKL's
``_mkl_linear`` in float32, oneDNN's ``_linear_pointwise`` in bfloat16 where the CPU has its bf16 path), the bias
passed to that call, its fresh result copied into the output or read by the epilogue; repacked whenever the weight
changes (``packed_weights.PackedWeight``); ``KERNELGEN_PACK_WEIGHTS=0`` takes the choice away. A measured choice,
never the default: on this project's AMD EPYC (Milan, AVX2, 2 cores loaded by another test run, load average
3.4-3.9; ``benchmarks/bench_packed_linear.py``, one process, 15 interleaved rounds of 50 calls, medians) at M=512
with (K, N) = (256, 768), (256, 256), (256, 1024), (1024, 256) the packed call took 1.12, 1.01, 1.02, 1.02x addmm's
time on one thread (1.07, 1.08, 1.03, 1.08x with the copy into the output) and 1.06, 1.19, 1.43, 0.89x on two
(threads fighting the load: noise), i.e. no gain here; packing pays where the vendor's packed format has
instructions to feed (AMX, AVX-512 bf16), which the tuner finds by measuring.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kernelgen.env_flags import PACK_WEIGHTS, env_flag
from kernelgen.ir.graph import Graph, Node
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, TensorSpec
from kernelgen.templates.gemm import GemmProblem
from kernelgen.templates.implementation import REBUILD
from kernelgen.templates.indexing import dynamic_source
from kernelgen.templates.packed_weights import PackedWeight
from kernelgen.templates.vendor_epilogue import epilogue_config, epilogue_space, pointwise_epilogue, vendor_source_hash

NAME = "aten_gemm"
ADDMM = "bias_in_addmm"  # the config key: the row bias goes into addmm's beta*bias (True) or the epilogue
PACK = "pack_weight"  # the config key: a constant B packed once for the vendor's linear (True) or ATen's matmul
PACK_ENV = PACK_WEIGHTS  # 0/off: no packed-weight choice (the switch, read when a space is made)


@dataclass(frozen=True)
class PackedLinear:
    """A vendor linear over a weight packed once: ``available()`` (this torch and CPU have it), ``pack(w, m)`` (the
    [N, K] weight, contiguous, for ``m`` rows) and ``run(x, packed, w, m, bias)`` (``x @ w.T + bias`` for 2-d
    ``x``, a fresh contiguous tensor; ``bias`` may be None)."""

    available: Any
    pack: Any
    run: Any


def _torch() -> Any:
    import torch  # deferred: the table is read when a space is made, before anything runs

    return torch


def _mkl() -> bool:
    torch = _torch()
    return torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")


def _onednn_bf16() -> bool:
    torch = _torch()
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


# The packed call per dtype (a dtype not here is never packed): MKL's sgemm on a packed B in float32 (given the
# packing's row count ``m``: a call with other rows runs the unpacked weight ``w``), oneDNN's linear on a reordered
# weight in bfloat16 where the CPU has oneDNN's bf16 path.
PACKED_LINEARS: dict[str, PackedLinear] = {
    "float32": PackedLinear(
        _mkl,
        lambda w, m: _torch().ops.mkl._mkl_reorder_linear_weight(w, m),
        lambda x, packed, w, m, bias: _torch().ops.mkl._mkl_linear(x, packed, w, bias, m)),
    "bfloat16": PackedLinear(
        _onednn_bf16,
        lambda w, m: _torch().ops.mkldnn._reorder_linear_weight(w, m),
        lambda x, packed, w, m, bias: _torch().ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")),
}


def view_steps(graph: Graph, node_id: int) -> tuple[int, tuple[tuple[str, tuple[int, ...]], ...]]:
    """``(input index, steps)``: how node ``node_id`` (an input seen through reshape/transpose nodes) is made
    from the input tensor with torch views, so the operand ATen gets has the graph's layout, no copy."""
    steps: list[tuple[str, tuple[int, ...]]] = []
    node = graph.nodes[node_id]
    while node.op != "input":
        steps.append((node.op, node.spec.shape))
        node = graph.nodes[node.inputs[0]]
    return node.attr("index"), tuple(reversed(steps))


def apply_view(tensor: Any, steps: tuple[tuple[str, tuple[int, ...]], ...], batch: int = 0) -> Any:
    """``tensor`` seen through ``steps``; in a shape-generic graph (``batch``: its sentinel size) a reshape to
    dim 0 of size ``batch`` keeps the run-time batch size of the tensor instead (the family check guarantees
    the sentinel is only ever a dim 0, the batch's)."""
    for op, shape in steps:
        if op == "transpose":
            tensor = tensor.transpose(-2, -1)
        else:
            tensor = tensor.reshape((tensor.shape[0], *shape[1:]) if batch and shape[:1] == (batch,) else shape)
    return tensor


def epilogue_graph(graph: Graph, result: int, strides: tuple[int, ...] | None = None
                   ) -> tuple[Graph, tuple[int, ...]] | None:
    """The graph's output as a function of node ``result`` (now its last input, contiguous or with ``strides``: the
    layout the vendor's call writes it in) and the original inputs it reads; with the original argument positions
    those inputs had. None when the output is ``result``."""
    out = graph.outputs[0]
    if out == result:
        return None
    live = {out}
    for i in range(out, -1, -1):
        if i in live and i != result:
            live.update(graph.nodes[i].inputs)
    used = [i for i in graph.input_ids if i in live]
    remap = {old: new for new, old in enumerate(used)}
    nodes = [Node("input", (), (("index", k),), graph.nodes[i].spec) for k, i in enumerate(used)]
    spec = graph.nodes[result].spec
    remap[result] = len(nodes)
    nodes.append(Node("input", (), (("index", len(used)),), TensorSpec(spec.shape, spec.dtype, strides)))
    for i, node in enumerate(graph.nodes):
        if i in live and i not in remap:
            remap[i] = len(nodes)
            nodes.append(Node(node.op, tuple(remap[j] for j in node.inputs), node.attrs, node.spec))
    args = tuple(graph.nodes[i].attr("index") for i in used)
    return Graph(tuple(nodes), (remap[out],), graph.dynamic), args  # a generic graph's epilogue is generic


@dataclass(frozen=True)
class _Plan:
    """One way to split the graph: ``result`` (the matmul, or the bias add folded into addmm) and the
    pointwise epilogue after it (None: ATen writes the output itself)."""

    result: int
    bias: int | None  # node id of the row bias addmm adds, when ``result`` is that add
    epilogue: Any  # TemplateImplementation of the pointwise epilogue, or None
    args: tuple[int, ...]  # original input positions the epilogue reads (then the matmul result)


class VendorGemmImplementation(Implementation):
    """ATen's matmul + kernelgen's pointwise epilogue for a ``GemmProblem`` on ``backend``."""

    name = NAME
    worker_factory = REBUILD
    worker_args = {"name": NAME}

    def __init__(self, problem: GemmProblem, backend: str) -> None:
        self.problem = problem
        self.graph = problem.graph
        self.backend = backend
        g, mm = self.graph, problem.matmul
        self._a = view_steps(g, g.nodes[mm].inputs[0])
        self._b = view_steps(g, g.nodes[mm].inputs[1])
        self._plans = {False: self._plan(mm, None)}
        bias = self._row_bias()
        if bias is not None:
            self._plans[True] = self._plan(*bias)
            self._bias = view_steps(g, bias[1])

    def _packable(self, target: Target) -> bool:
        """A packed B is offered only for a 2-d B the front end marked constant (a parameter of an inference graph,
        never a training graph's), in a static graph (a packing is for one row count), on the C++ backend on a CPU
        in a dtype ``PACKED_LINEARS`` packs with a call this machine has, unless ``KERNELGEN_PACK_WEIGHTS`` is
        off."""
        g, mm = self.graph, self.graph.nodes[self.problem.matmul]
        a, b = g.nodes[mm.inputs[0]].spec, g.nodes[mm.inputs[1]].spec
        base = next(n for n in g.nodes if n.op == "input" and n.attr("index") == self._b[0])
        linear = PACKED_LINEARS.get(mm.spec.dtype)
        return (bool(base.attr("constant")) and b.rank == 2 and a.rank >= 2 and a.dtype == b.dtype == mm.spec.dtype
                and not g.dynamic and self.backend == "cpp" and target.tensor_device == "cpu"
                and linear is not None and linear.available() and env_flag(PACK_ENV, True))

    def _plan(self, result: int, bias: int | None) -> _Plan:
        epilogue, args = pointwise_epilogue(epilogue_graph(self.graph, result), self.backend,
                                            f"GEMM workload {self.graph.workload_key[:12]}")
        return _Plan(result, bias, epilogue, args)

    def _row_bias(self) -> tuple[int, int] | None:
        """``(add node, bias node)`` when the matmul's only user adds a row vector (a linear's bias) of the
        matmul's dtype to a 2-d product, which ``torch.addmm`` computes in its accumulator as eager's linear does."""
        g, p = self.graph, self.problem
        users = [i for i, n in enumerate(g.nodes) if p.matmul in n.inputs]
        b_rank = g.nodes[g.nodes[p.matmul].inputs[1]].spec.rank
        if len(users) != 1 or b_rank != 2 or g.nodes[users[0]].op != "add":
            return None
        add = g.nodes[users[0]]
        others = [j for j in add.inputs if j != p.matmul]
        load = next((ld for ld in p.loads if others and ld.node == others[0]), None)
        mm_spec = g.nodes[p.matmul].spec
        if load is None or len(others) != 1 or add.spec != mm_spec or load.dtype != mm_spec.dtype:
            return None
        if any(load.strides[:-1]):  # not a row vector broadcast over the batch and rows
            return None
        return users[0], others[0]

    # -- the Implementation contract ------------------------------------------------------------------
    def source_hash(self) -> str:
        """The derived hash of this module's closure (the pointwise renderer included), the backend's recipe
        and the torch version whose matmul it calls."""
        return vendor_source_hash(__name__, self.backend)

    def space(self, target: Target) -> SearchSpace:
        """The epilogue's pointwise parameters (prefixed ``epilogue_``) and, where the epilogue starts with a
        row bias add, whether addmm adds it, and where B is a constant weight, whether it is packed once for the
        vendor's linear (``PACKED_LINEARS``; the bias then goes into that call). Configs that only differ in an
        epilogue that does not run are rejected, so the tuner does not measure one kernel twice."""
        full = self._plans[False].epilogue
        params, constraints, default = epilogue_space(full, target)
        if True in self._plans:
            params.append(Param(ADDMM, (True, False)))
            default[ADDMM] = True  # eager's linear: the bias lands in the accumulator
            if full is not None and self._plans[True].epilogue is None:
                fixed = dict(default)
                constraints.append(Constraint("with the bias in addmm there is no epilogue to configure",
                                              lambda cfg: not cfg[ADDMM] or all(
                                                  cfg[k] == v for k, v in fixed.items() if k != ADDMM)))
        if self._packable(target):
            params.append(Param(PACK, (False, True)))
            default[PACK] = False  # ATen's matmul, eager's call: the packed one runs only once measured faster
        return SearchSpace(params, constraints, default)

    def build(self, config: Config, target: Target) -> Launcher:
        problems = self.space(target).violations(config)
        if problems:
            raise ValueError(f"{NAME} config {dict(config)} is invalid: {'; '.join(problems)}")
        plan = self._plans[bool(config.get(ADDMM, False))]
        epilogue = None if plan.epilogue is None else plan.epilogue.build(epilogue_config(config), target)
        spec = self.graph.nodes[plan.result].spec
        packed = PACKED_LINEARS[self.graph.nodes[self.problem.matmul].spec.dtype] if config.get(PACK) else None
        return VendorLauncher(self, plan, epilogue, spec, target, packed)

    def shape_generic(self, target: Target) -> bool:
        """On a shape-generic graph: ATen's matmul takes any size, so this is generic when every epilogue is
        (or there is none)."""
        return bool(self.graph.dynamic) and all(plan.epilogue is None or plan.epilogue.shape_generic(target)
                                                for plan in self._plans.values())

    def __repr__(self) -> str:
        return f"VendorGemmImplementation(backend={self.backend!r})"


class VendorLauncher:
    """Runs one config: the ATen matmul into the output (no epilogue) or into a per-thread scratch buffer
    reused across calls (a fresh buffer per call costs page faults comparable to the matmul at these sizes),
    then the compiled epilogue kernel; or, with a packed B, the vendor's linear (its fresh result copied into
    the output or read by the epilogue)."""

    def __init__(self, impl: VendorGemmImplementation, plan: _Plan, epilogue: Any, spec: TensorSpec,
                 target: Target, linear: PackedLinear | None = None) -> None:
        import torch

        self._torch = torch
        self._a, self._b = impl._a, impl._b
        self._bias = impl._bias if plan.bias is not None else None
        self._epilogue = epilogue
        self._args = plan.args
        self._shape = spec.shape
        self._dtype = getattr(torch, spec.dtype)
        self._scratch = threading.local()
        self.source_file = getattr(epilogue, "source_file", None)
        # where the tensors must live: the epilogue kernel's device (a GPU for Triton on one); ATen's matmul runs
        # anywhere, so without an epilogue the target's own device (the measurer moves its inputs there)
        self.device = getattr(epilogue, "device", None) or target.tensor_device
        # a shape-generic graph: the sentinel batch size, and the input whose dim 0 is the run-time batch size
        # when the matmul result has it (the scratch buffer then has that many rows)
        self._batch = impl.graph.dynamic
        self._rows_from = dynamic_source(impl.graph, spec.shape)
        # a packed constant B: the vendor's linear over the weight packed once (``PackedWeight``: again after an
        # in-place update), its fresh result copied into the output or read by the epilogue
        self._linear = linear
        self._packed = None if linear is None else PackedWeight(self._pack)

    def _pack(self, w: Any, x: Any) -> tuple[Any, Any, int]:
        """``(packed, [N, K] weight, rows)`` for B = ``w.T`` and A = ``x``; keeps the contiguous weight, which the
        vendor's call reads when a call's rows differ from the packing's."""
        w = w.contiguous()
        rows = x.numel() // max(x.shape[-1], 1)
        return self._linear.pack(w, rows), w, rows

    def _buffer(self, device: Any, tensors: tuple) -> Any:
        rows = None if self._rows_from is None else tensors[self._rows_from].shape[0]
        buf = getattr(self._scratch, "buf", None)
        if buf is None or buf.device != device or (rows is not None and buf.shape[0] < rows):
            # a generic launcher's buffer grows to the next power of two, so a sweep of sizes allocates log2 times
            shape = self._shape if rows is None else (1 << max(0, rows - 1).bit_length(), *self._shape[1:])
            buf = self._torch.empty(shape, dtype=self._dtype, device=device)
            self._scratch.buf = buf
        return buf if rows is None else buf[:rows]  # dim 0 outermost: a contiguous view

    def __call__(self, *tensors: Any) -> None:
        torch = self._torch
        out = tensors[-1]
        a = apply_view(tensors[self._a[0]], self._a[1], self._batch)
        b = apply_view(tensors[self._b[0]], self._b[1], self._batch)
        bias = None if self._bias is None else \
            apply_view(tensors[self._bias[0]], self._bias[1], self._batch).reshape(-1)
        if self._packed is not None:
            packed, w, rows = self._packed(b.t(), a)  # b.t(): the Linear's own [N, K] weight, a view of it
            y = self._linear.run(a.reshape(-1, a.shape[-1]), packed, w, rows, bias)
            if self._epilogue is None:
                out.copy_(y.view(out.shape))
            else:  # the call's fresh result is the epilogue's input: no scratch buffer, no copy
                self._epilogue(*[tensors[i] for i in self._args], y.view(self._shape), out)
            return
        dst = out if self._epilogue is None else self._buffer(a.device, tensors)
        if b.dim() == 2 and a.dim() > 2:  # a weight shared by a batch: one 2-d GEMM, as eager's matmul folds it
            a, result = a.reshape(-1, a.shape[-1]), dst.view(-1, dst.shape[-1])
        else:
            result = dst
        if bias is not None:
            torch.addmm(bias, a, b, out=result)
        elif a.dim() == 2 and b.dim() == 2:
            torch.mm(a, b, out=result)
        else:
            torch.matmul(a, b, out=result)
        if self._epilogue is not None:
            self._epilogue(*[tensors[i] for i in self._args], dst, out)

    launch = __call__


__all__ = ["ADDMM", "NAME", "PACK", "PACKED_LINEARS", "PACK_ENV", "PackedLinear", "VendorGemmImplementation",
           "VendorLauncher", "apply_view", "epilogue_graph", "view_steps"]
