"""cpp_expr against eager torch: every elementwise op, literals, and the float16/bfloat16 bit-trick conversions.

A tiny flat-loop kernel is rendered here from ``emit`` so the expression layer is tested on its own,
independent of the templates. All ops of one dtype share one compiled kernel (g++ is the slow part).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.codegen import cpp_expr
from kernelgen.ir.reference import evaluate
from kernelgen.ir.values import FrozenMap, Source, TensorSpec

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _flat_kernel(graph: kernelgen.Graph, n: int):
    """Compile graph (all inputs and outputs contiguous, of n elements) as one flat loop."""
    env = {}
    for i in graph.input_ids:
        node = graph.nodes[i]
        env[i] = cpp_expr.load(node.spec.dtype, f"in{node.attr('index')}[i]")
    body = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, graph.outputs, env), env)
    for k, o in enumerate(graph.outputs):
        body.append(cpp_expr.store(graph.nodes[o].spec.dtype, f"out{k}[i]", env[o]))
    decls = []
    for a, spec in enumerate(graph.signature):
        decls.append(f"const {cpp_expr.storage_type(spec.dtype)}* __restrict in{a} = "
                     f"(const {cpp_expr.storage_type(spec.dtype)}*)p[{a}];")
    for k, spec in enumerate(graph.output_specs):
        decls.append(f"{cpp_expr.storage_type(spec.dtype)}* __restrict out{k} = "
                     f"({cpp_expr.storage_type(spec.dtype)}*)p[{len(graph.signature) + k}];")
    text = (cpp_expr.PRELUDE + 'extern "C" void kg_test(void* const* p, int64_t nt) {\n' + "\n".join(decls)
            + f"\nfor (int64_t i = 0; i < {n}; ++i) {{\n" + "\n".join(body) + "\n}\n}\n")
    sig = json.dumps([s.to_json() for s in (*graph.signature, *graph.output_specs)])
    return get_backend("cpp").compile(Source("cpp", text, "kg_test", meta=FrozenMap(signature=sig)))


def _run(fn, *inputs):
    graph = kernelgen.trace(fn, *inputs)
    kernel = _flat_kernel(graph, inputs[0].numel())
    outs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    return graph, outs


FLOAT_OPS = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "relu", "silu", "gelu", "reciprocal",
             "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
             "logical_and", "logical_or", "where", "const"}


def _all_float_ops(x, y):
    c = x > y
    return (-x, torch.abs(x), torch.exp(x), torch.log(torch.abs(x) + 1), torch.sqrt(torch.abs(y)),
            torch.rsqrt(torch.abs(y) + 0.5), torch.tanh(x), torch.erf(x), torch.sigmoid(x), torch.relu(x),
            F.silu(x), F.gelu(x), F.gelu(y, approximate="tanh"), torch.reciprocal(y + 10), x + y, x - y, x * y,
            x / (y + 10), torch.pow(torch.abs(x), y), x.pow(2), x ** 3, torch.abs(y) ** 0.5, torch.maximum(x, y),
            torch.minimum(x, y), torch.where(c, x, y), (x == y).float(), (x != y).float(), (x < y).float(),
            (x <= y).float(), (x >= y).float(), torch.logical_and(c, x < 0).float(),
            torch.logical_or(c, x < 0).float(), x.to(torch.int32).float(), torch.clamp(x, -0.5, 0.5), x * 1e-3)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float64, 1e-12)])
def test_every_float_op_matches_eager(dtype, tol):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1000, generator=gen, dtype=dtype) * 3
    y = torch.randn(1000, generator=gen, dtype=dtype)
    graph, outs = _run(_all_float_ops, x, y)
    expected = _all_float_ops(x, y)
    ops_seen = graph.ops()
    # the ops named after torch functions (expm1, fmod, ...) are swept over every dtype by test_op_table_cpp
    assert FLOAT_OPS - ops_seen <= {"cast"}
    for k, (got, want) in enumerate(zip(outs, expected)):
        torch.testing.assert_close(got, want, rtol=tol * 10, atol=tol * 10, msg=f"output {k}")
    for got, want in zip(outs, evaluate(graph, [x, y])):
        torch.testing.assert_close(got, want, rtol=tol * 10, atol=tol * 10)


def test_integer_and_bool_ops():
    x = torch.arange(-50, 50, dtype=torch.int32)
    y = torch.arange(100, dtype=torch.int32) % 7 - 3

    def fn(x, y):
        return (x + y, x * y, torch.maximum(x, y), torch.abs(x), torch.relu(y), x > y, (x + y).float() * 0.5)

    graph, outs = _run(fn, x, y)
    for got, want in zip(outs, fn(x, y)):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


def test_float16_and_bfloat16_conversions_round_like_torch():
    # every float16 / bfloat16 bit pattern through load, and a dense float sweep through store
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    finite = []
    for half in (torch.float16, torch.bfloat16):
        h = bits.view(half)
        graph, (out,) = _run(lambda a: a.float() * 1.0, h)
        want = h.float()
        assert torch.equal(out.isnan(), want.isnan())
        mask = ~want.isnan()
        assert torch.equal(out[mask], want[mask])
        finite.append(h)
    # float -> half rounding: random floats spanning subnormals to overflow, plus exact ties
    gen = torch.Generator().manual_seed(1)
    f = torch.cat([torch.randn(50000, generator=gen) * 10 ** torch.randint(-9, 6, (50000,), generator=gen),
                   torch.tensor([65504.0, 65520.0, 1e6, -1e6, 0.0, -0.0, 2.0 ** -25, 2.0 ** -24 * 1.5, math.inf])])
    for half in (torch.float16, torch.bfloat16):
        graph, (out,) = _run(lambda a: (a * 1.0).to(half), f)
        assert torch.equal(out.view(torch.int16), f.to(half).view(torch.int16)), half


def test_literals_are_rounded_like_torch():
    assert cpp_expr.literal("inf", "float32").startswith("(__builtin_inff")
    assert cpp_expr.literal(True, "bool") == "true"
    x = torch.full((16,), 1.0)
    graph, (out,) = _run(lambda a: a * 0.1 + 1e-7, x)
    assert torch.equal(out, x * 0.1 + 1e-7)


def test_emit_rejects_non_elementwise_nodes():
    graph = kernelgen.trace(lambda a: a.sum(-1), torch.randn(4, 4))
    with pytest.raises(ValueError, match="sum"):
        cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, graph.outputs, {0: "x"}), {0: "x"})


def _sigmoid(x):
    return torch.sigmoid(x)


def _silu(x):
    return F.silu(x)


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [_sigmoid, _silu, _gelu_tanh], ids=lambda f: f.__name__.strip("_"))
def test_ops_over_one_plus_exp_stay_finite_for_large_negative_inputs(fn, dtype):
    # Under -ffast-math y / (1 + exp(big)) became 0 * inf = nan (sigmoid(-100) was nan); nan must stay nan.
    x = torch.cat([torch.linspace(-1000.0, 300.0, 20_001), torch.tensor([math.nan])]).to(dtype)
    _, (got,) = _run(fn, x)
    want = fn(x)
    assert not torch.isnan(got[:-1]).any(), x[:-1][torch.isnan(got[:-1])][:5]
    atol = 1e-6 if dtype == torch.float32 else 1e-12  # gelu-tanh's exp form vs torch's tanh form near 0
    torch.testing.assert_close(got[:-1], want[:-1], rtol=2e-6, atol=atol)
    assert math.isnan(got[-1].item())


def test_sigmoid_at_the_infinities():
    _, (got,) = _run(_sigmoid, torch.tensor([-math.inf, math.inf, 0.0]))
    assert 0.0 <= got[0].item() < 1e-30  # 1 / (1 + e^80) with the cap: zero to any tolerance
    assert got[1:].tolist() == [1.0, 0.5]


def test_exp_of_x_minus_its_max_is_accurate_and_zero_below_the_normal_range():
    """softmax's exp(x - max(x)) uses the inline kg_exp_nonpos_f, valid for x <= 0 only."""
    n_sweep = 200001
    x = torch.cat([-torch.logspace(-9, math.log10(200), n_sweep),
                   torch.tensor([0.0, -0.0, -86.5, -86.6, -86.7, -87.5, -1e30, -math.inf])]).float()
    text = (cpp_expr.PRELUDE + 'extern "C" void kg_test(void* const* p, int64_t nt) {\n'
            "const float* __restrict x = (const float*)p[0]; float* __restrict y = (float*)p[1];\n"
            f"for (int64_t i = 0; i < {x.numel()}; ++i) y[i] = kg_exp_nonpos_f(x[i]);\n}}\n")
    kernel = get_backend("cpp").compile(Source("cpp", text, "kg_test"))
    y = torch.empty_like(x)
    kernel.launch(x, y)
    want = torch.exp(x.double())
    normal = x >= -86.5
    relative = ((y.double() - want) / want)[normal].abs().max().item()
    assert relative < 2.5e-7, relative  # about 2 ulp
    assert (y[x < -86.6] == 0).all()
    assert (y.double() - want)[~normal].abs().max().item() < 2.5e-38  # flushed only where e^x < 2.4e-38


def test_softmax_and_logsumexp_use_the_inline_exp_and_keep_masked_zeros():
    from kernelgen.templates import match
    from kernelgen.ir.target import Target

    x = torch.randn(4, 300) * 20
    x[:, ::7] = -math.inf  # masked positions: exactly 0 after softmax, as in eager
    for fn in (lambda t: torch.softmax(t, -1), lambda t: torch.logsumexp(t, -1)):
        graph = kernelgen.trace(fn, x)
        tpl, problem = match(graph)
        target = Target.current("cpp")
        source = tpl.render(problem, tpl.default_config(problem, target), target)
        assert "kg_exp_nonpos_f(" in source.text.split('extern "C"')[-1]
        out = torch.empty(graph.output_specs[0].shape)
        get_backend("cpp").compile(source)(x, out)
        want = fn(x)
        torch.testing.assert_close(out, want, rtol=2e-6, atol=2e-6)
        if out.dim() == 2:
            assert (out[:, ::7] == 0).all()


def _float32_sweep() -> torch.Tensor:
    """Dense around the clamps of the approximations, log-spaced over every magnitude (subnormal to overflow),
    both signs, plus zeros, the infinities and nan."""
    mags = torch.logspace(-45.0, 38.5, 300_001, dtype=torch.float64).float()  # ends in 1e-45 and inf
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 3.4028235e38, -3.4028235e38, 1e-45])
    return torch.cat([torch.linspace(-12.0, 12.0, 1_200_001), mags, -mags, specials])


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of float32 at |x| (x float64), as float64."""
    f = x.abs().float()
    return (torch.nextafter(f, torch.tensor(math.inf)) - f).double()


def test_erf_and_tanh_approximations_over_every_magnitude():
    # kg_erff_approx / kg_tanhf_approx directly (gelu hides most of their error): odd, exact to a few ulp near 0,
    # +-1 from the clamp on, nan stays nan.
    x = _float32_sweep()
    text = (cpp_expr.PRELUDE + 'extern "C" void kg_test(void* const* p, int64_t nt) {\n'
            "const float* __restrict x = (const float*)p[0];\n"
            "float* __restrict e = (float*)p[1]; float* __restrict t = (float*)p[2];\n"
            f"for (int64_t i = 0; i < {x.numel()}; ++i) {{ e[i] = kg_erff_approx(x[i]); t[i] = kg_tanhf_approx(x[i]); }}\n}}\n")
    spec = TensorSpec((x.numel(),), "float32")
    sig = json.dumps([spec.to_json()] * 3)
    kernel = get_backend("cpp").compile(Source("cpp", text, "kg_test", meta=FrozenMap(signature=sig)))
    got_erf, got_tanh = torch.empty_like(x), torch.empty_like(x)
    kernel(x, got_erf, got_tanh)
    for name, got, want, bound in (("erf", got_erf, torch.erf(x.double()), 4e-7),
                                   ("tanh", got_tanh, torch.tanh(x.double()), 3.5e-7)):
        assert torch.equal(got.isnan(), x.isnan()), name
        ok = ~x.isnan()
        err = (got[ok].double() - want[ok]).abs()
        assert err.max() <= bound, (name, err.max().item(), x[ok][err.argmax()].item())
        tiny = ok & (x.abs() < 1e-3)
        ulps = (got[tiny].double() - want[tiny]).abs() / _ulp(want[tiny])
        assert ulps.max() <= 4, (name, ulps.max().item(), x[tiny][ulps.argmax()].item())
        assert torch.equal(got[x.isinf()], x[x.isinf()].sign()), name
        pos, neg = got[1_200_001:1_500_002], got[1_500_002:1_800_003]  # the log-spaced magnitudes, then negated
        assert torch.equal(neg, -pos), name
        assert torch.equal(torch.signbit(got[x == 0]), torch.signbit(x[x == 0])), name  # erf(-0) = -0


def _erf(x):
    return torch.erf(x)


def _tanh(x):
    return torch.tanh(x)


def _gelu(x):
    return F.gelu(x)


@pytest.mark.parametrize("fn,atol", [(_erf, 2.5e-7), (_tanh, 2e-7), (_gelu, 1e-5), (_gelu_tanh, 1e-5), (_sigmoid, 1e-5),
                                     (_silu, 1e-5)], ids=lambda v: v.__name__.strip("_") if callable(v) else str(v))
def test_transcendental_ops_over_every_magnitude(fn, atol):
    # Against torch in float64 over the sweep; erf and tanh stay on libm (libmvec erff itself is off by up to
    # 2.4e-7), gelu runs on the inline rationals. nan and the infinities behave as in float64 torch.
    x = _float32_sweep()
    _, (got,) = _run(fn, x)
    want = fn(x.double())  # silu(-inf) is nan in torch (-inf * 0), and so in the kernel
    torch.testing.assert_close(got.double(), want, rtol=1.3e-6, atol=atol, equal_nan=True)
    if fn in (_erf, _tanh):  # f(x) ~ f'(0) x must stay accurate to a few ulp
        tiny = x.abs() < 1e-3
        assert ((got[tiny].double() - want[tiny]).abs() / _ulp(want[tiny])).max() <= 4
    if fn is _sigmoid:  # relative accuracy in the left tail
        tail = (x > -80) & (x < -10)
        torch.testing.assert_close(got[tail].double(), want[tail], rtol=1e-5, atol=0)
