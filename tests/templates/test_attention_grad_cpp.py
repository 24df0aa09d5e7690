"""The C++ attention backward template against ATen's CPU flash backward (eager, and the IR reference), and the
gradients of training-mode attention through torch.compile against eager autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelgen.backends import get_backend
from kernelgen.frontend import dynamo_backend
from tests.templates import attention_grad_cases as cases
from tests.templates.kernels import run_kernel

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


@pytest.mark.parametrize("index", range(len(cases.cases())), ids=cases.ids())
def test_attention_backward_matches_aten(index):
    fn, inputs = cases.cases()[index]
    _, outs = run_kernel(fn, inputs, "cpp", "attention_grad")
    for got, want in zip(outs, fn(*inputs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, **cases.TOLERANCE[want.dtype])


@pytest.mark.parametrize("config", [{"BLOCK_M": 16, "BLOCK_N": 16, "MR": 1, "NR": 16},
                                    {"BLOCK_M": 32, "BLOCK_N": 64, "MR": 4, "NR": 16}])
def test_attention_backward_blocks_do_not_change_the_result(config):
    fn, inputs = cases.cases()[1]  # causal, ragged blocks
    _, outs = run_kernel(fn, inputs, "cpp", "attention_grad", config=config)
    for got, want in zip(outs, fn(*inputs)):
        torch.testing.assert_close(got, want, **cases.TOLERANCE[torch.float32])


@pytest.mark.parametrize("causal", [False, True])
def test_train_mode_attention_runs_forward_and_backward_in_kernelgen(causal):
    torch._dynamo.reset()
    dynamo_backend.register()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 24, 16, generator=g, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 4, 24, 16, generator=g)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def run(f):
        out = f(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), grad)
        return out.detach(), grads

    with dynamo_backend.collect() as graphs:
        got, got_grads = run(torch.compile(fn, backend="kernelgen"))
    want, want_grads = run(fn)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4)
    templates = {s.name: dict(s.templates) for s in graphs}
    assert templates["forward"].get("attention") == 1 and templates["backward"].get("attention_grad") == 1, templates
    assert not [op for s in graphs for op in s.left if "attention" in op] and all(s.runs.get("eager", 0) == 0 for s in graphs)
