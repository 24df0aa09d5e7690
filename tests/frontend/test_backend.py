"""``torch.compile(..., backend="kernelgen")``: results and gradients against eager, Dynamo's features
(graph breaks, fullgraph, tensor attribute reads, Python scalars, dynamic shapes), the region custom op."""

from __future__ import annotations

import copy
import pathlib
import tomllib

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.errors import KernelgenError  # noqa: E402
from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.frontend.decompositions import decompositions  # noqa: E402
from kernelgen.frontend.region_op import RegionKernel  # noqa: E402

dynamo_backend.register()  # what the entry point does once kernelgen is installed


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class MLP(nn.Module):
    def __init__(self, d: int = 8, h: int = 16) -> None:
        super().__init__()
        self.up, self.norm, self.down = nn.Linear(d, h), nn.LayerNorm(h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.norm(self.up(x))))


def grads_of(model, x, g):
    out = model(x)
    out.backward(g)
    grads = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    return out.detach(), grads


def compiled_matches_eager(model, x, g, reference=None) -> list:
    """Outputs and gradients of ``torch.compile(model, backend="kernelgen")`` equal eager's (of ``reference``, a
    copy for a model whose state a step changes, else of ``model`` itself); the graphs' stats."""
    with dynamo_backend.collect() as graphs:
        got, got_grads = grads_of(torch.compile(model, backend="kernelgen"), x, g)
    want, want_grads = grads_of(model if reference is None else reference, x, g)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b)
    return graphs


@pytest.mark.slow  # ~12 s: compiles and checks a dozen kernels
def test_mlp_forward_and_backward_match_eager_and_run_kernels():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(2, 3, 8, requires_grad=True)
    g = torch.randn(2, 3, 8)
    graphs = compiled_matches_eager(model, x, g)
    assert [s.name for s in graphs] == ["forward", "backward"]
    forward, backward = graphs
    assert forward.runs.get("kernel", 0) == forward.regions > 0 and forward.coverage == 1.0
    assert backward.runs.get("kernel", 0) == backward.regions > 0
    assert {"gemm", "reduction"} <= set(forward.templates)
    # the bias gradients (sums over the leading dims) run in reduction regions: nothing is left to ATen
    assert not backward.left and backward.templates["reduction"] >= 3


@pytest.mark.slow  # ~8 s
def test_gradcheck_in_float64():
    torch.manual_seed(0)
    model = MLP(4, 6).double()
    compiled = torch.compile(model, backend="kernelgen")
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(compiled, (x,))


def test_graph_break_compiles_both_sides():
    def fn(x):
        y = torch.softmax(x * 2, -1)
        torch._dynamo.graph_break()
        return torch.relu(y - 0.1) * 3

    x = torch.randn(4, 8)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(x)
    torch.testing.assert_close(got, fn(x))
    assert len(graphs) == 2 and all(s.runs.get("kernel", 0) == 1 for s in graphs)


def test_fullgraph_with_tensor_attribute_reads_and_python_scalars():
    def fn(x, scale: float, shift: int):
        if x.device.type == "cpu" and x.dtype == torch.float32:
            y = x * scale + x.shape[-1]
        else:
            y = x
        return torch.tanh(y) - shift

    x = torch.randn(4, 8)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen", fullgraph=True)(x, 0.5, 2)
    torch.testing.assert_close(got, fn(x, 0.5, 2))
    assert graphs[0].regions == 1 and graphs[0].coverage == 1.0


def _region_kernels(graphs) -> list:
    from kernelgen.frontend.region_op import _REGIONS

    return [k for k in _REGIONS.values() if k.counters is not None and any(k.counters is g.runs for g in graphs)]


def test_dynamic_shapes_run_one_generic_kernel_per_region():
    """Dynamo's symbolic batch dim: regions still form (planned at the size hint) and each region serves every
    later size with one shape-generic kernel (the same family and source file), values as eager's."""
    def fn(x, w):
        return torch.softmax(torch.sigmoid(x) * x * w, -1)

    w = torch.randn(8)
    compiled = torch.compile(fn, backend="kernelgen", dynamic=True)
    sizes = (3, 5, 17, 64, 2)
    with dynamo_backend.collect() as graphs:
        for n in sizes:
            x = torch.randn(n, 8)
            torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert len(graphs) == 1 and graphs[0].regions >= 1 and not graphs[0].left
    assert graphs[0].runs == {"kernel": len(sizes) * graphs[0].regions}
    for kernel in _region_kernels(graphs):
        seen = {(e["family"], e["source_path"]) for e in
                (kernel.compiled.explain(torch.randn(n, 8), w) for n in sizes) if "family" in e}
        assert len(seen) == 1, seen  # one generic kernel, never one per size


def test_dynamic_shapes_training_matches_eager_at_each_size():
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="kernelgen", dynamic=True)
    with dynamo_backend.collect() as graphs:
        for n in (3, 6, 11):
            x = torch.randn(n, 8, requires_grad=True)
            g = torch.randn(n, 8)
            got, got_grads = grads_of(compiled, x, g)
            want, want_grads = grads_of(model, x, g)
            torch.testing.assert_close(got, want)
            for a, b in zip(got_grads, want_grads):
                torch.testing.assert_close(a, b)
    assert {g.name for g in graphs} == {"forward", "backward"}
    assert all(g.regions and g.runs.get("kernel") for g in graphs)


def test_symbolic_size_arguments_stay_aten():
    def fn(x):
        return x * x.shape[0]  # the size is a SymInt argument of the multiply

    compiled = torch.compile(fn, backend="kernelgen", dynamic=True)
    with dynamo_backend.collect() as graphs:
        for n in (3, 5):
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x), fn(x))
    assert any("SymInt" in reason for reason in graphs[0].left.values())


def test_unknown_option_is_a_kernelgen_error():
    compiled = torch.compile(lambda x: x + 1, backend="kernelgen", options={"tile": 4})
    with pytest.raises(Exception) as info:
        compiled(torch.randn(3))
    chain = [info.value, getattr(info.value, "inner_exception", None), info.value.__cause__]
    assert any(isinstance(e, KernelgenError) and "tile" in str(e) for e in chain)


def test_entry_point_names_the_backend():
    project = tomllib.loads((pathlib.Path(__file__).parents[2] / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["torch_dynamo_backends"]["kernelgen"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is dynamo_backend.kernelgen_backend


def _installed_region(fn, *inputs):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    dynamo_backend.compile_graph(gm, "test")
    call = next(n for n in gm.graph.nodes if n.target is torch.ops.kernelgen.region.default)
    return gm, call.args[0]


def test_region_op_passes_opcheck():
    x, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    _, key = _installed_region(lambda x, b: (F.gelu(x + b) * 2,), x.detach(), b.detach())
    torch.library.opcheck(torch.ops.kernelgen.region.default, (key, [x, b]),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_static"))


def test_region_op_under_autograd_gives_eager_gradients():
    x, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    _, key = _installed_region(lambda x, b: (torch.softmax(x * b, -1),), x.detach(), b.detach())
    out, = torch.ops.kernelgen.region.default(key, [x, b])
    out.pow(2).sum().backward()
    ours = x.grad.clone(), b.grad.clone()
    x.grad = b.grad = None
    torch.softmax(x * b, -1).pow(2).sum().backward()
    torch.testing.assert_close(ours, (x.grad, b.grad))


def test_a_region_whose_kernel_fails_runs_its_aten_nodes(monkeypatch):
    def broken(self, *inputs):
        raise KernelgenError("kernel unavailable")

    monkeypatch.setattr("kernelgen.runtime.compiled.CompiledFunction.__call__", broken)
    x = torch.randn(4, 8)
    fn = lambda x: torch.exp(x) * 2  # noqa: E731
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(x)
    torch.testing.assert_close(got, fn(x))
    assert graphs[0].runs == {"eager": 1}


def test_region_kernel_outputs_never_alias_inputs():
    x = torch.randn(4, 8)
    gm, key = _installed_region(lambda x: (x * 1.0,), x)
    from kernelgen.frontend.region_op import _REGIONS

    kernel: RegionKernel = _REGIONS[key]
    kernel.compiled = lambda *inputs: inputs  # an implementation that hands its input back
    kernel.impl = "test"
    out, = torch.ops.kernelgen.region.default(key, [x])
    assert out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, x)


class CausalBlock(nn.Module):
    """A GPT-2-style pre-norm attention block: causal SDPA over heads, then a residual."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.norm, self.qkv, self.out = heads, nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(b, t, c))


@pytest.mark.slow  # ~8 s
def test_causal_attention_block_gradients_match_eager():
    # core ATen's decomposition table gave gradients off by ~4 here (torch 2.13); the backend's table does not
    torch.manual_seed(0)
    model, x = CausalBlock(), torch.randn(2, 4, 16, requires_grad=True)
    g = torch.randn(2, 4, 16)
    got, got_grads = grads_of(torch.compile(model, backend="kernelgen"), x, g)
    want, want_grads = grads_of(model, x, g)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b)


def test_inference_attention_is_one_attention_region():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(2, 2, 8, 16).transpose(1, 2) for _ in range(3))  # strided [b, h, t, d] views
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v))
    assert dict(graphs[0].templates) == {"attention": 1} and graphs[0].runs == {"kernel": 1}


class MaskedBlock(nn.Module):
    """A BERT-style attention block: SDPA (not causal) with the padding mask as an additive [B, 1, 1, T] float
    or a [B, 1, T, T] bool ``attn_mask``, or none."""

    def __init__(self, mask=None, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("mask", mask)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        return x + self.out(y.transpose(1, 2).reshape(b, t, c))


def padding_masks(b: int = 2, t: int = 6) -> dict:
    keep = torch.ones(b, t, dtype=torch.bool)
    keep[1, 4:] = False  # the second sequence is padded
    additive = (1.0 - keep[:, None, None, :].float()) * torch.finfo(torch.float32).min
    return {"none": None, "additive": additive, "bool": keep[:, None, None, :].expand(b, 1, t, t)}


@pytest.mark.parametrize("mask", ["none", "additive", "bool"])
def test_training_attention_block_is_an_attention_region_with_eager_gradients(mask):
    # the forward reads the flash op's logsumexp for ATen's backward op: the region computes it too
    torch.manual_seed(0)
    model, x = MaskedBlock(padding_masks()[mask]), torch.randn(2, 6, 16, requires_grad=True)
    graphs = compiled_matches_eager(model, x, torch.randn(2, 6, 16))
    forward = next(s for s in graphs if s.name == "forward")
    assert forward.templates["attention"] == 1, forward.left
    assert not any("attention" in op for op in forward.left), forward.left


def test_masked_inference_attention_is_one_attention_region():
    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q, k, v = (torch.randn(2, 2, 6, 16) for _ in range(3))
    for mask in (padding_masks()["additive"], padding_masks()["bool"]):
        torch._dynamo.reset()
        with torch.no_grad(), dynamo_backend.collect() as graphs:
            got = torch.compile(fn, backend="kernelgen")(q, k, v, mask)
        torch.testing.assert_close(got, fn(q, k, v, mask))
        assert graphs[0].templates["attention"] == 1 and not any("attention" in op for op in graphs[0].left)


def test_relu_backward_constant_is_read_by_the_region_kernel():
    # relu's backward is where(mask, scalar_tensor(0), grad): the region folds the constant in as a literal and
    # still runs its kernel (its eager replay makes the constant from a region input, so the retrace records it)
    x = torch.randn(4, 8, requires_grad=True)
    with dynamo_backend.collect() as graphs:
        out = torch.compile(lambda x: torch.relu(x) * 2, backend="kernelgen")(x)
        out.backward(torch.ones_like(out))
    torch.testing.assert_close(x.grad, (x > 0).float() * 2)
    assert [s.name for s in graphs] == ["forward", "backward"]
    assert all(s.runs.get("eager", 0) == 0 and s.runs.get("kernel", 0) == s.regions > 0 for s in graphs)
    assert not [op for s in graphs for op in s.left if "scalar_tensor" in op or "full" in op]


def test_tune_option_tunes_each_region_and_records_it(tmp_path):
    from kernelgen.frontend.region_op import _REGIONS

    db = f"sqlite:///{tmp_path / 'tune.sqlite'}"
    fn = lambda x: torch.sigmoid(x) * x  # noqa: E731
    x = torch.randn(8, 32)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen", options={"tune": "auto", "trials": 2, "db": db})(x)
    torch.testing.assert_close(got, fn(x))
    kernel, = [k for k in _REGIONS.values() if k.counters is graphs[0].runs]
    assert kernel.compiled.explain(x)["source"] == "tuned"
    # a second compile of the same model finds the record in the database
    torch._dynamo.reset()
    with dynamo_backend.collect() as again:
        torch.compile(fn, backend="kernelgen", options={"db": db})(x)
    kernel, = [k for k in _REGIONS.values() if k.counters is again[0].runs]
    assert kernel.compiled.explain(x)["source"] == "db"


def test_registry_custom_calls_compete_for_regions():
    # registry/rms_norm replaces this plain-torch pattern; the region the backend makes of it is offered the
    # hand-written kernel beside the generated reduction, as kernelgen.compile offers it
    from kernelgen.frontend.region_op import _REGIONS
    from kernelgen.runtime.implementations import implementations_for

    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    x, w = torch.randn(4, 64), torch.randn(64)
    with dynamo_backend.collect() as graphs:
        torch.testing.assert_close(torch.compile(rms_norm, backend="kernelgen")(x, w), rms_norm(x, w))
    kernel, = [k for k in _REGIONS.values() if k.counters is graphs[0].runs]
    names = [impl.name for impl in implementations_for(kernel.graph, "cpp")]
    assert names[0] == "reduction" and "custom:rms_norm/cpp" in names


def test_batchnorm_eval_backward_partitions_without_a_cycle():
    # Two regions each reading the other's output once contracted made the rewritten graph cyclic
    # ("Input graph has cycles"): a region that grew after its reader was visited.
    torch.manual_seed(0)
    model = nn.BatchNorm2d(4).eval()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    g = torch.randn(2, 4, 8, 8)
    graphs = compiled_matches_eager(model, x, g)
    assert {s.name for s in graphs if s.regions} == {"forward", "backward"}


def test_training_batch_norm_runs_eagers_fused_kernels_and_updates_its_statistics():
    # Kept whole in train mode (kernelgen.frontend.decompositions): eager's one-pass native_batch_norm and its
    # backward beat the decomposed graph; the ReLU around it still runs in a region, the running statistics and
    # every gradient are eager's.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1)).train()
    reference = copy.deepcopy(model)
    x, g = torch.randn(2, 3, 8, 8, requires_grad=True), torch.randn(2, 4, 8, 8)
    graphs = compiled_matches_eager(model, x, g, reference)
    for mine, theirs in zip(model.buffers(), reference.buffers()):  # running mean, var and the batch count
        torch.testing.assert_close(mine, theirs)
    left = {key.split(" (")[1].rstrip(")") for stats in graphs for key in stats.left}
    assert {"aten._native_batch_norm_legit_functional.default", "aten.native_batch_norm_backward.default"} <= left
    assert all(stats.regions for stats in graphs)  # the ReLU and its backward


def test_pooling_is_one_window_region_with_its_epilogue():
    # Inductor's pooling rules need torch._inductor.lowering (absent where Inductor never ran) and turn one
    # ATen kernel into index arithmetic that runs op by op; kernelgen keeps pooling whole, as a window region.
    assert not [op for op in decompositions() if "pool" in op.name() and op.name().startswith("aten::")]
    x = torch.randn(1, 2, 6, 6)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(lambda t: F.relu(F.max_pool2d(t, 2)) * 2, backend="kernelgen")(x)
    torch.testing.assert_close(got, F.relu(F.max_pool2d(x, 2)) * 2)
    (stats,) = graphs
    assert stats.templates == {"window": 1} and stats.fused_ops == stats.aten_ops and stats.runs == {"kernel": 1}


class ConvBlock(nn.Module):
    """A CNN stem: convolution, batch norm, ReLU, 3x3/2 max pool, then an average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.avg_pool2d(F.max_pool2d(F.relu(self.bn(self.conv(x))), 3, 2, 1), 2)


def test_eval_conv_batch_norm_relu_is_one_conv_region_and_the_pools_window_regions():
    model = ConvBlock().eval()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        got = torch.compile(model, backend="kernelgen")(x)
        want = model(x)
    torch.testing.assert_close(got, want)
    (stats,) = graphs
    # the normalisation and ReLU are the convolution's epilogue (one aten_conv region: ATen's convolution, then one
    # kernel), the max pool and the average pool are window regions; the per-channel 1 / sqrt(var + eps) is a [C]
    # pointwise region (the epilogue reads it through an unsqueeze view); no op is left to ATen
    assert stats.templates == {"conv": 1, "window": 2, "pointwise": 1}, stats.as_dict()
    assert not stats.left and stats.runs == {"kernel": 4}, stats.as_dict()


def test_training_pooling_forward_and_backward_run_window_kernels_with_eagers_gradients():
    torch.manual_seed(0)
    model = ConvBlock().train()
    x = torch.randn(2, 3, 12, 12, requires_grad=True)
    g = torch.randn(2, 8, 3, 3)
    graphs = compiled_matches_eager(model, x, g)
    by_name = {s.name: s for s in graphs}
    assert by_name["forward"].templates["window"] == 2 and by_name["backward"].templates["window"] == 2
    assert not [op for s in graphs for op in s.left if "pool" in op], [s.left for s in graphs]
    assert all(s.runs.get("eager", 0) == 0 for s in graphs)

class Rotary(nn.Module):
    """Llama's rotary embedding: its backward writes the rotated halves back with ``new_full(..., device=cpu)``
    and ``slice_scatter`` (a tensor made on a named device beside the region's inputs)."""

    def forward(self, q):
        cos, sin = torch.cos(q), torch.sin(q)
        half = q.shape[-1] // 2
        rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
        return q * cos + rotated * sin


def test_rotary_backward_with_tensors_made_on_a_device_runs_kernels():
    torch.manual_seed(0)
    x, g = torch.randn(2, 3, 4, 8, requires_grad=True), torch.randn(2, 3, 4, 8)
    with dynamo_backend.collect() as graphs:
        out = torch.compile(Rotary(), backend="kernelgen")(x)
        out.backward(g)
    got, got_grad = out.detach(), x.grad.clone()
    x.grad = None
    want = Rotary()(x)
    want.backward(g)
    torch.testing.assert_close(got, want.detach())
    torch.testing.assert_close(got_grad, x.grad)
    assert all(s.runs.get("kernel", 0) == s.regions > 0 for s in graphs), [s.as_dict() for s in graphs]


def test_a_graph_whose_every_region_fails_runs_as_plain_aten_ops(monkeypatch, caplog):
    """Issue 31: a graph whose regions all failed their checks replayed each region's sub-graph through a region call
    (a call and an interpreted sub-graph beyond its ops), costing more than eager; after its first call it runs as
    the plain ATen graph, with eager's values, and says so once."""
    import logging

    from kernelgen.check import verdicts
    from kernelgen.ir.values import Status

    monkeypatch.setattr(verdicts, "check", lambda *a, **k: verdicts.Verdict(Status.WRONG_RESULT, "planted"))

    def fn(x, b):
        return F.gelu(x + b).sum(-1) * 2, (x * b).softmax(-1)

    x, b = torch.randn(64, 128), torch.randn(128)
    with dynamo_backend.collect() as graphs, caplog.at_level(logging.WARNING, logger="kernelgen"):
        compiled = torch.compile(fn, backend="kernelgen")
        for _ in range(3):
            got, want = compiled(x, b), fn(x, b)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
    (graph,) = graphs
    assert graph.regions >= 1 and graph.runs == {"eager": graph.regions}  # only the first call went through them
    assert sum("could run a kernel here" in r.getMessage() for r in caplog.records) == 1
