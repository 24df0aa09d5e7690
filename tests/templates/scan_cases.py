"""Functions with one cumsum/cumprod along some dim (with prologue, epilogue, cat or pad around it) and small
inputs for them: shared by the C++ and Triton scan template tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def plain_cumsum(x):
    return x.cumsum(-1)


def prologue_and_epilogue(x, b):
    return torch.cumsum(x * 2 + b, dim=1).tanh()


def cumprod_3d(x):
    return torch.cumprod(x, -1)


def int32_accumulates_in_int64(x):
    return x.cumsum(-1)  # eager: int64 result


def int64_cumprod_wraps(x):
    return x.cumprod(-1)  # 3**70 wraps around in eager's int64


def half_to_float_dtype(x):
    return torch.cumsum(x, -1, dtype=torch.float32)


def half_cumsum(x):
    return x.cumsum(-1)


def bool_mask_count(x):
    return (x > 0).cumsum(-1)


def scan_of_a_cat_and_two_outputs(a, b):
    c = torch.cat([a, F.pad(b, (1, 0), value=1.0)], dim=-1)
    s = c.cumsum(-1)
    return s, s * c


def scan_with_a_broadcast_operand(x, s):
    return (x * s).cumsum(-1)  # s: [3, 1] broadcast along the scanned dim


def cumsum_along_dim0(x, b):
    return torch.cumsum(x + b, 0) * 2  # strided rows: every column is scanned down


def cumprod_along_a_middle_dim_of_a_transposed_input(x):
    return x.transpose(1, 2).cumprod(1)


def scan_of_gathered_rows(table, index):
    return F.embedding(index, table).cumsum(-1)  # the index is read once per row, not per element


def logcumsumexp_with_infinities(x):
    return torch.logcumsumexp(x * 2, 1)


def cases():
    return [
        (plain_cumsum, (torch.randn(4, 37),)),
        (prologue_and_epilogue, (torch.randn(3, 50), torch.randn(50))),
        (cumprod_3d, (torch.rand(2, 3, 9) + 0.5,)),
        (int32_accumulates_in_int64, (torch.randint(-2**30, 2**30, (3, 20), dtype=torch.int32),)),
        (int64_cumprod_wraps, (torch.full((2, 70), 3, dtype=torch.int64),)),
        (half_to_float_dtype, (torch.randn(5, 8).half(),)),
        (half_cumsum, (torch.randn(5, 300).half(),)),
        (bool_mask_count, (torch.randn(4, 10),)),
        (scan_of_a_cat_and_two_outputs, (torch.randn(2, 3), torch.randn(2, 4))),
        (scan_with_a_broadcast_operand, (torch.randn(2, 3, 6), torch.randn(3, 1))),
        (cumsum_along_dim0, (torch.randn(9, 4), torch.randn(4))),
        (cumprod_along_a_middle_dim_of_a_transposed_input, (torch.rand(2, 5, 7) + 0.5,)),
        (scan_of_gathered_rows, (torch.randn(10, 6), torch.tensor([[4, 2], [7, 0]]))),
        (logcumsumexp_with_infinities, (torch.tensor([[float("-inf"), 1.0, float("inf"), 2.0, float("inf")],
                                                      [0.5, float("nan"), -3.0, float("-inf"), 4.0],
                                                      [float("-inf"), float("-inf"), 30.0, -30.0, 0.0]]),)),
    ]


def ids():
    return [fn.__name__ for fn, _ in cases()]
