"""rms_norm: ``x * rsqrt(mean(x**2, -1) + 1e-6) * w`` over the last dimension, hand-written in C++ (CPU),
Triton, CUDA, HIP and SYCL. Each registration implements ``custom_call("rms_norm", x, w)`` and replaces
the same function written in plain torch, so it competes with the generated row-reduction kernel."""

from __future__ import annotations

import ctypes

import torch

from kernelgen.registry import register_custom_call

EPS = 1e-6


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The reference, and the pattern the kernels replace."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


# Shapes `kernelgen registry check` runs: a tiny one, an odd width, and rows that are not a tile multiple.
EXAMPLES = [
    (((4, 64), "float32"), ((64,), "float32")),
    (((33, 1000), "float32"), ((1000,), "float32")),
    (((2, 3, 256), "float32"), ((256,), "float32")),
]


def _w_is_a_row(specs) -> bool:  # the kernels read w as one row of `cols` weights
    return specs[0].rank >= 1 and specs[0].shape[-1] > 0 and tuple(specs[1].shape) == (specs[0].shape[-1],)


def _rows_cols(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1]
    return x.numel() // cols, cols


COMMON = dict(reference=rms_norm, replaces=rms_norm, examples=EXAMPLES)


@register_custom_call("rms_norm", language="cpp", source="rms_norm.cpp", symbol="kernelgen_rms_norm_f32",
                      params={"rows_per_task": [1, 8, 32], "LANES": [8, 32, 64]}, defines=("LANES",),
                      default={"rows_per_task": 8, "LANES": 32}, constraints=[_w_is_a_row],
                      dtypes=("float32",), **COMMON)
def rms_norm_cpp(inputs, outputs, config, kernel):
    x, w = inputs
    rows, cols = _rows_cols(x)
    kernel(x, w, outputs[0], rows, cols, ctypes.c_float(EPS), config["rows_per_task"], kernel.num_threads)


def _triton_fits(rows_per_program, specs) -> bool:
    return _w_is_a_row(specs) and rows_per_program * triton_block(specs[0].shape[-1]) <= 1 << 16


def triton_block(cols: int) -> int:
    return 1 << max(cols - 1, 0).bit_length()


@register_custom_call("rms_norm", language="triton", source="rms_norm_triton.py", symbol="rms_norm_kernel",
                      params={"rows_per_program": [1, 4, 16], "num_warps": [2, 4, 8]},
                      constraints=[_triton_fits], dtypes=("float32", "float16", "bfloat16"), **COMMON)
def rms_norm_triton(inputs, outputs, config, kernel):
    x, w = inputs
    rows, cols = _rows_cols(x)
    per = config["rows_per_program"]
    grid = ((rows + per - 1) // per,)
    kernel[grid](x, w, outputs[0], rows, cols, EPS, ROWS=per, BLOCK=triton_block(cols),
                 num_warps=config["num_warps"])


def _gpu_launcher(inputs, outputs, config, kernel):
    x, w = inputs
    rows, cols = _rows_cols(x)
    stream = torch.cuda.current_stream().cuda_stream
    kernel(x, w, outputs[0], rows, cols, ctypes.c_float(EPS), config["block"], ctypes.c_void_p(stream))


register_custom_call("rms_norm", language="cuda", source="rms_norm.cu", symbol="kernelgen_rms_norm_cuda",
                     params={"block": [64, 128, 256, 512, 1024]}, default={"block": 256},
                     constraints=[_w_is_a_row], dtypes=("float32",), **COMMON)(_gpu_launcher)
register_custom_call("rms_norm", language="hip", source="rms_norm.hip", symbol="kernelgen_rms_norm_hip",
                     params={"block": [64, 128, 256, 512, 1024]}, default={"block": 256},
                     constraints=[_w_is_a_row], dtypes=("float32",), **COMMON)(_gpu_launcher)


@register_custom_call("rms_norm", language="sycl", source="rms_norm.cl", symbol="kernelgen_rms_norm_cl",
                      constraints=[_w_is_a_row], dtypes=("float32",), **COMMON)
def rms_norm_opencl(inputs, outputs, config, kernel):
    x, w = inputs
    rows, cols = _rows_cols(x)
    kernel(rows, x, w, outputs[0], cols, EPS, writes=outputs)


@register_custom_call("rms_norm", language="sycl", variant="dpcpp", source="rms_norm.sycl.cpp",
                      symbol="kernelgen_rms_norm_sycl", params={"group": [32, 64, 128, 256]},
                      default={"group": 128}, constraints=[_w_is_a_row], dtypes=("float32",), **COMMON)
def rms_norm_sycl(inputs, outputs, config, kernel):
    x, w = inputs
    rows, cols = _rows_cols(x)
    kernel(x, w, outputs[0], rows, cols, ctypes.c_float(EPS), config["group"])
