"""The torch.compile backend rendering Triton: under ``TRITON_INTERPRET=1`` on CPU tensors (tiny shapes), or
on a GPU where there is one. Outputs land on the inputs' device; forward and backward match eager."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's first import
pytest.importorskip("triton")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernelgen.backends.triton import interpreter_active  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402

pytestmark = pytest.mark.skipif(not (interpreter_active() or torch.cuda.is_available()),
                                reason="triton was imported before TRITON_INTERPRET=1 was set")
DEVICE = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"
dynamo_backend.register()


class NormGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = nn.LayerNorm(16), nn.Linear(16, 16)

    def forward(self, x):
        return torch.softmax(F.gelu(self.proj(self.norm(x))) * 0.5, -1)


@pytest.mark.slow  # the interpreter runs each kernel instance in Python
def test_norm_gelu_model_on_triton_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = NormGelu().to(DEVICE)
    x = torch.randn(4, 16, device=DEVICE, requires_grad=True)
    compiled = torch.compile(model, backend="kernelgen", options={"backend": "triton"})
    with dynamo_backend.collect() as graphs:
        got = compiled(x)
        got.sum().backward()
    ours = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    want = model(x)
    want.sum().backward()
    assert got.device == x.device
    torch.testing.assert_close(got, want)
    for a, b in zip(ours, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(a, b)
    assert all(s.runs.get("kernel", 0) == s.regions > 0 for s in graphs)
    torch._dynamo.reset()
