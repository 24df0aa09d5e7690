"""Attention backward problems (ATen's CPU flash backward op on the forward's saved output and logsumexp) with
small inputs: shared by the C++ and Triton attention backward template tests."""

from __future__ import annotations


import torch

aten = torch.ops.aten


def forward(q, k, v, causal=False, mask=None, scale=None):
    return aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


def make(b, h, lq, lk, d, dv, dtype=torch.float32, causal=False, mask=None, scale=None, seed=0, kv_heads=None):
    """``kv_heads`` < ``h``: grouped-query attention (ATen's CPU flash ops take K and V with fewer heads)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g).to(dtype)
    k = torch.randn(b, kv_heads or h, lk, d, generator=g).to(dtype)
    v = torch.randn(b, kv_heads or h, lk, dv, generator=g).to(dtype)
    grad = torch.randn(b, h, lq, dv, generator=g).to(dtype)
    if mask == "float":
        mask = torch.randn(1, h, lq, lk, generator=g).to(dtype)
    elif mask == "hiding":  # ATen's flash op takes a float mask: -inf hides a key (SDPA turns bool masks into it)
        seen = torch.rand(b, 1, lq, lk, generator=g) > 0.3
        seen[:, :, 1] = False  # a query that sees no key: zero gradients, as ATen's kernel gives
        mask = torch.zeros(seen.shape, dtype=dtype).masked_fill(~seen, float("-inf"))
    out, lse = forward(q, k, v, causal, mask, scale)
    return grad, q, k, v, out, lse, mask


def backward(causal=False, scale=None, parts=(0, 1, 2)):
    def fn(grad, q, k, v, out, lse, *mask):
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask[0] if mask else None, scale=scale)
        return tuple(grads[i] for i in parts)

    fn.__name__ = f"attention_backward{'_causal' if causal else ''}{'_scaled' if scale else ''}_{''.join('qkv'[i] for i in parts)}"
    return fn


def cases():
    def inputs(*args, **kwargs):
        grad, q, k, v, out, lse, mask = make(*args, **kwargs)
        return (grad, q, k, v, out, lse) + (() if mask is None else (mask,))

    return [
        (backward(), inputs(2, 3, 37, 29, 16, 16)),
        (backward(causal=True), inputs(1, 2, 45, 45, 8, 8)),
        (backward(causal=True, parts=(1,)), inputs(1, 2, 20, 33, 16, 16, causal=True)),
        (backward(scale=0.3, parts=(2, 0)), inputs(2, 1, 19, 23, 12, 12, scale=0.3)),
        (backward(), inputs(1, 2, 17, 21, 8, 8, mask="float")),
        (backward(causal=True), inputs(2, 2, 16, 16, 8, 8, causal=True, mask="hiding")),
        (backward(), inputs(1, 2, 24, 24, 16, 16, dtype=torch.float64)),
        (backward(), inputs(1, 2, 24, 24, 16, 16, dtype=torch.bfloat16)),
        # grouped-query attention: dK and dV of a key/value head sum those of its query heads
        (backward(), inputs(2, 4, 19, 23, 16, 16, kv_heads=2)),
        (backward(causal=True, parts=(1, 2)), inputs(1, 6, 33, 33, 8, 8, causal=True, mask="hiding", kv_heads=2)),
        (backward(), inputs(1, 4, 24, 24, 16, 16, dtype=torch.bfloat16, kv_heads=1)),
    ]


def ids():
    out = []
    for fn, inputs in cases():
        extra = "_mask" if len(inputs) > 6 else ""
        gqa = f"_gqa{inputs[1].shape[1]}x{inputs[2].shape[1]}" if inputs[1].shape[1] != inputs[2].shape[1] else ""
        out.append(f"{fn.__name__}{extra}{gqa}_{str(inputs[1].dtype).removeprefix('torch.')}_{inputs[1].shape[2]}x{inputs[2].shape[2]}")
    return out


TOLERANCE = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: dict(rtol=1e-9, atol=1e-9),
             torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}
