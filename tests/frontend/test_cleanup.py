"""Graph clean-ups before partitioning (kernelgen.frontend.cleanup) on graphs traced by make_fx."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.frontend.cleanup import drop_noop_conversions  # noqa: E402


def _conversions(gm) -> list:
    return [n for n in gm.graph.nodes if n.op == "call_function" and "convert_element_type" in str(n.target)]


def _trace(fn, *inputs):
    return make_fx(fn, tracing_mode="fake")(*inputs)


def test_a_conversion_to_the_same_dtype_is_dropped_and_values_stay_eagers():
    fn = lambda x: (torch.ops.prims.convert_element_type(x, torch.float32) + 1,)  # noqa: E731
    x = torch.randn(4, 3)
    gm = _trace(fn, x)
    assert len(_conversions(gm)) == 1
    assert drop_noop_conversions(gm) == 1
    assert not _conversions(gm)
    torch.testing.assert_close(gm(x)[0], fn(x)[0])


def test_real_conversions_and_returned_copies_are_kept():
    def fn(x):
        wider = torch.ops.prims.convert_element_type(x, torch.float64) * 2  # changes the dtype
        same = torch.ops.prims.convert_element_type(x, torch.float32)  # returned: would alias the input
        return wider, same

    x = torch.randn(4, 3)
    gm = _trace(fn, x)
    assert drop_noop_conversions(gm) == 0
    assert len(_conversions(gm)) == 2
    wider, same = gm(x)
    assert wider.dtype == torch.float64 and same.data_ptr() != x.data_ptr()


def _clones(gm) -> list:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target == torch.ops.aten.clone.default]


def test_a_copy_of_the_same_layout_read_by_other_ops_is_dropped():
    fn = lambda x: (torch.mm(x.clone(), x.t()),)  # noqa: E731
    x = torch.randn(4, 3)
    gm = _trace(fn, x)
    assert len(_clones(gm)) == 1
    assert drop_noop_conversions(gm) == 1 and not _clones(gm)
    torch.testing.assert_close(gm(x)[0], fn(x)[0])


def test_copies_that_change_the_layout_are_returned_or_precede_a_write_are_kept():
    def layout(x):
        return (x.t().contiguous().view(-1) * 2,)  # a transposed copy: the view needs its layout

    def returned(x):
        return x.clone(), x + 1  # eager's result is a fresh tensor, not the input

    def written(x):
        y = x.clone()
        x.copy_(x + 1)  # the copy holds the values before the write, which reads of y must see
        return (y * 2,)

    for fn in (layout, returned):
        gm = _trace(fn, torch.randn(4, 3))
        assert drop_noop_conversions(gm) == 0 and len(_clones(gm)) == 1, fn.__name__
    x = torch.randn(4, 3)
    gm = _trace(written, x.clone())
    assert drop_noop_conversions(gm) == 0 and len(_clones(gm)) == 1
    torch.testing.assert_close(gm(x.clone())[0], written(x.clone())[0])
