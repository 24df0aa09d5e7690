"""RMSNorm in Triton: each program normalises ROWS rows held in one [ROWS, BLOCK] tile (BLOCK >= cols)."""

import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, rows, cols, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BLOCK)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(x_ptr + r * cols + c, mask=mask, other=0.0).to(tl.float32)
    scale = tl.rsqrt(tl.sum(x * x, axis=1) / cols + eps)
    w = tl.load(w_ptr + c, mask=c < cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + r * cols + c, x * scale[:, None] * w, mask=mask)
