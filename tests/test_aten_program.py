"""The ATen candidate runs a region's own ATen ops (``kernelgen.runtime.aten_program``), not the IR's primitives:
a program is JSON that round-trips, runs to eager's values on every region of a real model, refuses what it cannot
express or resolve, and the launcher writes the outputs whenever they may differ from its last copy."""

from __future__ import annotations

import json

import pytest
import torch
import torch.fx

from kernelgen.backends import get_backend
from kernelgen.frontend import region_op
from kernelgen.runtime.aten import PROGRAMS, AtenImplementation, rebuild
from kernelgen.runtime.aten_program import compile_program, encode


def traced(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*inputs)


def test_a_program_round_trips_through_json_and_computes_what_the_graph_computes():
    def f(x, w):
        y = torch.nn.functional.layer_norm(x, (16,), w, None, 1e-5)
        z = torch.nn.functional.gelu(y).to(torch.bfloat16).float()
        return z.sum(-1), torch.full_like(x, float("inf")) * z

    x, w = torch.randn(4, 16), torch.randn(16)
    gm = traced(f, x, w)
    program = json.loads(json.dumps(encode(gm)))  # what travels to the measurement worker
    assert program["inputs"] == 2 and len(program["outputs"]) == 2
    assert all(node["op"] == "getitem" or node["op"].startswith("aten.") for node in program["nodes"])
    got, want = compile_program(program)((x, w)), f(x, w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, equal_nan=True)


def test_what_a_program_cannot_express_has_no_program():
    gm = traced(lambda x: x + 1, torch.randn(3))
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.args = (node.args[0], torch.randn(3))  # a tensor constant
    assert encode(gm) is None


@pytest.mark.parametrize("program, says", [
    ({"inputs": 1, "nodes": [{"op": "os.system.default", "args": ["true"], "kwargs": {}}], "outputs": []},
     "not an aten or prims overload"),
    ({"inputs": 1, "nodes": [{"op": "aten.no_such_op.default", "args": [], "kwargs": {}}], "outputs": []},
     "does not exist"),
    ({"inputs": 1, "nodes": [{"op": "aten.add.Tensor", "args": [{"eval": "1"}], "kwargs": {}}], "outputs": []},
     "not understood"),
    ({"inputs": 1, "nodes": "aten.add.Tensor", "outputs": []}, "'nodes' must be a list"),
])
def test_a_malformed_program_is_refused_in_one_line(program, says):
    with pytest.raises(ValueError, match=says):
        compile_program(program)


def test_every_region_of_a_real_model_runs_its_own_aten_ops_as_the_candidate(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import examples.hf_models as hf

    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path))
    model, inputs = hf.gpt2_test()
    compiled = torch.compile(model.eval(), backend="kernelgen", options={"db": f"sqlite:///{tmp_path / 'db.sqlite'}"})
    seen = {}
    with torch.no_grad():
        compiled(**inputs)
        with region_op.observe(lambda k, xs: seen.setdefault(id(k), (k, [x.clone() for x in xs]))):
            compiled(**inputs)
    assert seen
    target = get_backend("cpp").target()
    for kernel, xs in seen.values():
        graph = kernel.compiled.choices()[0]["graph"]
        assert graph.workload_key in PROGRAMS
        impl = AtenImplementation(graph, "cpp")
        assert impl.program is not None and impl.worker_args == {"program": impl.program}
        # the worker rebuilds it from its JSON arguments
        again = rebuild(graph, "cpp", **json.loads(json.dumps(impl.worker_args)))
        launch = again.build(again.default_config(target), target)
        outs = [torch.full(s.shape, float("nan") if "float" in s.dtype else -7, dtype=getattr(torch, s.dtype))
                for s in graph.output_specs]
        with torch.no_grad():
            launch(*xs, *outs)
            want = kernel.gm(*xs)
        for out, expected in zip(outs, want):
            torch.testing.assert_close(out, expected)


def test_the_launcher_copies_again_whenever_its_buffers_or_inputs_may_have_changed():
    gm = traced(lambda x: (x * 2,), torch.randn(4))
    from kernelgen.runtime.aten import AtenLauncher

    class Graph:  # the launcher reads the inputs' count only
        input_ids = (0,)

    launch = AtenLauncher(Graph(), "cpu", encode(gm))
    x, out = torch.arange(4.0), torch.empty(4)
    launch(x, out)
    assert out.tolist() == [0, 2, 4, 6]
    out.fill_(-1)  # a measurer's sentinel: the next call must write again
    launch(x, out)
    assert out.tolist() == [0, 2, 4, 6]
    x.add_(1)  # new input values
    launch(x, out)
    assert out.tolist() == [2, 4, 6, 8]
    other = torch.empty(4)
    launch(x, other)
    assert other.tolist() == [2, 4, 6, 8]
