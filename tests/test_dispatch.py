"""kernelgen.compile: per-signature dispatch, out=, input errors, eager fallback and database lookups."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.errors import InputMismatchError
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Measurement, Provenance, Status, TimeStats, TuningRecord
from kernelgen.runtime.implementations import implementations_for

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

X = torch.randn(24, 40, generator=torch.Generator().manual_seed(0))
B = torch.randn(40, generator=torch.Generator().manual_seed(1))


def bias_gelu(x, b):
    return F.gelu(x + b)


def test_result_matches_eager_and_out_is_written_in_place():
    f = compile(bias_gelu, backend="cpp")
    torch.testing.assert_close(f(X, B), bias_gelu(X, B))
    out = torch.empty(24, 40)
    assert f(X, B, out=out) is out
    torch.testing.assert_close(out, bias_gelu(X, B))
    torch.testing.assert_close(f(x=X, b=B), bias_gelu(X, B))


def test_each_signature_gets_its_own_kernel_once():
    f = compile(bias_gelu, backend="cpp")
    f(X, B)
    f(X, B)
    assert len(f._cache) == 1
    xt = torch.randn(40, 24).t()  # same shape, other layout: specialised, still right
    torch.testing.assert_close(f(xt, B), bias_gelu(xt, B))
    y = torch.randn(3, 40)
    torch.testing.assert_close(f(y, B), bias_gelu(y, B))
    assert len(f._cache) == 3


def five_way(a, b, c, d, e):
    return a * b + c * d - e


def test_signatures_of_every_arity_tell_layouts_apart():
    """The unrolled keys (1-4 tensors) and the generic one (5+) must all see shapes and strides."""
    xs = [torch.randn(6, 8, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    for fn, n in ((torch.relu, 1), (torch.add, 2), (lambda a, b, c: a * b + c, 3),
                  (lambda a, b, c, d: a * b + c * d, 4), (five_way, 5)):
        f = compile(fn, backend="cpp")
        args = xs[:n]
        torch.testing.assert_close(f(*args), fn(*args))
        last_transposed = [*args[:-1], torch.randn(8, 6).t()]
        torch.testing.assert_close(f(*last_transposed), fn(*last_transposed))
        taller = [torch.randn(7, 8) for _ in range(n)]
        torch.testing.assert_close(f(*taller), fn(*taller))
        assert len(f._cache) == 3, n


def test_multiple_outputs_and_reductions():
    def stats(x):
        return torch.softmax(x, -1), x.mean(-1)

    f = compile(stats, backend="cpp")
    got = f(X)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, stats(X)):
        torch.testing.assert_close(g, w)
    outs = (torch.empty(24, 40), torch.empty(24))
    f(X, out=outs)
    torch.testing.assert_close(outs[1], X.mean(-1))
    assert f.explain(X)["implementation"] == "reduction"


@pytest.mark.parametrize("args,out,needle", [
    ((X, torch.randn(7)), None, "cannot run on inputs"),
    ((X,), None, "takes (x, b)"),
    ((X, B), torch.empty(24, 41), "out[0]"),
    ((X, B), torch.empty(24, 40, dtype=torch.float64), "out[0]"),
    ((X, B), torch.empty(40, 24).t(), "contiguous"),
    ((X.to("meta"), B), None, "CPU"),
    ((X.to(torch.complex64), B), None, "dtype"),
])
def test_inputs_it_cannot_take_raise_a_one_line_error(args, out, needle):
    f = compile(bias_gelu, backend="cpp")
    with pytest.raises(InputMismatchError) as info:
        f(*args, out=out) if out is not None else f(*args)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_unsupported_graph_runs_eagerly_and_logs_once(caplog):
    def cumulative(x):  # flip: an op kernelgen leaves to eager (cumsum, used here before, is now a scan)
        return torch.flip(x, [-1]) * 2

    def two_matmuls(x, w):
        return (x @ w) @ w

    f, g = compile(cumulative, backend="cpp", partition=False), compile(two_matmuls, backend="cpp", partition=False)
    w = torch.randn(40, 40)
    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        for _ in range(3):
            torch.testing.assert_close(f(X), cumulative(X))
            torch.testing.assert_close(g(X, w), two_matmuls(X, w))
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("kernelgen")]
    assert len(messages) == 2
    assert any("flip" in m for m in messages)
    out = torch.empty(24, 40)
    assert f(X, out=out) is out
    torch.testing.assert_close(out, cumulative(X))


def _record(graph, impl, config, median=1e-5, digest=None):
    target = get_backend("cpp").target()
    return TuningRecord(
        workload_key=graph.workload_key, workload_family=graph.family_key, signature=graph.signature,
        implementation=impl.name, implementation_hash=digest or impl.source_hash(), backend="cpp",
        target_fingerprint=target.fingerprint, target_family=target.family, device=target.device_name,
        toolchain=FrozenMap({"compiler": "test"}),
        measurement=Measurement(Config(config), Status.OK, TimeStats(median, median, 0.0, 5)),
        provenance=Provenance("host", "user", kernelgen.__version__, 0.0))


def test_best_database_record_is_used_and_stale_ones_are_not(tmp_path):
    db_module = pytest.importorskip("kernelgen.db")
    graph = kernelgen.trace(bias_gelu, X, B)
    impl = implementations_for(graph, "cpp")[0]
    tuned = {"block": 2048, "schedule": "dynamic", "simd": False}
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    db = db_module.open_db(url)
    db.commit(_record(graph, impl, tuned, median=2e-5))
    db.commit(_record(graph, impl, {"block": 4096, "schedule": "static", "simd": False}, median=1e-6,
                      digest="old-template-source"))  # faster but for another version of the template
    db.close()
    f = compile(bias_gelu, backend="cpp", db=url)
    torch.testing.assert_close(f(X, B), bias_gelu(X, B))
    explained = f.explain(X, B)
    assert {k: explained[k] for k in ("implementation", "config", "source")} == \
        {"implementation": "pointwise", "config": tuned, "source": "db"}
    assert explained["implementation_hash"] == impl.source_hash()
    fresh = compile(bias_gelu, backend="cpp", db=f"sqlite:///{tmp_path / 'empty.sqlite'}")
    assert fresh.explain(X, B)["source"] == "default"


def test_tune_auto_tunes_on_first_call_only(monkeypatch):
    tuner = pytest.importorskip("kernelgen.tune.tuner")
    calls = []

    class Result:
        best = None

    def fake_tune_graph(graph, **kwargs):
        calls.append(kwargs)
        impl = implementations_for(graph, "cpp")[0]
        result = Result()
        result.best = _record(graph, impl, {"block": 1024, "schedule": "static", "simd": True})
        return result

    monkeypatch.setattr(tuner, "tune_graph", fake_tune_graph)
    f = compile(bias_gelu, backend="cpp", tune="auto", trials=3)
    y = torch.randn(5, 40)
    for _ in range(2):
        torch.testing.assert_close(f(y, B), bias_gelu(y, B))
    assert len(calls) == 1 and calls[0]["trials"] == 3
    assert f.explain(y, B)["source"] == "tuned"
    with pytest.raises(Exception, match="tune"):
        compile(bias_gelu, tune="always")


def test_explain_points_at_the_generated_source_it_runs():
    f = compile(bias_gelu, backend="cpp")
    explained = f.explain(X, B)
    path = Path(explained["source_path"])
    assert path.suffix == ".cpp" and path.is_file()
    text = path.read_text()
    impl = implementations_for(kernelgen.trace(bias_gelu, X, B), "cpp")[0]
    rendered = impl.render(Config(explained["config"]), Target.current("cpp"))
    assert rendered.text in text and f'extern "C" void {rendered.entry}' in text  # the kernel, as compiled
    assert explained["implementation_hash"] == impl.source_hash()
    assert explained["reason"]


def test_explain_of_an_eager_signature_says_why_and_has_no_source():
    f = compile(lambda x: x.topk(2).values, backend="cpp", partition=False)  # no template covers topk
    explained = f.explain(X)
    assert explained["implementation"] == "eager" and explained["source_path"] is None
    assert explained["reason"]


def test_a_graph_no_template_covers_runs_as_regions_through_the_backend(caplog):
    """partition=True (default): the function goes through torch.compile with the kernelgen backend; its two
    GEMMs become regions of kernelgen kernels, with eager's values, and nothing is logged as eager."""
    from kernelgen.frontend import dynamo_backend

    def two_matmuls(x, w):
        return torch.relu(x @ w) @ w

    g = compile(two_matmuls, backend="cpp")
    w = torch.randn(40, 40)
    explained = g.explain(X, w)
    assert explained["implementation"] == "graph" and "torch.compile" in explained["reason"]
    with dynamo_backend.collect() as graphs, caplog.at_level(logging.WARNING, logger="kernelgen"):
        for _ in range(3):
            torch.testing.assert_close(g(X, w), two_matmuls(X, w))
    assert not [r for r in caplog.records if r.name.startswith("kernelgen")]
    assert len(graphs) == 1 and graphs[0].regions == 2 and graphs[0].runs == {"kernel": 4}  # the 1st call: eager
    out = torch.empty(24, 40)
    assert g(X, w, out=out) is out
    torch.testing.assert_close(out, two_matmuls(X, w))


def test_a_partitioned_signature_raises_what_eager_raises():
    # Inductor's decomposition of gelu takes integers; eager's gelu does not: kernelgen keeps eager's error.
    f = compile(torch.nn.functional.gelu, backend="cpp")
    x = torch.arange(6)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            f(x)


def test_auto_backend_follows_the_tensors_device_on_a_machine_with_a_gpu(monkeypatch):
    # found on an H100: backend="auto" chose Triton for CPU tensors wherever a GPU existed, and the Triton
    # kernel refused them (CPU models on GPU machines ran ATen with a warning for every region)
    from kernelgen.backends import default_backend, get_backend

    monkeypatch.setattr(type(get_backend("triton")), "has_gpu", lambda self: True)
    assert default_backend("cpu").name == "cpp" and default_backend("cuda").name == "triton"
    x, b = torch.randn(8, 16), torch.randn(16)
    fast = kernelgen.compile(lambda x, b: torch.relu(x + b))
    torch.testing.assert_close(fast(x, b), torch.relu(x + b))
    what = fast.explain(x, b)
    assert what["implementation"] == "pointwise" and str(what["source_path"]).endswith(".cpp")


def test_an_unusable_database_is_reported_once_and_kernels_still_run(caplog):
    """A database URL that cannot serve costs the records, not the kernels: one warning per process (a model has
    dozens of regions) that says the kernels run on their default configs, never that they run eagerly."""
    url = "not-a-url-for-this-test"
    fs = [compile(lambda x, b, k=k: F.gelu(x + b) * k, backend="cpp", db=url) for k in (2.0, 3.0)]
    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        for k, f in zip((2.0, 3.0), fs):
            torch.testing.assert_close(f(X, B), F.gelu(X + B) * k)
            assert f.explain(X, B)["implementation"] == "pointwise"
    said = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    assert len(said) == 1 and "default configs" in said[0] and "eagerly" not in said[0], said
