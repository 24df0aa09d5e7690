"""What the front end asks of an ATen fx node: its kernelgen ``TensorSpec``, whether its sizes are symbolic,
its op packet, and whether it only reinterprets memory (a view, which stays ATen)."""

from __future__ import annotations

from typing import Any

from kernelgen.ir.values import SUPPORTED_DTYPES, TensorSpec

# ATen ops that only reinterpret their input's memory: free in ATen, read by a region through strides.
VIEW_OPS = frozenset({"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "unsqueeze",
                      "squeeze", "alias", "slice", "select", "as_strided", "diagonal", "unfold", "split",
                      "split_with_sizes", "unbind", "narrow", "detach"})


def spec_of(value: Any) -> TensorSpec | None:
    """The ``TensorSpec`` of a fake tensor from ``node.meta['val']``, or None when it is not a plain tensor of a
    supported dtype. A symbolic size or stride (Dynamo's dynamic shapes) is taken at its hint, the size of
    the example the graph was traced with: regions are chosen on it, and each region's kernel is then built
    for the sizes its calls bring (``kernelgen.frontend.region_op``: one generic kernel per shape family)."""
    import torch

    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype not in SUPPORTED_DTYPES:
        return None
    try:
        shape, strides = (tuple(_hint(s) for s in dims) for dims in (value.shape, value.stride()))
    except (TypeError, ValueError, RuntimeError):  # an unbacked size (data-dependent): no hint to plan with
        return None
    return TensorSpec(shape, dtype, strides)


def is_symbolic(value: Any) -> bool:
    """Whether fake tensor ``value`` has a symbolic (dynamic) size or stride."""
    import torch

    return isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in (*value.shape, *value.stride()))


def _hint(size: Any) -> int:
    if isinstance(size, int):
        return size
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return int(optimization_hint(size))


def op_packet(node: Any) -> str:
    """The ATen overload packet's name of a call node (``add`` for ``aten.add.Tensor``), else its target's name."""
    target = node.target
    return getattr(getattr(target, "overloadpacket", None), "__name__", getattr(target, "__name__", str(target)))


def op_name(target: Any) -> str:
    """An ATen overload's schema name without the overload (``aten::add`` for ``aten.add.Tensor``; the table keys
    of ``kernelgen.runtime.aten.EAGER_FIRST`` and ``kernelgen.frontend.decompositions``), else ``""``."""
    return getattr(getattr(target, "_schema", None), "name", "")


# ATen ops that make a tensor of one repeated value from Python numbers alone (no tensor input): what a region
# reading them folds in as a literal (``kernelgen.frontend.partition``).
CONSTANT_OPS = frozenset({"full", "scalar_tensor", "zeros", "ones"})


def is_constant(node: Any) -> bool:
    """Whether ``node`` makes a constant-filled tensor from Python numbers only (``scalar_tensor``, ``full``)."""
    import torch

    return (node.op == "call_function" and not node.all_input_nodes and op_packet(node) in CONSTANT_OPS
            and isinstance(node.meta.get("val"), torch.Tensor))


def constant_value(node: Any) -> Any:
    """The Python number constant ``node`` (``is_constant``) is filled with."""
    packet = op_packet(node)
    if packet in ("zeros", "ones"):
        return int(packet == "ones")
    return node.args[0] if packet == "scalar_tensor" else node.args[1]


def is_view(node: Any) -> bool:
    """Whether call node ``node`` only reinterprets its input's memory (``VIEW_OPS``)."""
    return node.op == "call_function" and op_packet(node) in VIEW_OPS


# A placeholder the backend found to be a parameter or buffer of an inference graph (``dynamo_backend``): its values
# are the same call after call unless the tensor is updated in place, so a kernel may prepare it once (a packed
# weight). A region's sub-graph module lists the positions of such inputs in ``CONSTANT_INPUTS`` for the capture.
CONSTANT_INPUT = "kernelgen_constant_input"
CONSTANT_INPUTS = "kernelgen_constant_inputs"


def is_constant_input(node: Any) -> bool:
    """Whether fx node ``node`` is a ``CONSTANT_INPUT`` placeholder or a view of one (a Linear's weight reaches its
    matmul region as ``t(weight)``, a view ATen makes outside the region each call; a view shares its base's
    memory and version counter, so it is as constant as the base)."""
    while is_view(node) and node.args and hasattr(node.args[0], "meta"):
        node = node.args[0]
    return bool(node.meta.get(CONSTANT_INPUT))


__all__ = ["CONSTANT_INPUT", "CONSTANT_INPUTS", "CONSTANT_OPS", "VIEW_OPS", "constant_value", "is_constant", "is_constant_input", "is_symbolic", "is_view", "op_name", "op_packet", "spec_of"]
