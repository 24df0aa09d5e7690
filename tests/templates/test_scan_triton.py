"""The Triton scan template (interpreter without a GPU) against eager PyTorch and the IR reference: the cases of
the C++ test (tests/templates/scan_cases.py). tl.cumsum is a parallel scan in float32, so floats compare with a
float32 tolerance; integers are exact."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.templates import match  # noqa: E402
from tests.templates import scan_cases  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


@pytest.mark.parametrize("index", range(len(scan_cases.cases())), ids=scan_cases.ids())
def test_scan_matches_eager(index):
    torch.manual_seed(index)
    fn, inputs = scan_cases.cases()[index]
    inputs = tuple(x.to(DEVICE) for x in inputs)
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "scan"
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, template.default_config(problem, target), target))
    outs = [torch.full(s.shape, 123, device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), eager):
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
        if DEVICE != "cpu" and want.dtype in (torch.float16, torch.bfloat16):
            # eager's CUDA scan combines partial sums in the half type; kernelgen keeps them in float32: no
            # element-wise match is possible, so the kernel must be no further from the exact sums than eager
            exact = fn(*(x.double() if x.is_floating_point() else x for x in inputs))
            exact = exact[0] if isinstance(exact, tuple) else exact
            ours, theirs = ((t.double() - exact).abs().max() for t in (got, want))
            assert ours <= theirs + tol["atol"], f"scan error {ours} vs eager's {theirs}"
            continue
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
        torch.testing.assert_close(got, ref, equal_nan=True, **tol)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_scan_and_moved_pointwise_kernels_compile_ahead_of_time_for_gpus(arch, monkeypatch):
    """The interpreter accepts more than the compiler (scalar pointers under block masks, helper jit functions):
    compile the kernels for a CUDA and an AMD target without a GPU, as the resource reports do."""
    from kernelgen.backends.triton_aot import ResourceReport, aot_results
    from kernelgen.ir.target import Target
    from tests.templates import moves_cases

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # the spaces' defaults, without compiling their candidates
    picked = {"rotary", "embedding_rows_scaled", "pad_of_a_cat", "scan_of_gathered_rows", "cumsum_along_dim0",
              "int64_cumprod_wraps", "scan_with_a_broadcast_operand"}
    target = Target.gpu(arch)
    sources = []
    for fn, inputs in moves_cases.cases() + scan_cases.cases():
        if fn.__name__ in picked:
            template, problem = match(kernelgen.trace(fn, *inputs))
            sources.append(template.backend_module("triton").render(problem, template.space(problem, target).default(),
                                                                     target))
    results = aot_results(sources, target)
    assert len(results) == len(picked) and all(isinstance(r, ResourceReport) and r.spills == 0 for r in results), results
