"""The same front-end guarantees on the Triton backend (interpreter on CPU tensors, or a GPU): result
structure, gradients, ``out=`` and outputs allocated on the inputs' device."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

from kernelgen.api import compile  # noqa: E402
from kernelgen.errors import InputMismatchError  # noqa: E402

pytestmark = needs_triton


def pair(x, b):
    y = F.gelu(x + b)
    return [y, (y * 2,)]


def test_structure_gradients_and_device_on_triton():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 16, generator=g).to(DEVICE).requires_grad_()
    b = torch.randn(16, generator=g).to(DEVICE)
    f = compile(pair, backend="triton")
    got, want = f(x, b), pair(x, b)
    assert f.explain(x, b)["implementation"] == "pointwise"
    assert isinstance(got, list) and isinstance(got[1], tuple)
    for o, w in ((got[0], want[0]), (got[1][0], want[1][0])):
        assert o.device == x.device and o.grad_fn is not None
        torch.testing.assert_close(o, w)
    (got[0].sum() + got[1][0].sum()).backward()
    ours = x.grad.clone()
    x.grad = None
    (want[0].sum() + want[1][0].sum()).backward()
    torch.testing.assert_close(ours, x.grad)


def test_out_on_the_inputs_device_is_accepted_and_another_refused():
    x = torch.randn(8, 16, device=DEVICE)
    f = compile(lambda a: torch.sigmoid(a) * a, backend="triton")
    out = torch.empty(8, 16, device=DEVICE)
    assert f(x, out=out) is out
    torch.testing.assert_close(out, torch.sigmoid(x) * x)
    with pytest.raises(InputMismatchError, match="out"):
        f(x, out=torch.empty(8, 16, device="meta"))


def test_explain_points_at_the_triton_module_it_runs():
    from pathlib import Path

    x, b = torch.randn(4, 16).to(DEVICE), torch.randn(16).to(DEVICE)
    f = compile(lambda x, b: F.gelu(x + b), backend="triton")
    explained = f.explain(x, b)
    path = Path(explained["source_path"])
    assert path.suffix == ".py" and path.is_file()
    text = path.read_text()
    assert "@triton.jit" in text and "tl.erf" in text  # the kernel itself, gelu included
    assert explained["implementation_hash"]
