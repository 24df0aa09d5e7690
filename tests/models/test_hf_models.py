"""Hugging Face ``transformers`` models built from configs (``examples/hf_models.py``, test size: 2 layers,
hidden 64, 2 x 16 tokens; a two-stage ResNet at 32²) through ``torch.compile(backend="kernelgen")``, inference
and a training step, against eager: outputs and every parameter's gradient, with kernelgen regions really
running. Skipped where transformers is not installed (``pip install -e '.[models]'``)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[models]'")

from examples.hf_models import NAMES, build  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.tune.model import prepare, step  # noqa: E402

# float32 at the test size: kernels reorder sums (GEMMs, norms, softmax, weight gradients over every token).
TOL = {"rtol": 2e-4, "atol": 2e-4}


def _first(out):
    return out if isinstance(out, torch.Tensor) else out.to_tuple()[0]


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_hf_model_matches_eager_through_the_backend(name, mode):
    dynamo_backend.register()
    model, inputs = build(name, "test")
    prepare(model, mode)
    twin = copy.deepcopy(model)
    want = _first(step(model, (), inputs, mode)())
    compiled = torch.compile(twin, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        got = _first(step(compiled, (), inputs, mode)())
    torch.testing.assert_close(got, want, **TOL)
    if mode == "train":
        for (n, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            assert (p.grad is None) == (q.grad is None), n
            if p.grad is not None:
                torch.testing.assert_close(q.grad, p.grad, **TOL, msg=lambda m, n=n: f"{n}: {m}")
    assert sum(g.runs.get("kernel", 0) for g in graphs) > 0, [g.as_dict() for g in graphs]
    assert not any(g.runs.get("eager") for g in graphs), [g.as_dict() for g in graphs]
    torch._dynamo.reset()
