"""Shape families: one generic kernel serves every batch size, configs per size bucket, the variant cap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.api import compile
from kernelgen.backends import cpp as cpp_backend
from kernelgen.backends import get_backend
from kernelgen.errors import KernelgenError
from kernelgen.ir.values import Config, FrozenMap, Measurement, Provenance, Status, TimeStats, TuningRecord
from kernelgen.runtime import dynamic as dyn
from kernelgen.runtime.implementations import implementations_for

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

SIZES = (2, 3, 17, 64, 257, 1, 0, 5)  # 0 and 1 are specialised (eager / their own kernel), the rest share one


def bias_gelu(x, b):
    return F.gelu(x + b)


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def batched_scale(x, s):  # 3-D: the batch folds into the collapsed outer dims
    return x * s + 1.0


def linear_relu(x, w, b):  # the batch folds into GEMM's M
    return F.relu(F.linear(x, w, b))


def bmm_scale(x, y):  # the batch is GEMM's batch loop
    return torch.bmm(x, y) * 0.5


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


CASES = {
    "pointwise": (bias_gelu, lambda n, g: (torch.randn(n, 40, generator=g), torch.randn(40, generator=g))),
    "reduction": (softmax, lambda n, g: (torch.randn(n, 33, generator=g),)),
    "reduction-affine": (layer_norm, lambda n, g: (torch.randn(n, 24, generator=g), torch.randn(24, generator=g),
                                                   torch.randn(24, generator=g))),
    "pointwise-3d": (batched_scale, lambda n, g: (torch.randn(n, 3, 8, generator=g), torch.randn(3, 1, generator=g))),
    "gemm": (linear_relu, lambda n, g: (torch.randn(n, 20, generator=g), torch.randn(12, 20, generator=g),
                                        torch.randn(12, generator=g))),
    "gemm-batched": (bmm_scale, lambda n, g: (torch.randn(n, 5, 8, generator=g), torch.randn(n, 8, 6, generator=g))),
    "attention": (attention, lambda n, g: tuple(torch.randn(n, 2, 9, 8, generator=g) for _ in range(3))),
}


@pytest.fixture
def compiles(monkeypatch):
    """How many C++ libraries were built (a cached library counts too: a build is what a new size must avoid)."""
    count = []
    real = cpp_backend.build_shared_library

    def counting(*args, **kwargs):
        count.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpp_backend, "build_shared_library", counting)
    get_backend("cpp")._kernels.clear()  # in-memory kernels of earlier tests would hide builds
    return count


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_generic_kernel_serves_every_batch_size(case, compiles):
    fn, make = CASES[case]
    f = compile(fn, backend="cpp", dynamic=True)
    g = torch.Generator().manual_seed(0)
    families = set()
    for n in SIZES:
        args = make(n, g)
        torch.testing.assert_close(f(*args), fn(*args), atol=1e-4, rtol=1e-4)
        if n >= 2:
            what = f.explain(*args)
            assert what["implementation"] != "eager"
            assert what["bucket"] == dyn.bucket(n)
            families.add(what["family"])
    assert len(families) == 1
    # one build for the family, at most one for size 1 (specialised, as Dynamo does); none per size
    assert len(compiles) <= 2
    before = len(compiles)
    for n in (6, 100, 129):
        args = make(n, g)
        torch.testing.assert_close(f(*args), fn(*args), atol=1e-4, rtol=1e-4)
    assert len(compiles) == before


def test_default_is_static_until_a_second_size():
    f = compile(softmax, backend="cpp")
    a, b = torch.randn(6, 16), torch.randn(9, 16)
    torch.testing.assert_close(f(a), softmax(a))
    assert "family" not in f.explain(a)  # first size: compiled for its exact shape
    torch.testing.assert_close(f(b), softmax(b))
    member = f.explain(b)
    assert member["family"] is not None and member["implementation_hash"] and member["reason"]
    assert "n0" in Path(member["source_path"]).read_text()  # the generic kernel takes the batch size as an argument
    assert "family" not in f.explain(a)  # the first size keeps its exact kernel


def test_dynamic_false_and_named_arguments():
    f = compile(bias_gelu, backend="cpp", dynamic=False)
    for n in (4, 5):
        x, b = torch.randn(n, 8), torch.randn(8)
        torch.testing.assert_close(f(x, b), bias_gelu(x, b))
        assert "family" not in f.explain(x, b)
    named = compile(bias_gelu, backend="cpp", dynamic={"x": [0]})
    x, b = torch.randn(7, 8), torch.randn(8)
    torch.testing.assert_close(named(x, b), bias_gelu(x, b))
    assert named.explain(x, b)["family"] is not None


@pytest.mark.parametrize("bad, words", [
    ({"x": [1]}, "only dim 0"), ({"nope": [0]}, "does not take"), ("yes", "not understood"),
])
def test_bad_dynamic_argument_is_one_line_error(bad, words):
    with pytest.raises(KernelgenError, match=words) as info:
        compile(bias_gelu, backend="cpp", dynamic=bad)
    assert "\n" not in str(info.value)


def test_a_weight_whose_dim_0_meets_the_batch_size_by_chance_stays_static():
    f = compile(linear_relu, backend="cpp", dynamic=True)
    w, b = torch.randn(12, 20), torch.randn(12)
    for n in (5, 12, 7):  # at n = 12, x [12, 20] and w [12, 20] have one dim-0 size
        x = torch.randn(n, 20)
        torch.testing.assert_close(f(x, w, b), linear_relu(x, w, b), atol=1e-4, rtol=1e-4)
    assert len({f.explain(torch.randn(n, 20), w, b)["family"] for n in (5, 12, 7)}) == 1
    assert f.variants == 1


def test_a_batch_size_baked_into_the_graph_is_not_a_family():
    def flatten_scale(x):
        return x.reshape(-1) * 2.0  # dim 0 of the output is n * 8, not the batch size

    f = compile(flatten_scale, backend="cpp", dynamic=True)
    for n in (3, 4):
        x = torch.randn(n, 8)
        torch.testing.assert_close(f(x), flatten_scale(x))
        assert "family" not in f.explain(x)


def test_variant_cap_warns_once_then_runs_eagerly(caplog):
    f = compile(bias_gelu, backend="cpp", dynamic=False, max_variants=2)
    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        for n in (3, 4, 5, 6, 7):
            x, b = torch.randn(n, 8), torch.randn(8)
            torch.testing.assert_close(f(x, b), bias_gelu(x, b))
    assert f.variants == 2
    assert f.explain(torch.randn(6, 8), torch.randn(8))["implementation"] == "eager"
    warnings = [r.getMessage() for r in caplog.records if "limit of 2" in r.getMessage()]
    assert len(warnings) == 1


def test_variant_cap_from_environment(monkeypatch):
    monkeypatch.setenv(kernelgen.runtime.family_path.VARIANTS_ENV, "3")
    assert compile(bias_gelu, backend="cpp").max_variants == 3
    monkeypatch.setenv(kernelgen.runtime.family_path.VARIANTS_ENV, "many")
    with pytest.raises(KernelgenError, match="KERNELGEN_MAX_VARIANTS"):
        compile(bias_gelu, backend="cpp")
    with pytest.raises(KernelgenError, match="max_variants=0"):
        compile(bias_gelu, backend="cpp", max_variants=0)


def test_buckets_are_powers_of_two_and_ranges_pick_one_size_per_bucket():
    assert [dyn.bucket(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 1000, 1024, 1025)] == \
        [0, 1, 2, 4, 4, 8, 8, 16, 1024, 1024, 2048]
    assert dyn.representatives(1, 16) == [1, 2, 4, 8, 16]
    assert dyn.representatives(5, 100) == [8, 16, 32, 64, 128]
    wide = dyn.representatives(1, 65536)
    assert len(wide) <= dyn.MAX_REPRESENTATIVES and wide[0] == 1 and wide[-1] == 65536
    with pytest.raises(KernelgenError, match="min = 9, max = 3"):
        dyn.representatives(9, 3)


def test_family_key_ignores_only_the_dynamic_sizes():
    a, b, c = torch.randn(5, 8), torch.randn(9, 8), torch.randn(9, 7)
    assert dyn.family_key((a,), (0,)) == dyn.family_key((b,), (0,))
    assert dyn.family_key((a,), (0,)) != dyn.family_key((c,), (0,))
    assert dyn.family_key((a,), ()) != dyn.family_key((b,), ())
    assert dyn.dynamic_dims((torch.randn(5, 8).t(),), None) == ()  # dim 0 not outermost in memory
    assert dyn.dynamic_dims((torch.randn(1, 8),), None) == ()  # size 1 broadcasts: specialised


def _record(graph, impl, config):
    target = get_backend("cpp").target()
    return TuningRecord(
        workload_key=graph.workload_key, workload_family=graph.family_key, signature=graph.signature,
        implementation=impl.name, implementation_hash=impl.source_hash(), backend="cpp",
        target_fingerprint=target.fingerprint, target_family=target.family, device=target.device_name,
        toolchain=FrozenMap({"compiler": "test"}),
        measurement=Measurement(Config(config), Status.OK, TimeStats(1e-5, 1e-5, 0.0, 5)),
        provenance=Provenance("host", "user", kernelgen.__version__, 0.0))


def test_dispatch_picks_the_exact_record_then_the_bucket_record(tmp_path):
    db_module = pytest.importorskip("kernelgen.db")
    bucket_config = {"block": 2048, "schedule": "static", "simd": False}
    exact_config = {"block": 4096, "schedule": "dynamic", "simd": False}
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    db = db_module.open_db(url)
    for n, config in ((64, bucket_config), (40, exact_config)):
        x, b = torch.randn(n, 40), torch.randn(40)
        graph = kernelgen.trace(bias_gelu, x, b)  # records as `kernelgen tune` writes them: a static graph
        db.commit(_record(graph, implementations_for(graph, "cpp")[0], config))
    db.close()
    f = compile(bias_gelu, backend="cpp", db=url, dynamic=True)
    # 100: bucket 128 has no record; its neighbour 64 has one (neighbour_buckets); 200: none within one bucket
    for n, config, source in ((40, exact_config, "db"), (50, bucket_config, "bucket"), (33, bucket_config, "bucket"),
                              (100, bucket_config, "bucket"), (200, None, "default")):
        x, b = torch.randn(n, 40), torch.randn(40)
        torch.testing.assert_close(f(x, b), bias_gelu(x, b))
        what = f.explain(x, b)
        assert what["source"] == source, n
        if config is not None:
            assert what["config"] == config


def test_family_members_carry_eager_gradients():
    f = compile(layer_norm, backend="cpp", dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 16, requires_grad=True)
        w, b = torch.randn(16, requires_grad=True), torch.randn(16)
        f(x, w, b).sum().backward()
        gx, gw = x.grad, w.grad
        x.grad = w.grad = None
        layer_norm(x, w, b).sum().backward()
        torch.testing.assert_close(gx, x.grad)
        torch.testing.assert_close(gw, w.grad)
        assert f.explain(x, w, b)["family"] is not None


def test_substituted_graph_has_the_workload_key_of_a_trace_at_that_size():
    x, b = torch.randn(37, 40), torch.randn(40)
    family = kernelgen.trace(bias_gelu, x, b)
    at_64 = kernelgen.trace(bias_gelu, torch.randn(64, 40), b)
    assert dyn.substitute(family, 37, 64).workload_key == at_64.workload_key
