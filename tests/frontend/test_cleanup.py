"""Graph clean-ups before partitioning (kernelgen.frontend.cleanup) on graphs traced by make_fx."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.frontend.cleanup import aten_conversions, drop_noop_conversions, fold_constants  # noqa: E402


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


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_prim_conversion_runs_as_atens_to_copy_with_eagers_values():
    """A prim left to ATen ran torch's Python reference (~325 us a call on an H200); ``_to_copy`` is C++."""
    fn = lambda x: (torch.ops.prims.convert_element_type(x, torch.bfloat16) * 2,)  # noqa: E731
    x = torch.randn(4, 3)
    gm = _trace(fn, x)
    assert aten_conversions(gm) == 1
    assert torch.ops.prims.convert_element_type.default not in _targets(gm)
    assert torch.ops.aten._to_copy.default in _targets(gm)
    torch.testing.assert_close(gm(x)[0], fn(x)[0], rtol=0, atol=0)


def test_constants_from_no_tensor_are_computed_once_and_returned_ones_are_not():
    def fn(x):
        positions = torch.arange(x.shape[-1])  # read by an op: folded
        mask = torch.ops.prims.iota(x.shape[-1], start=0, step=1, dtype=torch.int64, device=x.device,
                                    requires_grad=False)
        returned = torch.arange(3.0)  # the caller may write into it: kept
        filled = torch.full((5,), 2.0)  # a literal regions fold in: kept
        return x + positions + (mask < 2) * filled, returned.view(3, 1)

    x = torch.randn(4, 5)
    gm = _trace(fn, x)
    assert fold_constants(gm) == 2
    assert [n.op for n in gm.graph.nodes].count("get_attr") == 2
    assert torch.ops.aten.full.default in _targets(gm)
    assert [n for n in gm.graph.nodes if n.op == "call_function" and "arange" in str(n.target)]
    for _ in range(2):  # the folded values are read, not consumed
        got, want = gm(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
    first, second = gm(x)[1], gm(x)[1]
    assert first.data_ptr() != second.data_ptr()  # a fresh tensor every call


def test_compiled_gpt2_leaves_no_prim_and_no_constant_to_run_every_step():
    """Issue 31, item 2: a GPT-2 block's graphs through the backend had three ``prims.iota`` left to run each step
    (position ids, the causal mask); none is left now, in float32 and bfloat16."""
    pytest.importorskip("transformers", reason="pip install -e '.[models]'")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from examples.hf_models import build
    from kernelgen.frontend import dynamo_backend

    for dtype in (torch.float32, torch.bfloat16):
        model, inputs = build("gpt2", "test")
        model = model.to(dtype).eval()
        torch._dynamo.reset()
        with dynamo_backend.collect() as graphs, torch.no_grad():
            torch.compile(model, backend="kernelgen")(**inputs)
        left = {op: why for g in graphs for op, why in g.left.items()}
        assert not [op for op in left if "prims." in op or "iota" in op or "arange" in op], left
