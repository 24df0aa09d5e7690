"""Every op of the Triton op table against eager torch on special values, for every dtype, under the interpreter.

The cases are derived from ``triton_expr.OPS`` and ``TL_DTYPE``: a new op or dtype is swept without editing
this file. One tensor per dtype holds NaN, +-inf, +-0, huge, tiny, subnormal and ordinary values (integer
extremes for ints); binary ops see every pair of them, so each (op, dtype) is one compile. The kernel must
run (no eager fallback) wherever eager accepts the dtype, and equal eager within the dtype's tolerance with
NaN in the same places; integers and bools must be exact, wraparound included.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's first import
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends.triton import interpreter_active  # noqa: E402
from kernelgen.codegen.triton_expr import OPS, REFUSED, TL_DTYPE  # noqa: E402
from kernelgen.ir.graph import BINARY_OPS, UNARY_OPS  # noqa: E402
from tests.codegen.eager_compare import assert_like_eager  # noqa: E402

pytestmark = [pytest.mark.skipif(not (interpreter_active() or torch.cuda.is_available()),
                                 reason="triton was imported before TRITON_INTERPRET=1 was set"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # numpy, in the interpreter, on inf/NaN
DEVICE = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"
DTYPES = [getattr(torch, name) for name in TL_DTYPE]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def special_values(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor([False, True], device=DEVICE)
    if dtype.is_floating_point:
        fi = torch.finfo(dtype)
        values = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 40.0, 100.0,
                  fi.max, -fi.max, fi.tiny, -fi.tiny / 8, 1e-3]
        return torch.tensor(values, dtype=torch.float64).to(dtype).to(DEVICE)
    ii = torch.iinfo(dtype)
    values = {ii.min, ii.min + 1, ii.max - 1, ii.max, 0, 1, 2, 3, 5, 31, 64, 127 if ii.min else 200}
    if ii.min:
        values |= {-1, -3}
    return torch.tensor(sorted(values), dtype=dtype, device=DEVICE)


def eager_op(op: str, variant: str | None):
    """The torch function an IR op stands for, found by name (gelu also by its approximation)."""
    if op == "gelu":
        return lambda x: F.gelu(x, approximate=variant)
    return getattr(torch, op, None) or getattr(F, op)


def cases():
    for op in sorted(OPS - {"const", "cast"}):
        for variant in (("none", "tanh") if op == "gelu" else (None,)):
            for dtype in DTYPES:
                name = f"{op}[{variant}]" if variant else op
                yield pytest.param(op, variant, dtype, id=f"{name}-{str(dtype).removeprefix('torch.')}")


def inputs_for(op: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    v = special_values(dtype)
    if op in UNARY_OPS:
        return (v,)
    n = v.numel()
    x, y = v.repeat_interleave(n), v.repeat(n)  # every ordered pair
    if op in BINARY_OPS:
        return x, y
    assert op == "where", f"the sweep does not know how to call op {op!r}: teach inputs_for"
    return torch.arange(n * n, device=DEVICE) % 3 == 0, x, y


def fixed_arity(fn, n: int):
    """``fn`` as a function of exactly ``n`` tensors (torch.fx cannot trace ``*args``)."""
    return {1: lambda x: fn(x), 2: lambda x, y: fn(x, y), 3: lambda c, x, y: fn(c, x, y)}[n]


@pytest.mark.parametrize("op,variant,dtype", list(cases()))
def test_op_matches_eager_on_special_values(op, variant, dtype):
    fn = eager_op(op, variant)
    inputs = inputs_for(op, dtype)
    try:
        want = fn(*inputs)
        fn(*(t.cpu() for t in inputs))  # eager's CUDA kernels accept integer division by zero; its CPU ones
    except (RuntimeError, TypeError) as exc:  # raise, and kernelgen leaves it to eager on every device
        pytest.skip(f"eager rejects {op} on {dtype}: {str(exc)[:80]}")
    compiled = kernelgen.compile(fixed_arity(fn, len(inputs)), backend="triton")
    got = compiled(*inputs)
    assert compiled.explain(*inputs)["implementation"] == "pointwise", "the Triton kernel did not run"
    wide = None
    if want.dtype.is_floating_point and dtype != torch.float64:
        wide = fn(*(t.double() if t.dtype.is_floating_point else t for t in inputs)).to(want.dtype)
    assert_like_eager(got, want, wide, f"{op} on {dtype}", lambda k: fn(*(t[k:k + 1] for t in inputs)))


def _defined(src: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """Elements whose conversion to ``dst`` C++ defines: float -> integer needs a finite value whose
    truncation fits (NaN or out of range is undefined behaviour, and eager's CPU and CUDA results differ)."""
    if not src.dtype.is_floating_point or dst.is_floating_point or dst == torch.bool:
        return torch.ones_like(src, dtype=torch.bool)
    t = src.double().trunc()
    ii = torch.iinfo(dst)
    return t.isfinite() & (t >= ii.min) & (t <= ii.max)


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_cast_matches_eager_to_every_dtype(src):
    x = special_values(src)
    others = [d for d in DTYPES if d != src]
    compiled = kernelgen.compile(lambda x: tuple(x.to(d) for d in others), backend="triton")
    got = compiled(x)
    assert compiled.explain(x)["implementation"] == "pointwise"
    for dst, g in zip(others, got):
        keep = _defined(x, dst)
        assert_like_eager(g[keep], x.to(dst)[keep], None, f"cast {src} -> {dst}")


def test_every_ir_elementwise_op_has_a_triton_rule():
    from kernelgen.ir.graph import ELEMENTWISE_OPS

    assert ELEMENTWISE_OPS <= OPS | REFUSED
    assert not OPS & REFUSED


def test_a_refused_row_runs_eagerly_with_the_reason(monkeypatch, caplog):
    # a row that accepts no dtype is how a backend leaves an op to eager (REFUSED lists them)
    from kernelgen.codegen import triton_rules
    from kernelgen.codegen.renderer import OpRule
    from kernelgen.codegen.triton_renderer import TritonRenderer

    table = dict(TritonRenderer.code_for_op)
    table["sin"] = OpRule(triton_rules.refuse("no accurate formula here"), accepts=frozenset())
    monkeypatch.setattr(TritonRenderer, "code_for_op", table)
    inputs = inputs_for("sin", torch.float32)
    compiled = kernelgen.compile(lambda x: torch.sin(x) + 1, backend="triton")
    with caplog.at_level("WARNING", logger="kernelgen"):
        got = compiled(*inputs)
    assert compiled.explain(*inputs)["implementation"] == "eager"
    assert "op 'sin'" in caplog.text
    assert_like_eager(got, torch.sin(inputs[0]) + 1, None, "sin")


def test_integer_pow_is_exact_and_wraps_like_eager():
    # issue 15: pow(int32 [5, 7, 3], [2, 2, 4]) gave [24, 49, 80] through float exp2/log2
    compiled = kernelgen.compile(lambda x, y: torch.pow(x, y), backend="triton")
    for dtype in (torch.int32, torch.int64):
        x = torch.tensor([5, 7, 3, 3, -3, 7, 2, -1, -1, 1, 0, 2], dtype=dtype, device=DEVICE)
        y = torch.tensor([2, 2, 4, 40, 41, 100, -1, -3, -4, -7, 0, 63], dtype=dtype, device=DEVICE)
        assert torch.equal(compiled(x, y), torch.pow(x, y)), dtype
    square_cube = kernelgen.compile(lambda x: x ** 2 + x ** 3 + x ** 13, backend="triton")
    x = torch.tensor([5, -7, 300000, 46341], dtype=torch.int32, device=DEVICE)
    assert torch.equal(square_cube(x), x ** 2 + x ** 3 + x ** 13)


def test_integer_pow_with_a_negative_constant_exponent_runs_eager_and_raises_like_it():
    compiled = kernelgen.compile(lambda x: torch.pow(x, -2), backend="triton")
    x = torch.tensor([2, 3], dtype=torch.int32, device=DEVICE)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(x, -2)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        compiled(x)


def test_a_refused_graph_still_has_a_gpu_search_space():
    # The ahead-of-time resource check renders configs; a renderer refusal must not escape space()
    # (dispatch would raise instead of running eagerly), it surfaces when the kernel is built.
    from kernelgen.errors import UnsupportedOpError
    from kernelgen.ir.target import Target
    from kernelgen.templates import match

    from kernelgen.ir.graph import Graph, Node
    from kernelgen.ir.values import TensorSpec

    vector = TensorSpec((8,), "int32")  # built by hand: the lowering may refuse int ** -2 before a renderer sees it
    graph = Graph((Node("input", (), (("index", 0),), vector),
                   Node("const", (), (("value", -2),), TensorSpec((), "int32")),
                   Node("pow", (0, 1), (), vector)), (2,))
    template, problem = match(graph)
    target = Target.gpu("sm_90")
    config = template.space(problem, target).default()
    with pytest.raises(UnsupportedOpError, match="negative exponent -2"):
        template.render(problem, config, target)


def test_mixed_dtypes_are_promoted_and_rounded_like_eager():
    u8 = torch.tensor([200, 255, 0, 128, 7], dtype=torch.uint8, device=DEVICE)
    i8 = torch.tensor([-56, -1, 0, -128, 7], dtype=torch.int8, device=DEVICE)
    i32 = torch.tensor([2049, 16777217, 3, -4097, 2051], dtype=torch.int32, device=DEVICE)
    h = torch.tensor([2048.0, 1.0, 3.0, -4096.0, 1.0], dtype=torch.float16, device=DEVICE)
    b = h.to(torch.bfloat16)
    cases = [
        (lambda a, b: (a == b, a < b, a > b, a + b), (u8, i8)),  # compared and added in int16
        (lambda a, b: (a == b, a > b, a + b, a * b), (i32, h)),  # int32 rounds to float16 first
        (lambda a, b: (a == b, a >= b, a + b), (i32, b)),
        (lambda a, b: (a * 3 == b * 3, a * 0.1 == b * 0.1, a == 0.1, a != 2049), (h, h + 1)),  # fp16 rounding
    ]
    for fn, args in cases:
        compiled = kernelgen.compile(fn, backend="triton")
        got = compiled(*args)
        assert compiled.explain(*args)["implementation"] == "pointwise"
        for g, w in zip(got, fn(*args)):
            assert g.dtype == w.dtype and torch.equal(g, w), (fn(*args), got)


@pytest.mark.slow
def test_every_swept_kernel_compiles_ahead_of_time_for_a_gpu(monkeypatch):
    # The interpreter runs the sweep; this proves the same rules (float64 powers, int64 loops, bitcasts,
    # PropagateNan) also compile for a real GPU, where no GPU is needed to build them (~30 s; gfx942 passes too)
    arch = "sm_90"
    from kernelgen.backends.triton_aot import aot_results
    from kernelgen.errors import ToolchainUnavailableError
    from kernelgen.ir.target import Target
    from kernelgen.templates import match

    target = Target.gpu(arch)
    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # default configs without compiling each one first
    sources, names = [], []
    for param in cases():
        op, variant, dtype = param.values
        inputs = inputs_for(op, dtype)
        fn = fixed_arity(eager_op(op, variant), len(inputs))
        try:
            fn(*inputs)
            fn(*(t.cpu() for t in inputs))  # what eager's CPU kernels reject kernelgen leaves to eager everywhere
        except (RuntimeError, TypeError):
            continue  # eager rejects the dtype
        template, problem = match(kernelgen.trace(fn, *inputs))
        sources.append(template.render(problem, template.default_config(problem, target), target))
        names.append(param.id)
    try:
        results = aot_results(sources, target)
    except ToolchainUnavailableError as exc:
        pytest.skip(str(exc))
    failed = [(name, result[:200]) for name, result in zip(names, results) if isinstance(result, str)]
    assert not failed


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2, 3, -1, -2, 1, 0, 1.7, -3.0, 0.0])
def test_float_pow_with_a_constant_exponent_matches_eager(exponent):
    # ATen special-cases these exponents (sqrt, rsqrt, x * x, reciprocal...), which differ from C's pow at
    # -inf and -0.0; the renderer must follow eager, not the formula
    x = special_values(torch.float32)
    compiled = kernelgen.compile(lambda x: torch.pow(x, exponent), backend="triton")
    assert_like_eager(compiled(x), torch.pow(x, exponent), None, f"pow(x, {exponent})")


def test_python_integers_wrap_into_the_tensor_dtype_like_eager():
    # eager casts the scalar to the tensor's dtype: int8 x < 1000 is x < -24, uint8 x > -1 is x > 255
    i8 = torch.tensor([-128, -30, -24, 0, 5, 127], dtype=torch.int8, device=DEVICE)
    u8 = torch.tensor([0, 1, 200, 255], dtype=torch.uint8, device=DEVICE)
    for fn, x in ((lambda x: (x < 1000, x * 1000, x + 300, x == 232, x - 2**40), i8),
                  (lambda x: (x > -1, x + 257, x * -1), u8)):
        compiled = kernelgen.compile(fn, backend="triton")
        for got, want in zip(compiled(x), fn(x)):
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
        assert compiled.explain(x)["implementation"] == "pointwise"


@pytest.mark.parametrize("narrow", [torch.float16, torch.bfloat16])
def test_a_narrow_intermediate_is_rounded_where_its_dtype_changes(narrow):
    # eager stores x * 3 in x's dtype before .float(), a comparison or an op in float64 reads it
    x = torch.tensor([1.0208, 1.01, 1.2345, -7.77], device=DEVICE).to(narrow)
    d = torch.ones(4, dtype=torch.float64, device=DEVICE)

    other = torch.float16 if narrow == torch.bfloat16 else torch.bfloat16

    def fn(x, d):
        y = x * 3
        return y.float() * 1.0, (y * d), y.double() / 3, y == 3.0625, y.to(other).float() + 0.0

    compiled = kernelgen.compile(fn, backend="triton")
    for got, want in zip(compiled(x, d), fn(x, d)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_a_python_scalar_takes_the_dtype_of_the_op_that_uses_it():
    # -1 next to a uint8 tensor is 255 in uint8 arithmetic but -1.0 in a true division
    u8 = torch.tensor([1, 34, 200], dtype=torch.uint8, device=DEVICE)
    fn = lambda y: (torch.div(-1, y), y + (-1), torch.log(torch.div(-1, y)), y * 2.5)  # noqa: E731
    compiled = kernelgen.compile(fn, backend="triton")
    for got, want in zip(compiled(u8), fn(u8)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", ["expm1", "log1p", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "atan", "asin",
                                "acos", "log10", "tan"])
def test_written_out_math_is_accurate_over_every_magnitude(op, dtype):
    # the formulas from core tl functions (Kahan's expm1/log1p, the fitted atan...) against eager on a dense grid
    mags = torch.logspace(-30 if dtype == torch.float32 else -200, 2, 400, dtype=torch.float64)
    grid = torch.cat([mags, -mags, torch.linspace(-1, 1, 201, dtype=torch.float64),
                      1 + torch.logspace(-12, 1, 50, dtype=torch.float64)]).to(dtype).to(DEVICE)
    fn = getattr(torch, op)
    compiled = kernelgen.compile(lambda x: fn(x), backend="triton")
    got = compiled(grid)
    assert compiled.explain(grid)["implementation"] == "pointwise"
    assert_like_eager(got, fn(grid), fn(grid.double()).to(dtype) if dtype != torch.float64 else None, f"{op} on {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_atan2_is_accurate_in_every_quadrant(dtype):
    v = torch.cat([torch.logspace(-20, 20, 30, dtype=torch.float64), torch.linspace(0.1, 3, 15, dtype=torch.float64)])
    v = torch.cat([v, -v, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")], dtype=torch.float64)])
    y, x = v.repeat_interleave(v.numel()).to(dtype).to(DEVICE), v.repeat(v.numel()).to(dtype).to(DEVICE)
    compiled = kernelgen.compile(lambda a, b: torch.atan2(a, b), backend="triton")
    got = compiled(y, x)
    assert compiled.explain(y, x)["implementation"] == "pointwise"
    assert_like_eager(got, torch.atan2(y, x), torch.atan2(y.double(), x.double()).to(dtype) if dtype != torch.float64
                      else None, f"atan2 on {dtype}")
