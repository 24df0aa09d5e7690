"""The C++ backend's flags keep what eager guarantees: IEEE division, NaN propagation, signed zeros; only sums
are reordered (explicitly, as ``omp simd`` reductions). Compared bit for bit with eager.

Before: ``-ffast-math`` made ``x / y`` with y of shape [4,1,1] and a transposed x differ from eager in 56 of
128 elements (each equal to ``x * (1/y)``: reciprocal math), and the backward of ``(x / nz, z / nz)`` with
z = 0, nz = -0 gave -inf where eager (and Inductor) give NaN (reassociation).
"""

from __future__ import annotations

import torch

import kernelgen

SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0, 1e-40, -1e-40, 1e38, -1e38, float("inf"), -float("inf"), float("nan"), 0.1, 7.0]


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit, except that any NaN equals any NaN (payloads are not part of eager's contract)."""
    nan = torch.isnan(a)
    return a.shape == b.shape and torch.equal(nan, torch.isnan(b)) and \
        torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


def test_division_by_a_broadcast_divisor_is_eagers_division() -> None:
    fast = kernelgen.compile(lambda x, y: x / y)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, 4, generator=g).transpose(1, 2)
    y = torch.randn(4, 1, 1, generator=g)
    assert bits_equal(fast(x, y), x / y)


def test_division_of_special_values_is_eagers_division() -> None:
    fast = kernelgen.compile(lambda x, y: x / y)
    v = torch.tensor(SPECIAL)
    x, y = v.repeat_interleave(len(SPECIAL)), v.repeat(len(SPECIAL))  # every pair
    assert bits_equal(fast(x, y), x / y)


def test_signed_zeros_and_nan_propagate_as_in_eager() -> None:
    def fn(x, y):
        return x * 0.0, torch.relu(x) - x.clamp(min=0), (x - y) + (y - x), x * y / y, (x + y) - y

    fast = kernelgen.compile(fn)
    v = torch.tensor(SPECIAL)
    x, y = v.repeat_interleave(len(SPECIAL)), v.repeat(len(SPECIAL))
    for got, want in zip(fast(x, y), fn(x, y)):
        assert bits_equal(got, want)


def test_the_backward_of_a_division_by_negative_zero_is_nan_as_in_eager() -> None:
    def fn(x, nz, z):
        return (x / nz).sum() + (z / nz).sum()

    def grads(f):
        x = torch.randn(8, generator=torch.Generator().manual_seed(1)).requires_grad_()
        nz = torch.full((8,), -0.0, requires_grad=True)
        z = torch.zeros(8, requires_grad=True)
        f(x, nz, z).backward()
        return x.grad, nz.grad, z.grad

    compiled = torch.compile(fn, backend="kernelgen", options={"backend": "cpp"})
    for got, want in zip(grads(compiled), grads(fn)):
        assert bits_equal(got, want), (got, want)
