"""The renderer seam (issue 16): one op table per language, every IR elementwise op a row in each, refusals as
``UnsupportedOpError`` naming the op and dtype, and the tables' modules inside every template's source hash."""

from __future__ import annotations


import pytest

from kernelgen.codegen import cpp_expr, triton_expr
from kernelgen.codegen.cpp_renderer import CppRenderer
from kernelgen.codegen.triton_renderer import TritonRenderer
from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import ELEMENTWISE_OPS, Graph, Node
from kernelgen.ir.values import TensorSpec


def _unary_graph(op: str, dtype: str, out_dtype: str | None = None) -> Graph:
    spec = TensorSpec((8,), dtype)
    return Graph((Node("input", (), (("index", 0),), spec), Node(op, (0,), (), TensorSpec((8,), out_dtype or dtype))),
                 (1,))


def test_every_ir_elementwise_op_is_a_row_of_each_table():
    assert ELEMENTWISE_OPS <= CppRenderer.ops()
    assert ELEMENTWISE_OPS <= TritonRenderer.ops()
    assert cpp_expr.OPS == CppRenderer.ops()


@pytest.mark.parametrize("op,dtype", [("bitwise_and", "float32"), ("bitwise_left_shift", "bool"), ("expm1", "int32")])
def test_a_row_refuses_a_dtype_it_cannot_match_with_the_op_and_dtype_named(op, dtype):
    graph = _unary_graph(op, dtype) if op in ("expm1",) else Graph(
        (Node("input", (), (("index", 0),), TensorSpec((8,), dtype)),
         Node("input", (), (("index", 1),), TensorSpec((8,), dtype)),
         Node(op, (0, 1), (), TensorSpec((8,), dtype))), (2,))
    with pytest.raises(UnsupportedOpError, match=f"{dtype} rule for op '{op}'"):
        cpp_expr.op_expr(graph, len(graph.nodes) - 1, ["in0[i]", "in1[i]"][: len(graph.nodes) - 1])
    with pytest.raises(UnsupportedOpError, match=f"{dtype} rule for op '{op}'"):
        triton_expr.ExprEmitter(graph, {i: f"x{i}" for i in graph.input_ids}).emit([len(graph.nodes) - 1])


def test_integer_division_renders_only_by_a_safe_constant():
    spec, c = TensorSpec((8,), "int8"), TensorSpec((), "int8")
    for value, ok in ((7, True), (0, False), (-1, False), (256, False), (255, False), (-3, True)):
        graph = Graph((Node("input", (), (("index", 0),), spec), Node("const", (), (("value", value),), c),
                       Node("floor_divide", (0, 1), (), spec)), (2,))
        if ok:
            assert "kg_floordiv_int" in cpp_expr.op_expr(graph, 2, ["in0[i]", cpp_expr.literal(value, "int8")])
        else:  # 256 wraps to 0 in int8 and 255 to -1: eager divides by those
            with pytest.raises(UnsupportedOpError, match="constant other than 0 and -1"):
                cpp_expr.op_expr(graph, 2, ["in0[i]", cpp_expr.literal(value, "int8")])


@pytest.mark.parametrize("renderer,table", [("kernelgen.templates.pointwise_cpp", "kernelgen.codegen.cpp_renderer"),
                                            ("kernelgen.templates.reduction_triton", "kernelgen.codegen.triton_renderer")])
def test_the_op_tables_are_part_of_the_template_source_hash(renderer, table):
    from kernelgen.code_hash import module_closure

    # the derived implementation hash walks the renderer's imports: the op table modules are in it
    closure = module_closure((renderer,))
    assert table in closure and "kernelgen.codegen.renderer" in closure