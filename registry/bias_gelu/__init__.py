"""bias_gelu: ``gelu(x + b)`` (exact, erf-based) with ``b`` broadcast over rows, hand-written in C++ (CPU),
Triton, CUDA, HIP and SYCL. Each registration implements ``custom_call("bias_gelu", x, b)`` and replaces
the same function in plain torch, so it competes with the generated pointwise kernel."""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from kernelgen.registry import register_custom_call


def bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The reference, and the pattern the kernels replace."""
    return F.gelu(x + b)


EXAMPLES = [
    (((4, 64), "float32"), ((64,), "float32")),
    (((17, 1001), "float32"), ((1001,), "float32")),
    (((2, 5, 128), "float32"), ((128,), "float32")),
]


def _b_is_a_row(specs) -> bool:  # the kernels read b as one row of `cols` values
    return specs[0].rank >= 1 and specs[0].shape[-1] > 0 and tuple(specs[1].shape) == (specs[0].shape[-1],)


def _rows_cols(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1]
    return x.numel() // cols, cols


COMMON = dict(reference=bias_gelu, replaces=bias_gelu, examples=EXAMPLES)


@register_custom_call("bias_gelu", language="cpp", source="bias_gelu.cpp", symbol="kernelgen_bias_gelu_f32",
                      params={"rows_per_task": [1, 4, 16, 64]}, default={"rows_per_task": 4},
                      constraints=[_b_is_a_row], dtypes=("float32",), **COMMON)
def bias_gelu_cpp(inputs, outputs, config, kernel):
    x, b = inputs
    rows, cols = _rows_cols(x)
    kernel(x, b, outputs[0], rows, cols, config["rows_per_task"], kernel.num_threads)


@register_custom_call("bias_gelu", language="triton", source="bias_gelu_triton.py", symbol="bias_gelu_kernel",
                      params={"BLOCK_R": [1, 4, 16], "BLOCK_C": [64, 256, 1024], "num_warps": [2, 4, 8]},
                      default={"BLOCK_R": 4, "BLOCK_C": 256, "num_warps": 4},
                      constraints=[_b_is_a_row, lambda BLOCK_R, BLOCK_C: BLOCK_R * BLOCK_C <= 8192],
                      dtypes=("float32", "float16", "bfloat16"), **COMMON)
def bias_gelu_triton(inputs, outputs, config, kernel):
    x, b = inputs
    rows, cols = _rows_cols(x)
    br, bc = config["BLOCK_R"], config["BLOCK_C"]
    grid = ((rows + br - 1) // br, (cols + bc - 1) // bc)
    kernel[grid](x, b, outputs[0], rows, cols, BLOCK_R=br, BLOCK_C=bc, num_warps=config["num_warps"])


def _gpu_launcher(inputs, outputs, config, kernel):
    x, b = inputs
    rows, cols = _rows_cols(x)
    stream = torch.cuda.current_stream().cuda_stream
    kernel(x, b, outputs[0], rows, cols, config["block"], config["vec"], ctypes.c_void_p(stream))


_GPU = dict(params={"block": [128, 256, 512, 1024], "vec": [1, 4]}, default={"block": 256, "vec": 4},
            constraints=[_b_is_a_row], dtypes=("float32",), **COMMON)
register_custom_call("bias_gelu", language="cuda", source="bias_gelu.cu", symbol="kernelgen_bias_gelu_cuda",
                     **_GPU)(_gpu_launcher)
register_custom_call("bias_gelu", language="hip", source="bias_gelu.hip", symbol="kernelgen_bias_gelu_hip",
                     **_GPU)(_gpu_launcher)


@register_custom_call("bias_gelu", language="sycl", source="bias_gelu.cl", symbol="kernelgen_bias_gelu_cl",
                      constraints=[_b_is_a_row], dtypes=("float32",), **COMMON)
def bias_gelu_opencl(inputs, outputs, config, kernel):
    x, b = inputs
    kernel(x.numel(), x, b, outputs[0], x.shape[-1], writes=outputs)


@register_custom_call("bias_gelu", language="sycl", variant="dpcpp", source="bias_gelu.sycl.cpp",
                      symbol="kernelgen_bias_gelu_sycl", params={"group": [64, 128, 256]}, default={"group": 128},
                      constraints=[_b_is_a_row], dtypes=("float32",), **COMMON)
def bias_gelu_sycl(inputs, outputs, config, kernel):
    x, b = inputs
    rows, cols = _rows_cols(x)
    kernel(x, b, outputs[0], rows, cols, config["group"])
