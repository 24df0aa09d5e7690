"""kernelgen.compile accepts modules, bound methods, partials, callable objects and keyword arguments."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.errors import InputMismatchError, KernelgenError

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

X = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))


class Block(torch.nn.Module):
    """Linear + GELU with a scaling buffer: parameters, a buffer and a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x):
        return F.gelu(self.proj(x)) * self.scale

    def doubled(self, x):
        return self.forward(x) * 2


def test_module_matches_eager_and_sees_parameter_updates():
    torch.manual_seed(0)
    block = Block()
    f = compile(block, backend="cpp")
    with torch.no_grad():
        torch.testing.assert_close(f(X), block(X))
        assert f.explain(X)["implementation"] == "gemm"  # float32 on C++: the generated GEMM first
        block.proj.weight.add_(1.0)  # in place, as an optimizer step does
        block.scale.fill_(2.0)
        torch.testing.assert_close(f(X), block(X))
        block.proj.bias = torch.nn.Parameter(torch.ones(8))  # replaced
        torch.testing.assert_close(f(X), block(X))
    assert f.__name__ == "Block"


def test_module_parameters_get_gradients_and_an_optimizer_step_is_seen():
    torch.manual_seed(0)
    block, twin = Block(), Block()
    twin.load_state_dict(block.state_dict())
    f = compile(block, backend="cpp")
    for model, fn in ((block, f), (twin, twin)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            fn(X).square().sum().backward()
            opt.step()
    for (name, p), q in zip(block.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, msg=name)
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_bound_method_partial_callable_object_and_keywords():
    block = Block()
    with torch.no_grad():
        torch.testing.assert_close(compile(block.doubled, backend="cpp")(X), block.doubled(X))

    def scaled_add(x, y, alpha=2.0, *, relu=False):
        z = x + alpha * y
        return torch.relu(z) if relu else z

    y = torch.randn(5, 16)
    f = compile(scaled_add, backend="cpp")
    torch.testing.assert_close(f(X, y), scaled_add(X, y))
    torch.testing.assert_close(f(X, y, 3.0), scaled_add(X, y, 3.0))
    torch.testing.assert_close(f(X, y=y, alpha=0.5, relu=True), scaled_add(X, y, alpha=0.5, relu=True))
    assert f.explain(X, y, relu=True)["implementation"] == "pointwise"

    p = functools.partial(scaled_add, alpha=-1.0)
    torch.testing.assert_close(compile(p, backend="cpp")(X, y), p(X, y))
    assert compile(p, backend="cpp").__name__ == "partial(scaled_add)"

    class Scale:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return torch.sigmoid(x) * self.k

    torch.testing.assert_close(compile(Scale(3.0), backend="cpp")(X), Scale(3.0)(X))
    torch.testing.assert_close(compile(torch.relu, backend="cpp")(X), torch.relu(X))


def test_python_scalars_are_part_of_the_signature():
    def mul(x, k):
        return x * k

    f = compile(mul, backend="cpp")
    for k in (2.0, 3.0, 2, float("nan"), float("nan"), 0.0, -0.0):
        torch.testing.assert_close(f(X, k), mul(X, k), equal_nan=True)
        assert f(X, k).dtype == mul(X, k).dtype
    assert len(f._cache) == 6  # 2.0, 3.0, 2, 0.0, -0.0 (x * -0.0 is not x * 0.0) and one entry for NaN


def test_out_and_explain_work_for_modules():
    block = Block()
    f = compile(block, backend="cpp")
    out = torch.empty(5, 8)
    with torch.no_grad():
        assert f(X, out=out) is out
        torch.testing.assert_close(out, block(X))
    assert f.explain(X)["implementation"] == "gemm"  # float32 on C++: the generated GEMM first


def gen(x):
    yield x


@pytest.mark.parametrize("thing,needle", [
    (3, "needs a callable"), (Block, "pass an instance"), (gen, "generator"), ("relu", "needs a callable"),
])
def test_what_it_cannot_compile_is_a_one_line_kernelgen_error(thing, needle):
    with pytest.raises(KernelgenError, match=needle) as info:
        compile(thing)
    assert "\n" not in str(info.value)


def test_wrong_arguments_name_the_signature():
    f = compile(lambda x, y: x + y, backend="cpp")
    with pytest.raises(InputMismatchError, match=r"takes \(x, y\)"):
        f(X)
    with pytest.raises(InputMismatchError, match=r"takes \(x, y\)"):
        f(X, X, X)
    with pytest.raises(InputMismatchError, match=r"takes \(x, y\)"):
        f(X, z=X)


def test_trace_accepts_modules_with_state_as_inputs():
    graph = kernelgen.trace(Block(), X)
    assert [list(s.shape) for s in graph.signature] == [[5, 16], [8, 16], [8], [8]]


class ModeDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x + 1


def test_train_and_eval_are_separate_signatures():
    m = ModeDependent()
    f = compile(m, backend="cpp")
    torch.testing.assert_close(f(X), X * 2)
    m.eval()
    torch.testing.assert_close(f(X), X + 1)
    m.train()
    torch.testing.assert_close(f(X), X * 2)
    assert f.explain(X)["implementation"] == "pointwise"
