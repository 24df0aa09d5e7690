"""Cache keys of compiled calls: what a kernel is specialised on, computed in a few hundred nanoseconds.

A key holds, per tensor, its dtype, shape, strides, device and requires_grad, and per Python constant
its type and value (a trace bakes constants in). Calls of one to four tensors use unrolled key functions.
"""

from __future__ import annotations

from typing import Any


def signature_key(args: tuple) -> tuple:
    """Everything a kernel is specialised on, cheaply: dtype, shape, strides, device and requires_grad per
    tensor, in one flat tuple. Calls with one to four tensors use the unrolled twins below, which skip the
    loop and the per-tensor tuples (about 1 µs of a 5 µs dispatch budget with three tensors)."""
    return tuple([v for a in args for v in (a.dtype, a.shape, a.stride(), a.device, a.requires_grad)])


def _key1(args: tuple) -> tuple:
    (a,) = args
    return (a.dtype, a.shape, a.stride(), a.device, a.requires_grad)


def _key2(args: tuple) -> tuple:
    a, b = args
    return (a.dtype, a.shape, a.stride(), a.device, a.requires_grad,
            b.dtype, b.shape, b.stride(), b.device, b.requires_grad)


def _key3(args: tuple) -> tuple:
    a, b, c = args
    return (a.dtype, a.shape, a.stride(), a.device, a.requires_grad,
            b.dtype, b.shape, b.stride(), b.device, b.requires_grad,
            c.dtype, c.shape, c.stride(), c.device, c.requires_grad)


def _key4(args: tuple) -> tuple:
    a, b, c, d = args
    return (a.dtype, a.shape, a.stride(), a.device, a.requires_grad,
            b.dtype, b.shape, b.stride(), b.device, b.requires_grad,
            c.dtype, c.shape, c.stride(), c.device, c.requires_grad,
            d.dtype, d.shape, d.stride(), d.device, d.requires_grad)


KEYS = (signature_key, _key1, _key2, _key3, _key4)


class NotAConstant(Exception):
    """An argument that is neither a tensor nor an immutable constant (it cannot be part of a cache key)."""


def is_constant(value: Any) -> bool:
    import torch

    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str, bytes, torch.dtype,
                                                                torch.device, torch.memory_format, torch.layout)):
        return True
    return isinstance(value, tuple) and all(is_constant(v) for v in value)  # torch.Size, namedtuples too


def value_key(i: int, value: Any) -> tuple:
    """Cache-key part of one call value: a tensor's layout, or a constant's type and value (a trace bakes
    constants in, so a new value is a new signature)."""
    import torch

    if isinstance(value, torch.Tensor):
        return (value.dtype, value.shape, value.stride(), value.device, value.requires_grad)
    if not is_constant(value):
        raise NotAConstant(f"argument {i} is a {type(value).__name__}, neither a tensor nor an immutable constant")
    # repr tells -0.0 from 0.0 (equal, but x * -0.0 and x * 0.0 differ) and makes NaN equal to itself.
    return (type(value), repr(value) if isinstance(value, (float, complex, tuple)) else value)


def describe_values(values: tuple) -> str:
    """``float32[4, 8], 2.0``: the call's values, for error messages."""
    return ", ".join(str(v.dtype).removeprefix("torch.") + str(list(v.shape)) if hasattr(v, "dtype") and
                     hasattr(v, "shape") else repr(v)[:40] for v in values)


__all__ = ["KEYS", "NotAConstant", "describe_values", "is_constant", "signature_key", "value_key"]
