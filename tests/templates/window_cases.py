"""Functions with pooling (max, average, adaptive, their gradients) and elementwise work around it, with small
inputs: shared by the C++ and Triton window template tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def max_pool_3x3_s2_p1(x):
    return F.max_pool2d(x, 3, 2, 1)


def max_pool_with_indices(x):
    return F.max_pool2d(x, 2, return_indices=True)


def bn_relu_max_pool(x, scale, shift):
    return F.max_pool2d(torch.relu(x * scale + shift), 3, 2, 1)  # eval-mode batch norm folded


def max_pool_dilated_ceil(x):
    return F.max_pool2d(x, (3, 2), (2, 1), (1, 0), dilation=(2, 1), ceil_mode=True, return_indices=True)


def max_pool_1d(x):
    return F.max_pool1d(x, 4, 3, 2, return_indices=True)


def max_pool_3d(x):
    return F.max_pool3d(x, 2, 2, 1, return_indices=True)


def int_max_pool(x):
    return F.max_pool2d(x, 2)


def avg_pool_include_pad(x):
    return F.avg_pool2d(x, 3, 2, 1)


def avg_pool_exclude_pad_ceil(x):
    return F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)


def avg_pool_divisor_then_epilogue(x, b):
    return F.avg_pool2d(x, 2, divisor_override=3) + b


def avg_pool_3d(x):
    return F.avg_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0))


def adaptive_avg(x):
    return F.adaptive_avg_pool2d(x, (3, 5))


def adaptive_max(x):
    return F.adaptive_max_pool2d(x, (4, 3), return_indices=True)


def half_max_pool(x):
    return F.max_pool2d(x, 2, 1)


def max_pool_backward(g, x, i):
    return aten.max_pool2d_with_indices_backward.default(g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, i)


def max_pool_backward_relu_backward(g, x, i, y):
    return torch.where(y <= 0, 0.0, aten.max_pool2d_with_indices_backward.default(g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, i))


def avg_pool_backward(g, x):
    return aten.avg_pool2d_backward.default(g, x, [3, 3], [2, 2], [1, 1], True, False, None)


def avg_pool3d_backward(g, x):
    return aten.avg_pool3d_backward.default(g, x, [2, 3, 2], [1, 2, 2], [1, 1, 0], False, True, None)


def adaptive_avg_backward(g, x):
    return aten._adaptive_avg_pool2d_backward.default(g, x)


def adaptive_max_backward(g, x, i):
    return aten.adaptive_max_pool2d_backward.default(g, x, i)


def _with_nonfinite(x):
    x = x.clone()
    flat = x.view(-1)
    flat[3::17] = float("nan")
    flat[5::13] = float("-inf")
    flat[7::11] = float("inf")
    return x


def _ties(shape):
    return torch.randint(-2, 3, shape).float()  # many equal values in each window: the first maximum wins


def _pooled(fn, x):
    return fn(x)


def cases():
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    x = randn(2, 3, 9, 11)
    _, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    _, aidx = F.adaptive_max_pool2d(x, (4, 3), return_indices=True)
    x3 = randn(2, 2, 5, 7, 6)
    return [
        (max_pool_3x3_s2_p1, (_with_nonfinite(randn(2, 3, 9, 11)),)),
        (max_pool_with_indices, (_ties((2, 3, 8, 6)),)),
        (bn_relu_max_pool, (randn(2, 4, 10, 10), randn(4, 1, 1), randn(4, 1, 1))),
        (max_pool_dilated_ceil, (_with_nonfinite(randn(1, 2, 11, 7)),)),
        (max_pool_1d, (randn(3, 4, 17),)),
        (max_pool_3d, (_ties((1, 2, 5, 6, 7)),)),
        (int_max_pool, (torch.randint(-100, 100, (2, 3, 6, 8), generator=g, dtype=torch.int32),)),
        (avg_pool_include_pad, (randn(2, 3, 9, 11),)),
        (avg_pool_exclude_pad_ceil, (randn(2, 3, 10, 7),)),
        (avg_pool_divisor_then_epilogue, (randn(2, 3, 8, 8), randn(3, 1, 1))),
        (avg_pool_3d, (x3,)),
        (adaptive_avg, (randn(2, 3, 10, 13),)),
        (adaptive_max, (_with_nonfinite(randn(2, 3, 9, 7)),)),
        (half_max_pool, (randn(2, 3, 7, 9).half(),)),
        (max_pool_backward, (randn(2, 3, 5, 6), x, idx)),
        (max_pool_backward_relu_backward, (randn(2, 3, 5, 6), x, idx, randn(2, 3, 9, 11))),
        (avg_pool_backward, (randn(2, 3, 5, 6), x)),
        (avg_pool3d_backward, (randn(*F.avg_pool3d(x3, (2, 3, 2), (1, 2, 2), (1, 1, 0), count_include_pad=False).shape), x3)),
        (adaptive_avg_backward, (randn(2, 3, 3, 5), randn(2, 3, 10, 13))),
        (adaptive_max_backward, (randn(2, 3, 4, 3), x, aidx)),
    ]


EXACT = {"max_pool_3x3_s2_p1", "max_pool_with_indices", "max_pool_dilated_ceil", "max_pool_1d", "max_pool_3d",
         "int_max_pool", "avg_pool_include_pad", "avg_pool_exclude_pad_ceil", "avg_pool_3d", "adaptive_avg",
         "adaptive_max", "max_pool_backward", "max_pool_backward_relu_backward", "avg_pool_backward",
         "avg_pool3d_backward", "adaptive_avg_backward", "adaptive_max_backward"}
"""Cases whose float32 results are eager's to the bit: no arithmetic but the window's own, in eager's order."""


def ids():
    return [fn.__name__ for fn, _ in cases()]
