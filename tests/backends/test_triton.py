"""The Triton backend: compile, spec checks, caching, errors, timing; on a GPU when there is one."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's first import (also in conftest)
pytest.importorskip("triton")

from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.backends.triton import TritonBackend, interpreter_active  # noqa: E402
from kernelgen.errors import CompileError, InputMismatchError, ToolchainUnavailableError  # noqa: E402
from kernelgen.ir.values import FrozenMap, Source, TensorSpec, TimeStats  # noqa: E402

HAS_GPU = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not (interpreter_active() or HAS_GPU),
                                reason="triton was imported before TRITON_INTERPRET=1 was set")
DEVICE = "cuda" if HAS_GPU and not interpreter_active() else "cpu"

AXPY = '''import triton
import triton.language as tl


@triton.jit
def axpy(x, y, out, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 10
    tl.store(out + offs, 2.0 * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)
'''


def axpy_source(text: str = AXPY, n: int = 10) -> Source:
    spec = TensorSpec((n,), "float32").to_json()
    return Source("triton", text, "axpy", meta=FrozenMap({
        "signature": json.dumps([spec] * 3), "grid": "[2]", "constexprs": json.dumps({"BLOCK": 8}),
        "num_warps": 1, "num_stages": 1}))


def test_compile_launches_with_grid_and_constexprs_from_meta():
    kernel = get_backend("triton").compile(axpy_source())
    x, y = torch.randn(10, device=DEVICE), torch.randn(10, device=DEVICE)
    out = torch.full((10,), float("nan"), device=DEVICE)
    kernel(x, y, out)
    torch.testing.assert_close(out, 2 * x + y)  # both programs ran: the tail past 8 is written too


def test_compile_is_cached_per_source():
    backend = get_backend("triton")
    assert backend.compile(axpy_source()) is backend.compile(axpy_source())
    assert backend.compile(axpy_source()) is not backend.compile(axpy_source(AXPY.replace("2.0", "3.0")))


def test_kernel_rejects_wrong_tensors_with_a_clear_error():
    kernel = get_backend("triton").compile(axpy_source())
    x = torch.randn(10, device=DEVICE)
    with pytest.raises(InputMismatchError, match="takes 3 tensors"):
        kernel(x, x)
    with pytest.raises(InputMismatchError, match="float64"):
        kernel(x, x.double(), x)
    with pytest.raises(InputMismatchError, match=r"\[11\]"):
        kernel(x, x, torch.randn(11, device=DEVICE))
    with pytest.raises(InputMismatchError, match="strides"):
        kernel(torch.randn(20, device=DEVICE)[::2], x, x)
    if DEVICE == "cpu":
        with pytest.raises(InputMismatchError, match="CPU"):
            kernel(x, x, torch.ones(1).expand(10).numpy())


def test_bad_source_is_a_compile_error_naming_the_file():
    with pytest.raises(CompileError, match=r"\.py"):
        get_backend("triton").compile(axpy_source(AXPY.replace("def axpy(", "def axpy(((")))
    with pytest.raises(CompileError, match="cannot compile 'cpp'"):
        get_backend("triton").compile(Source("cpp", "int x;", "axpy"))


def test_triton_semantic_error_surfaces_as_compile_error_at_first_launch():
    broken = AXPY.replace("tl.arange(0, BLOCK)", "tl.arange(0, 10)")  # arange needs a power of two
    kernel = get_backend("triton").compile(axpy_source(broken))
    x = torch.randn(10, device=DEVICE)
    with pytest.raises(CompileError, match=r"axpy_\w+\.py.*power of 2"):
        kernel(x, x, torch.empty_like(x))


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU error path")
def test_without_gpu_or_interpreter_compile_says_how_to_fix(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = TritonBackend()
    assert not backend.is_available()
    with pytest.raises(ToolchainUnavailableError, match="TRITON_INTERPRET=1"):
        backend.compile(axpy_source())


def test_benchmark_returns_time_statistics():
    kernel = get_backend("triton").compile(axpy_source())
    x = torch.randn(10, device=DEVICE)
    out = torch.empty_like(x)
    stats = get_backend("triton").benchmark(lambda: kernel(x, x, out), min_time=0.0, min_repeats=3, warmup=1)
    assert isinstance(stats, TimeStats) and stats.repeats >= 3 and stats.median > 0


def test_target_without_gpu_is_the_interpreter_cpu():
    target = get_backend("triton").target()
    assert target.backend == "triton"
    assert target.kind == ("cuda" if HAS_GPU else "cpu") or target.kind == "hip"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU or interpreter_active(), reason="no CUDA/ROCm GPU")
def test_on_gpu_every_template_default_matches_eager():
    import torch.nn.functional as F

    import kernelgen
    from kernelgen.ir.reference import evaluate
    from kernelgen.templates import match

    cases = [
        (lambda x, b: F.gelu(x + b), (torch.randn(300, 70), torch.randn(70))),
        (lambda x: torch.softmax(x, -1), (torch.randn(33, 5000),)),
        (lambda a, w, b: torch.relu(a @ w + b), (torch.randn(100, 70), torch.randn(70, 90), torch.randn(90))),
        (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         (torch.randn(2, 3, 70, 64), torch.randn(2, 3, 70, 64), torch.randn(2, 3, 70, 64))),
    ]
    backend = get_backend("triton")
    for fn, inputs in cases:
        inputs = tuple(t.cuda().half() for t in inputs)
        graph = kernelgen.trace(fn, *inputs)
        template, problem = match(graph)
        kernel = backend.compile(template.render(problem, template.default_config(problem, backend.target()),
                                                 backend.target()))
        outs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="cuda") for s in graph.output_specs]
        kernel(*inputs, *outs)
        torch.testing.assert_close(outs[0], evaluate(graph, inputs)[0], atol=2e-2, rtol=2e-2)
        stats = backend.benchmark(lambda: kernel(*inputs, *outs), min_time=0.01)
        assert stats.median > 0


def test_tensors_on_mixed_devices_raise_naming_the_fix():
    # issue 15: outputs must be where the inputs are; a launch never reads one device's pointer on another
    kernel = get_backend("triton").compile(axpy_source())
    x = torch.randn(10, device=DEVICE)
    elsewhere = torch.empty(10, device="meta")  # a second device every machine has
    for args in ((x, x, elsewhere), (x, elsewhere, x)):
        with pytest.raises(InputMismatchError, match=rf"is on meta but argument 0 is on {DEVICE}.*\.to\('{DEVICE}"):
            kernel(*args)
        with pytest.raises(InputMismatchError, match="one device"):
            kernel.launch(*args)  # the dispatcher's hot path skips the spec check, not the device check


def test_compiled_function_with_inputs_on_two_devices_does_what_eager_does():
    import kernelgen

    fn = lambda x, y: x * y + 1.0  # noqa: E731
    compiled = kernelgen.compile(fn, backend="triton")
    x = torch.randn(10, device=DEVICE)
    torch.testing.assert_close(compiled(x, x), x * x + 1.0)
    other = torch.empty(10, device="meta")
    with pytest.raises(RuntimeError) as eager:
        fn(x, other)
    with pytest.raises(type(eager.value)):  # mixed devices run eagerly, so the caller sees eager's own error
        compiled(x, other)


@pytest.mark.skipif(HAS_GPU, reason="the CPU-tensor error of a GPU kernel, faked where there is no GPU")
def test_a_gpu_kernel_refuses_cpu_tensors_naming_the_fix():
    kernel = get_backend("triton").compile(axpy_source())
    gpu_kernel = type(kernel)(kernel.source, kernel.fn, kernel.path, "cuda")
    x = torch.randn(10)
    with pytest.raises(InputMismatchError, match=r"on the CPU.*\.cuda\(\).*TRITON_INTERPRET=1"):
        gpu_kernel(x, x, x)


def test_tensor_device_is_where_kernels_run():
    backend = get_backend("triton")
    assert backend.tensor_device() == DEVICE
    assert backend.compile(axpy_source()).device == DEVICE
