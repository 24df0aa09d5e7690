"""Other ways to give a kernel: an in-memory @triton.jit function and a prebuilt shared library + symbol."""

from __future__ import annotations

import pytest
import torch
from cc_helpers import BIAS_GELU_CPP, bias_gelu, launch

from kernelgen.custom_calls import get_language
from kernelgen.custom_calls.candidates import candidates
from kernelgen.frontend.capture import trace
from kernelgen.ir.target import Target
from kernelgen.registry import register_custom_call


def test_prebuilt_library_and_symbol(registry):
    from kernelgen.backends.cpp import build_shared_library

    library = build_shared_library(BIAS_GELU_CPP, name="prebuilt_bias_gelu")
    register_custom_call("bg", language="cpp", library=str(library), symbol="bias_gelu", reference=bias_gelu,
                         replaces=bias_gelu)(launch())
    x, b = torch.randn(3, 24), torch.randn(24)
    (impl,) = candidates(trace(bias_gelu, x, b), "cpp")
    run = impl.build(impl.default_config(Target.current("cpp")), Target.current("cpp"))
    y = torch.empty(3, 24)
    run(x, b, y)
    torch.testing.assert_close(y, bias_gelu(x, b))


def test_in_memory_triton_kernel_runs_on_the_triton_backend(registry):
    triton_lang = get_language("triton")
    if not any(triton_lang.platform_ready(p)[0] for p in ("cuda", "hip", "cpu")):
        pytest.skip(triton_lang.platform_ready("cpu")[1])
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, b_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < n
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=mask) + tl.load(b_ptr + i % cols, mask=mask), mask=mask)

    def add(x, b):
        return x + b

    @register_custom_call("add_rows", language="triton", source=add_kernel, reference=add, replaces=add,
                          params={"BLOCK": [64, 128]}, constraints=[lambda BLOCK, specs: BLOCK <= 2 * specs[0].numel])
    def launch_add(inputs, outputs, config, kernel):
        x, b = inputs
        n = x.numel()
        kernel[(triton.cdiv(n, config["BLOCK"]),)](x, b, outputs[0], n, x.shape[-1], BLOCK=config["BLOCK"])

    x, b = torch.randn(5, 20), torch.randn(20)
    graph = trace(add, x, b)
    assert candidates(graph, "cpp") == []
    (impl,) = candidates(graph, "triton")
    assert impl.name == "custom:add_rows/triton"
    target = Target.current("triton")
    for config in impl.space(target):
        run = impl.build(config, target)
        y = torch.empty(5, 20, device=impl.device)
        run(x.to(impl.device), b.to(impl.device), y)
        torch.testing.assert_close(y.cpu(), x + b)
