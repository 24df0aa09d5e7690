"""ATen's convolution (or oneDNN's, with a fused post-op or a packed weight) plus a kernelgen pointwise epilogue, as
the ``Implementation`` of every graph the convolution template matches: what ``aten_gemm`` is for matmuls.

The convolution runs first and its result, in the graph's dtype, is what the epilogue kernel (the pointwise template
over the graph with the convolution replaced by an input: ``vendor_gemm.epilogue_graph``) reads; with no epilogue
it is copied into the output. ATen's convolution has no ``out=`` form that writes in place (its out overload is a
copy), so its fresh result is the scratch buffer, not one kept per thread as the GEMM's.

Config choices, each measured by the tuner, never assumed faster (default: ATen's ``convolution``, what eager runs):

- ``conv_call``: ``aten`` or ``onednn`` (``mkldnn._convolution_pointwise``), on the C++ backend in float32 (bfloat16
  where the CPU has oneDNN's bf16 path);
- ``post_op``: with ``onednn``, the epilogue's first ops fused into the convolution where they are exactly ReLU,
  a residual add of a same-shaped input, or that add then ReLU; the rest of the epilogue still runs as the kernel;
- ``pack_weight``: with ``onednn``, a weight the front end marked ``constant`` (a parameter or buffer of an
  inference graph, ``kernelgen.frontend.dynamo_backend``) reordered once into oneDNN's blocked layout
  (``_reorder_convolution_weight``) and reused while it is unchanged (``packed_weights.PackedWeight``);
  ``KERNELGEN_PACK_WEIGHTS=0`` takes the choice away. A packed convolution writes channels-last: the epilogue then
  reads that layout (one more epilogue kernel), and without an epilogue the copy into the output transposes.

Measured (the brief's, AMD EPYC Milan, one thread, loaded machine): packed with ReLU 0.59-0.77x the time of
``conv2d`` + ``relu`` at ResNet-18's 128-512-channel 3x3 layers, but 1.37x at a stride-2 64->128 one and 1.23x at
the 7x7 stem: hence a choice per shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelgen.env_flags import PACK_WEIGHTS, env_flag
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, TensorSpec
from kernelgen.templates.conv import ConvProblem
from kernelgen.templates.implementation import REBUILD
from kernelgen.templates.packed_weights import PackedWeight
from kernelgen.templates.vendor_epilogue import (EPILOGUE, epilogue_config, epilogue_space, pointwise_epilogue,
                                                 vendor_source_hash)
from kernelgen.templates.vendor_gemm import epilogue_graph

NAME = "aten_conv"
CALL = "conv_call"  # "aten" | "onednn"
POST = "post_op"  # "none" | "relu" | "add" | "add_relu": the epilogue's first ops oneDNN runs inside the convolution
PACK = "pack_weight"  # a constant weight reordered once for oneDNN
PACK_ENV = PACK_WEIGHTS  # 0/off: no packed-weight choice (the switch, read when a space is made)
POST_OPS = ("none", "relu", "add", "add_relu")


@dataclass(frozen=True)
class _Plan:
    """One way to run the graph: the node whose value the convolution call gives (the convolution, or the last
    op fused into it), the residual input fused in (its argument position), the unary post-op, and the epilogue
    after ``result`` (None: the call's value is the output)."""

    result: int
    other: int | None
    unary: str | None
    strides: tuple[int, ...] | None  # the layout the call writes (None: contiguous)
    epilogue: Any  # TemplateImplementation of the pointwise epilogue, or None
    args: tuple[int, ...]  # original input positions the epilogue reads (then the call's value)


def channels_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Dense strides of ``shape`` [N, C, *spatial] with the channels innermost (what a packed oneDNN convolution
    writes)."""
    strides = [0] * len(shape)
    step = 1
    for d in (1, *range(len(shape) - 1, 1, -1), 0):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


class VendorConvImplementation(Implementation):
    """ATen's or oneDNN's convolution + kernelgen's pointwise epilogue for a ``ConvProblem`` on ``backend``."""

    name = NAME
    worker_factory = REBUILD
    worker_args = {"name": NAME}

    def __init__(self, problem: ConvProblem, backend: str) -> None:
        self.problem = problem
        self.graph = problem.graph
        self.backend = backend
        conv = self.graph.nodes[problem.conv]
        self.attrs = (list(conv.attr("stride")), list(conv.attr("padding")), list(conv.attr("dilation")),
                      int(conv.attr("groups")))
        self.dtype = conv.spec.dtype
        self._fused = self._post_ops()
        self._plans: dict[tuple[str, bool], _Plan] = {}

    # -- what oneDNN may fuse --------------------------------------------------------------------------
    def _post_ops(self) -> dict[str, tuple[int, int | None, str | None]]:
        """``post_op -> (result node, residual argument, unary)`` for the fusions the epilogue allows: each op of the
        chain is the only reader of the one before (the rest of the epilogue never reads a value inside it)."""
        g, p = self.graph, self.problem
        users = g.users()
        found: dict[str, tuple[int, int | None, str | None]] = {"none": (p.conv, None, None)}

        def only_user(i: int) -> Any:
            return users[i][0] if len(users[i]) == 1 and i not in g.outputs else None

        def relu_after(i: int) -> int | None:
            u = only_user(i)
            return u if u is not None and g.nodes[u].op == "relu" else None

        relu = relu_after(p.conv)
        if relu is not None:
            found["relu"] = (relu, None, "relu")
        add = only_user(p.conv)
        spec = g.nodes[p.conv].spec
        if add is not None and g.nodes[add].op == "add" and p.spatial in (2, 3) and g.nodes[add].spec == spec:
            others = [j for j in g.nodes[add].inputs if j != p.conv]
            other = g.nodes[others[0]] if len(others) == 1 else None
            if other is not None and other.op == "input" and other.spec == spec:  # same shape, dtype, contiguous
                found["add"] = (add, other.attr("index"), None)
                relu = relu_after(add)
                if relu is not None:
                    found["add_relu"] = (relu, other.attr("index"), "relu")
        return found

    def _onednn(self, target: Target) -> bool:
        """Whether oneDNN's convolution is a choice here: a CPU backend, oneDNN built in, a dtype it computes."""
        if self.backend != "cpp" or target.tensor_device != "cpu":
            return False
        import torch  # deferred: the space of a graph is asked for before anything runs

        if not torch.backends.mkldnn.is_available():
            return False
        return self.dtype == "float32" or (self.dtype == "bfloat16" and torch.ops.mkldnn._is_mkldnn_bf16_supported())

    def _packable(self, target: Target) -> bool:
        """A packed weight is offered only for a weight the front end marked constant (never a training graph's),
        of a 2-d or 3-d convolution (oneDNN reorders no 1-d weight), unless ``KERNELGEN_PACK_WEIGHTS`` is off."""
        weight = self.graph.nodes[self.graph.nodes[self.problem.conv].inputs[1]]
        return bool(weight.attr("constant")) and self.problem.spatial in (2, 3) and self._onednn(target) \
            and env_flag(PACK_ENV, True)

    def _plan(self, post: str, packed: bool) -> _Plan:
        key = (post, packed)
        if key not in self._plans:
            result, other, unary = self._fused[post]
            strides = channels_last(self.graph.nodes[result].spec.shape) if packed else None
            epilogue, args = pointwise_epilogue(epilogue_graph(self.graph, result, strides), self.backend,
                                                f"convolution workload {self.graph.workload_key[:12]}")
            self._plans[key] = _Plan(result, other, unary, strides, epilogue, args)
        return self._plans[key]

    # -- the Implementation contract ------------------------------------------------------------------
    def source_hash(self) -> str:
        """The derived hash of this module's closure (the pointwise renderer included), the backend's recipe and
        the torch version whose convolutions it calls."""
        return vendor_source_hash(__name__, self.backend)

    def space(self, target: Target) -> SearchSpace:
        """The epilogue's pointwise parameters (prefixed ``epilogue_``) and, where oneDNN is a choice, the call, the
        post-op and the packed weight. Configs that differ only in an epilogue that does not run, or in oneDNN's
        options while ATen runs, are rejected, so the tuner does not measure one thing twice."""
        full = self._plan("none", False).epilogue
        params, constraints, default = epilogue_space(full, target)
        if self._onednn(target):
            params.append(Param(CALL, ("aten", "onednn")))
            default[CALL] = "aten"  # eager's own call: oneDNN's runs only once measured faster
            posts = tuple(p for p in POST_OPS if p in self._fused)
            if len(posts) > 1:
                params.append(Param(POST, posts))
                default[POST] = "none"
                constraints.append(Constraint("a fused post-op needs oneDNN's call",
                                              lambda cfg: cfg[POST] == "none" or cfg[CALL] == "onednn"))
            if self._packable(target):
                params.append(Param(PACK, (False, True)))
                default[PACK] = False
                constraints.append(Constraint("a packed weight needs oneDNN's call",
                                              lambda cfg: not cfg[PACK] or cfg[CALL] == "onednn"))
        if full is not None:
            fixed = {k: v for k, v in default.items() if k.startswith(EPILOGUE)}

            def epilogue_fits(cfg: Config) -> bool:
                plan = self._plan(cfg.get(POST, "none"), bool(cfg.get(PACK, False)))
                if plan.epilogue is None:  # nothing to configure: the default only
                    return all(cfg[k] == v for k, v in fixed.items())
                return plan.epilogue is full or not plan.epilogue.space(target).violations(epilogue_config(cfg))

            constraints.append(Constraint("the epilogue that runs takes this config (none runs: the default)",
                                          epilogue_fits))
        return SearchSpace(params, constraints, default)

    def build(self, config: Config, target: Target) -> Launcher:
        problems = self.space(target).violations(config)
        if problems:
            raise ValueError(f"{NAME} config {dict(config)} is invalid: {'; '.join(problems)}")
        packed = bool(config.get(PACK, False))
        plan = self._plan(config.get(POST, "none"), packed)
        epilogue = None if plan.epilogue is None else plan.epilogue.build(epilogue_config(config), target)
        return ConvLauncher(self, plan, epilogue, config.get(CALL, "aten") == "onednn", packed, target)

    def shape_generic(self, target: Target) -> bool:
        return False  # the convolution's sizes are the graph's: a shape family compiles one per size

    def __repr__(self) -> str:
        return f"VendorConvImplementation(backend={self.backend!r})"


class ConvLauncher:
    """Runs one config: the convolution call, then the compiled epilogue kernel (or a copy into the output)."""

    def __init__(self, impl: VendorConvImplementation, plan: _Plan, epilogue: Any, onednn: bool, packed: bool,
                 target: Target) -> None:
        import torch

        self._torch = torch
        p = impl.problem
        self._x, self._w, self._b = p.x, p.weight, p.bias
        self._stride, self._padding, self._dilation, self._groups = impl.attrs
        self._zeros = [0] * len(self._stride)
        self._plan = plan
        self._epilogue = epilogue
        self._onednn = onednn
        self._packed = PackedWeight(self._reorder) if packed else None
        self._strides = plan.strides
        self.source_file = getattr(epilogue, "source_file", None)
        self.device = getattr(epilogue, "device", None) or target.tensor_device

    def _reorder(self, weight: Any, x: Any) -> Any:
        return self._torch.ops.mkldnn._reorder_convolution_weight(weight, self._padding, self._stride, self._dilation,
                                                                  self._groups, list(x.shape))

    def _call(self, tensors: tuple) -> Any:
        torch = self._torch
        x, w = tensors[self._x], tensors[self._w]
        b = None if self._b is None else tensors[self._b]
        if not self._onednn:
            return torch.convolution(x, w, b, self._stride, self._padding, self._dilation, False, self._zeros,
                                     self._groups)
        if self._packed is not None:
            w = self._packed(w, x)
        plan = self._plan
        if plan.other is not None:
            return torch.ops.mkldnn._convolution_pointwise.binary(
                x, tensors[plan.other], w, b, self._padding, self._stride, self._dilation, self._groups, "add", None,
                plan.unary, [], "")
        return torch.ops.mkldnn._convolution_pointwise(x, w, b, self._padding, self._stride, self._dilation,
                                                       self._groups, plan.unary or "none", [], "")

    def __call__(self, *tensors: Any) -> None:
        out = tensors[-1]
        y = self._call(tensors)
        if self._epilogue is None:
            out.copy_(y)
            return
        # the epilogue reads the layout it was compiled for, whatever the call wrote
        if self._strides is None:
            y = y.contiguous()
        elif y.stride() != self._strides:
            y = self._torch.empty_strided(y.shape, self._strides, dtype=y.dtype, device=y.device).copy_(y)
        self._epilogue(*[tensors[i] for i in self._plan.args], y, out)

    launch = __call__


__all__ = ["CALL", "ConvLauncher", "NAME", "PACK", "PACK_ENV", "POST", "POST_OPS",
           "VendorConvImplementation", "channels_last"]
