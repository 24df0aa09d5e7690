"""Shared fixtures: an isolated kernel cache and tuning database per test session."""

from __future__ import annotations

import os

import pytest
import torch

# Without a GPU, Triton kernels run under the interpreter on torch CPU tensors. The variable must be set
# before anything imports triton, so it is set here, at collection time, for the whole suite.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Tests never write to the user's real cache or database.
    if "KERNELGEN_CACHE_DIR" not in os.environ:
        os.environ["KERNELGEN_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))
    os.environ["KERNELGEN_DB"] = f"sqlite:///{tmp_path_factory.mktemp('db') / 'session.sqlite'}"


@pytest.fixture(autouse=True)
def _kernels_for_small_regions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Untuned, a model's region of one or two small ops runs ATen (kernelgen.runtime.aten.aten_first). Test
    # shapes are tiny, so the rule would leave many regions to ATen and their kernels unchecked against eager:
    # the suite turns it off; tests of the rule itself (tests/test_records_similar.py) turn it back on.
    monkeypatch.setattr("kernelgen.runtime.aten.ENABLED", False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests marked slow (tens of seconds to two minutes: several Python processes, whole models) run first, in
    # collection order otherwise. pytest-xdist's workers take the suite in contiguous chunks and steal from each
    # other's queues once idle; a slow test that starts last keeps the run waiting on one worker while the other
    # idles (measured: the suite's slowest tests took 40-115 s each).
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
