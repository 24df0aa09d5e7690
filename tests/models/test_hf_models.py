"""Hugging Face ``transformers`` models built from configs (``examples/hf_models.py``, test size: 2 layers,
hidden 64, 2 x 16 tokens; a two-stage ResNet at 32²) through ``torch.compile(backend="kernelgen")``, inference
and a training step, against eager: outputs and every parameter's gradient, with kernelgen regions really
running. Skipped where transformers is not installed (``pip install -e '.[models]'``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[models]'")

from examples.hf_models import NAMES  # noqa: E402
from tests.models.eager_contract import compare_with_eager  # noqa: E402


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_hf_model_matches_eager_through_the_backend(name, mode):
    compare_with_eager(name, mode)
