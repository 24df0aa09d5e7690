"""A region's own ATen ops as data: what the ``aten`` candidate runs when it is measured in a worker.

The measured ATen candidate used to evaluate the region's kernelgen graph primitive by primitive
(``kernelgen.ir.reference.evaluate``): a GELU is one ATen op but a dozen IR nodes, a layer norm five ATen ops but
more IR nodes, each a Python call and a pass over memory. Measured against the region's ATen replay (what dispatch
runs when ATen wins) on GPT-2's regions (bench size, one thread, 2-core AMD EPYC): pointwise and reduction regions
took 3.0-7.5x the replay's time as the candidate (a [4, 128, 256] layer norm 434 vs 106 us), GEMM and attention
regions 1.1-1.2x. So every kernel was compared with an ATen three to seven times slower than the one it replaces,
and kernels that lose inside the model were declared winners.

A program is JSON (it travels to the measurement worker in ``worker_args``): ``{"inputs": n, "nodes": [{"op":
"aten.add.Tensor", "args": [...], "kwargs": {...}}, ...], "outputs": [ref, ...]}``; a ref is ``{"in": k}`` (the
k-th input) or ``{"v": j}`` (node j's value); dtypes, devices, layouts and memory formats are ``{"dtype":
"float32"}`` and so on; ``{"op": "getitem"}`` takes an element of a node's tuple. Only ``aten`` and ``prims``
overloads are resolved, by attribute lookup: a program is never evaluated as code. A graph with anything else
(a tensor constant, a symbolic size, another namespace) has no program, and the candidate evaluates the IR.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

NAMESPACES = ("aten", "prims")  # the ops a program may call
_TAGS = ("dtype", "device", "layout", "memory_format")


class Unencodable(Exception):
    """An fx graph that a program cannot express (its ATen ops are then evaluated from the IR instead)."""


def encode(gm: Any) -> dict[str, Any] | None:
    """The program of fx GraphModule ``gm`` (placeholders, ATen calls, ``getitem``s, one output), or None."""
    try:
        return _encode(gm)
    except Unencodable:
        return None


def _encode(gm: Any) -> dict[str, Any]:
    refs: dict[Any, dict[str, int]] = {}
    nodes: list[dict[str, Any]] = []
    outputs: list[Any] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            refs[node] = {"in": len([r for r in refs.values() if "in" in r])}
        elif node.op == "call_function":
            op = "getitem" if node.target is operator.getitem else _op_name(node.target)
            nodes.append({"op": op, "args": _arg(node.args, refs), "kwargs": _arg(dict(node.kwargs), refs)})
            refs[node] = {"v": len(nodes) - 1}
        elif node.op == "output":
            result = node.args[0]
            outputs = _arg(list(result) if isinstance(result, (tuple, list)) else [result], refs)
        else:
            raise Unencodable(f"a {node.op} node")
    return {"inputs": sum("in" in r for r in refs.values()), "nodes": nodes, "outputs": outputs}


def _op_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    namespace = getattr(target, "namespace", None)
    if schema is None or namespace not in NAMESPACES:
        raise Unencodable(f"op {target}")
    return f"{namespace}.{target._opname}.{target._overloadname}"


def _arg(value: Any, refs: dict[Any, dict[str, int]]) -> Any:
    import torch

    if isinstance(value, torch.fx.Node):
        if value not in refs:
            raise Unencodable(f"node {value}")
        return dict(refs[value])
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_arg(v, refs) for v in value]
    if isinstance(value, dict):
        return {"kwargs": {str(k): _arg(v, refs) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise Unencodable(f"argument {type(value).__name__}")


def compile_program(program: dict[str, Any]) -> Callable[[tuple], list]:
    """``run(inputs) -> outputs`` for ``program`` (validated here: a malformed program raises ValueError)."""
    import torch

    steps = []
    for node in _field(program, "nodes", list):
        if not isinstance(node, dict):
            raise ValueError("a program node must be an object")
        op = _field(node, "op", str)
        fn = operator.getitem if op == "getitem" else _resolve(torch, op)
        args = _decode(torch, _field(node, "args", list))
        kwargs = _decode(torch, _field(node, "kwargs", dict))
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        steps.append((fn, args, kwargs))
    outputs = _decode(torch, _field(program, "outputs", list))

    def run(inputs: tuple) -> list:
        values: list[Any] = []
        for fn, args, kwargs in steps:
            values.append(fn(*_bind(args, inputs, values), **_bind(kwargs, inputs, values)))
        return _bind(outputs, inputs, values)
    return run


def _field(data: dict, key: str, kind: type) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise ValueError(f"a program's {key!r} must be a {kind.__name__}")
    return value


def _resolve(torch: Any, op: str) -> Any:
    parts = op.split(".")
    if len(parts) != 3 or parts[0] not in NAMESPACES:
        raise ValueError(f"program op {op!r} is not an aten or prims overload")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except AttributeError:
        raise ValueError(f"program op {op!r} does not exist in this torch") from None


class _Ref:
    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int) -> None:
        self.kind, self.index = kind, index


def _decode(torch: Any, value: Any) -> Any:
    """Tags and refs decoded once (refs become ``_Ref``s that ``_bind`` replaces at each run)."""
    if isinstance(value, list):
        return [_decode(torch, v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key in ("in", "v") and isinstance(inner, int) and not isinstance(inner, bool):
            return _Ref(key, inner)
        if key == "kwargs" and isinstance(inner, dict):
            return {k: _decode(torch, v) for k, v in inner.items()}
        if key == "device" and isinstance(inner, str):
            return torch.device(inner)
        if key in _TAGS and isinstance(inner, str):
            found = getattr(torch, inner, None)
            kinds = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}
            if isinstance(found, kinds[key]):
                return found
    if not value:  # an empty kwargs object
        return {}
    raise ValueError(f"a program argument {value!r} is not understood")


def _bind(value: Any, inputs: tuple, values: list) -> Any:
    if isinstance(value, _Ref):
        return inputs[value.index] if value.kind == "in" else values[value.index]
    if isinstance(value, list):
        return [_bind(v, inputs, values) for v in value]
    if isinstance(value, dict):
        return {k: _bind(v, inputs, values) for k, v in value.items()}
    return value


__all__ = ["NAMESPACES", "compile_program", "encode"]
