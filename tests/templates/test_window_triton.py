"""The Triton window template (interpreter without a GPU) against eager PyTorch and the IR reference: the cases of
the C++ test (tests/templates/window_cases.py), and the kernels compiled ahead of time for a CUDA and an AMD GPU."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.templates import match  # noqa: E402
from tests.templates import window_cases  # noqa: E402

pytestmark = needs_triton


@pytest.mark.parametrize("index", range(len(window_cases.cases())), ids=window_cases.ids())
def test_window_matches_eager(index):
    fn, inputs = window_cases.cases()[index]
    inputs = tuple(x.to(DEVICE) for x in inputs)
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "window"
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, template.default_config(problem, target), target))
    outs = [torch.full(s.shape, 123, device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
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
    from kernelgen.backends.triton_aot import ResourceReport, aot_results
    from kernelgen.ir.target import Target

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # the spaces' defaults, without compiling their candidates
    picked = {"max_pool_with_indices", "bn_relu_max_pool", "avg_pool_3d", "adaptive_max", "max_pool_backward_relu_backward",
              "avg_pool_backward", "adaptive_avg_backward"}
    target = Target.gpu(arch)
    sources = []
    for fn, inputs in window_cases.cases():
        if fn.__name__ in picked:
            template, problem = match(kernelgen.trace(fn, *inputs))
            sources.append(template.backend_module("triton").render(problem, template.space(problem, target).default(),
                                                                     target))
    results = aot_results(sources, target)
    assert len(results) == len(picked) and all(isinstance(r, ResourceReport) and r.spills == 0 for r in results), results
