"""Registration validates eagerly: clear RegistryErrors for bad registrations, never for a missing toolchain."""

from __future__ import annotations

import pytest
from cc_helpers import BIAS_GELU_CPP, bias_gelu, launch

from kernelgen.custom_calls import get_language
from kernelgen.errors import RegistryError
from kernelgen.registry import register_custom_call


def _register(name="bg", **overrides):
    kwargs = dict(language="cpp", source=BIAS_GELU_CPP, symbol="bias_gelu", reference=bias_gelu)
    kwargs.update(overrides)
    return register_custom_call(name, **kwargs)(launch())


def test_valid_registration_is_listed(registry):
    _register(params={"chunk": [1, 4]}, constraints=[lambda chunk: chunk <= 4])
    (entry,) = registry.entries()
    assert entry.implementation_name == "custom:bg/cpp"
    assert entry.arity == 2 and [p.name for p in entry.params] == ["chunk"]


def test_duplicate_name_language_platform_is_rejected(registry):
    _register()
    with pytest.raises(RegistryError, match="already registered.*variant"):
        _register()


def test_a_variant_is_not_a_duplicate(registry):
    _register()
    _register(variant="slow")
    assert sorted(e.implementation_name for e in registry.entries()) == ["custom:bg/cpp", "custom:bg/cpp.slow"]


@pytest.mark.parametrize("params, message", [
    ({"block": []}, "no choices"),
    ({"block": [1, object()]}, "not a JSON scalar"),
    ({"block": 64}, "list of choices"),
    ({"block": [1, 1]}, "repeats a choice"),
    ({"specs": [1]}, "identifier other than"),
    ([("block", [1])], "must be a dict"),
])
def test_invalid_params(registry, params, message):
    with pytest.raises(RegistryError, match=message):
        _register(params=params)
    assert registry.entries() == []


@pytest.mark.parametrize("constraints, message", [
    ([42], "not callable"),
    ([lambda blok: blok > 1], "unknown param 'blok'"),
    ([lambda **kw: True], "must name its params"),
])
def test_invalid_constraints(registry, constraints, message):
    with pytest.raises(RegistryError, match=message):
        _register(params={"block": [1, 2]}, constraints=constraints)


def test_constraints_may_read_input_specs(registry):
    _register(params={"block": [1, 2]}, constraints=[lambda block, specs: block <= specs[0].shape[-1]])
    (entry,) = registry.entries()
    from kernelgen.ir.values import TensorSpec

    space = entry.space((TensorSpec((4, 1), "float32"), TensorSpec((1,), "float32")), None)
    assert [dict(c) for c in space] == [{"block": 1}]


def test_reference_with_the_wrong_signature(registry):
    with pytest.raises(RegistryError, match="does not take the call's 2 tensor inputs"):
        _register(reference=lambda x: x, inputs=("x", "b"))
    with pytest.raises(RegistryError, match="does not take the call's 2 tensor inputs"):
        _register(reference=lambda x: x, replaces=bias_gelu)
    with pytest.raises(RegistryError, match="name its tensor inputs"):
        _register(reference=lambda *xs: xs[0])


def test_same_name_must_keep_its_arity(registry):
    _register()
    with pytest.raises(RegistryError, match="takes 1 inputs but its cpp version takes 2"):
        register_custom_call("bg", language="triton", source=object(), reference=lambda x: x)(launch())


def test_missing_reference_launcher_or_source(registry):
    with pytest.raises(RegistryError, match="needs reference="):
        _register(reference=None)
    with pytest.raises(RegistryError, match=r"must take \(inputs, outputs, config\)"):
        register_custom_call("bg", language="cpp", source=BIAS_GELU_CPP, symbol="bias_gelu",
                             reference=bias_gelu)(lambda inputs: None)
    with pytest.raises(RegistryError, match="source file .* not found"):
        _register(source="no_such_kernel.cpp")
    with pytest.raises(RegistryError, match="needs symbol="):
        _register(symbol=None)


def test_unknown_language_or_platform(registry):
    with pytest.raises(RegistryError, match="unknown language 'fortran'"):
        _register(language="fortran")
    with pytest.raises(RegistryError, match=r"platforms \['cuda'\] must be some of \['cpu'\]"):
        _register(platforms=["cuda"])


def test_missing_toolchain_marks_the_entry_unavailable(registry, monkeypatch):
    cuda = get_language("cuda")
    monkeypatch.setattr(type(cuda), "compiler", lambda self: None)
    register_custom_call("bg", language="cuda", source="__global__ void k() {}\n", symbol="k",
                         reference=bias_gelu)(launch())
    (entry,) = registry.entries()
    availability = cuda.availability(entry)
    assert availability.state == "unavailable"
    assert "nvcc not found" in availability.reason and "install" in availability.reason


def test_missing_prebuilt_library_is_unavailable_not_an_error(registry, tmp_path):
    _register(source=None, library=tmp_path / "libmissing.so")
    (entry,) = registry.entries()
    availability = get_language("cpp").availability(entry)
    assert availability.state == "unavailable" and "libmissing.so not found" in availability.reason


def test_triton_needs_a_kernel_and_replaces_must_be_callable(registry):
    with pytest.raises(RegistryError, match="needs source=, a @triton.jit kernel"):
        register_custom_call("bg", language="triton", reference=bias_gelu)(launch())
    with pytest.raises(RegistryError, match="replaces= must be a plain torch function"):
        _register(replaces="bias_gelu")
