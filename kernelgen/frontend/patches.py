"""Patch embeddings: a convolution whose stride equals its kernel (non-overlapping patches, no padding, dilation or
groups; a vision transformer's ``Conv2d(3, hidden, kernel_size=p, stride=p)``) written as what it is, a matrix
product over patches, so that kernelgen's regions run it: a copy that gathers each patch's pixels into a column
(a pointwise region) and a batched GEMM with the bias as its epilogue (a GEMM region). Its backward likewise:
the weight's gradient one GEMM over every patch of the batch, the input's a batched GEMM and a copy back, the
bias's a sum.

Decompositions for the backend's table (``kernelgen.frontend.decompositions``); each returns ``NotImplemented``
(make_fx's "keep the op") for any other convolution, which stays ATen's. Eager's strides are kept: the forward's
result is contiguous [B, O, *L] as eager's convolution of a contiguous input is, and only a contiguous input and
weight are rewritten (a channels-last convolution returns channels-last, which this product does not). Shapes
must be static: a symbolic size would have to be guarded on to tell whether the patches tile the input.

Values: the same sums of products, in another order (within the float tolerance of the GEMM; the weight's gradient
sums B·L products per element in one GEMM, as eager's does, not B partial sums).
"""

from __future__ import annotations

import math
from typing import Any


def _patch_sizes(x: Any, weight: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                 output_padding: Any, groups: int) -> tuple[int, ...] | None:
    """The patch (kernel) sizes when this convolution cuts its input into non-overlapping patches, else None."""
    import torch

    spatial = x.dim() - 2
    if transposed or groups != 1 or spatial < 1 or weight.dim() != x.dim():
        return None
    if any(isinstance(s, torch.SymInt) for s in (*x.shape, *weight.shape, *x.stride(), *weight.stride())):
        return None
    sizes = tuple(int(s) for s in weight.shape[2:])
    if list(stride) != list(sizes) or any(p != 0 for p in padding) or any(d != 1 for d in dilation) \
            or any(p != 0 for p in output_padding) or math.prod(sizes) == 1:
        return None  # overlapping windows, padding, or a 1x1 convolution (a plain matrix product already)
    if not (x.is_floating_point() and x.dtype == weight.dtype and x.is_contiguous() and weight.is_contiguous()):
        return None
    if any(s < p for s, p in zip(x.shape[2:], sizes)) or 0 in x.shape or 0 in weight.shape:
        return None  # no patch fits, or nothing to compute: eager's own result (or error)
    return sizes


def _tiles(x: Any, sizes: tuple[int, ...]) -> Any:
    """``x`` [B, C, *S] cropped to whole patches and viewed as [B, C, L1, P1, L2, P2, ...] (splitting a dim is a
    view of any strides)."""
    for d, p in enumerate(sizes):
        whole = x.shape[2 + d] // p * p
        if whole != x.shape[2 + d]:
            x = x.narrow(2 + d, 0, whole)  # stride = kernel: the rows past the last whole patch are never read
    counts = [x.shape[2 + d] // p for d, p in enumerate(sizes)]
    return x.reshape(*x.shape[:2], *(v for n, p in zip(counts, sizes) for v in (n, p))), counts


def convolution(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, transposed: bool,
                output_padding: Any, groups: int) -> Any:
    """``aten.convolution`` of non-overlapping patches: out[b, o, l] = W[o, :] · patch[b, :, l] (+ bias[o])."""
    import torch

    sizes = _patch_sizes(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if sizes is None:
        return NotImplemented
    n = len(sizes)
    tiles, counts = _tiles(x, sizes)
    b, c, o = x.shape[0], x.shape[1], weight.shape[0]
    k, length = c * math.prod(sizes), math.prod(counts)
    # [B, C, P1, P2, ..., L1, L2, ...]: each patch's pixels a column, in the weight's (C, P1, P2, ...) order
    patches = tiles.permute(0, 1, *(3 + 2 * i for i in range(n)), *(2 + 2 * i for i in range(n))).reshape(b, k, length)
    out = torch.bmm(weight.reshape(o, k).expand(b, o, k), patches)
    if bias is not None:
        out = out + bias.reshape(o, 1)
    return out.reshape(b, o, *counts)


def convolution_backward(grad: Any, x: Any, weight: Any, bias_sizes: Any, stride: Any, padding: Any, dilation: Any,
                         transposed: bool, output_padding: Any, groups: int, output_mask: Any) -> Any:
    """``aten.convolution_backward`` of ``convolution``'s patches: (grad_input, grad_weight, grad_bias), None where
    ``output_mask`` does not ask for one."""
    import torch

    sizes = _patch_sizes(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if sizes is None or grad.dim() != x.dim() or any(isinstance(s, torch.SymInt) for s in grad.shape):
        return NotImplemented
    n = len(sizes)
    b, c, o = x.shape[0], x.shape[1], weight.shape[0]
    counts = [int(s) for s in grad.shape[2:]]
    k, length = c * math.prod(sizes), math.prod(counts)
    grad3 = grad.reshape(b, o, length)
    grad_input = grad_weight = grad_bias = None
    if output_mask[2]:
        grad_bias = grad.sum([0, *range(2, 2 + n)])
    if output_mask[1]:
        tiles, _ = _tiles(x, sizes)
        # [B, L1, L2, ..., C, P1, P2, ...] → [B·L, K]: one GEMM sums over every patch of the batch
        rows = tiles.permute(0, *(2 + 2 * i for i in range(n)), 1, *(3 + 2 * i for i in range(n))).reshape(b * length, k)
        grad_weight = torch.mm(grad3.permute(1, 0, 2).reshape(o, b * length), rows).reshape(weight.shape)
    if output_mask[0]:
        cols = torch.bmm(weight.reshape(o, k).t().expand(b, k, o), grad3)  # [B, K, L]: each patch's gradient
        back = cols.reshape(b, c, *sizes, *counts)  # → [B, C, L1, P1, L2, P2, ...] → the covered input
        back = back.permute(0, 1, *(v for i in range(n) for v in (2 + n + i, 2 + i)))
        grad_input = back.reshape(b, c, *(m * p for m, p in zip(counts, sizes)))
        pads = [v for d in reversed(range(n)) for v in (0, x.shape[2 + d] - grad_input.shape[2 + d])]
        if any(pads):  # the rows past the last whole patch get no gradient
            grad_input = torch.nn.functional.pad(grad_input, pads)
    return grad_input, grad_weight, grad_bias


__all__ = ["convolution", "convolution_backward"]
