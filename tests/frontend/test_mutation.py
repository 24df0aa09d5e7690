"""Functions that write their inputs in place, through ``torch.compile(backend="kernelgen")`` and
``kernelgen.compile``: the results, the inputs after each call and which result aliases which input are eager's
(AOTAutograd functionalizes the writes; the regions compute the new values, scatters included, and the copy back
into the inputs is eager's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")
dynamo_backend.register()


def add_(x, y):
    x.add_(y)
    return x * 2


def setitem(x, y):
    x[:, 2] = y
    return x.sum(-1)


def write_a_view(x):
    x[0].mul_(3)  # a view of the input: the input itself changes
    return x


def index_put_(x, i, v):
    x.index_put_((i,), v, accumulate=True)
    return x


def scatter_add_(x, i, s):
    x.scatter_add_(0, i, s)
    return x + 1


def kv_cache_update(cache, new):
    cache[:, :, 4:6] = new  # the rotary/KV-cache write of Llama-family graphs
    return cache.sum(-1)


def alias_of_the_input(x):
    y = x.view(-1)
    y.add_(1)
    return y  # a view of x: eager's result shares x's memory


CASES = [
    (add_, lambda: (torch.randn(3, 4), torch.randn(4))),
    (setitem, lambda: (torch.randn(3, 4), torch.randn(3))),
    (write_a_view, lambda: (torch.randn(3, 4),)),
    (index_put_, lambda: (torch.randn(5, 3), torch.tensor([1, 1, 4]), torch.randn(3, 3))),
    (scatter_add_, lambda: (torch.randn(5, 3), torch.randint(0, 5, (7, 3)), torch.randn(7, 3))),
    (kv_cache_update, lambda: (torch.randn(2, 3, 8, 4), torch.randn(2, 3, 2, 4))),
    (alias_of_the_input, lambda: (torch.randn(3, 4),)),
]


def _check_like_eager(fn, compiled, make):
    torch.manual_seed(0)
    inputs = make()
    for _ in range(2):  # the graph path's first call of a signature runs eagerly: the second runs the regions
        mine, theirs = [t.clone() for t in inputs], [t.clone() for t in inputs]
        got, want = compiled(*mine), fn(*theirs)
        torch.testing.assert_close(got, want)
        for a, b in zip(mine, theirs):  # the writes into the inputs
            assert torch.equal(a, b)
        assert (got.untyped_storage().data_ptr() == mine[0].untyped_storage().data_ptr()) == \
            (want.untyped_storage().data_ptr() == theirs[0].untyped_storage().data_ptr())


@pytest.mark.parametrize("fn,make", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_torch_compile_writes_back_what_eager_writes(fn, make):
    torch._dynamo.reset()
    with dynamo_backend.collect() as graphs:
        _check_like_eager(fn, torch.compile(fn, backend="kernelgen"), make)
    assert graphs and all(s.fused_ops == s.aten_ops and s.runs.get("eager", 0) == 0 for s in graphs), \
        [s.as_dict() for s in graphs]


@pytest.mark.parametrize("fn,make", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_kernelgen_compile_writes_back_what_eager_writes(fn, make):
    torch._dynamo.reset()
    _check_like_eager(fn, kernelgen.compile(fn, backend="cpp"), make)
