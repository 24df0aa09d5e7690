"""Functions with concatenations and constant pads inside one pointwise region, and small inputs for them:
shared by the C++ and Triton template tests (each compares the kernel with eager and the IR reference)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelgen.ir.reference import evaluate

TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3)}  # the IR computes float16 in float32 (see kernelgen.ir.graph)


def assert_matches_eager_and_reference(fn, inputs, graph, outs) -> None:
    """A kernel's outputs ``outs`` of ``graph`` (traced from ``fn``) equal eager's and the IR reference's."""
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), eager):
        tol = TOL.get(want.dtype, dict(rtol=2e-6, atol=2e-6) if want.is_floating_point() else dict(rtol=0, atol=0))
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, ref, **tol)
        torch.testing.assert_close(got, want, **tol)


def cat_input_and_computed(a, b):
    return torch.cat([a, b.sin() * 2], dim=-1) + 1


def cat_three_along_dim0(a, b, c):
    return torch.cat([a.exp(), b, c - 1], dim=0) * 0.5


def cat_broadcast_into_a_larger_shape(a, b, x):
    return torch.cat([a, b], dim=1) * x  # [3, 7] broadcast over x's [4, 3, 7]


def cat_of_a_transposed_operand(a, b):
    return torch.cat([a.t(), b], dim=1).relu()


def rotary(x1, x2, cos, sin):
    """Llama's rotate_half written over the halves: x * cos + cat(-x2, x1) * sin."""
    return torch.cat([x1, x2], dim=-1) * cos + torch.cat([-x2, x1], dim=-1) * sin


def pad_two_dims(x):
    return F.pad(x.exp(), (1, 2, 3, 0), value=-1.5)


def pad_crops_and_pads(x):
    return F.pad(x, (-1, 2, 0, -2)) * 3


def pad_of_a_cat(a, b):
    return F.pad(torch.cat([a, -b], dim=-1), (2, 1), value=7.0) + 1


def pad_with_infinity_and_two_outputs(x):
    padded = F.pad(x, (1, 1), value=float("inf"))
    return padded, -padded


def cat_int32_and_pad_value(a, b):
    return F.pad(torch.cat([a, b * 3], dim=1), (1, 0), value=-4) + 1


def cat_of_comparisons(a, b):
    return torch.cat([a > 0, b < 0], dim=1)


def cat_size_one_operand(a, b):
    return torch.cat([a, b], dim=-1) - 2  # b is one column wide


def embedding_rows_scaled(table, index):
    return F.embedding(index, table) * 2  # a [2, 3] index: [2, 3, 4] rows


def embedding_of_a_computed_table_int32_index(table, index, row):
    return F.embedding(index, table.exp()) + F.pad(row.sin(), (0, 0, 0, 2))  # [3, 4] + [3, 4]


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def kv_cache_write(cache, new):
    return torch.slice_scatter(cache, new * 2, 2, 4, 6) + 1  # cache[:, :, 4:6] = new * 2, functionalized


def strided_slice_write(x, src):
    return torch.slice_scatter(x, src, 1, 1, 8, 3).exp()


def select_write(x, y):
    return torch.select_scatter(x, y, 0, -1), x * y  # two outputs of one shape


def diagonal_copy_below(x):
    return torch.diagonal_copy(x, -1) * 2


def diagonal_write(x, d):
    return torch.diagonal_scatter(x, d.sin(), 1, 1, 2)


def gather_along_dim1(x, index):
    return torch.gather(x.exp(), 1, index) - 1


def unfold_windows(x):
    return torch.unfold_copy(x, 1, 3, 2) * 3


def cases():
    """(fn, inputs) pairs; every value comes from the global RNG (seeded by the caller)."""
    return [
        (cat_input_and_computed, (_r(3, 4), _r(3, 5))),
        (cat_three_along_dim0, (_r(2, 6), _r(1, 6), _r(3, 6))),
        (cat_broadcast_into_a_larger_shape, (_r(3, 4), _r(3, 3), _r(4, 1, 7))),
        (cat_of_a_transposed_operand, (_r(5, 3), _r(3, 2))),
        (rotary, (_r(2, 3, 4), _r(2, 3, 4), _r(3, 8), _r(3, 8))),
        (pad_two_dims, (_r(4, 5),)),
        (pad_crops_and_pads, (_r(5, 6),)),
        (pad_of_a_cat, (_r(2, 3), _r(2, 2))),
        (pad_with_infinity_and_two_outputs, (_r(2, 3),)),
        (cat_int32_and_pad_value, (torch.randint(-9, 9, (2, 3), dtype=torch.int32),
                                   torch.randint(-9, 9, (2, 2), dtype=torch.int32))),
        (cat_of_comparisons, (_r(2, 3), _r(2, 2))),
        (cat_size_one_operand, (_r(3, 4), _r(3, 1))),
        (embedding_rows_scaled, (_r(10, 4), torch.tensor([[1, 3, 9], [0, 0, 2]]))),
        (embedding_of_a_computed_table_int32_index, (_r(7, 4), torch.tensor([6, 0, 3], dtype=torch.int32),
                                                      _r(1, 4))),
        (cat_input_and_computed, (_r(3, 4, dtype=torch.float16), _r(3, 5, dtype=torch.float16))),
        (kv_cache_write, (_r(2, 3, 8, 4), _r(2, 3, 2, 4))),
        (strided_slice_write, (_r(3, 9), _r(3, 3))),
        (select_write, (_r(4, 5), _r(5))),
        (diagonal_copy_below, (_r(4, 5),)),
        (diagonal_write, (_r(2, 4, 5), _r(2, 4))),
        (gather_along_dim1, (_r(4, 6), torch.tensor([[5, 0, 0], [1, 2, 3], [4, 4, 4], [0, 5, 1]]))),
        (unfold_windows, (_r(2, 9, 3),)),
    ]
