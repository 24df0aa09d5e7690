"""Custom calls compete in ``torch.compile`` regions with ``tune="auto"`` as they do in ``kernelgen.compile``:
the measurement worker matches a pattern in a region's ATen form as the parent does. Uses the project's own
``registry/`` kernels (``bias_gelu`` replaces ``F.gelu(x + b)``).

Before: every trial of a custom call in a region failed its worker setup ("the measurement worker cannot set
up 'custom:bias_gelu/cpp': NoTemplateError"), so a custom call could never win a region.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from kernelgen.check import verdicts
from kernelgen.db import open_db
from kernelgen.registry import Registry, use_registry


class BiasGelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(256))

    def forward(self, x):
        return F.gelu(x + self.b)


@pytest.mark.timeout(600)
def test_the_projects_bias_gelu_competes_in_a_tuned_region(tmp_path, caplog) -> None:
    verdicts.forget()
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    model = BiasGelu().eval()
    x = torch.randn(64, 256)
    with use_registry(Registry(), load_defaults=True), caplog.at_level(logging.WARNING, logger="kernelgen"):
        compiled = torch.compile(model, backend="kernelgen",
                                 options={"backend": "cpp", "tune": "auto", "trials": 2, "db": url})
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
    assert not [r for r in caplog.records if "cannot set up" in r.getMessage()], caplog.text
    with open_db(url) as db:
        measured = {(r.implementation, r.measurement.status.value) for r in db.records()}
    assert ("custom:bias_gelu/cpp", "ok") in measured  # measured in the region's worker, beside the template
    assert any(impl == "pointwise" for impl, _ in measured)
