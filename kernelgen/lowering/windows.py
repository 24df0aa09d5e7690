"""Lowering of pooling to the IR's window ops (``kernelgen.ir.graph.WINDOW_OPS``): max, average and adaptive
pools over 1 to 3 trailing dims, as the torch functions (``F.max_pool2d``, ``F.avg_pool3d``,
``F.adaptive_avg_pool2d``...) and as the ATen ops a ``torch.compile`` graph holds (``max_pool2d_with_indices``,
``avg_pool2d``, ``_adaptive_avg_pool2d``, ``adaptive_max_pool2d``), and their backwards
(``max_pool2d_with_indices_backward``, ``avg_pool3d_backward``...), which the window template renders.

Registered in the table of ``kernelgen.lowering.rules``. Sizes follow eager's rules (ATen's
``pooling_output_shape``); what eager computes specially (integer averages, empty inputs) is left to eager.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.rules import arg, handles, is_float_dtype, is_node, ref


def _sizes(value: Any, k: int, name: str, where: str, default: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """A pooling size argument as one int per window dim (an int or a 1-list repeats; None or [] is ``default``)."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        if default is None:
            raise UnsupportedOpError(f"pooling without a {name} at `{where}`")
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * k
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if len(value) == 1:
            return (int(value[0]),) * k
        if len(value) == k:
            return tuple(int(v) for v in value)
    raise UnsupportedOpError(f"pooling {name}={value!r} at `{where}` is not {k} sizes")


def _output_size(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool) -> int:
    """ATen's ``pooling_output_shape``: windows that start inside the (left-padded) input."""
    out = (size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _source(b: Any, x: Any, k: int, where: str) -> int:
    if not is_node(x):
        raise UnsupportedOpError(f"pooling of {x!r} at `{where}`")
    x = int(x)
    spec = b.spec(x)
    if spec.rank < k + 1 or 0 in spec.shape[-k:] or spec.dtype == "bool":  # (an empty batch: an empty result)
        raise UnsupportedOpError(f"pooling of a {spec.dtype}{list(spec.shape)} tensor over {k} dims at `{where}`; "
                                 "eager PyTorch runs it")
    return x


def _fixed(b: Any, x: int, k: int, args: tuple, kwargs: dict, where: str, dilated: bool) -> dict[str, Any]:
    """The attributes of a fixed window from (kernel_size, stride, padding[, dilation], ceil_mode) arguments."""
    kernel = _sizes(arg(args, kwargs, 1, "kernel_size"), k, "kernel_size", where)
    stride = _sizes(arg(args, kwargs, 2, "stride"), k, "stride", where, default=kernel)
    padding = _sizes(arg(args, kwargs, 3, "padding", 0), k, "padding", where)
    dilation = _sizes(arg(args, kwargs, 4, "dilation", 1), k, "dilation", where) if dilated else (1,) * k
    ceil = arg(args, kwargs, 5 if dilated else 4, "ceil_mode", False)
    if not isinstance(ceil, bool) or min(kernel + stride + dilation) < 1 or min(padding) < 0 \
            or any(2 * p > d * (s - 1) + 1 for p, s, d in zip(padding, kernel, dilation)):
        raise UnsupportedOpError(f"pooling window {kernel}/{stride}/{padding}/{dilation} at `{where}`; eager decides")
    shape = b.spec(x).shape
    out = tuple(_output_size(size, *w, ceil) for size, *w in zip(shape[-k:], kernel, stride, padding, dilation))
    if min(out) < 1:
        raise UnsupportedOpError(f"pooling to an empty output {list(out)} at `{where}`; eager PyTorch decides")
    return {"spatial": k, "kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation,
            "ceil_mode": ceil, "out": out}


def _adaptive(b: Any, x: int, k: int, size: Any, where: str) -> dict[str, Any]:
    shape = b.spec(x).shape
    sizes = size if isinstance(size, (list, tuple)) else (size,) * k
    if len(sizes) == 1 and k > 1:
        sizes = tuple(sizes) * k
    if len(sizes) != k:
        raise UnsupportedOpError(f"adaptive pooling to {size!r} at `{where}` is not {k} sizes")
    out = tuple(shape[-k + d] if s is None else s for d, s in enumerate(sizes))
    if any(not isinstance(s, int) or s < 1 for s in out):
        raise UnsupportedOpError(f"adaptive pooling to {size!r} at `{where}`; eager PyTorch decides")
    return {"spatial": k, "adaptive": True, "out": out}


def _window(b: Any, x: int, reduce: str, attrs: dict[str, Any], dtype: str | None = None) -> int:
    attrs = dict(attrs)
    out = attrs.pop("out")
    spec = b.spec(x)
    dtype = "int64" if reduce == "argmax" else dtype or spec.dtype
    return b.add("window", (x,), TensorSpec(spec.shape[:-len(out)] + out, dtype), reduce=reduce, **attrs)


def _max_pool(k: int, tuple_result: bool | None) -> Any:
    """max_pool{k}d[_with_indices](x, kernel_size, stride, padding, dilation, ceil_mode[, return_indices]):
    ``tuple_result`` True always returns (values, indices) (the ``_with_indices`` ops), None as
    ``return_indices`` says."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
        x = _source(b, arg(args, kwargs, 0, "input", kwargs.get("self")), k, where)
        attrs = _fixed(b, x, k, args, kwargs, where, dilated=True)
        values = _window(b, x, "max", attrs)
        if tuple_result or (tuple_result is None and arg(args, kwargs, 6, "return_indices", False)):
            return ref(values), ref(_window(b, x, "argmax", attrs))
        return values

    return handler


def _avg_pool(k: int) -> Any:
    """avg_pool{k}d(x, kernel_size, stride, padding, ceil_mode, count_include_pad[, divisor_override])."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _source(b, arg(args, kwargs, 0, "input", kwargs.get("self")), k, where)
        if not is_float_dtype(b.spec(x).dtype):
            raise UnsupportedOpError(f"integer average pooling at `{where}` (eager divides in integers); eager runs it")
        attrs = _fixed(b, x, k, args, kwargs, where, dilated=False)
        include = arg(args, kwargs, 5, "count_include_pad", True)
        divisor = arg(args, kwargs, 6, "divisor_override")
        if not isinstance(include, bool) or (divisor is not None and (not isinstance(divisor, int) or divisor < 1)):
            raise UnsupportedOpError(f"average pooling count_include_pad={include!r}, divisor_override={divisor!r} "
                                     f"at `{where}`; eager decides")
        return _window(b, x, "avg", {**attrs, "count_include_pad": include, "divisor": divisor or 0})

    return handler


def _adaptive_pool(k: int, reduce: str, tuple_result: bool | None) -> Any:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
        x = _source(b, arg(args, kwargs, 0, "input", kwargs.get("self")), k, where)
        if reduce == "avg" and not is_float_dtype(b.spec(x).dtype):
            raise UnsupportedOpError(f"integer adaptive average pooling at `{where}`; eager runs it")
        attrs = _adaptive(b, x, k, arg(args, kwargs, 1, "output_size"), where)
        values = _window(b, x, reduce, attrs)
        if reduce == "max" and (tuple_result or (tuple_result is None and arg(args, kwargs, 2, "return_indices", False))):
            return ref(values), ref(_window(b, x, "argmax", attrs))
        return values

    return handler


def _grad(b: Any, grad: Any, x: Any, index: Any, reduce: str, attrs: dict[str, Any], where: str) -> int:
    """``window_grad``: the gradient, of ``x``'s shape, of a window whose output gradient is ``grad``."""
    if not is_node(grad) or (index is not None and not is_node(index)):
        raise UnsupportedOpError(f"pooling backward of {grad!r} at `{where}`")
    grad, x = int(grad), int(x)  # (x: the forward's input, a node id, read for its shape only)
    attrs = dict(attrs)
    out = attrs.pop("out")
    gspec = b.spec(grad)
    if gspec.shape[-len(out):] != out or not is_float_dtype(gspec.dtype) or 0 in gspec.shape:
        raise UnsupportedOpError(f"pooling backward of a {gspec.dtype}{list(gspec.shape)} gradient at `{where}`")
    inputs = (grad,) if index is None else (grad, int(index))
    return b.add("window_grad", inputs, TensorSpec(b.spec(x).shape, gspec.dtype), reduce=reduce, **attrs)


def _max_pool_backward(k: int) -> Any:
    """max_pool{k}d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, indices)."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _source(b, args[1], k, where)
        attrs = _fixed(b, x, k, args[1:], {}, where, dilated=True)
        return _grad(b, args[0], x, arg(args, kwargs, 7, "indices"), "max", attrs, where)

    return handler


def _avg_pool_backward(k: int) -> Any:
    """avg_pool{k}d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _source(b, args[1], k, where)
        attrs = _fixed(b, x, k, args[1:], {}, where, dilated=False)
        include, divisor = args[6], args[7] if len(args) > 7 else None
        return _grad(b, args[0], x, None, "avg", {**attrs, "count_include_pad": bool(include),
                                                   "divisor": divisor or 0}, where)

    return handler


def _adaptive_backward(k: int, reduce: str) -> Any:
    """_adaptive_avg_pool{k}d_backward(grad, self) / adaptive_max_pool{k}d_backward(grad, self, indices)."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _source(b, args[1], k, where)
        if not is_node(args[0]):
            raise UnsupportedOpError(f"pooling backward of {args[0]!r} at `{where}`")
        attrs = _adaptive(b, x, k, list(b.spec(int(args[0])).shape[-k:]), where)
        return _grad(b, args[0], x, args[2] if reduce == "max" else None, reduce, attrs, where)

    return handler


for _k in (1, 2, 3):
    handles(f"max_pool{_k}d")(_max_pool(_k, None))
    handles(f"max_pool{_k}d_with_indices")(_max_pool(_k, True))
    handles(f"avg_pool{_k}d")(_avg_pool(_k))
    handles(f"adaptive_avg_pool{_k}d", f"_adaptive_avg_pool{_k}d")(_adaptive_pool(_k, "avg", None))
    handles(f"adaptive_max_pool{_k}d")(_adaptive_pool(_k, "max", None))
    handles(f"adaptive_max_pool{_k}d_with_indices")(_adaptive_pool(_k, "max", True))
for _k in (2, 3):
    handles(f"aten.adaptive_max_pool{_k}d")(_adaptive_pool(_k, "max", True))
    handles(f"max_pool{_k}d_with_indices_backward")(_max_pool_backward(_k))
    handles(f"avg_pool{_k}d_backward")(_avg_pool_backward(_k))
    handles(f"_adaptive_avg_pool{_k}d_backward")(_adaptive_backward(_k, "avg"))
    handles(f"adaptive_max_pool{_k}d_backward")(_adaptive_backward(_k, "max"))


__all__: list[str] = []
