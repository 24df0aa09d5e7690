"""Tracing into the IR: decompositions, the structural hash and clear errors for unsupported ops."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.errors import TraceError, UnsupportedOpError
from kernelgen.ir.values import TensorSpec


def f32(*shape: int) -> TensorSpec:
    return TensorSpec(shape, "float32")


def bias_gelu(x, b):
    return F.gelu(x + b)


def bias_gelu_renamed(inp, bias):
    tmp = inp + bias
    return F.gelu(tmp)


def test_hash_is_independent_of_variable_names() -> None:
    a = kernelgen.trace(bias_gelu, f32(4, 8), f32(8))
    b = kernelgen.trace(bias_gelu_renamed, f32(4, 8), f32(8))
    assert a.workload_key == b.workload_key


def test_hash_changes_with_shape_but_family_does_not() -> None:
    a = kernelgen.trace(bias_gelu, f32(4, 8), f32(8))
    b = kernelgen.trace(bias_gelu, f32(4, 16), f32(16))
    assert a.workload_key != b.workload_key
    assert a.family_key == b.family_key
    c = kernelgen.trace(lambda x, b: F.gelu(x * b), f32(4, 8), f32(8))
    assert c.family_key != a.family_key


def test_hash_is_stable_across_processes() -> None:
    code = ("import kernelgen, torch.nn.functional as F\n"
            "from kernelgen.ir.values import TensorSpec as T\n"
            "def f(x, b): return F.gelu(x + b)\n"
            "print(kernelgen.trace(f, T((4, 8), 'float32'), T((8,), 'float32')).workload_key)\n")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
            for _ in range(2)}
    assert keys == {kernelgen.trace(bias_gelu, f32(4, 8), f32(8)).workload_key}


def test_softmax_is_decomposed_into_primitives() -> None:
    graph = kernelgen.trace(lambda x: torch.softmax(x, dim=-1), f32(4, 8))
    # normalised by the row's reciprocal, as eager's vectorised softmax computes it (bit for bit with IEEE flags)
    assert [n.op for n in graph.nodes] == ["input", "max", "sub", "exp", "sum", "reciprocal", "mul"]
    assert graph.output_specs == (f32(4, 8),)


def test_trace_accepts_tensors_and_records_specs() -> None:
    x = torch.randn(3, 5, dtype=torch.float16)
    graph = kernelgen.trace(lambda x: torch.sigmoid(x).float(), x)
    assert graph.signature == (TensorSpec((3, 5), "float16"),)
    assert graph.output_specs[0].dtype == "float32"
    assert "cast" in graph.ops()


def test_linear_becomes_matmul_with_transposed_weight() -> None:
    graph = kernelgen.trace(lambda x, w, b: F.relu(F.linear(x, w, b)), f32(4, 8), f32(16, 8), f32(16))
    ops = [n.op for n in graph.nodes]
    assert "matmul" in ops and "transpose" in ops and ops[-1] == "relu"


def test_unsupported_op_names_the_op() -> None:
    with pytest.raises(UnsupportedOpError, match="flip"):  # (cumsum, named here before, now lowers to a scan)
        kernelgen.trace(lambda x: torch.flip(x, [-1]), f32(4, 8))


def test_reductions_keep_their_reduced_dims_as_size_one() -> None:
    graph = kernelgen.trace(lambda x: x.sum(dim=0), f32(4, 8))
    total, flat = graph.nodes[1], graph.nodes[2]
    assert (total.op, total.attr("dims"), total.spec.shape) == ("sum", (0,), (1, 8))
    assert (flat.op, flat.spec.shape) == ("reshape", (8,))
    # a last-dim reduction carries no attribute: the graphs and keys of row reductions did not change
    assert kernelgen.trace(lambda x: x.amax(-1), f32(4, 8)).nodes[1].attrs == ()
    index = kernelgen.trace(lambda x: x.argmax(), f32(4, 8)).nodes[1]
    assert (index.op, index.attr("dims"), index.spec.dtype) == ("argmax", (0, 1), "int64")


def test_reductions_eager_computes_specially_stay_eager() -> None:
    with pytest.raises(UnsupportedOpError, match="empty dim"):  # sum over an empty dim is 0 in eager
        kernelgen.trace(lambda x: x.sum(0), f32(0, 8))
    assert kernelgen.trace(lambda x: x.sum(1), f32(0, 8)).output_specs[0].shape == (0,)  # an empty result
    with pytest.raises(UnsupportedOpError, match="float math"):
        kernelgen.trace(lambda x: x.var(0), torch.zeros(4, 8, dtype=torch.int32))



def test_graph_json_round_trip_of_a_reduction_over_dims() -> None:
    graph = kernelgen.trace(lambda x: torch.var_mean(x, [0, 2])[0], f32(2, 3, 4))
    assert kernelgen.Graph.from_json(graph.to_json()) == graph  # dims come back as a tuple, not a list


def test_wrong_number_of_inputs() -> None:
    with pytest.raises(TraceError, match="takes 2 tensors"):
        kernelgen.trace(bias_gelu, f32(4, 8))


def test_graph_json_round_trip() -> None:
    graph = kernelgen.trace(lambda x, w: F.layer_norm(x, (8,), w), f32(4, 8), f32(8))
    assert kernelgen.Graph.from_json(graph.to_json()) == graph
