"""``out=`` over an input the kernel reads is refused in one line; a separate ``out=`` still works.

Before: ``fast(x, w, b, out=x)`` on a GEMM returned silently wrong values (max error 4.7 in the issue's case,
2e4 at 512x512).
"""

from __future__ import annotations

import pytest
import torch

import kernelgen
from kernelgen.errors import InputMismatchError


def _gemm():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g), torch.randn(256, generator=g)
    return kernelgen.compile(lambda x, w, b: torch.relu(x @ w + b)), x, w, b


@pytest.mark.parametrize("alias", ["x", "w", "x_view"])
def test_out_over_an_input_is_refused_and_nothing_is_written(alias: str) -> None:
    fast, x, w, b = _gemm()
    expected = torch.relu(x @ w + b)
    fast(x, w, b)  # the signature is compiled and the hot path is taken below
    out = {"x": x, "w": w, "x_view": x.view(256, 256)}[alias]
    before = out.clone()
    with pytest.raises(InputMismatchError, match="shares memory with argument"):
        fast(x, w, b, out=out)
    assert torch.equal(out, before)
    torch.testing.assert_close(fast(x, w, b), expected, rtol=1e-3, atol=1e-4)


def test_a_separate_out_and_a_disjoint_view_of_the_same_storage_are_accepted() -> None:
    fast, x, w, b = _gemm()
    expected = torch.relu(x @ w + b)
    out = torch.empty(256, 256)
    assert fast(x, w, b, out=out).data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-4)
    buffer = torch.empty(2, 256, 256)  # inputs in one half of a buffer, the output in the other
    buffer[0].copy_(x)
    fast(buffer[0], w, b, out=buffer[1])
    torch.testing.assert_close(buffer[1], expected, rtol=1e-3, atol=1e-4)


def test_several_outputs_are_checked_too() -> None:
    fast = kernelgen.compile(lambda x: (x.softmax(-1), x.sum(-1)))
    x = torch.randn(8, 32)
    fast(x)
    with pytest.raises(InputMismatchError, match="out\\[0\\] shares memory"):
        fast(x, out=(x, torch.empty(8)))
