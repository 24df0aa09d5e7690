"""The public API is small and deliberate: this test freezes it, so a change is a conscious decision."""

from __future__ import annotations

import kernelgen

EXPECTED = [
    "CompiledFunction",
    "Config",
    "Constraint",
    "Graph",
    "KernelgenError",
    "Measurement",
    "Param",
    "SearchSpace",
    "Source",
    "Status",
    "Target",
    "TensorSpec",
    "TimeStats",
    "TuningRecord",
    "__version__",
    "compile",
    "custom_call",
    "register_custom_call",
    "trace",
]


def test_all_is_sorted_and_frozen() -> None:
    assert kernelgen.__all__ == sorted(kernelgen.__all__)
    assert kernelgen.__all__ == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in kernelgen.__all__:
        assert getattr(kernelgen, name) is not None


def test_the_entry_points_the_readme_uses_are_the_real_ones() -> None:
    from kernelgen import api, registry
    from kernelgen.runtime.compiled import CompiledFunction

    assert kernelgen.compile is api.compile
    assert kernelgen.CompiledFunction is CompiledFunction
    assert kernelgen.register_custom_call is registry.register_custom_call
    assert kernelgen.custom_call is registry.custom_call
