"""Shape families on Triton (the interpreter without a GPU): one generic kernel per template serves every
batch size, with the batch size passed as a kernel argument and the grid sized at launch."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

from kernelgen.api import compile  # noqa: E402
from kernelgen.runtime.dynamic import bucket  # noqa: E402

pytestmark = needs_triton


def bias_gelu(x, b):
    return F.gelu(x + b)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def linear_relu(x, w, b):
    return F.relu(F.linear(x, w, b))


def bmm_scale(x, y):
    return torch.bmm(x, y) * 0.5


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _t(*shape, g):
    return torch.randn(*shape, generator=g).to(DEVICE)


CASES = {
    "pointwise": (bias_gelu, lambda n, g: (_t(n, 24, g=g), _t(24, g=g))),
    "reduction": (layer_norm, lambda n, g: (_t(n, 40, g=g), _t(40, g=g), _t(40, g=g))),
    "gemm": (linear_relu, lambda n, g: (_t(n, 16, g=g), _t(8, 16, g=g), _t(8, g=g))),
    "gemm-batched": (bmm_scale, lambda n, g: (_t(n, 4, 8, g=g), _t(n, 8, 4, g=g))),
    "attention": (attention, lambda n, g: tuple(_t(n, 2, 5, 8, g=g) for _ in range(3))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_generic_triton_kernel_serves_every_batch_size(case):
    fn, make = CASES[case]
    f = compile(fn, backend="triton", dynamic=True)
    g = torch.Generator().manual_seed(0)
    families = set()
    for n in (2, 3, 7, 1, 0):
        args = make(n, g)
        torch.testing.assert_close(f(*args), fn(*args), atol=1e-4, rtol=1e-4)
        if n >= 2:
            what = f.explain(*args)
            assert what["bucket"] == bucket(n)
            families.add(what["family"])
    assert len(families) == 1
    assert f.variants <= 2  # the family, and size 1's own kernel


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_vendor_gemm_family_on_triton(dtype):
    """Off the C++ backend ATen's GEMM ranks first: one family runs it (ATen's matmul and a generic Triton
    epilogue) at every batch size."""
    dt = getattr(torch, dtype)
    f = compile(linear_relu, backend="triton", dynamic=True)
    g = torch.Generator().manual_seed(0)
    w, b = _t(8, 16, g=g).to(dt), _t(8, g=g).to(dt)
    families = set()
    for n in (2, 3, 7, 40, 1, 0):
        x = _t(n, 16, g=g).to(dt)
        torch.testing.assert_close(f(x, w, b), linear_relu(x, w, b))
        if n >= 2:
            what = f.explain(x, w, b)
            assert (what["implementation"], what["bucket"]) == ("aten_gemm", bucket(n))
            families.add(what["family"])
    assert len(families) == 1
    assert f.variants <= 2
