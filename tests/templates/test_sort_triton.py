"""The Triton sort and search templates (interpreter without a GPU) against eager PyTorch and the IR reference: the
cases of the C++ test (tests/templates/sort_cases.py), exact, and the kernels compiled ahead of time for a CUDA and
an AMD GPU."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import kernelgen  # noqa: E402
from kernelgen.templates import match  # noqa: E402
from tests.templates import sort_cases  # noqa: E402
from tests.templates.kernels import aot_reports, run_kernel  # noqa: E402

pytestmark = needs_triton


def _check(fn, inputs, template):
    inputs = tuple(x.to(DEVICE) for x in inputs)
    graph, outs = run_kernel(fn, inputs, "triton", template, device=DEVICE)
    sort_cases.assert_exactly_eager_and_reference(fn, inputs, graph, outs)


@pytest.mark.parametrize("index", range(len(sort_cases.cases())), ids=sort_cases.ids())
def test_sort_matches_eager(index):
    _check(*sort_cases.cases()[index], "sort")


@pytest.mark.parametrize("index", range(len(sort_cases.search_cases())), ids=sort_cases.search_ids())
def test_search_matches_eager(index):
    _check(*sort_cases.search_cases()[index], "search")


def test_rows_past_the_triton_limit_are_left_to_eager():
    from kernelgen.backends import get_backend
    from kernelgen.errors import UnsupportedOpError
    from kernelgen.templates.sort_triton import MAX_ROW

    graph = kernelgen.trace(lambda x: x.sort(dim=-1, stable=True), torch.randn(2, MAX_ROW + 1))
    template, problem = match(graph)
    target = get_backend("triton").target()
    with pytest.raises(UnsupportedOpError, match="eager PyTorch runs this graph"):
        template.render(problem, template.default_config(problem, target), target)


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_sort_and_search_kernels_compile_ahead_of_time_for_gpus(arch, monkeypatch):
    """The interpreter accepts more than the compiler: compile a float, a half, a bool and an int64 sort and two
    searches for a CUDA and an AMD target without a GPU, as the resource reports do."""
    from kernelgen.backends.triton_aot import ResourceReport

    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # the spaces' defaults, without compiling their candidates
    picked = {"sort_values_of_a_prologue_with_epilogue", "sort_half_rounded_keys", "sort_bool", "sort_int64_extremes",
              "sort_bfloat16_descending", "argsort_middle_dim", "bucketize_right_int32", "searchsorted_side_right"}
    cases = [c for c in sort_cases.cases() + sort_cases.search_cases() if c[0].__name__ in picked]
    count, results = aot_reports(cases, arch)
    assert count == len(cases) and all(isinstance(r, ResourceReport) and r.spills == 0 for r in results), results
