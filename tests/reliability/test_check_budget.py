"""A signature too large to check in a worker is served by its shape family (one generic kernel, checked at a
small batch size), else eagerly; the worker is never asked for more than ``KERNELGEN_CHECK_MAX_BYTES``.

Before: the first call on a 2^31-element int8 tensor made the check worker allocate ~9 bytes per element
(15.5 GB). The budget is lowered here so that a 1 MB tensor stands for the 2 GB one.
"""

from __future__ import annotations

import logging

import pytest
import torch

import kernelgen
from kernelgen.check import verdicts
from kernelgen.check.budget import MAX_BYTES_ENV
from kernelgen.check.compare import make_inputs
from kernelgen.ir.target import Target
from kernelgen.ir.values import TensorSpec
from kernelgen.runtime.implementations import implementations_for


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setenv(MAX_BYTES_ENV, str(1 << 20))
    verdicts.forget()
    yield
    verdicts.forget()


def test_a_first_call_too_large_to_check_runs_its_shape_familys_checked_kernel(small_budget) -> None:
    fast = kernelgen.compile(lambda x: x + 3)
    x = torch.randint(-100, 100, (1 << 20,), dtype=torch.int8)
    assert torch.equal(fast(x), x + 3)
    info = fast.explain(x)
    assert info.get("family") and info["implementation"] == "pointwise"  # generic kernel from the first call


def test_without_a_shape_family_it_runs_eagerly_and_says_why(small_budget, caplog) -> None:
    fast = kernelgen.compile(lambda x: x + 3, dynamic=False)
    x = torch.randint(-100, 100, (1 << 20,), dtype=torch.int8)
    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        assert torch.equal(fast(x), x + 3)
    assert fast.explain(x)["implementation"] == "eager"
    assert any(MAX_BYTES_ENV in r.getMessage() for r in caplog.records)


def test_an_oversized_check_starts_no_worker(small_budget, monkeypatch) -> None:
    from kernelgen.frontend.capture import trace

    graph = trace(lambda x: x * 2, TensorSpec((1 << 20,), "float32"))
    impl = implementations_for(graph, "cpp")[0]
    target = Target.current("cpp")

    def no_worker(*_a, **_k):
        raise AssertionError("a worker was started for a check over the budget")

    monkeypatch.setattr(verdicts, "IsolatedMeasurer", no_worker)
    verdict = verdicts.check(impl, impl.default_config(target), target, quiet=True)
    assert not verdict.ok and MAX_BYTES_ENV in verdict.message and verdict.message.startswith("retryable")


def test_integer_inputs_are_drawn_in_their_own_dtype() -> None:
    # 1 byte per int8 element (it was 9: drawn as int64, then cast), and the same values as before.
    ((base, view),) = make_inputs([TensorSpec((1000,), "int8")], seed=5)
    gen = torch.Generator().manual_seed(5)
    assert base.dtype == torch.int8 and base.element_size() == 1
    assert torch.equal(view, torch.randint(-8, 9, (1000,), generator=gen, dtype=torch.int64).to(torch.int8))
