"""Functions with one sort (values and/or positions, any dim, ascending or descending; prologue and epilogue
around it) or one bucketize/searchsorted, and small inputs with ties, NaN, infinities and signed zeros: shared by
the C++ and Triton sort and search template tests."""

from __future__ import annotations

import torch

from kernelgen.ir.reference import evaluate

NAN, INF = float("nan"), float("inf")


def assert_exactly_eager_and_reference(fn, inputs, graph, outs) -> None:
    """A kernel's outputs ``outs`` of ``graph`` (traced from ``fn``) equal eager's and the IR reference's to the bit,
    NaN where theirs are."""
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), eager):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(got, ref, equal_nan=True, rtol=0, atol=0)


def _special(rows: int, n: int) -> torch.Tensor:
    """Rows with ties, NaN, +-inf and both zeros at spread positions (so stability and NaN placement show)."""
    x = torch.randint(-3, 4, (rows, n)).float()
    flat = x.view(-1)
    flat[1::7], flat[2::11], flat[3::13], flat[4::5] = NAN, INF, -INF, -0.0
    return x


def sort_last(x):
    return torch.sort(x, dim=-1, stable=True)


def sort_descending(x):
    return x.sort(dim=-1, descending=True, stable=True)


def unstable_sort_values(x):
    return torch.sort(x, dim=-1, descending=True).values  # positions of ties are eager's own: values only


def sort_stable_dim0(x):
    return torch.sort(x, dim=0, stable=True)


def argsort_middle_dim(x):
    return torch.argsort(x, dim=1, descending=True, stable=True)


def sort_values_of_a_prologue_with_epilogue(x, b):
    values, indices = torch.sort(x * 2 + b, dim=-1, descending=True, stable=True)
    return values.relu() + 1, indices * 3


def sort_int32(x):
    return x.sort(dim=-1, stable=True)


def sort_int8_descending(x):
    return x.sort(dim=-1, descending=True, stable=True)


def sort_uint8(x):
    return x.sort(dim=-1, stable=True)


def sort_int64_extremes(x):
    return x.sort(dim=-1, stable=True)


def sort_bool(x):
    return x.sort(dim=-1, stable=True)


def sort_half_rounded_keys(x):
    return (x * 3).sort(dim=-1, stable=True)  # keys rounded to float16 first: ties eager sees, positions in eager's order


def sort_bfloat16_descending(x):
    return x.sort(dim=-1, descending=True, stable=True)


def sort_float64_long_row(x):
    return x.sort(dim=-1, stable=True)


def sort_transposed_input(x):
    return x.transpose(0, 1).sort(dim=-1, stable=True)


def cases():
    g = torch.Generator().manual_seed(0)
    return [
        (sort_last, (_special(4, 37),)),
        (sort_descending, (_special(3, 50),)),
        (unstable_sort_values, (_special(3, 50),)),
        (sort_stable_dim0, (_special(33, 5),)),
        (argsort_middle_dim, (_special(6, 9).reshape(2, 9, 3),)),
        (sort_values_of_a_prologue_with_epilogue, (_special(3, 20), torch.randn(20, generator=g))),
        (sort_int32, (torch.randint(-5, 5, (4, 30), dtype=torch.int32, generator=g),)),
        (sort_int8_descending, (torch.randint(-128, 127, (3, 64), dtype=torch.int8, generator=g),)),
        (sort_uint8, (torch.randint(0, 255, (3, 17), dtype=torch.uint8, generator=g),)),
        (sort_int64_extremes, (torch.tensor([[2**63 - 1, -2**63, 0, 5, -2**63, 2**63 - 1, 5]]),)),
        (sort_bool, (torch.rand(3, 12, generator=g) > 0.5,)),
        (sort_half_rounded_keys, (torch.randn(4, 40, generator=g).half(),)),
        (sort_bfloat16_descending, (_special(2, 33).bfloat16(),)),
        (sort_float64_long_row, (torch.randn(2, 1000, generator=g).double().round(decimals=1),)),
        (sort_transposed_input, (_special(19, 3),)),
    ]


def ids():
    return [fn.__name__ for fn, _ in cases()]


# ------------------------------------------------------------------------------------ bucketize / searchsorted

def bucketize_left(x, b):
    return torch.bucketize(x, b)


def bucketize_right_int32(x, b):
    return torch.bucketize(x, b, right=True, out_int32=True)


def bucketize_of_a_prologue_with_epilogue(x, b):
    return torch.bucketize(x * 2, b) * 3 + 1


def bucketize_ints_in_float_boundaries(x, b):
    return torch.bucketize(x, b, right=True)


def searchsorted_side_right(b, x):
    return torch.searchsorted(b, x, side="right")


def bucketize_nan_boundaries(x, b):
    return torch.bucketize(x, b)  # unsorted (NaN) boundaries: wherever eager's own bisection lands


def search_cases():
    g = torch.Generator().manual_seed(1)
    edges = torch.tensor([-INF, -2.0, -0.0, 0.0, 0.5, 0.5, 1.0, 3.0, INF])
    x = _special(5, 13) / 2
    return [
        (bucketize_left, (x, edges)),
        (bucketize_right_int32, (x, edges)),
        (bucketize_of_a_prologue_with_epilogue, (x.reshape(5, 1, 13), edges[1:])),
        (bucketize_ints_in_float_boundaries, (torch.randint(-4, 4, (40,), generator=g), edges)),
        (searchsorted_side_right, (torch.tensor([-3, -1, 0, 0, 2, 7], dtype=torch.int64),
                                   torch.randint(-5, 9, (3, 7), generator=g))),
        (bucketize_nan_boundaries, (x, torch.tensor([0.0, NAN, 1.0, -1.0, 2.0]))),
        (bucketize_left, (torch.randn(300, generator=g).half(), torch.linspace(-2, 2, 100).half())),
    ]


def search_ids():
    return [f"{fn.__name__}_{k}" for k, (fn, _) in enumerate(search_cases())]
