"""The eager contract for a whole Hugging Face model through ``torch.compile(backend="kernelgen")``, shared by the
model tests: one inference or training step of ``examples/hf_models.py``'s model against eager's step on a deep
copy, outputs and every parameter's gradient compared, with kernelgen regions really running (a kernel launched,
no region replaying ATen because no kernel could run). Importing it needs transformers (the callers skip first)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from examples.hf_models import build
from kernelgen.frontend import dynamo_backend
from kernelgen.tune.model import prepare, step

# float32 at the test size: kernels reorder sums (GEMMs, norms, softmax, weight gradients over every token).
TOL = {"rtol": 2e-4, "atol": 2e-4}


def outputs(result: Any) -> list:
    """The tensors a step returned: the tensor itself, or a model output's tensor fields."""
    items = (result,) if isinstance(result, torch.Tensor) else result.to_tuple()
    return [item for item in items if isinstance(item, torch.Tensor)]


def compare_with_eager(name: str, mode: str, attention: str | None = None) -> list:
    """Run model ``name`` at test size through the backend and eagerly, assert the contract, and return the
    statistics of the graphs the backend compiled (``dynamo_backend.GraphStats``)."""
    dynamo_backend.register()
    torch._dynamo.reset()
    model, inputs = build(name, "test", attention=attention)
    prepare(model, mode)
    twin = copy.deepcopy(model)
    want = outputs(step(model, (), inputs, mode)())
    compiled = torch.compile(twin, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        got = outputs(step(compiled, (), inputs, mode)())
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)
    if mode == "train":
        for (n, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            assert (p.grad is None) == (q.grad is None), n
            if p.grad is not None:
                torch.testing.assert_close(q.grad, p.grad, **TOL, msg=lambda m, n=n: f"{n}: {m}")
    assert sum(g.runs.get("kernel", 0) for g in graphs) > 0, [g.as_dict() for g in graphs]
    assert not any(g.runs.get("eager") for g in graphs), [g.as_dict() for g in graphs]
    torch._dynamo.reset()
    return graphs


__all__ = ["TOL", "compare_with_eager", "outputs"]
