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
