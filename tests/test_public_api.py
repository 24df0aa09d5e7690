"""The public API is small and deliberate: this test freezes it, so a change is a conscious decision."""

from __future__ import annotations

import kernelgen

EXPECTED = [
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
    "trace",
]


def test_all_is_sorted_and_frozen() -> None:
    assert kernelgen.__all__ == sorted(kernelgen.__all__)
    assert kernelgen.__all__ == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in kernelgen.__all__:
        assert getattr(kernelgen, name) is not None
