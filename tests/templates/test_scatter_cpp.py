"""The C++ scatter template against eager PyTorch and the IR reference: scatter, scatter_add, scatter_reduce (with
and without self), index_put (accumulate, negative indices, broadcast values), index_add and the embedding
backward; duplicates accumulate in eager's order, NaN propagates as eager's does."""

from __future__ import annotations

import pytest
import torch

from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from tests.templates import scatter_cases
from tests.templates.kernels import run_kernel

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


@pytest.mark.parametrize("index", range(len(scatter_cases.cases())), ids=scatter_cases.ids())
def test_scatter_matches_eager(index):
    fn, inputs = scatter_cases.cases()[index]
    graph, (out,) = run_kernel(fn, inputs, "cpp", "scatter")
    want = fn(*inputs)
    assert out.dtype == want.dtype and out.shape == want.shape
    tol = dict(rtol=0, atol=0) if fn.__name__ in scatter_cases.EXACT else {}
    torch.testing.assert_close(out, want, equal_nan=True, **tol)
    ref = evaluate(graph, list(inputs))[0]
    torch.testing.assert_close(out, ref, equal_nan=True, **({} if want.dtype != torch.float16 else dict(rtol=2e-2, atol=2e-2)))
