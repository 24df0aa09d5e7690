"""Issue 15, item 1 on the C++ backend: every value kernelgen returns equals eager PyTorch's, NaN/Inf placement,
integer wraparound, dtype promotion and input mutation included; where a kernel cannot match, eager runs.

Each case compiles a small function with ``backend="cpp"``, runs it on inputs with NaN/±Inf or integer
extremes and compares with the same function run eagerly (exact dtype and shape, ``equal_nan``). Cases the C++
kernels must handle assert that a kernel ran (``explain``), so a silent eager fallback cannot hide a bug.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

INF, NAN = float("inf"), float("nan")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def _special(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Random values with NaN, +inf and -inf at fixed places (one of each per 8 elements, not row aligned)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    flat = x.view(-1)
    flat[3::8], flat[5::8], flat[6::8] = NAN, INF, -INF
    return x.to(dtype)


def _same(fn, *args, kernel: bool = True, tol: dict | None = None) -> None:
    """fn compiled for the C++ backend returns what eager returns on args (and ran a kernel if ``kernel``)."""
    compiled = kernelgen.compile(fn, backend="cpp")
    eager_args = [a.clone() for a in args]
    want = fn(*eager_args)
    got = compiled(*args)
    if kernel:
        assert compiled.explain(*args)["implementation"] != "eager", "expected a C++ kernel, got an eager fallback"
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{g.dtype}{list(g.shape)} != {w.dtype}{list(w.shape)}"
        torch.testing.assert_close(g, w, equal_nan=True, **(tol or TOL.get(w.dtype, dict(rtol=0, atol=0))))
    for a, e in zip(args, eager_args):  # the inputs end as eager leaves them (mutation)
        torch.testing.assert_close(a, e, equal_nan=True, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ NaN / Inf

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_maximum_minimum_propagate_nan_from_either_side(dtype):
    x, y = _special((4, 64), dtype, 0), _special((4, 64), dtype, 1).flip(-1).contiguous()
    _same(lambda a, b: torch.maximum(a, b), x, y)
    _same(lambda a, b: torch.minimum(a, b), x, y)
    _same(lambda a, b: torch.max(a, b) - torch.min(b, a), x, y)


def test_clamp_keeps_nan_input_and_nan_bounds():
    x = _special((4, 64))
    _same(lambda a: torch.clamp(a, -0.5, 0.5), x)
    _same(lambda a: torch.clamp(a, min=NAN), x)
    _same(lambda a: torch.clamp(a, max=NAN), x)
    lo = _special((64,), seed=3)
    _same(lambda a, b: torch.clamp(a, min=b), x, lo)
    _same(lambda a: a.clamp(2.0, 1.0), x)  # min > max: eager gives max everywhere


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_of_pointwise_chain_keeps_nan(dtype):
    x, y, z = (_special((4, 128), dtype, s) for s in range(3))
    _same(lambda a, b, c: torch.relu((a + b) * c), x, y, z)
    _same(lambda a: F.relu(a) + torch.sigmoid(a) + F.silu(a), x)


def test_relu_of_gemm_epilogue_keeps_the_nan_row():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
    x[3, 5] = NAN
    x[7, 1] = INF
    w, b = torch.randn(32, 24), torch.randn(24)
    _same(lambda a, ww, bb: torch.relu(a @ ww + bb), x, w, b, tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_softmax_rows_with_nan_and_inf(dtype):
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x[0, 17] = NAN
    x[1, :] = -INF
    x[2, 5] = INF
    x[3, :150] = -INF  # the first part of a long row is -inf: online fusion must not turn it into nan
    x[4, :] = INF
    _same(lambda a: torch.softmax(a, -1), x)
    _same(lambda a: torch.log_softmax(a, -1), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_rows_with_nan_and_inf(dtype):
    x = torch.randn(6, 100, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x[0, 3] = NAN
    x[1, :] = INF
    x[2, :] = -INF
    x[3, 9] = INF
    x[4, 9] = -INF
    _same(lambda a: torch.logsumexp(a, -1), x)
    _same(lambda a: torch.logsumexp(a, -1, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_amax_amin_rows_with_nan(dtype):
    x = _special((4, 200), dtype)
    x[0] = torch.randn(200, dtype=dtype)  # one finite row
    _same(lambda a: torch.amax(a, -1), x)
    _same(lambda a: torch.amin(a, -1, keepdim=True), x)
    _same(lambda a: a.max(dim=-1).values, x)


def test_rmsnorm_with_one_inf_matches_eager_elementwise():
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    x[1, 10] = INF
    w = torch.randn(256)
    _same(lambda a, ww: a * torch.rsqrt(torch.mean(a * a, -1, keepdim=True) + 1e-6) * ww, x, w)
    _same(lambda a, ww: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * ww, x, w)


def test_division_by_inf_and_rsqrt_of_inf():
    x, y = _special((4, 64)), _special((4, 64), seed=1)
    _same(lambda a, b: a / b, x, y)
    _same(lambda a: torch.rsqrt(a) + torch.reciprocal(a), x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gelu_of_inf_and_nan(dtype, approximate):
    """gelu(-inf) and gelu(nan) are nan, gelu(+inf) is +inf. Eager is not self-consistent at +inf: its vectorised
    float32/bfloat16 erf-gelu (contiguous tensors of 2+ elements) gives nan, while the same eager op on one
    element, on a strided view, in float16/float64 or with approximate='tanh' gives inf. kernelgen gives inf;
    everywhere else it must equal eager on the same tensor."""
    x = torch.tensor([INF, -INF, NAN, 1.0, -2.0, 0.0, 40.0, -40.0] * 8, dtype=dtype)
    b = torch.zeros(64, dtype=dtype)
    finite_or_neg = x != INF
    for fn, args in ((lambda a, bb: F.gelu(a + bb, approximate=approximate), (x, b)),
                     (lambda a: F.gelu(a, approximate=approximate), (x,))):
        compiled = kernelgen.compile(fn, backend="cpp")
        got = compiled(*args)
        assert compiled.explain(*args)["implementation"] != "eager"
        want = fn(*args)
        torch.testing.assert_close(got[finite_or_neg], want[finite_or_neg], equal_nan=True, **TOL[dtype])
        per_element = torch.cat([fn(*(a[i:i + 1] for a in args)) for i in range(len(x))])  # eager's scalar path
        torch.testing.assert_close(got, per_element, equal_nan=True, **TOL[dtype])
        assert torch.all(got[~finite_or_neg] == INF)


@pytest.mark.parametrize("op", [torch.exp, torch.log, torch.tanh, torch.erf, torch.sqrt, torch.abs, torch.neg])
def test_unary_ops_on_nan_and_inf(op):
    x = _special((2, 64))
    _same(lambda a: op(a), x)


# ------------------------------------------------------------------------------------ integers and dtypes

@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8])
def test_integer_pow_wraps_around_like_eager(dtype):
    info = torch.iinfo(dtype)
    lo = max(info.min, -50)
    base = torch.arange(lo, lo + 128, dtype=torch.int64).clamp(max=info.max).to(dtype)
    exp = torch.arange(0, 128, dtype=torch.int64).remainder(40).to(dtype)
    _same(lambda a, e: torch.pow(a, e), base, exp)
    _same(lambda a: a ** 3 + a ** 13, base)


def test_integer_pow_small_values_and_negative_exponents():
    a = torch.tensor([5, 7, 3] * 4, dtype=torch.int32)
    e = torch.tensor([2, 2, 4] * 4, dtype=torch.int32)
    _same(lambda x, y: torch.pow(x, y), a, e)
    base = torch.tensor([2, -1, 1, 0, 3, -1, 0, -2] * 4)
    exps = torch.tensor([-1, -3, -2, 0, -1, -4, 0, 63] * 4)
    _same(lambda x, y: x ** y, base, exps)


def test_integer_pow_with_a_negative_scalar_exponent_raises_like_eager():
    a = torch.arange(1, 9, dtype=torch.int32)
    with pytest.raises(RuntimeError):
        a ** -1
    compiled = kernelgen.compile(lambda x: x ** -1, backend="cpp")
    with pytest.raises(Exception):
        compiled(a)


@pytest.mark.parametrize("fn", [
    lambda a, b: a / b,                      # int / int is true division: float
    lambda a, b: a + 2.5,                    # int tensor + float scalar: default float dtype
    lambda a, b: a * b + True,
    lambda a, b: (a > 1) + (b < 3),          # bool + bool stays bool
    lambda a, b: (a > 1) * 3,                # bool * int scalar: int64
    lambda a, b: a.to(torch.int8) + b.to(torch.uint8),  # int8 + uint8: int16
    lambda a, b: a.to(torch.int8) * 100,     # int8 stays int8 and wraps
    lambda a, b: a.to(torch.float16) + b,    # half + int64 tensor: half
    lambda a, b: torch.where(a > 2, a, 0.5),
    lambda a, b: a.to(torch.int32) - b,      # int32 - int64: int64
])
def test_dtype_promotion_matches_eager(fn):
    a = torch.arange(-60, 68, dtype=torch.int64).reshape(2, 64)
    b = torch.arange(1, 129, dtype=torch.int64).reshape(2, 64).remainder(7) + 1
    _same(fn, a, b)


def test_integer_add_and_mul_wrap_around():
    info = torch.iinfo(torch.int32)
    a = torch.tensor([info.max, info.min, info.max - 3, 7] * 16, dtype=torch.int32)
    _same(lambda x: x + 5, a)
    _same(lambda x: x * x - 3, a)
    _same(lambda x: -x + x.abs(), a)


# ------------------------------------------------------------------------------ bitcasts and mutation

def test_view_as_another_dtype_is_a_bitcast_not_a_conversion():
    x = torch.randn(4, 64)
    _same(lambda a: a.view(torch.int32), x, kernel=False)
    _same(lambda a: (a * 2).view(torch.int32) + 1, x, kernel=False)
    _same(lambda a: a.view(torch.float32) * 2, torch.arange(256, dtype=torch.int32).reshape(4, 64), kernel=False)


@pytest.mark.parametrize("fn", [
    lambda a, b: a.relu_(),
    lambda a, b: a.add_(b) * 2,
    lambda a, b: a.mul_(2).exp(),
    lambda a, b: torch.relu_(a) + b,
    lambda a, b: torch.add(a, b, out=a),
    lambda a, b: torch.exp(a, out=b) + 1,
    lambda a, b: F.relu(a, inplace=True),
    lambda a, b: a.sigmoid_() + b.clamp_(0, 1),
])
def test_in_place_ops_mutate_inputs_like_eager(fn):
    x, y = torch.randn(4, 64), torch.randn(4, 64)
    _same(fn, x, y, kernel=False)


# ------------------------------------------------------------------- found by the OpInfo suite (tests/opinfo)

def test_lowering_follows_each_overloads_argument_order():
    x, y = torch.randn(4, 64), torch.randn(4, 64)
    _same(lambda a, c, b: a.where(c, b), x, x > 0, y)  # Tensor.where(condition, other): self is the value
    _same(lambda a: torch.std(a, True), x, kernel=False)  # std(input, unbiased): over all dims
    _same(lambda a: torch.var(a, -1, False), x)  # var(input, dim, unbiased): positional unbiased
    _same(lambda a: torch.var(a, -1, True, True), x)  # ... and positional keepdim
    _same(lambda a: torch.square(a > 0), x)  # square(bool) is int64
    _same(lambda a: torch.sum(a.to(torch.int8), -1), x * 100)  # int8 sums accumulate in int64


def sigmoid(x):  # a user's own function that shares a torch op's name; fx keeps it as one call (wrap below)
    return x * 2


torch.fx.wrap("sigmoid")


def test_functions_named_like_torch_ops_are_not_lowered_as_them():
    x = torch.randn(4, 64)
    _same(lambda a: sigmoid(a) + 1, x, kernel=False)
    mask = torch.rand(4, 64, generator=torch.Generator().manual_seed(0)) > 0.5
    _same(lambda a, m: torch.masked.sum(a, -1, mask=m), x, mask, kernel=False)


def test_linear_with_a_one_dimensional_weight_and_reductions_of_empty_rows():
    x, w = torch.randn(4, 64), torch.randn(64)
    _same(lambda a, ww: F.linear(a, ww), x, w, kernel=False, tol=dict(rtol=1e-4, atol=1e-4))
    _same(lambda a: torch.sum(a, -1) + 1, torch.randn(4, 0), kernel=False)
    _same(lambda a: torch.logsumexp(a, -1), torch.arange(256, dtype=torch.int32).reshape(4, 64) % 7)


@pytest.mark.parametrize("fn", [lambda a: F.gelu(a), lambda a: F.silu(a), lambda a: torch.softmax(a, -1),
                                lambda a: torch.exp(a).sum(-1) + torch.log_softmax(a, -1)])
def test_float_math_on_integers_raises_or_promotes_like_eager(fn):
    x = torch.arange(12).reshape(3, 4)
    try:
        want = fn(x)
    except Exception as exc:
        with pytest.raises((type(exc), kernelgen.KernelgenError)):  # eager's error, or kernelgen's naming it
            kernelgen.compile(fn, backend="cpp")(x)
        return
    torch.testing.assert_close(kernelgen.compile(fn, backend="cpp")(x), want)


def test_rsub_keeps_its_alpha():
    x, y = torch.randn(4, 64), torch.randn(4, 64)
    _same(lambda a, b: torch.rsub(a, b, alpha=3), x, y)
    _same(lambda a: torch.rsub(a, 2.5, alpha=-2), x)
    _same(lambda a, b: torch.rsub(a, b, alpha=5), torch.arange(256).reshape(4, 64), torch.ones(4, 64, dtype=torch.int64))


def test_transpose_of_low_rank_tensors():
    x = torch.randn(64)
    _same(lambda a: torch.transpose(a, 0, -1) + 1, x)
    _same(lambda a: a.t() * 2, x)
    _same(lambda a: torch.transpose(a, 0, -1) * 2, torch.tensor(3.0))  # 0-d: was a ZeroDivisionError
