"""Functions with one write at computed positions (scatter, scatter_add, scatter_reduce, index_put, index_add, the
embedding backward) and small inputs for them, duplicates and NaN included: shared by the C++ and Triton scatter
template tests."""

from __future__ import annotations

import torch

aten = torch.ops.aten


def scatter_src(x, i, s):
    return torch.scatter(x, 1, i, s)


def scatter_value_dim0(x, i):
    return x.scatter(0, i, 2.5)


def scatter_add_with_prologue(x, i, s):
    return torch.scatter_add(x * 2, 0, i, s.exp())


def scatter_add_int(x, i, s):
    return x.scatter_add(1, i, s)


def scatter_reduce_amax_nan(x, i, s):
    return x.scatter_reduce(1, i, s, "amax")


def scatter_reduce_prod_exclude_self(x, i, s):
    return x.scatter_reduce(0, i, s, "prod", include_self=False)


def scatter_reduce_amin_exclude_self(x, i, s):
    return x.scatter_reduce(2, i, s, "amin", include_self=False)


def half_scatter_add(x, i, s):
    return x.scatter_add(0, i, s)


def index_put_accumulate(x, i, v):
    return x.index_put((i,), v, accumulate=True)


def index_put_rows(x, i, v):
    return x.index_put((i,), v)


def index_put_broadcast_values(x, i, v):
    return torch.index_put(x, (i,), v, accumulate=True)


def embedding_backward(zeros, grad, idx):
    column = idx.unsqueeze(-1)  # (an input's view: the mask is computed in the kernel)
    valid = (column >= 0) & (column < 11) & (column != 3)
    return aten._unsafe_masked_index_put_accumulate.default(zeros, valid, [idx], grad)


def embedding_dense_backward(grad, idx):
    return aten.embedding_dense_backward.default(grad, idx, 11, 3, False)


def index_add_dim1(x, i, s):
    return x.index_add(1, i, s, alpha=2)


def _nan(t):
    t = t.clone()
    t.view(-1)[1::5] = float("nan")
    return t


def cases():
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def randint(hi, *shape):
        return torch.randint(0, hi, shape, generator=g)

    return [
        (scatter_src, (randn(4, 9), randint(9, 3, 6), randn(3, 7))),
        (scatter_value_dim0, (randn(5, 4), randint(5, 7, 4))),
        (scatter_add_with_prologue, (randn(6, 5), randint(6, 20, 5), randn(20, 5))),
        (scatter_add_int, (torch.randint(-5, 5, (4, 8), generator=g), randint(8, 4, 30),
                           torch.randint(-2**31, 2**31 - 1, (4, 30), generator=g))),
        (scatter_reduce_amax_nan, (_nan(randn(3, 7)), randint(7, 3, 12), _nan(randn(3, 12)))),
        (scatter_reduce_prod_exclude_self, (randn(5, 3), randint(5, 8, 3), randn(8, 3))),
        (scatter_reduce_amin_exclude_self, (randn(2, 3, 6), randint(6, 2, 3, 9), randn(2, 3, 9))),
        (half_scatter_add, (randn(4, 16).half(), randint(4, 40, 16), randn(40, 16).half())),
        (index_put_accumulate, (randn(7, 5), torch.tensor([3, -1, 3, 0, 6, -7, 3]), randn(7, 5))),
        (index_put_rows, (randn(6, 2, 3), torch.tensor([[5, 0], [2, -2]]), randn(2, 2, 2, 3))),
        (index_put_broadcast_values, (randn(8, 4), randint(8, 12), randn(4))),
        (embedding_backward, (torch.zeros(11, 6), randn(4, 9, 6), torch.randint(-2, 13, (4, 9), generator=g))),
        (embedding_dense_backward, (randn(4, 9, 6), torch.tensor([[3, 0, 10, 3, 5, 5, 5, 1, 2]] * 4))),
        (index_add_dim1, (randn(3, 6, 2), randint(6, 10), randn(3, 10, 2))),
    ]


EXACT = {"scatter_src", "scatter_value_dim0", "scatter_add_int", "scatter_reduce_amax_nan", "scatter_reduce_amin_exclude_self",
         "half_scatter_add", "index_put_accumulate", "index_put_rows", "index_put_broadcast_values", "embedding_backward", "embedding_dense_backward"}
"""Cases whose results are eager's to the bit: eager's order of accumulation, no arithmetic besides it."""


def ids():
    return [fn.__name__ for fn, _ in cases()]
