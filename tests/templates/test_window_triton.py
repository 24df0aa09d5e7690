"""The Triton window template (interpreter without a GPU) against eager PyTorch and the IR reference: the cases of
the C++ test (tests/templates/window_cases.py), and the kernels compiled ahead of time for a CUDA and an AMD GPU."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

from kernelgen.ir.reference import evaluate  # noqa: E402
from tests.templates import window_cases  # noqa: E402
from tests.templates.kernels import aot_reports, run_kernel  # noqa: E402

pytestmark = needs_triton


@pytest.mark.parametrize("index", range(len(window_cases.cases())), ids=window_cases.ids())
def test_window_matches_eager(index):
    fn, inputs = window_cases.cases()[index]
    inputs = tuple(x.to(DEVICE) for x in inputs)
    graph, outs = run_kernel(fn, inputs, "triton", "window", device=DEVICE)
    eager = fn(*inputs)
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), list(eager) if isinstance(eager, tuple) else [eager]):
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = dict(rtol=1e-3, atol=1e-3) if want.dtype == torch.float16 else \
            dict(rtol=0, atol=0) if fn.__name__ in window_cases.EXACT and DEVICE == "cpu" else {}
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
        torch.testing.assert_close(got, ref, equal_nan=True, **tol)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_window_kernels_compile_ahead_of_time_for_gpus(arch, monkeypatch):
    """The interpreter accepts more than the compiler: compile the forward, fused and backward kernels for a CUDA
    and an AMD target without a GPU, as the resource reports do."""
    from kernelgen.backends.triton_aot import ResourceReport

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # the spaces' defaults, without compiling their candidates
    picked = {"max_pool_with_indices", "bn_relu_max_pool", "avg_pool_3d", "adaptive_max", "max_pool_backward_relu_backward",
              "avg_pool_backward", "adaptive_avg_backward"}
    count, results = aot_reports([c for c in window_cases.cases() if c[0].__name__ in picked], arch)
    assert count == len(picked) and all(isinstance(r, ResourceReport) and r.spills == 0 for r in results), results
