"""Autograd is never dropped: kernel forward, eager gradients (gradcheck in float64, eager's in float32)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.errors import InputMismatchError

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def bias_gelu(x, b):
    return F.gelu(x + b)


def softmax_and_mean(x):
    return torch.softmax(x, -1), x.mean(-1)


def linear_relu(x, w, b):
    return torch.relu(F.linear(x, w, b))


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


CASES = [
    (bias_gelu, [(4, 8), (8,)], "pointwise"),
    (softmax_and_mean, [(4, 8)], "reduction"),
    (linear_relu, [(4, 8), (6, 8), (6,)], "gemm"),  # float32 on C++: the generated GEMM first
    (rms_norm, [(4, 8), (8,)], "reduction"),
]


def _inputs(shapes, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("fn,shapes,impl", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradcheck_float64(fn, shapes, impl):
    f = compile(fn, backend="cpp")
    inputs = _inputs(shapes, torch.float64)
    assert f.explain(*inputs)["implementation"] == impl  # the kernel computes the forward
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("fn,shapes,impl", CASES, ids=[c[0].__name__ for c in CASES])
def test_float32_gradients_equal_eagers(fn, shapes, impl):
    f = compile(fn, backend="cpp")
    ours, theirs = _inputs(shapes, torch.float32), _inputs(shapes, torch.float32)
    got, want = f(*ours), fn(*theirs)
    got_t = got if isinstance(got, tuple) else (got,)
    want_t = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got_t, want_t):
        assert g.grad_fn is not None and g.requires_grad
        torch.testing.assert_close(g, w)
    sum(o.sin().sum() for o in got_t).backward()
    sum(o.sin().sum() for o in want_t).backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_only_inputs_that_require_grad_get_one():
    x = torch.randn(4, 8, requires_grad=True)
    b = torch.randn(8)
    y = compile(bias_gelu, backend="cpp")(x, b)
    y.sum().backward()
    assert b.grad is None
    torch.testing.assert_close(x.grad, torch.autograd.grad(bias_gelu(x, b).sum(), x)[0])


def test_second_order_gradients():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(compile(bias_gelu, backend="cpp"), (x, b))


def test_no_grad_and_inference_mode_keep_the_plain_kernel_path():
    f = compile(bias_gelu, backend="cpp")
    x, b = torch.randn(4, 8, requires_grad=True), torch.randn(8)
    with torch.no_grad():
        y = f(x, b)
    assert y.grad_fn is None and not y.requires_grad
    with torch.inference_mode():
        z = f(x.detach(), b)
    assert z.grad_fn is None
    torch.testing.assert_close(y, bias_gelu(x, b).detach())


def test_out_with_inputs_that_require_grad_is_refused():
    f = compile(bias_gelu, backend="cpp")
    with pytest.raises(InputMismatchError, match="require grad"):
        f(torch.randn(4, 8, requires_grad=True), torch.randn(8), out=torch.empty(4, 8))
