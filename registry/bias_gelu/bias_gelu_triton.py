"""Fused bias + exact GELU in Triton: each program computes one [BLOCK_R, BLOCK_C] tile of gelu(x + b)."""

import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    mask = (r < rows) & (c < cols)
    v = tl.load(x_ptr + r * cols + c, mask=mask, other=0.0).to(tl.float32)
    v += tl.load(b_ptr + c, mask=c < cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + r * cols + c, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=mask)
