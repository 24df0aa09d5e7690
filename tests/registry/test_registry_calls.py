"""custom_call tracing and eager runs, candidates() matching, and the first-use check against the reference."""

from __future__ import annotations

import json

import pytest
import torch
from cc_helpers import BIAS_GELU_CPP, bias_gelu, launch

from kernelgen.check import verdicts
from kernelgen.custom_calls.candidates import candidates
from kernelgen.custom_calls.verify import describe
from kernelgen.errors import InputMismatchError, RegistryError
from kernelgen.frontend.capture import trace
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Status
from kernelgen.registry import custom_call, reference_for, register_custom_call


def _register(name="bg", **overrides):
    kwargs = dict(language="cpp", source=BIAS_GELU_CPP, symbol="bias_gelu", reference=bias_gelu)
    kwargs.update(overrides)
    return register_custom_call(name, **kwargs)(launch())


def uses_bg(x, b):
    return custom_call("bg", x, b)


def test_custom_call_runs_the_reference_eagerly_and_traces_to_one_node(registry):
    _register()
    x, b = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(uses_bg(x, b), bias_gelu(x, b))
    graph = trace(uses_bg, x, b)
    assert [n.op for n in graph.nodes] == ["input", "input", "custom_call"]
    assert graph.nodes[2].attr("name") == "bg" and graph.output_specs[0].shape == (3, 8)
    torch.testing.assert_close(evaluate(graph, [x, b], custom_calls=reference_for)[0], bias_gelu(x, b))


def test_unknown_custom_call_names_the_registered_ones(registry):
    _register()
    with pytest.raises(RegistryError, match="no custom call named 'nope'.*registered: bg"):
        custom_call("nope", torch.ones(2))


def test_named_call_and_replaced_pattern_are_candidates(registry):
    _register(replaces=bias_gelu)
    x, b = torch.randn(4, 16), torch.randn(16)
    for graph in (trace(uses_bg, x, b), trace(bias_gelu, x, b)):
        (impl,) = candidates(graph, "cpp")
        assert impl.name == "custom:bg/cpp" and impl.backend == "cpp"
        assert candidates(graph, "triton") == []  # a CPU C++ call is not a GPU-backend candidate
    other = trace(lambda x, b: torch.nn.functional.gelu(x - b), x, b)
    assert candidates(other, "cpp") == []


def test_name_only_call_does_not_replace_plain_torch(registry):
    _register()
    assert candidates(trace(bias_gelu, torch.randn(4, 16), torch.randn(16)), "cpp") == []


def test_dtype_layout_and_constraint_filters(registry):
    _register(replaces=bias_gelu, dtypes=("float32",),
              constraints=[lambda specs: specs[1].shape == (specs[0].shape[-1],)])
    assert candidates(trace(bias_gelu, torch.randn(4, 16).double(), torch.randn(16).double()), "cpp") == []
    assert candidates(trace(bias_gelu, torch.randn(16, 4).t(), torch.randn(16)), "cpp") == []
    assert candidates(trace(bias_gelu, torch.randn(4, 16), torch.randn(4, 16)), "cpp") == []
    assert len(candidates(trace(bias_gelu, torch.randn(4, 16), torch.randn(16)), "cpp")) == 1


def test_built_launcher_runs_validates_and_has_a_stable_identity(registry):
    _register(replaces=bias_gelu)
    x, b = torch.randn(5, 33), torch.randn(33)
    (impl,) = candidates(trace(bias_gelu, x, b), "cpp")
    target = Target.current("cpp")
    run = impl.build(impl.default_config(target), target)
    y = torch.empty(5, 33)
    run(x, b, y)
    torch.testing.assert_close(y, bias_gelu(x, b))
    with pytest.raises(InputMismatchError, match="argument 0"):
        run(torch.randn(5, 34), b, y)
    assert impl.source_hash() == candidates(trace(bias_gelu, x, b), "cpp")[0].source_hash()


@pytest.fixture()
def checks_here(monkeypatch):
    """Calls registered inside a test cannot be rebuilt by a worker process: check them in this one (these
    tests are about what a check finds; test_registry_isolation covers where it runs)."""
    monkeypatch.setenv(verdicts.ISOLATE_ENV, "0")


def test_wrong_call_fails_its_check_every_time_and_the_reason_is_listed(registry, checks_here):
    _register(symbol="bias_only", replaces=bias_gelu)
    x, b = torch.randn(6, 40), torch.randn(40)
    (impl,) = candidates(trace(bias_gelu, x, b), "cpp")
    target = Target.current("cpp")
    first = verdicts.check(impl, impl.default_config(target), target)
    assert first.status is Status.WRONG_RESULT and "outside" in first.message
    assert verdicts.check(impl, impl.default_config(target), target) is first  # kept: not run again
    row = describe(registry.entries()[0])
    assert row["check"].startswith("failed: wrong_result:") and "outside" in row["check"]
    assert row["rejected"][0]["specs"][0]["shape"] == [6, 40]
    json.dumps(row)


def test_launcher_exception_is_a_failed_check(registry, checks_here):
    def broken(inputs, outputs, config, kernel):
        raise RuntimeError("launch went wrong")

    register_custom_call("bg", language="cpp", source=BIAS_GELU_CPP, symbol="bias_gelu", reference=bias_gelu,
                         replaces=bias_gelu)(broken)
    (impl,) = candidates(trace(bias_gelu, torch.randn(2, 8), torch.randn(8)), "cpp")
    target = Target.current("cpp")
    verdict = verdicts.check(impl, impl.default_config(target), target)
    assert verdict.status is Status.RUNTIME_ERROR and "RuntimeError: launch went wrong" in verdict.message


def test_config_outside_the_space_is_refused(registry):
    _register(replaces=bias_gelu, params={"chunk": [1, 2]})
    (impl,) = candidates(trace(bias_gelu, torch.randn(2, 8), torch.randn(8)), "cpp")
    from kernelgen.errors import KernelgenError
    from kernelgen.ir.values import Config

    with pytest.raises(KernelgenError, match="chunk=3"):
        impl.build(Config(chunk=3), Target.current("cpp"))


def test_a_change_of_compile_flags_is_a_new_custom_call_hash(registry, monkeypatch):
    from kernelgen.backends import cpp

    _register(replaces=bias_gelu)
    x, b = torch.randn(5, 33), torch.randn(33)
    (impl,) = candidates(trace(bias_gelu, x, b), "cpp")
    before = impl.source_hash()
    flags = cpp.compile_flags()
    monkeypatch.setattr(cpp, "compile_flags", lambda: (*flags, "-fno-tree-vectorize"))
    assert impl.source_hash() != before


OFF_BY_A_LITTLE_CPP = BIAS_GELU_CPP.replace("extern \"C\" void bias_only", r'''
extern "C" void bias_gelu_off(const float* x, const float* b, float* y, int64_t rows, int64_t cols, int64_t) {
    // bias_gelu plus 0.02: right by a registered tolerance of 0.05, wrong by the shared table.
    for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = x[i] + b[i % cols];
        y[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678f)) + 0.02f;
    }
}
extern "C" void bias_only''')


@pytest.mark.parametrize(("symbol", "tolerance", "status"), [
    ("bias_gelu_off", 0.05, Status.OK),  # the registered tolerance is the check's, not one more on top of it
    ("bias_gelu_off", None, Status.WRONG_RESULT),  # without one: the shared table of kernelgen.check.compare
    ("bias_gelu", 1e-12, Status.WRONG_RESULT),  # tighter than the table: the kernel's erf rounding shows
])
def test_a_registered_tolerance_governs_the_one_check(registry, checks_here, symbol, tolerance, status):
    _register(source=OFF_BY_A_LITTLE_CPP, symbol=symbol, tolerance=tolerance, replaces=bias_gelu)
    (impl,) = candidates(trace(bias_gelu, torch.randn(6, 40), torch.randn(40)), "cpp")
    target = Target.current("cpp")
    verdict = verdicts.check(impl, impl.default_config(target), target)
    assert verdict.status is status, verdict.message
