"""The C++ scan template (cumsum/cumprod over the last dim) against eager PyTorch and the IR reference."""

from __future__ import annotations

import pytest
import torch

import kernelgen
from kernelgen.backends import cpp as cpp_backend
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.templates import match
from tests.templates import scan_cases

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


@pytest.mark.parametrize("index", range(len(scan_cases.cases())), ids=scan_cases.ids())
def test_scan_matches_eager(index):
    torch.manual_seed(index)
    fn, inputs = scan_cases.cases()[index]
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "scan"
    target = Target.current("cpp")
    kernel = get_backend("cpp").compile(template.render(problem, template.default_config(problem, target), target))
    outs = [torch.full(s.shape, 123).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), eager):
        assert got.dtype == want.dtype and got.shape == want.shape
        # eager's accumulator, in eager's order: the same bits (the tanh epilogue is libm's to an ulp or two)
        tol = dict(rtol=1e-6, atol=1e-6) if fn is scan_cases.prologue_and_epilogue else dict(rtol=0, atol=0)
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
        torch.testing.assert_close(got, ref, equal_nan=True, **tol)


def test_scan_along_the_run_time_dim_renders_static():
    # dim 0 is the family's run-time size: a scan along it needs the static length, so each size is its own kernel
    fn = lambda x: x.cumsum(0)  # noqa: E731
    f = kernelgen.compile(fn, backend="cpp", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), fn(x), rtol=0, atol=0)
        assert f.explain(x)["implementation"] == "scan"


def test_a_move_that_shifts_the_running_value_is_not_a_scan_region():
    # an exclusive scan written as pad(cumsum) reads the running value one column back: no row loop has it
    graph = kernelgen.trace(lambda t: torch.nn.functional.pad(t.cumsum(-1), (1, 0)), torch.randn(4, 6))
    assert match(graph) is None
    # a pad before the scan only shifts the loads: fine
    graph = kernelgen.trace(lambda t: torch.nn.functional.pad(t, (1, 0)).cumsum(-1), torch.randn(4, 6))
    assert match(graph)[0].name == "scan"


def test_one_generic_scan_kernel_serves_every_batch_size(monkeypatch):
    builds = []
    real = cpp_backend.build_shared_library
    monkeypatch.setattr(cpp_backend, "build_shared_library", lambda *a, **k: builds.append(1) or real(*a, **k))
    get_backend("cpp")._kernels.clear()
    fn = lambda x, b: (x + b).cumsum(-1).relu()  # noqa: E731
    f = kernelgen.compile(fn, backend="cpp", dynamic=True)
    families = set()
    for n in (2, 3, 17, 64):
        args = (torch.randn(n, 7), torch.randn(7))
        torch.testing.assert_close(f(*args), fn(*args), rtol=0, atol=0)
        what = f.explain(*args)
        assert what["implementation"] == "scan"
        families.add(what["family"])
    assert len(families) == 1 and len(builds) == 1
