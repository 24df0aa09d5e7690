"""Fixtures for registry tests: an empty active registry per test, so registrations never leak."""

from __future__ import annotations

import pytest

from kernelgen.custom_calls.implementation import forget_verdicts
from kernelgen.registry import Registry, use_registry


@pytest.fixture()
def registry() -> Registry:
    forget_verdicts()
    with use_registry() as reg:
        yield reg
    forget_verdicts()
