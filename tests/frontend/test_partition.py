"""The partitioner's regions on hand-made ATen graphs (``make_fx`` with core ATen decompositions)."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.frontend.decompositions import decompositions  # noqa: E402
from kernelgen.frontend.dynamo_backend import compile_graph  # noqa: E402
from kernelgen.frontend.partition import partition  # noqa: E402

aten = torch.ops.aten


def aten_graph(fn, *inputs):
    return make_fx(fn, decomposition_table=decompositions())(*inputs)


def regions_of(fn, *inputs):
    found = partition(aten_graph(fn, *inputs))
    return [(r.template, [n.target for n in r.nodes if n.target is not operator.getitem]) for r in found.regions], \
        found


def test_linear_bias_gelu_scale_is_one_gemm_region_with_epilogue():
    regions, found = regions_of(lambda x, w, b: F.gelu(F.linear(x, w, b)) * 2,
                                torch.randn(4, 8), torch.randn(16, 8), torch.randn(16))
    # gelu is decomposed (erf, mul, add): the accumulator feeds several epilogue ops, still one region
    (template, ops), = regions
    assert template == "gemm" and ops[0] == aten.addmm.default and aten.erf.default in ops
    # the weight's transpose stays an ATen view, read by the kernel through its strides
    assert [n.target for n in found.left] == [aten.permute.default]


def test_softmax_with_prologue_and_epilogue_is_one_reduction_region():
    regions, found = regions_of(lambda x: torch.softmax(x * 3, -1) + 1, torch.randn(4, 8))
    (template, ops), = regions
    assert template == "reduction" and ops[0] == aten.mul.Tensor and ops[-1] == aten.add.Tensor
    assert {aten.amax.default, aten.sum.dim_IntList} <= set(ops) and not found.left


def test_layer_norm_region_keeps_its_three_outputs_together():
    regions, found = regions_of(lambda x, w, b: F.layer_norm(x, (8,), w, b).relu(),
                                torch.randn(4, 8), torch.randn(8), torch.randn(8))
    (template, ops), = regions
    # the backend keeps layer norm's forward whole (eager's overflow rows: kernelgen.frontend.decompositions)
    assert template == "reduction" and ops == [aten.native_layer_norm.default, aten.relu.default]
    assert len(found.regions[0].outputs) == 1  # mean and rstd are not read outside
    assert not [n for n in found.left if n.target is not aten.view.default]


def test_a_reduction_without_a_lowering_rule_is_left_to_aten_with_its_reason():
    regions, found = regions_of(lambda x: (x.median(0).values, x.exp()), torch.randn(4, 8))
    assert regions == [("pointwise", [aten.exp.default])]
    (node, reason), = found.left.items()
    assert node.target == aten.median.dim and "unsupported op" in reason


def test_a_leading_dim_sum_and_a_sibling_share_a_reduction_region():
    regions, found = regions_of(lambda x: (x.sum(0), x.exp()), torch.randn(4, 8))
    assert regions == [("reduction", [aten.sum.dim_IntList, aten.exp.default])] and not found.left


def test_bias_gradient_of_a_linear_runs_in_a_reduction_region():
    # AOTAutograd's backward of linear: the bias gradient is sum(grad, [0]) of [N, C] (and of [B, T, C] over
    # [0, 1]); its producer here is the GEMM's recomputed gelu epilogue, which a reduction cannot join, so it is
    # a region of its own: no longer ATen
    def backward(x, w, b, g):
        x, w, b = (t.requires_grad_() for t in (x, w, b))
        return torch.autograd.grad(F.gelu(F.linear(x, w, b)), (x, w, b), g)

    regions, found = regions_of(backward, torch.randn(2, 4, 6), torch.randn(5, 6), torch.randn(5), torch.randn(2, 4, 5))
    assert ("reduction", [aten.sum.dim_IntList]) in regions
    assert not [n for n in found.left if n.target == aten.sum.dim_IntList]


def test_a_leading_dim_sum_joins_its_pointwise_producer_which_stays_an_output():
    # gelu's backward (pointwise) then the bias gradient sum(dim=0): one reduction region, whose elementwise
    # result is also read outside (the input gradient): an element output of the reduction kernel
    def fn(h, g):
        h = h.requires_grad_()
        grad = torch.autograd.grad(F.gelu(h), (h,), g)[0]
        return grad * 3, grad.sum(0)

    inputs = (torch.randn(8, 6), torch.randn(8, 6))
    regions, found = regions_of(fn, *inputs)
    reduction = [ops for t, ops in regions if aten.sum.dim_IntList in ops]
    assert len(reduction) == 1 and aten.erf.default in reduction[0]
    gm = aten_graph(fn, *inputs)
    want = gm(*inputs)
    record = compile_graph(gm, "test")
    for got, expected in zip(gm(*inputs), want):
        torch.testing.assert_close(got, expected)
    assert record.runs == {"kernel": record.regions}


def test_batch_norm_training_forward_is_one_reduction_region():
    def fn(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True).relu()

    regions, found = regions_of(fn, torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3))
    (template, ops), = regions
    assert template == "reduction" and ops[0] == aten.var_mean.correction and ops[-1] == aten.relu.default


def test_batch_norm_training_backward_reductions_all_fuse_and_match_aten():
    # The backend keeps training batch norm whole (eager's fused kernels win, kernelgen.frontend.decompositions);
    # decomposed, as Inductor's table writes it (and as hand-written normalisations look), its per-channel
    # reductions and pointwise ops must still all fuse and match.
    from torch._inductor.decomposition import select_decomp_table

    def fn(x, w, b, g):
        x, w, b = (t.requires_grad_() for t in (x, w, b))
        return torch.autograd.grad(F.batch_norm(x, None, None, w, b, training=True), (x, w, b), g)

    inputs = (torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3), torch.randn(4, 3, 5, 5))
    table = {**decompositions(), **{op: f for op, f in select_decomp_table().items() if "batch_norm" in str(op)}}
    gm = make_fx(fn, decomposition_table=table)(*inputs)
    found = partition(gm)
    regions = [(r.template, [n.target for n in r.nodes if n.target is not operator.getitem]) for r in found.regions]
    reductions = {aten.sum.dim_IntList, aten.var_mean.correction}
    assert not [n for n in found.left if n.target in reductions]
    assert all(t == "reduction" for t, ops in regions if reductions & set(ops))
    gm = make_fx(fn, decomposition_table=table)(*inputs)
    want = gm(*inputs)
    record = compile_graph(gm, "test")
    assert list(record.left) == ["empty (aten.empty.memory_format)"]  # the unused running-stats placeholder
    for got, expected in zip(gm(*inputs), want):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert record.runs == {"kernel": record.regions}  # every region ran its kernel (none fell back to ATen)


def test_a_gemm_read_by_two_consumers_is_not_recomputed():
    # the matmul result feeds two epilogues: one region holds the GEMM, nothing computes it twice
    def fn(x, w):
        y = x @ w
        return y.relu(), y.sigmoid() * 2

    regions, found = regions_of(fn, torch.randn(4, 8), torch.randn(8, 16))
    mm_regions = [r for r in regions if aten.mm.default in r[1]]
    assert len(mm_regions) == 1
    assert sum(r[1].count(aten.mm.default) for r in regions) == 1
    # the other consumer is still fused, in a pointwise region reading the GEMM's output
    fused = {t for _, nodes in regions for t in nodes}
    assert {aten.relu.default, aten.sigmoid.default, aten.mul.Tensor} <= fused


def test_multi_output_pointwise_region():
    def fn(x, y):
        s = x + y
        return s.exp(), s * 2

    regions, found = regions_of(fn, torch.randn(4, 8), torch.randn(8))
    assert regions == [("pointwise", [aten.add.Tensor, aten.exp.default, aten.mul.Tensor])]
    assert len(found.regions[0].outputs) == 2


def test_regions_are_convex():
    # exp(x) -> median over dim 0 (ATen: no rule) -> added back to exp(x): the add cannot join exp's region,
    # which would then both feed and read the ATen reduction
    def fn(x):
        e = x.exp()
        return e + e.median(0).values

    regions, found = regions_of(fn, torch.randn(4, 8))
    assert [nodes for _, nodes in regions] == [[aten.exp.default], [aten.add.Tensor]]


def test_installed_regions_compute_what_the_aten_graph_computes():
    def fn(x, w, b):
        h = F.layer_norm(x, (8,), w, b)
        return torch.softmax(h * 2, -1), h.median(0).values

    inputs = (torch.randn(6, 8), torch.randn(8), torch.randn(8))
    gm = aten_graph(fn, *inputs)
    want = gm(*inputs)
    record = compile_graph(gm, "test")
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    # layer norm, scale and softmax share their rows: one reduction region holds all three
    assert ops.count(torch.ops.kernelgen.region.default) == record.regions == 1
    assert record.fused_ops == record.aten_ops - 1  # the median stays ATen (no lowering rule)
    got = gm(*inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert record.runs.get("kernel", 0) == 1


def test_non_contiguous_region_output_keeps_eager_strides():
    # an elementwise op on a transposed input keeps the transposed layout in eager; the graph's later view
    # relies on it, so the region's output must come back with those strides
    def fn(x):
        y = x.t() * 2
        return y.t().reshape(-1)

    x = torch.randn(4, 6)
    gm = aten_graph(fn, x)
    compile_graph(gm, "test")
    torch.testing.assert_close(gm(x)[0] if isinstance(gm(x), (tuple, list)) else gm(x), fn(x))


def test_siblings_reading_one_input_share_a_region():
    # two independent chains over x: one multi-output kernel loads x once
    def fn(x):
        return x.exp() * 2, torch.tanh(x) + 1

    regions, found = regions_of(fn, torch.randn(4, 8))
    assert len(regions) == 1 and regions[0][0] == "pointwise"
    assert len(found.regions[0].outputs) == 2


def test_a_device_move_stays_out_of_regions():
    # _to_copy(device=...) lowers to a cast like any dtype copy; a kernel writes on its inputs' device, so a
    # region never spans two devices and the copy stays ATen's
    def fn(x):
        return aten._to_copy.default(x * 2, device=torch.device("meta")) + 1

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(4, 8))
    found = partition(gm)
    assert [n.target for n in found.left] == [aten._to_copy.default]
    devices = [{str(n.meta["val"].device) for n in (*r.inputs, *r.nodes)} for r in found.regions]
    assert devices == [{"cpu"}, {"meta"}]


def test_a_member_whose_consumer_stays_outside_is_an_output_or_leaves():
    # y = x @ w feeds the epilogue and a median that no template covers: y becomes a second output,
    # which the GEMM template does not allow, so the epilogue leaves the GEMM region (checked at the end)
    def fn(x, w):
        y = x @ w
        return y.relu(), y.median(0).values

    regions, found = regions_of(fn, torch.randn(4, 8), torch.randn(8, 16))
    assert sorted(t for t, _ in regions) == ["gemm", "pointwise"]
    gemm = next(r for r in found.regions if r.template == "gemm")
    assert [n.target for n in gemm.nodes] == [aten.mm.default]


def test_gpt_block_attention_shapes_partition_and_run_like_aten():
    # a causal attention written out (batched matmuls over views, masked softmax): whatever is grouped, the
    # rewritten graph computes what the ATen graph computes
    def fn(q, k, v, mask):
        s = (q @ k.transpose(-1, -2)) * 0.25
        s = s.masked_fill(mask, float("-inf"))
        return torch.softmax(s, -1) @ v

    q, k, v = (torch.randn(2, 2, 4, 8) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1)
    gm = aten_graph(fn, q, k, v, mask)
    want = gm(q, k, v, mask)
    record = compile_graph(gm, "test")
    assert record.regions >= 2
    torch.testing.assert_close(gm(q, k, v, mask), want)


def test_linear_on_a_3d_input_fuses_its_epilogue_through_the_reshape():
    # addmm works on [B*T, C]; the gelu and residual read view(addmm, [B, T, N]): the view moves below them
    def fn(x, w, b):
        return x + F.gelu(F.linear(x, w, b))

    inputs = (torch.randn(2, 3, 8), torch.randn(8, 8), torch.randn(8))
    gm = aten_graph(fn, *inputs)
    want = gm(*inputs)
    record = compile_graph(gm, "test")
    assert dict(record.templates) == {"gemm": 1} and record.fused_ops == record.aten_ops
    torch.testing.assert_close(gm(*inputs), want)


def test_aten_rules_compute_eager_values():
    # clamp_min/max, var(correction=0), log_softmax, full_like: ATen-only rules, checked against the ATen graph
    def fn(x):
        return (torch.full_like(x, 2.0) * x, torch.clamp_min(x, 0.1), torch.clamp_max(x, 0.2),
                x.var(-1, correction=0), torch.log_softmax(x, -1), F.layer_norm(x, (8,)))

    x = torch.randn(4, 8)
    gm = aten_graph(fn, x)
    want = gm(x)
    record = compile_graph(gm, "test")
    assert record.regions >= 1 and all("constant" in reason for reason in record.left.values())
    for got, expected in zip(gm(x), want):
        torch.testing.assert_close(got, expected)


# --- data movement and prims (issue 16, part 2) --------------------------------------------------------------

def _installed_matches_aten(fn, *inputs):
    """compile_graph on fn's ATen graph: the regions' kernels compute what the ATen graph computes."""
    gm = aten_graph(fn, *inputs)
    want = gm(*inputs)
    record = compile_graph(gm, "test")
    got = gm(*inputs)
    for g, w in zip(got if isinstance(got, (tuple, list)) else [got], want if isinstance(want, (tuple, list)) else [want]):
        torch.testing.assert_close(g, w)
    assert record.runs.get("kernel", 0) == record.regions and not record.runs.get("eager")
    return record


def test_rotary_embedding_is_one_pointwise_region():
    # Llama's x * cos + rotate_half(x) * sin: the slices stay ATen views, neg + cat + muls + add one kernel.
    # add reads two producer regions (x * cos, and the cat chain): they merge instead of one reading the other.
    def rotary(q, cos, sin):
        h = q.shape[-1] // 2
        return q * cos + torch.cat((-q[..., h:], q[..., :h]), dim=-1) * sin

    inputs = (torch.randn(2, 3, 8), torch.randn(3, 8), torch.randn(3, 8))
    regions, found = regions_of(rotary, *inputs)
    (template, ops), = regions
    assert template == "pointwise" and aten.cat.default in ops and ops.count(aten.mul.Tensor) == 2
    assert {n.target for n in found.left} == {aten.slice.Tensor}
    record = _installed_matches_aten(rotary, *inputs)
    assert record.regions == 1 and record.fused_ops == record.aten_ops == 5


def test_constant_pad_fuses_with_its_producer_and_consumer():
    fn = lambda x, y: F.pad(x.exp(), (1, 2, 0, 1), value=-2.0) + y  # noqa: E731
    inputs = (torch.randn(3, 4), torch.randn(4, 7))
    regions, found = regions_of(fn, *inputs)
    assert regions == [("pointwise", [aten.exp.default, aten.constant_pad_nd.default, aten.add.Tensor])]
    _installed_matches_aten(fn, *inputs)


def test_softmax_backward_fma_is_lowered_not_left_to_aten():
    # Inductor decomposes _softmax_backward_data into mul, sum, neg and prims.fma(-y, sum, g * y)
    fn = lambda g, y: torch.ops.aten._softmax_backward_data(g, y, -1, torch.float32)  # noqa: E731
    inputs = (torch.randn(4, 8), torch.softmax(torch.randn(4, 8), -1))
    regions, found = regions_of(fn, *inputs)
    assert any(torch.ops.prims.fma.default in ops for _, ops in regions)
    assert not [n for n in found.left if n.target is torch.ops.prims.fma.default]
    _installed_matches_aten(fn, *inputs)


def test_cumsum_with_prologue_and_epilogue_is_one_scan_region():
    fn = lambda x, b: torch.cumsum(x * 2 + b, -1).relu()  # noqa: E731
    inputs = (torch.randn(3, 5, 9), torch.randn(9))
    regions, found = regions_of(fn, *inputs)
    assert regions == [("scan", [aten.mul.Tensor, aten.add.Tensor, aten.cumsum.default, aten.relu.default])]
    _installed_matches_aten(fn, *inputs)
    _installed_matches_aten(lambda m: m.cumsum(-1) * 3, torch.randint(-5, 5, (4, 6), dtype=torch.int32))  # int64


def test_row_gathers_fuse_as_index_arithmetic():
    # x[index] (aten.index.Tensor) and F.embedding (aten.embedding) read rows through the index: no copy
    table, index = torch.randn(10, 4), torch.tensor([[1, 3, 9], [0, 0, 2]])
    for fn, op in ((lambda w, i: w[i] * 2 + 1, aten.index.Tensor), (lambda w, i: F.embedding(i, w).tanh(), aten.embedding.default)):
        regions, found = regions_of(fn, table, index)
        (template, ops), = regions
        assert template == "pointwise" and ops[0] == op and not found.left
        _installed_matches_aten(fn, table, index)


def _constants(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target in (aten.full.default, aten.scalar_tensor.default)]


def test_constants_fold_into_the_regions_that_read_them_and_leave_the_graph():
    # where(x > 0, x, -1.5) and masked_fill(-inf): ATen makes the 0-d constants, the regions read them as literals
    def fn(x):
        return torch.where(x > 0, x, torch.full((), -1.5)) * 2, x.masked_fill(x < -1, float("-inf"))

    x = torch.randn(4, 8)
    gm = aten_graph(fn, x)
    want = gm(x)
    assert len(_constants(gm)) == 2
    found = partition(gm)
    assert sorted(len(r.consts) for r in found.regions) == [2] and all(not r.inputs[0].all_input_nodes
                                                                        for r in found.regions)
    record = compile_graph(gm, "test")
    assert record.fused_ops == record.aten_ops and not record.left, record.as_dict()
    assert not _constants(gm)  # nobody else reads them: ATen no longer makes them
    for g, w in zip(gm(x), want):
        torch.testing.assert_close(g, w)
    assert record.runs == {"kernel": 1}


def test_a_constant_an_aten_op_also_reads_stays_made_by_aten():
    def fn(x):
        c = torch.full((4, 8), 2.0)
        return x * c, c.median(0).values  # median has no lowering rule: it needs the tensor

    x = torch.randn(4, 8)
    gm = aten_graph(fn, x)
    want = gm(x)
    record = compile_graph(gm, "test")
    assert len(_constants(gm)) == 1 and any("full" in op for op in record.left)
    assert record.fused_ops == 1  # the multiplication (with the constant folded in)
    for g, w in zip(gm(x), want):
        torch.testing.assert_close(g, w)


def test_a_region_output_that_copies_an_input_is_a_copy_kernel_never_the_input():
    # clone(x) returned: eager's result is a fresh tensor; the region writes it with a copy kernel
    x = torch.randn(4, 6).t()
    gm = aten_graph(lambda t: t.clone(memory_format=torch.contiguous_format), x)
    record = compile_graph(gm, "test")
    got = gm(x)
    got = got[0] if isinstance(got, (tuple, list)) else got
    assert record.fused_ops == record.aten_ops == 1 and record.runs == {"kernel": 1}
    assert got.is_contiguous() and got.data_ptr() != x.data_ptr()
    torch.testing.assert_close(got, x)


def test_members_a_region_gives_up_stay_one_region_where_a_template_covers_them():
    # Grouped-query attention's rotary embeddings: the keys' ([2, 2, 8, 16]) joins the queries' region as a sibling
    # (both read cos and sin) before the attention that reads both is seen; with both outputs the pointwise template
    # refuses the region, which then gives up the keys' five ops: one region again, not five of one op each.
    def rope(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin

    def fn(q, k, v, cos, sin):
        return F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, enable_gqa=True)

    inputs = (torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(8, 16),
              torch.randn(8, 16))
    regions, found = regions_of(fn, *inputs)
    assert sorted(t for t, _ in regions) == ["attention", "pointwise", "pointwise"], regions
    assert all(len(ops) == 5 for t, ops in regions if t == "pointwise")
    record = _installed_matches_aten(fn, *inputs)
    assert record.regions == 3 and record.fused_ops == record.aten_ops
