"""The C++ window template (pooling and its gradients) against eager PyTorch and the IR reference (ATen's own
pooling kernels): values, indices, ties, NaN/inf placement, eager's divisors and summation order."""

from __future__ import annotations

import pytest
import torch

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from tests.templates import window_cases
from tests.templates.kernels import run_kernel

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _flat(result):
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.parametrize("index", range(len(window_cases.cases())), ids=window_cases.ids())
def test_window_matches_eager(index):
    fn, inputs = window_cases.cases()[index]
    graph, outs = run_kernel(fn, inputs, "cpp", "window")
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), _flat(fn(*inputs))):
        assert got.dtype == want.dtype and got.shape == want.shape
        # maxima and eager-ordered sums are eager's to the bit; a prologue's or epilogue's arithmetic may contract
        # into fused multiply-adds, and float16 rounds once at the store
        tol = dict(rtol=1e-3, atol=1e-3) if want.dtype == torch.float16 else \
            dict(rtol=0, atol=0) if fn.__name__ in window_cases.EXACT else {}
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
        torch.testing.assert_close(got, ref, equal_nan=True, **tol)


def test_compiled_pooling_with_indices_and_its_gradient_match_eager():
    fn = window_cases.max_pool_with_indices
    x = window_cases._ties((2, 3, 8, 6))
    f = kernelgen.compile(fn, backend="cpp")
    values, indices = f(x)
    want_values, want_indices = fn(x)
    assert torch.equal(values, want_values) and torch.equal(indices, want_indices)
    assert f.explain(x)["implementation"] == "window"


@pytest.mark.parametrize("scatter", [True, False], ids=["at-indices", "windows-read"])
def test_max_pool_gradient_of_indices_no_window_holds_matches_the_reference(scatter):
    """The dispatch check runs a max pool's gradient on random indices, some outside the plane or outside their
    window (a forward never makes those; eager writes wherever they point): both ways of computing it add nothing
    for them, as the IR reference does, and equal each other and eager on real indices, to the bit."""
    from kernelgen.ir.values import Config

    fn = window_cases.max_pool_backward_relu_backward
    g_, x, i, y = torch.randn(2, 3, 5, 6), torch.randn(2, 3, 9, 11), None, torch.randn(2, 3, 9, 11)
    _, real = torch.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)
    shuffled = torch.randint(-5, 9 * 11 + 5, real.shape)
    for i in (real, shuffled):
        graph, outs = run_kernel(fn, (g_, x, i, y), "cpp", "window",
                                 Config({"schedule": "static", "tile": 64, "scatter": scatter}))
        torch.testing.assert_close(outs[0], evaluate(graph, [g_, x, i, y])[0], rtol=0, atol=0)
        if i is real:
            torch.testing.assert_close(outs[0], fn(g_, x, i, y), rtol=0, atol=0)
