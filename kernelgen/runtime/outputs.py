"""Eager's result structure for a compiled call: which kernel output, input or constant sits where.

The traced function's return value is flattened with ``torch.utils._pytree`` (tensors, tuples, lists,
dicts, namedtuples, any nesting). Each leaf is a kernel output, a second distinct tensor equal to one
(two fx values that common-subexpression elimination merged: eager returns two tensors, so we clone), an
input returned as it is (eager returns the very same object), an alias of an input made by calling its method
(``x.detach()``: as aliased as eager's, no kernel), or a Python constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelgen.errors import InputMismatchError

OUT, COPY, ARG, ARG_CALL, CONST = "out", "copy", "arg", "argcall", "const"


@dataclass(frozen=True)
class OutputPlan:
    """``leaves[i]`` is ``(kind, value)``: (OUT, k) kernel output k, (COPY, k) a clone of it, (ARG, i)
    graph input i, (ARG_CALL, (i, method)) ``getattr(input i, method)()`` (``detach``), (CONST, v) a Python value. ``spec`` is the pytree structure to rebuild."""

    spec: Any
    leaves: tuple[tuple[str, Any], ...]

    @property
    def is_single(self) -> bool:
        """The result is exactly kernel output 0, a bare tensor."""
        return self.spec.is_leaf() and self.leaves == ((OUT, 0),)

    @property
    def is_flat_tuple(self) -> bool:
        """The result is a tuple of the kernel outputs 0..n-1, each once: the dispatcher's fast layout."""
        from torch.utils._pytree import tree_structure

        n = len(self.leaves)
        return n > 1 and self.leaves == tuple((OUT, k) for k in range(n)) and \
            self.spec == tree_structure(tuple(range(n)))

    def build(self, outs: tuple, inputs: tuple) -> Any:
        from torch.utils._pytree import tree_unflatten

        values = []
        for kind, value in self.leaves:
            if kind == OUT:
                values.append(outs[value])
            elif kind == COPY:
                values.append(outs[value].clone())
            elif kind == ARG:
                values.append(inputs[value])
            elif kind == ARG_CALL:
                values.append(getattr(inputs[value[0]], value[1])())
            else:
                values.append(value)
        return tree_unflatten(values, self.spec)


def _end(t: Any, start: int) -> int:
    """One past the last byte a tensor's elements occupy."""
    if t.is_contiguous():
        return start + t.numel() * t.element_size()
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    return start + extent * t.element_size()


def refuse_aliasing(outs: Any, inputs: Any, name: str) -> None:
    """Raise ``InputMismatchError`` when an ``out=`` tensor's bytes overlap an input's: a kernel writes its
    outputs while it still reads its inputs (a GEMM's tiles, a reduction's rows), so an output over an input is
    silently wrong. Eager computes such calls, kernelgen refuses them in one line. Cheap on the hot path: two
    pointer comparisons per input unless the ranges meet."""
    for i, o in enumerate(outs):
        lo = o.data_ptr()
        hi = _end(o, lo)
        for j, a in enumerate(inputs):
            start = getattr(a, "data_ptr", None)
            if start is None:
                continue
            a_lo = start()
            if a_lo >= hi or (a_lo + a.nbytes <= lo and a.is_contiguous()):  # apart (the common cases)
                continue
            if lo < _end(a, a_lo) and a.numel():
                raise InputMismatchError(f"out[{i}] shares memory with argument {j} of {name}, which the kernel "
                                         "reads while it writes: pass a separate out= tensor (or use the "
                                         "returned result)")


def plain(value: Any) -> Any:
    """fx's immutable_list / immutable_dict as list / dict, recursively, so the rebuilt result has eager's types."""
    if isinstance(value, tuple):
        items = [plain(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def fill_out(result: Any, out: Any, name: str) -> Any:
    """Copy ``result``'s tensors into ``out`` (a tensor or a sequence, in flattened order) and return
    ``result``'s structure holding ``out``'s tensors: the ``out=`` contract for every result layout."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(result)
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(slots):
        raise InputMismatchError(f"out= has {len(outs)} tensors; {name} returns {len(slots)}")
    for n, (i, o) in enumerate(zip(slots, outs)):
        r = leaves[i]
        if not isinstance(o, torch.Tensor) or o.shape != r.shape or o.dtype != r.dtype or o.device != r.device:
            raise InputMismatchError(f"out[{n}] is {getattr(o, 'dtype', type(o).__name__)}"
                                     f"{list(getattr(o, 'shape', []))}; expected {str(r.dtype).removeprefix('torch.')}"
                                     f"{list(r.shape)} on {r.device}")
        if o is not r:
            o.copy_(r)
        leaves[i] = o
    return tree_unflatten(leaves, spec)


__all__ = ["ARG_CALL", "ARG", "CONST", "COPY", "OUT", "OutputPlan", "fill_out", "plain"]
