"""kernelgen.compile returns eager's result structure: bare tensor, 1-tuple, list, nesting, dict, identity."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_structure

from kernelgen.api import compile
from kernelgen.backends import get_backend

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

X = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
Y = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))


def one_tuple(x):
    return (x + 1,)


def a_list(x, y):
    return [x + y, x * y]


def nested(x, y):
    return (x + y, [x * y, (torch.relu(x),)])


def a_dict(x, y):
    return {"sum": x + y, "prod": x * y}


def with_constant(x):
    return x * 2, 3


def same_value_twice(x):
    y = x * 2
    return y, y


def equal_values_twice(x):
    return x * 2, x * 2  # two tensors in eager, one node after CSE


def returns_input(x, y):
    return x, x + y


def assert_same_as_eager(got, want):
    assert tree_structure(got) == tree_structure(want)
    for g, w in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
        if isinstance(w, torch.Tensor):
            torch.testing.assert_close(g, w)
        else:
            assert g == w and type(g) is type(w)


@pytest.mark.parametrize("fn,args", [
    (one_tuple, (X,)), (a_list, (X, Y)), (nested, (X, Y)), (a_dict, (X, Y)), (with_constant, (X,)),
])
def test_result_has_eagers_structure(fn, args):
    f = compile(fn, backend="cpp")
    for _ in range(2):  # first call builds, second takes the cached path
        got = f(*args)
        assert_same_as_eager(got, fn(*args))
        assert type(got) is type(fn(*args))
    assert f.explain(*args)["implementation"] != "eager"  # the kernel ran, not the fallback


def test_one_tuple_and_list_of_a_kernel_result_keep_their_type():
    assert isinstance(compile(one_tuple, backend="cpp")(X), tuple)
    assert isinstance(compile(a_list, backend="cpp")(X, Y), list)


def test_identity_follows_eager():
    f, g, h = (compile(fn, backend="cpp") for fn in (same_value_twice, equal_values_twice, returns_input))
    a, b = f(X)
    assert a is b  # eager returns one object twice
    torch.testing.assert_close(a, X * 2)
    c, d = g(X)
    assert c is not d and c.data_ptr() != d.data_ptr()  # eager returns two tensors
    torch.testing.assert_close(c, d)
    same, total = h(X, Y)
    assert same is X
    torch.testing.assert_close(total, X + Y)
    assert {f.explain(X)["implementation"], g.explain(X)["implementation"], h.explain(X, Y)["implementation"]} \
        == {"pointwise"}  # the kernel ran: identity comes from the result layout, not from eager


def test_out_takes_the_flattened_tensors_and_returns_eagers_structure():
    f = compile(a_list, backend="cpp")
    outs = (torch.empty(6, 8), torch.empty(6, 8))
    got = f(X, Y, out=outs)
    assert isinstance(got, list) and got[0] is outs[0] and got[1] is outs[1]
    assert_same_as_eager(got, a_list(X, Y))
    single = torch.empty(6, 8)
    got = compile(one_tuple, backend="cpp")(X, out=single)
    assert isinstance(got, tuple) and got[0] is single
    torch.testing.assert_close(single, X + 1)


def test_trace_leaves_inputs_returned_as_is_out_of_the_kernel_outputs():
    """The kernel computes only new values; the dispatcher hands the input itself back (eager identity)."""
    import kernelgen

    graph = kernelgen.trace(returns_input, X, Y)
    assert [graph.nodes[i].op for i in graph.outputs] == ["add"]


def test_a_copy_of_an_input_is_fresh_and_an_alias_or_a_no_op_conversion_is_not():
    """``x.clone()`` lowers to its input's value, but eager returns a fresh tensor: a copy kernel writes it (the
    result was the input itself, so writing into it wrote into ``x``); ``x.float()`` of a float ``x`` is ``x``,
    ``x.detach()`` an alias without history, ``x.contiguous()`` of a transposed ``x`` a contiguous copy."""
    x = X.clone().requires_grad_()
    copied, total = compile(lambda a: (a.clone(), a + 1), backend="cpp")(x)
    assert copied is not x and copied.data_ptr() != x.data_ptr() and copied.requires_grad
    torch.testing.assert_close(copied, x)
    copied.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    same, alias, _ = compile(lambda a: (a.float(), a.detach(), a * 2), backend="cpp")(x)
    assert same is x and alias is not x and alias.data_ptr() == x.data_ptr() and not alias.requires_grad
    t = X.t()
    dense = compile(lambda a: a.contiguous(), backend="cpp")
    got = dense(t)
    assert got.is_contiguous() and got.data_ptr() != t.data_ptr() and dense.explain(t)["implementation"] == "pointwise"
    torch.testing.assert_close(got, t)
    assert compile(lambda a: a.contiguous(), backend="cpp")(X) is X  # already contiguous: eager returns it


def test_results_that_are_inputs_only_launch_nothing():
    f = compile(lambda a, b: (a.detach(), b), backend="cpp")
    alias, same = f(X, Y)
    assert same is Y and alias.data_ptr() == X.data_ptr()
    assert f.explain(X, Y)["implementation"] == "identity"


@pytest.mark.parametrize("fn,args", [
    (lambda a: torch.relu(a) * 2, (torch.randn(0, 5),)),
    (lambda a, b: a + b, (torch.randn(3, 0), torch.randn(1, 0))),
    (lambda a: a.sum(-1), (torch.randn(0, 7),)),
    (lambda a: (a.exp(), a.cumsum(0)), (torch.randn(4, 0, 2),)),
])
def test_empty_results_come_back_without_a_launch(fn, args):
    f = compile(fn, backend="cpp")
    got, want = f(*args), fn(*args)
    assert_same_as_eager(got, want)
    assert all(t.dtype == w.dtype and t.shape == w.shape for t, w in zip(tree_flatten(got)[0], tree_flatten(want)[0]))
    assert f.explain(*args)["implementation"] == "empty"
    grads = [a.clone().requires_grad_() for a in args]  # autograd still runs eager's backward
    out = f(*grads)
    sum(t.sum() for t in tree_flatten(out)[0]).backward()
    assert all(g.grad is not None and g.grad.shape == g.shape for g in grads)


def test_empty_rows_gathered_out_of_range_raise_what_eager_raises():
    import torch.nn.functional as F

    index, table = torch.tensor([1, 7]), torch.randn(4, 0)
    with pytest.raises(RuntimeError) as eager:
        F.embedding(index, table)
    with pytest.raises(RuntimeError) as ours:
        compile(lambda i, t: F.embedding(i, t), backend="cpp")(index, table)
    assert type(ours.value) is type(eager.value)
