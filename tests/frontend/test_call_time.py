"""Call-time problems are handled like eager or raise KernelgenError; user code runs once per call."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.errors import InputMismatchError, KernelgenError

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def add(x, y):
    return x + y


def gelu(x):
    return F.gelu(x)


def softmax(x):
    return torch.softmax(x, -1)


def row_sum(x):
    return x.sum(-1)


def matmul(x, w):
    return x @ w


def relu_scaled(x, s):
    return torch.relu(x) * s


def row_mean(x):
    return x.mean(-1)


def row_var(x):
    return x.var(-1)


def layer_norm(x):
    return F.layer_norm(x, x.shape[-1:])


@pytest.mark.parametrize("fn,args", [
    (gelu, (torch.tensor(1.5),)),
    (add, (torch.tensor(1.5), torch.tensor(-2.0))),
    (relu_scaled, (torch.randn(4, 4), torch.tensor(2.0))),
    (relu_scaled, (torch.tensor(-1.0), torch.tensor(2.0, dtype=torch.float64))),
    (row_mean, (torch.tensor(1.5),)),
    (row_sum, (torch.tensor(1.5),)),
    (gelu, (torch.randn(256, 0),)),
    (row_mean, (torch.randn(256, 0),)),
    (row_var, (torch.randn(256, 0),)),
    (layer_norm, (torch.randn(256, 0),)),
    (softmax, (torch.randn(256, 0),)),
    (row_sum, (torch.randn(256, 0),)),
    (row_sum, (torch.randn(0, 256),)),
    (matmul, (torch.randn(0, 8), torch.randn(8, 4))),
    (matmul, (torch.randn(4, 0), torch.randn(0, 4))),
], ids=lambda v: v.__name__ if callable(v) else None)
@pytest.mark.filterwarnings("ignore:var\\(\\)")  # eager's own warning for the variance of an empty row
def test_zero_dim_and_empty_tensors_match_eager(fn, args):
    want = fn(*args)
    got = compile(fn, backend="cpp")(*args)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True)  # the mean of an empty row is NaN


def test_integer_input_to_a_float_only_op_raises_what_eager_raises():
    x = torch.arange(6)
    with pytest.raises(Exception) as eager:
        gelu(x)
    with pytest.raises(Exception) as ours:
        compile(gelu, backend="cpp")(x)
    assert isinstance(ours.value, (type(eager.value), KernelgenError)), ours.value


def test_untraceable_function_runs_exactly_once_per_call():
    """Side effects and RNG draws on real data happen once per call, as in eager (tracing only sees proxies)."""
    calls = []

    def data_dependent(x):
        if isinstance(x, torch.Tensor):
            calls.append(1)
        noisy = x + torch.rand_like(x)
        return noisy * 2 if noisy.sum() > 0 else noisy - 1

    f = compile(data_dependent, backend="cpp")
    x = torch.ones(3)
    for n in (1, 2):
        torch.manual_seed(n)
        got = f(x)
        assert len(calls) == n
        torch.manual_seed(n)
        torch.testing.assert_close(got, data_dependent(x))
        calls.pop()


@torch.library.custom_op("kernelgen_test::no_meta_double", mutates_args=())
def _no_meta_double(x: torch.Tensor) -> torch.Tensor:
    SEEN.append(x.clone())
    return x * 2


SEEN: list = []


def uses_op_without_meta_kernel(x):
    return torch.ops.kernelgen_test.no_meta_double(x) + 1


def test_shape_propagation_never_runs_user_code_on_real_memory():
    """The op has no meta or fake kernel: kernelgen must run it once, eagerly, on the caller's data only."""
    SEEN.clear()
    x = torch.arange(4.0)
    got = compile(uses_op_without_meta_kernel, backend="cpp")(x)
    torch.testing.assert_close(got, x * 2 + 1)
    assert len(SEEN) == 1 and torch.equal(SEEN[0], x)


def test_inputs_that_eager_rejects_after_failed_shape_propagation_raise_input_mismatch():
    f = compile(add, backend="cpp")
    with pytest.raises(InputMismatchError, match="cannot run on inputs") as info:
        f(torch.randn(3, 4), torch.randn(5))
    assert isinstance(info.value.__cause__, RuntimeError)
    torch.testing.assert_close(f(torch.ones(3, 4), torch.ones(4)), torch.full((3, 4), 2.0))


def test_out_on_another_device_is_refused():
    f = compile(add, backend="cpp")
    x = torch.randn(3)
    with pytest.raises(InputMismatchError, match="out"):
        f(x, x, out=torch.empty(3, device="meta"))


def _hostile_values():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    return [
        base, base.t(), base[:, ::2], base[0], torch.tensor(0.5), torch.randn(0, 6), torch.randn(4, 0),
        torch.randn(1, 1, 4, 6), base.double(), base.half(), base.to(torch.bfloat16), torch.arange(24).view(4, 6),
        torch.ones(4, 6, dtype=torch.bool), base.to(torch.complex64), torch.full((4, 6), float("nan")),
        torch.full((4, 6), float("inf")), base.to("meta"), 2, 2.5, True, None, "x", [base], (1, 2),
        base.clone().requires_grad_(),
    ]


def _same_result(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
        if want.device.type != "meta":
            torch.testing.assert_close(got, want, equal_nan=True, atol=1e-2, rtol=1e-2)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same_result(g, w)
    else:
        assert got == want


def _values_checked_here(args) -> bool:
    """Finite floating-point tensors: dispatch must give eager's values. Integer/bool promotion and NaN/Inf
    placement are each op's lowering rule, checked op by op by the OpInfo differential suite."""
    return all(not isinstance(a, torch.Tensor) or (a.is_floating_point() and a.device.type == "meta")
               or (a.is_floating_point() and bool(torch.isfinite(a).all())) for a in args)


@pytest.mark.parametrize("fn", [add, gelu, softmax, row_sum, matmul, relu_scaled])
def test_hostile_inputs_raise_only_what_eager_raises_or_a_kernelgen_error(fn):
    """Every escaping exception is eager's own for those inputs or a KernelgenError (one line)."""
    values = _hostile_values()
    arity = fn.__code__.co_argcount
    combos = [(v,) * arity for v in values] + list(itertools.islice(itertools.permutations(values, arity), 0, None, 7))
    compiled = compile(fn, backend="cpp")
    for args in combos:
        try:
            want, eager_error = fn(*args), None
        except Exception as exc:  # noqa: BLE001 - any eager failure is the reference
            want, eager_error = None, exc
        try:
            got = compiled(*args)
        except KernelgenError as exc:
            assert "\n" not in str(exc)
            continue
        except Exception as exc:  # noqa: BLE001
            assert eager_error is not None and type(exc) is type(eager_error), (fn.__name__, args, exc)
            continue
        if _values_checked_here(args):
            assert eager_error is None, (fn.__name__, args, "kernelgen succeeded where eager raised", eager_error)
            _same_result(got, want)


def relu_in_place(x):
    return F.relu(x, inplace=True) * 2


def exp_of_view_in_place(x):
    x.t().exp_()
    return x + 1


def in_place_on_a_value_read_later(x):
    y = x * 2
    z = y + 1
    y.relu_()
    return z, y


def add_in_place(x, y):
    x += y
    return x * 2


@pytest.mark.parametrize("fn,n", [(relu_in_place, 1), (exp_of_view_in_place, 1), (in_place_on_a_value_read_later, 1),
                                  (add_in_place, 2)], ids=lambda v: getattr(v, "__name__", None))
def test_in_place_writes_are_seen_as_in_eager(fn, n):
    g = torch.Generator().manual_seed(0)
    ours = [torch.randn(4, 4, generator=g) for _ in range(n)]
    theirs = [t.clone() for t in ours]
    got, want = compile(fn, backend="cpp")(*ours), fn(*theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)  # the same mutation of the caller's tensors
    for g_, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g_, w)


def test_in_place_on_a_fresh_value_still_runs_the_kernel():
    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(inplace=True))
    x = torch.randn(3, 8)
    f = compile(block, backend="cpp")
    with torch.no_grad():
        torch.testing.assert_close(f(x), block(x))
    assert f.explain(x)["implementation"] == "gemm"  # float32 on C++: the generated GEMM first


def test_augmented_assignment_on_a_fresh_value_still_runs_the_kernel():
    def bias_then_scale(x, b):
        h = x * 2
        h += b
        return h

    x, b = torch.randn(4, 8), torch.randn(8)
    f = compile(bias_then_scale, backend="cpp")
    torch.testing.assert_close(f(x, b), bias_then_scale(x, b))
    assert f.explain(x, b)["implementation"] == "pointwise"


def half_plus_float_in_place(x, b):
    h = x * 2
    h += b  # in place: h stays float16, where h + b would be float32
    return h


def half_method_in_place(x, b):
    return (x * 2).add_(b).relu_()


def int_times_float_in_place(x):
    h = x * 2
    h.mul_(2.5)  # eager refuses to write a float result into an int tensor
    return h


@pytest.mark.parametrize("fn", [half_plus_float_in_place, half_method_in_place], ids=lambda f: f.__name__)
def test_in_place_on_a_fresh_value_keeps_the_written_dtype(fn):
    x, b = torch.randn(4, 8, dtype=torch.float16), torch.randn(8)
    f = compile(fn, backend="cpp")
    got, want = f(x, b), fn(x, b)
    assert got.dtype == want.dtype == torch.float16
    torch.testing.assert_close(got, want)
    assert f.explain(x, b)["implementation"] == "pointwise"


def test_in_place_on_a_fresh_value_raises_where_eager_raises():
    x = torch.arange(6, dtype=torch.int32)
    with pytest.raises(RuntimeError):
        int_times_float_in_place(x)
    with pytest.raises((RuntimeError, KernelgenError)):
        compile(int_times_float_in_place, backend="cpp")(x)


def test_outputs_are_allocated_on_the_inputs_device_whatever_the_default_device():
    f = compile(add, backend="cpp")
    x = torch.randn(4, 8)
    f(x, x)  # built on the default device
    with torch.device("meta"):  # a default device other than the inputs' must not receive the outputs
        got = f(x, x)
    assert got.device == x.device
    torch.testing.assert_close(got, x + x)
