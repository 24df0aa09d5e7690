"""``kernelgen.check.verdicts``: dispatch's gate. Any implementation (a template here, through the fake) runs in
the caller's process only after its config passed a check in a worker; the next candidate takes over."""

from __future__ import annotations

import pytest
import torch

from kernelgen.check import verdicts
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Status

from tune_fakes import FakeImpl, relu_add_graph


@pytest.fixture(autouse=True)
def fresh_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    verdicts.forget()
    yield
    verdicts.forget()


@pytest.mark.timeout(120)
def test_a_crashing_first_choice_falls_back_to_the_next_candidate() -> None:
    impl = FakeImpl(relu_add_graph())
    target = Target.current("cpp")
    picked = verdicts.build_checked([(impl, Config(mode="segv", reps=1)), (impl, Config(mode="garbage", reps=1)),
                                    (impl, Config(mode="ok", reps=1))], target)
    assert picked is not None and picked.config == Config(mode="ok", reps=1) and picked.fallback
    x, y, out = torch.randn(256), torch.randn(256), torch.empty(256)
    picked.launcher(x, y, out)  # the survivor runs here
    torch.testing.assert_close(out, torch.relu(x + y))
    assert verdicts.check(impl, Config(mode="segv", reps=1), target).status is Status.RUNTIME_ERROR


@pytest.mark.timeout(120)
def test_nothing_passes_means_none(monkeypatch) -> None:
    monkeypatch.setenv(verdicts.TIMEOUT_ENV, "2")
    impl = FakeImpl(relu_add_graph())
    assert verdicts.build_checked([(impl, Config(mode="hang", reps=1)), (impl, Config(mode="syntax", reps=1))],
                                 Target.current("cpp")) is None


def test_check_timeout_must_be_positive(monkeypatch) -> None:
    from kernelgen.errors import KernelgenError

    monkeypatch.setenv(verdicts.TIMEOUT_ENV, "-3")
    with pytest.raises(KernelgenError, match="KERNELGEN_CHECK_TIMEOUT"):
        verdicts.check_timeout()


def test_the_key_changes_with_config_threads_and_signature() -> None:
    impl, other = FakeImpl(relu_add_graph()), FakeImpl(relu_add_graph(128))
    target = Target.current("cpp")
    base = verdicts._key(impl, Config(mode="ok", reps=1), target, 1)[0]
    assert base == verdicts._key(impl, Config(mode="ok", reps=1), target, 1)[0]
    assert base != verdicts._key(impl, Config(mode="ok", reps=2), target, 1)[0]
    assert base != verdicts._key(impl, Config(mode="ok", reps=1), target, 2)[0]
    assert base != verdicts._key(other, Config(mode="ok", reps=1), target, 1)[0]
