"""The Triton scatter template (interpreter without a GPU) against eager PyTorch: the cases of the C++ test
(tests/templates/scatter_cases.py), and the kernels compiled ahead of time for a CUDA and an AMD GPU."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

from kernelgen.errors import UnsupportedOpError  # noqa: E402
from tests.templates import scatter_cases  # noqa: E402
from tests.templates.kernels import aot_reports, run_kernel  # noqa: E402

pytestmark = needs_triton


@pytest.mark.parametrize("index", range(len(scatter_cases.cases())), ids=scatter_cases.ids())
def test_scatter_matches_eager(index):
    fn, inputs = scatter_cases.cases()[index]
    inputs = tuple(x.to(DEVICE) for x in inputs)
    try:
        graph, (out,) = run_kernel(fn, inputs, "triton", "scatter", device=DEVICE)
    except UnsupportedOpError:  # float16 sums: eager's CPU kernel sums in float32, which the interpreter cannot
        assert fn.__name__ == "half_scatter_add" and DEVICE == "cpu"
        return
    want = fn(*inputs)
    tol = dict(rtol=0, atol=0) if fn.__name__ in scatter_cases.EXACT and DEVICE == "cpu" else {}
    torch.testing.assert_close(out, want, equal_nan=True, **tol)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_scatter_kernels_compile_ahead_of_time_for_gpus(arch, monkeypatch):
    from kernelgen.backends.triton_aot import ResourceReport

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")
    count, results = aot_reports(scatter_cases.cases(), arch)
    assert count == len(results) and all(isinstance(r, ResourceReport) and r.spills == 0 for r in results), results
