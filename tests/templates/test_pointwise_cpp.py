"""The C++ pointwise template against eager PyTorch and the IR reference: shapes, broadcasting, dtypes, layouts.

Also checks that loading and running kernels leaves the process's floating-point mode (FTZ/DAZ) alone.
"""

from __future__ import annotations

import ctypes
import platform

import pytest
import torch
import torch.nn.functional as F

from typing import Any

import torch

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.errors import InputMismatchError
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap
from kernelgen.templates import match
from kernelgen.templates import pointwise_cpp

TOL = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


def build(fn: Any, *inputs: Any, template: str, **config: Any):
    """(graph, problem, kernel) for fn on inputs, with the default config overridden by ``config``."""
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None, f"no template matched\n{graph}"
    tpl, problem = found
    assert tpl.name == template
    target = Target.current("cpp")
    cfg = Config({**tpl.default_config(problem, target).to_json(), **config})
    kernel = get_backend("cpp").compile(tpl.render(problem, cfg, target))
    return graph, problem, kernel


def check(fn: Any, *inputs: Any, template: str, **config: Any) -> list[torch.Tensor]:
    """Run the kernel and compare with both the IR reference and the original torch function."""
    graph, _, kernel = build(fn, *inputs, template=template, **config)
    outs = [torch.full(s.shape, float("nan")).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    reference = evaluate(graph, list(inputs))
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, reference, eager):
        tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
        torch.testing.assert_close(got, ref, **tol)
        torch.testing.assert_close(got, want.reshape(got.shape), **tol)
    return outs

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_odd_shape(approximate):
    g = _gen()
    x, b = torch.randn(37, 53, generator=g), torch.randn(53, generator=g)
    check(lambda x, b: F.gelu(x + b, approximate=approximate), x, b, template="pointwise")


def test_chain_with_scalar_and_per_row_inputs_and_two_outputs():
    g = _gen(1)
    x, y, s = torch.randn(5, 7, 9, generator=g), torch.randn(5, 7, 1, generator=g), torch.randn((), generator=g)

    def fn(x, y, s):
        t = torch.relu((x + y) * s)
        return t, torch.sigmoid(t) - x * 2.0

    check(fn, x, y, s, template="pointwise")


def test_very_wide_single_row_split_into_column_blocks():
    g = _gen(2)
    x, y = torch.randn(1, 100003, generator=g), torch.randn(1, 100003, generator=g)
    # block 1024 forces many column blocks per row, dynamic schedule exercises the other pragma
    check(lambda x, y: F.silu(x) * y, x, y, template="pointwise", block=1024, schedule="dynamic", simd=False)


def test_flat_path_large_enough_to_run_in_parallel():
    g = _gen(3)
    x, y, z = (torch.randn(300, 257, generator=g) for _ in range(3))
    check(lambda x, y, z: torch.relu((x + y) * z), x, y, z, template="pointwise")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_and_outputs(dtype):
    g = _gen(4)
    x, b = torch.randn(33, 65, generator=g).to(dtype), torch.randn(65, generator=g).to(dtype)
    outs = check(lambda x, b: F.gelu(x + b), x, b, template="pointwise")
    assert outs[0].dtype == dtype


def test_mixed_dtypes_and_casts():
    g = _gen(5)
    x, m = torch.randn(17, 19, generator=g).to(torch.float16), torch.randn(17, 19, generator=g) > 0
    check(lambda x, m: torch.where(m, x.float() * 3, -x.float()).to(torch.bfloat16), x, m, template="pointwise")


def test_transposed_input_is_read_through_its_strides():
    g = _gen(6)
    xt = torch.randn(41, 23, generator=g).t()  # [23, 41], strides (1, 23)
    b = torch.randn(41, generator=g)
    assert not xt.is_contiguous()
    check(lambda x, b: torch.tanh(x) + b, xt, b, template="pointwise")


def test_kernel_rejects_tensors_it_was_not_built_for():
    x = torch.randn(8, 16)
    graph, _, kernel = build(lambda x: torch.exp(x), x, template="pointwise")
    out = torch.empty(8, 16)
    with pytest.raises(InputMismatchError):
        kernel(torch.randn(8, 17), out)
    with pytest.raises(InputMismatchError):
        kernel(x.double(), out)
    with pytest.raises(InputMismatchError):
        kernel(torch.randn(16, 8).t(), out)  # same shape, transposed layout


def test_malformed_configs_are_rejected_by_render():
    x = torch.randn(8, 16)
    graph = kernelgen.trace(lambda x: x * 2, x)
    tpl, problem = match(graph)
    target = Target.current("cpp")
    good = tpl.default_config(problem, target).to_json()
    for bad in ({**good, "block": 3}, {k: v for k, v in good.items() if k != "schedule"}, {**good, "extra": 1}):
        with pytest.raises(ValueError):
            tpl.render(problem, Config(bad), target)
    with pytest.raises(ValueError):
        pointwise_cpp.render(problem, Config({**good, "schedule": "guided"}), target)


def test_space_respects_the_l2_size():
    x = torch.randn(64, 64)
    graph = kernelgen.trace(lambda x: x + 1, x)
    _, problem = match(graph)
    small = Target.current("cpp")
    small = Target(**{**small.__dict__, "caches": FrozenMap({"l1d": 32768, "l2": 65536, "l3": 0})})
    space = pointwise_cpp.space(problem, small)
    assert space.is_valid(space.default())
    assert not space.is_valid(Config({**space.default().to_json(), "block": 131072}))
    assert all(c["block"] * 8 <= 32768 or c["block"] == 1024 for c in space)


def _mxcsr() -> int:
    from kernelgen.backends.cpp import build_shared_library

    lib = ctypes.CDLL(str(build_shared_library(
        '#include <xmmintrin.h>\nextern "C" unsigned kg_mxcsr() { return _mm_getcsr(); }\n', name="mxcsr")))
    lib.kg_mxcsr.restype = ctypes.c_uint
    return lib.kg_mxcsr()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="MXCSR is x86-only")
def test_loading_kernels_leaves_denormals_alone():
    before = _mxcsr()
    assert float(torch.tensor(1e-40) * 1.0) != 0.0
    check(lambda x: torch.exp(x) * 0.5, torch.randn(4, 8), template="pointwise")
    after = _mxcsr()
    assert after & 0x8040 == before & 0x8040  # FTZ (bit 15) and DAZ (bit 6) unchanged
    assert float(torch.tensor(1e-40) * 1.0) != 0.0


@pytest.mark.parametrize("count", [3, 20], ids=["pointer-arguments", "pointer-array"])
def test_launch_passes_every_pointer_in_order(count):
    """Up to MAX_POINTER_ARGS tensors go as arguments of <entry>_kgargs, more through the pointer array."""
    from kernelgen.backends.cpp import MAX_POINTER_ARGS

    names = [f"x{i}" for i in range(count)]  # torch.fx traces named parameters, not *args
    weighted_sum = eval(f"lambda {', '.join(names)}: " + " + ".join(f"{n} * {i + 1}.0" for i, n in enumerate(names)))

    xs = [torch.randn(5, 7, generator=torch.Generator().manual_seed(i)) for i in range(count)]
    graph = kernelgen.trace(weighted_sum, *xs)
    tpl, problem = match(graph)
    target = Target.current("cpp")
    kernel = get_backend("cpp").compile(tpl.render(problem, tpl.default_config(problem, target), target))
    assert (kernel._args_fn is not None) == (count + 1 <= MAX_POINTER_ARGS)
    out = torch.empty(5, 7)
    kernel.launch(*xs, out)
    torch.testing.assert_close(out, weighted_sum(*xs))
