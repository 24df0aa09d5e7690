"""Layer norm's forward stays whole through the torch.compile backend (``kernelgen.frontend.decompositions``) and
lowers by its own ATen rule (``aten.native_layer_norm``), which no OpInfo entry calls by that name: PyTorch's
``nn.functional.layer_norm`` samples run through the backend here, forward and backward, against eager."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest: pip install -e '.[dev]'")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from kernelgen.testing.opinfo import sample_inputs  # noqa: E402

LAYER_NORM = next(info for info in op_db if info.name == "nn.functional.layer_norm")
# bfloat16/float16 results are rounded once from float math on both sides; the float32 ones differ by summation order
TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-7, "atol": 1e-7},
             torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2}, torch.float16: {"rtol": 1e-3, "atol": 1e-3}}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: str(d).removeprefix("torch."))
def test_layer_norm_samples_through_the_backend_match_eager(dtype: torch.dtype) -> None:
    from kernelgen.frontend import dynamo_backend

    samples = sample_inputs(LAYER_NORM, "cpu", dtype, requires_grad=dtype in (torch.float32, torch.float64))
    assert samples
    kernels = 0
    for sample in samples:
        torch._dynamo.reset()
        fn = torch.compile(lambda x, *a, **k: torch.nn.functional.layer_norm(x, *a, **k), backend="kernelgen")
        with dynamo_backend.collect() as graphs:
            got = fn(sample.input, *sample.args, **sample.kwargs)
        kernels += sum(s.runs.get("kernel", 0) for s in graphs)
        want = torch.nn.functional.layer_norm(sample.input, *sample.args, **sample.kwargs)
        torch.testing.assert_close(got, want, **TOLERANCE[dtype], equal_nan=True)
        if not sample.input.requires_grad:
            continue
        tensors = [t for t in (sample.input, *sample.args, *sample.kwargs.values())
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        grad = torch.randn_like(want)
        got_grads = torch.autograd.grad(got, tensors, grad)
        want_grads = torch.autograd.grad(want, tensors, grad)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, **TOLERANCE[dtype], equal_nan=True)
    assert kernels, "no sample ran a kernelgen kernel: the test compared eager with itself"
