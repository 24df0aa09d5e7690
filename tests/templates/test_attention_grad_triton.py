"""The Triton attention backward template (interpreter without a GPU) against ATen's CPU flash backward: the cases
of the C++ test (tests/templates/attention_grad_cases.py), and the kernels compiled ahead of time for GPUs."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

from tests.templates import attention_grad_cases as cases  # noqa: E402
from tests.templates.kernels import aot_reports, run_kernel  # noqa: E402

pytestmark = [needs_triton, pytest.mark.skipif(DEVICE != "cpu", reason="ATen's CPU flash backward is the reference")]


@pytest.mark.parametrize("index", range(len(cases.cases())), ids=cases.ids())
def test_attention_backward_matches_aten(index):
    fn, inputs = cases.cases()[index]
    _, outs = run_kernel(fn, inputs, "triton", "attention_grad")
    for got, want in zip(outs, fn(*inputs)):
        torch.testing.assert_close(got, want, **cases.TOLERANCE[want.dtype])


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_attention_backward_compiles_ahead_of_time_for_gpus(arch, monkeypatch):
    from kernelgen.backends.triton_aot import ResourceReport

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")
    count, results = aot_reports(cases.cases()[:6], arch)  # float32, masks, causal, subsets of the gradients
    assert count == len(results) and all(isinstance(r, ResourceReport) for r in results), results


def test_train_mode_attention_runs_forward_and_backward_as_triton_kernels():
    import torch.nn.functional as F

    from kernelgen.frontend import dynamo_backend

    torch._dynamo.reset()
    dynamo_backend.register()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 20, 16, generator=g, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 2, 20, 16, generator=g)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def run(f):
        return torch.autograd.grad(f(q, k, v), (q, k, v), grad)

    with dynamo_backend.collect() as graphs:
        got = run(torch.compile(fn, backend="kernelgen", options={"backend": "triton"}))
    for a, b in zip(got, run(fn)):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4)
    assert {s.name: s.templates.get("attention_grad", 0) for s in graphs}.get("backward") == 1
    assert all(s.runs.get("eager", 0) == 0 for s in graphs)
