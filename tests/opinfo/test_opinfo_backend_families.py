"""ATen ops the held-out model families needed (issue 33 item 4), on PyTorch's OpInfo samples through the torch.compile
backend, forward and backward, against eager:

- ``aten.index`` with several index tensors (``__getitem__``'s samples: Mistral's sliding-window mask reads
  positions by [batch, query] indices), a gather kernel where they are on the leading dims, ATen's op otherwise;
- ``aten.convolution`` and ``aten.convolution_backward`` (``nn.functional.conv1d/2d/3d``), decomposed into a patch
  copy and GEMMs where the stride equals the kernel (a vision transformer's patch embedding,
  ``kernelgen.frontend.patches``); any other forward convolution of a contiguous input is a ``conv`` region (ATen's
  convolution called by ``aten_conv``, issue 33 item 3) and its backward ATen's op. op_db's samples have overlapping
  windows, padding, dilation or groups (the decomposition must keep them), so patch-shaped samples in the same form
  are added.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest: pip install -e '.[dev]'")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

from kernelgen.testing.opinfo import sample_inputs  # noqa: E402

TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-5}, torch.float64: {"rtol": 1e-7, "atol": 1e-7}}


def _info(name: str):
    return next(info for info in op_db if info.name == name)


def _run(op, sample, grad_tolerance: dict | None = None) -> int:
    """``op(sample)`` through the backend and eagerly: equal values and gradients (of every float input that
    requires grad; within ``grad_tolerance`` where given); returns how many kernelgen kernels ran."""
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    torch._dynamo.reset()
    dtype = sample.input.dtype
    fn = torch.compile(lambda x, *a, **k: op(x, *a, **k), backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        got = fn(sample.input, *sample.args, **sample.kwargs)
        want = op(sample.input, *sample.args, **sample.kwargs)
        torch.testing.assert_close(got, want, **TOLERANCE[dtype], equal_nan=True)
        tensors = [t for t in (sample.input, *sample.args, *sample.kwargs.values())
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if tensors:
            grad = torch.randn_like(want)
            for g, w in zip(torch.autograd.grad(got, tensors, grad), torch.autograd.grad(want, tensors, grad)):
                torch.testing.assert_close(g, w, **(grad_tolerance or TOLERANCE[dtype]), equal_nan=True)
    return sum(s.runs.get("kernel", 0) for s in graphs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_getitem_samples_through_the_backend_match_eager(dtype: torch.dtype) -> None:
    from kernelgen.runtime import aten

    info = _info("__getitem__")
    samples = sample_inputs(info, "cpu", dtype, requires_grad=True)
    assert samples
    enabled, aten.ENABLED = aten.ENABLED, False  # one-op regions run their kernel, not their ATen op
    try:
        kernels = sum(_run(info.op, sample) for sample in samples)
    finally:
        aten.ENABLED = enabled
    assert kernels, "no sample ran a kernelgen kernel: the test compared eager with itself"


def _patch_samples(info, dtype: torch.dtype) -> list:
    """Patch embeddings in the OpInfo's own sample form ``(input, weight, bias, stride=...)``: stride = kernel, with
    and without a bias, inputs that the patches tile and ones with a remainder (never read: no gradient)."""
    spatial = int(info.name[-2])
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    shapes = {1: [((2, 3, 12), (5, 3, 4)), ((1, 2, 14), (4, 2, 4))],
              2: [((2, 3, 8, 12), (6, 3, 4, 4)), ((1, 2, 9, 7), (4, 2, 2, 3))],
              3: [((1, 2, 4, 6, 4), (3, 2, 2, 3, 2))]}[spatial]
    samples = []
    for x, w in shapes:
        kernel = w[2:]
        samples.append(SampleInput(t(*x), args=(t(*w), t(w[0])), kwargs={"stride": kernel}))
        samples.append(SampleInput(t(*x), args=(t(*w), None), kwargs={"stride": kernel}))
    return samples


@pytest.mark.parametrize("name", ["nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d"])
def test_convolution_samples_and_patch_embeddings_through_the_backend_match_eager(name: str) -> None:
    info = _info(name)
    samples = sample_inputs(info, "cpu", torch.float32, requires_grad=True)
    assert samples
    # overlapping windows, padding, dilation, groups: conv regions (their one-op regions run the region's call, the
    # suite turning the untuned ATen-first rule off), eager's values and gradients
    assert sum(_run(info.op, sample) for sample in samples), f"no {name} sample ran a conv region"
    for sample in _patch_samples(info, torch.float64):
        assert _run(info.op, sample), f"the patch convolution {sample} ran no kernelgen kernel"


def test_patch_convolution_is_gemm_regions_and_leaves_no_convolution() -> None:
    from kernelgen.frontend import dynamo_backend

    info = _info("nn.functional.conv2d")
    sample = _patch_samples(info, torch.float32)[0]
    torch._dynamo.reset()
    fn = torch.compile(lambda x, *a, **k: info.op(x, *a, **k), backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        fn(sample.input, *sample.args, **sample.kwargs).sum().backward()
    assert not any("convolution" in op for g in graphs for op in g.left), [g.as_dict() for g in graphs]
    assert all(g.templates.get("gemm", 0) >= 1 for g in graphs), [g.as_dict() for g in graphs]
    channels_last = sample.input.detach().contiguous(memory_format=torch.channels_last)
    torch._dynamo.reset()
    with dynamo_backend.collect() as graphs:  # eager returns channels-last there: ATen's convolution keeps it
        got = fn(channels_last, *sample.args, **sample.kwargs)
    want = info.op(channels_last, *sample.args, **sample.kwargs)
    torch.testing.assert_close(got, want, **TOLERANCE[torch.float32])
    assert got.stride() == want.stride()
    assert any("convolution" in op for g in graphs for op in g.left)


def _gqa_samples(dtype: torch.dtype) -> list:
    """Grouped-query attention in the OpInfo's sample form (``enable_gqa=True``, which op_db's samples lack): K and
    V with a half or a quarter of Q's heads, causal or with an additive mask, Tq != Tk."""
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    mask = torch.randn(2, 4, 9, 9, generator=g, dtype=dtype)
    mask[..., ::3] = float("-inf")
    return [SampleInput(t(2, 4, 9, 8), args=(t(2, 2, 9, 8), t(2, 2, 9, 8)), kwargs={"is_causal": True, "enable_gqa": True}),
            SampleInput(t(2, 4, 9, 8), args=(t(2, 1, 9, 8), t(2, 1, 9, 8)), kwargs={"attn_mask": mask, "enable_gqa": True}),
            SampleInput(t(1, 6, 5, 16), args=(t(1, 3, 11, 16), t(1, 3, 11, 16)), kwargs={"enable_gqa": True})]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_attention_samples_and_grouped_query_attention_through_the_backend_match_eager(dtype: torch.dtype) -> None:
    info = _info("nn.functional.scaled_dot_product_attention")
    samples = [s for s in sample_inputs(info, "cpu", dtype, requires_grad=True) if not s.kwargs.get("dropout_p")]
    assert samples
    op = torch.nn.functional.scaled_dot_product_attention  # (info.op is a wrapper Dynamo does not trace into)
    # the attention backward's own tolerance (kernelgen.templates.attention_grad: dS = P * (dP - delta) cancels by
    # construction; op_db's inputs in [-9, 9] give scores of ~100 and gradients near 0 that are such differences)
    grad_tolerance = {"rtol": 1e-3, "atol": 1e-4} if dtype == torch.float32 else None
    kernels = sum(_run(op, sample, grad_tolerance) for sample in samples)
    assert kernels, "no sample ran a kernelgen kernel: the test compared eager with itself"
    for sample in _gqa_samples(dtype):
        assert _run(op, sample, grad_tolerance) >= 2, f"grouped-query attention {sample} ran no forward and backward kernel"
