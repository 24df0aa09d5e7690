"""A low-precision result is judged as one (issue 31, item 1): a candidate passes when it is as close to the
exact (float64) values as eager's own computation in that dtype, within ``EAGER_ERROR_MULTIPLE``
(``kernelgen.check.compare.judge``), and a planted bug (a dropped term, an off-by-one tile, a wrong scale) fails.

Before: the check took its tolerance from the output's dtype alone. A bfloat16 GEMM whose result is cast to float32
(a model's logits, a softmax's upcast) was held to float32's 1e-3, so eager's own answer (ATen's bfloat16 GEMM,
rounded to bfloat16) was refused ("max abs error 0.124"), every bfloat16 GEMM region of a GPU model ran eagerly,
and the generated GEMM that did pass differed from eager by up to 1 (K=3072); while bfloat16's own 4% let a
dropped term of a K=8192 sum through.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.check.compare import judge
from kernelgen.ir.reference import evaluate

LOW = [torch.bfloat16, torch.float16]


def _references(fn, *inputs):
    graph = kernelgen.trace(fn, *inputs)
    return evaluate(graph, inputs, precision="exact")[0], evaluate(graph, inputs, precision="eager")[0], \
        graph.output_specs[0].dtype


def _rand(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _gemm_candidates(x, w, out_dtype):
    """Correct GEMMs as kernels compute them: eager's, and float32 accumulation rounded once at the store."""
    return {"eager": (x @ w).to(out_dtype), "float32 accumulation": (x.float() @ w.float()).to(out_dtype)}


def _gemm_bugs(x, w, out_dtype):
    good = (x.float() @ w.float())
    shifted = good.clone()
    shifted[16:32] = good[17:33]  # the second tile of 16 rows reads one row too far
    return {"dropped term": (good - x[:, :1].float() @ w[:1].float()).to(out_dtype),
            "off-by-one tile": shifted.to(out_dtype),
            "wrong scale": (good * 1.02).to(out_dtype)}


@pytest.mark.parametrize("k", [64, 1024, 8192])
@pytest.mark.parametrize("dtype", LOW, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("upcast", [False, True], ids=["low-precision-out", "cast-to-float32"])
def test_gemms_that_round_as_eager_pass_and_planted_bugs_fail(k: int, dtype: torch.dtype, upcast: bool) -> None:
    x, w = _rand(64, k, dtype=dtype), _rand(k, 64, dtype=dtype, seed=1)
    fn = (lambda x, w: (x @ w).float()) if upcast else (lambda x, w: x @ w)
    exact, eager, out = _references(fn, x, w)
    out_dtype = getattr(torch, out)
    for name, candidate in _gemm_candidates(x, w, out_dtype).items():
        assert judge(candidate, exact, eager, out) is None, name
    for name, candidate in _gemm_bugs(x, w, out_dtype).items():
        assert judge(candidate, exact, eager, out) is not None, f"{name} passed"


@pytest.mark.parametrize("dtype", LOW, ids=lambda d: str(d).removeprefix("torch."))
def test_softmax_layer_norm_and_embedding_pass_and_planted_bugs_fail(dtype: torch.dtype) -> None:
    x = _rand(32, 768, dtype=dtype) * 4
    w, b = _rand(768, dtype=dtype, seed=2), _rand(768, dtype=dtype, seed=3)
    table, ids = _rand(1000, 64, dtype=dtype, seed=4), torch.randint(0, 999, (256,), generator=torch.Generator().manual_seed(5))
    xf = x.float()
    mean, var = xf.mean(-1, keepdim=True), xf.var(-1, keepdim=True, unbiased=False)
    normalised = (xf - mean) * torch.rsqrt(var + 1e-5)
    cases = {
        "softmax": (lambda x: torch.softmax(x, -1), (x,), {
            "eager": torch.softmax(x, -1), "float32 math": torch.softmax(xf, -1).to(dtype)}, {
            "last tile of the sum dropped": (xf.exp() / xf[:, :-64].exp().sum(-1, keepdim=True)).to(dtype),
            "wrong scale": torch.softmax(xf * 1.05, -1).to(dtype)}),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (768,), w, b), (x, w, b), {
            "eager": F.layer_norm(x, (768,), w, b), "float32 math": (normalised * w.float() + b.float()).to(dtype)}, {
            "variance 5% off": ((xf - mean) * torch.rsqrt(var * 1.05 + 1e-5) * w.float() + b.float()).to(dtype),
            "bias dropped in one tile": torch.cat([(normalised * w.float())[:16],
                                                   (normalised * w.float() + b.float())[16:]]).to(dtype)}),
        "embedding": (lambda t, i: F.embedding(i, t), (table, ids), {"eager": F.embedding(ids, table)}, {
            "off-by-one row": F.embedding((ids + 1).clamp(max=999), table)}),
    }
    for op, (fn, inputs, good, bad) in cases.items():
        exact, eager, out = _references(fn, *inputs)
        for name, candidate in good.items():
            assert judge(candidate, exact, eager, out) is None, f"{op}: {name}"
        for name, candidate in bad.items():
            assert judge(candidate, exact, eager, out) is not None, f"{op}: {name} passed"


def test_a_bfloat16_gemm_cast_to_float32_is_checked_and_runs_a_kernel(tmp_path, monkeypatch) -> None:
    """End to end on the C++ backend: ATen's bfloat16 GEMM (eager's own answer) passes the check now (it was
    refused: "2513 of 4096 elements outside rtol=0.001"), and so does the generated GEMM."""
    from kernelgen.backends import get_backend
    from kernelgen.check.measure import Bench
    from kernelgen.runtime.implementations import candidates_for

    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path))
    x, w = _rand(64, 3072, dtype=torch.bfloat16), _rand(3072, 64, dtype=torch.bfloat16, seed=1)
    graph = kernelgen.trace(lambda x, w: (x @ w).float(), x, w)
    target = get_backend("cpp").target()
    checked = {}
    for impl in candidates_for(graph, "cpp"):
        bench = Bench(impl, target)
        config = impl.default_config(target)
        assert bench.build(config) is None
        failure = bench.check(config)
        checked[impl.name] = None if failure is None else failure.message
    assert checked.get("aten_gemm", "missing") is None and checked.get("gemm", "missing") is None, checked


def test_a_float32_graph_keeps_the_table_and_still_catches_a_wrong_element() -> None:
    """float32 results pass the shared table as before, or else the exact judgement (a long reordered sum near 0);
    a single wrong element is far outside both."""
    x, w = _rand(64, 8192, dtype=torch.float32), _rand(8192, 64, dtype=torch.float32, seed=1)
    exact, eager, out = _references(lambda x, w: x @ w, x, w)
    reordered = (x.double() @ w.double()).float()
    assert judge(reordered, exact, eager, out) is None
    wrong = reordered.clone()
    wrong[5, 7] += 0.5
    assert judge(wrong, exact, eager, out) is not None
