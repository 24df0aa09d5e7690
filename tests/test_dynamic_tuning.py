"""tune="auto" on a shape family: one tuning run per size bucket, on the family's generic kernel, recorded
under the static graph at the bucket's size; bucket kernels count against max_variants."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import kernelgen
import kernelgen.tune.tuner as tuner_module
from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.runtime.bucket_member import BucketMember
from kernelgen.runtime.implementations import implementations_for
from tests.test_dynamic import _record, compiles  # noqa: F401 - compiles is a fixture

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")
db_module = pytest.importorskip("kernelgen.db")


def softmax(x):
    return torch.softmax(x, dim=-1)


@pytest.fixture
def tuning_runs(monkeypatch):
    """Every tune_graph call: (graph, implementations) - wrapped, so the tuning itself is real."""
    runs = []
    real = tuner_module.tune_graph

    def spying(graph, **kwargs):
        runs.append((graph, list(kwargs.get("implementations") or [])))
        return real(graph, **kwargs)

    monkeypatch.setattr(tuner_module, "tune_graph", spying)
    return runs


def _keys(url: str) -> set[str]:
    db = db_module.open_db(url)
    try:
        return {r.workload_key for r in db.records()}
    finally:
        db.close()


def test_auto_tunes_once_per_bucket_on_the_generic_kernel(tmp_path, tuning_runs, compiles, caplog):
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    f = compile(softmax, backend="cpp", dynamic=True, tune="auto", trials=2, db=url)
    with caplog.at_level(logging.INFO, logger="kernelgen.runtime"):
        for n, source in ((5, "tuned"), (7, "bucket"), (6, "bucket")):  # one bucket: 8
            x = torch.randn(n, 33)
            torch.testing.assert_close(f(x), softmax(x))
            what = f.explain(x)
            assert (what["bucket"], what["source"]) == (8, source), n
            if n == 5:
                builds = len(compiles)
    assert len(compiles) == builds  # sizes after the bucket's first: no compile
    assert len(tuning_runs) == 1
    graph, members = tuning_runs[0]
    at_8 = kernelgen.trace(softmax, torch.randn(8, 33))
    assert graph.workload_key == at_8.workload_key  # the static graph at the bucket's size, as `kernelgen tune` keys it
    assert _keys(url) == {at_8.workload_key}  # no record at the sizes 5, 6, 7 themselves
    assert any("size bucket 8" in r.getMessage() for r in caplog.records)
    # what was measured is the family's generic kernel (the batch size a run-time argument), the one that runs
    assert members and all(isinstance(m, BucketMember) and m.inner.graph.dynamic for m in members)
    target = get_backend("cpp").target()
    launcher = members[0].build(members[0].default_config(target), target)
    assert "n0" in Path(launcher.source_file).read_text()
    assert "n0" in Path(f.explain(torch.randn(6, 33))["source_path"]).read_text()

    # a size in another bucket tunes again, at that bucket's size
    x = torch.randn(9, 33)
    torch.testing.assert_close(f(x), softmax(x))
    assert (f.explain(x)["bucket"], f.explain(x)["source"]) == (16, "tuned")
    assert len(tuning_runs) == 2
    assert tuning_runs[1][0].workload_key == kernelgen.trace(softmax, torch.randn(16, 33)).workload_key
    assert len(_keys(url)) == 2

    # a new process (a fresh compiled function) dispatches the records by bucket: no tuning
    again = compile(softmax, backend="cpp", dynamic=True, tune="auto", trials=2, db=url)
    for n in (7, 12):
        x = torch.randn(n, 33)
        torch.testing.assert_close(again(x), softmax(x))
        assert again.explain(x)["source"] == "bucket"
    assert len(tuning_runs) == 2


def test_bucket_kernels_count_against_max_variants(tmp_path, caplog):
    """Each distinct bucket config is one more built kernel: under the cap it is built, past it the bucket
    runs a kernel the family has (no compile, no eager), with one warning; explain() shows the counts."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    db = db_module.open_db(url)
    impl = implementations_for(kernelgen.trace(softmax, torch.randn(8, 33)), "cpp")[0]
    base = dict(impl.space(get_backend("cpp").target()).default())
    rows = iter((1, 2, 4))
    for b in (8, 64, 512):  # three buckets far apart (no neighbour sharing), three configs
        graph = kernelgen.trace(softmax, torch.randn(b, 33))
        db.commit(_record(graph, implementations_for(graph, "cpp")[0], {**base, "rows_per_task": next(rows)}))
    db.close()
    f = compile(softmax, backend="cpp", dynamic=True, db=url, max_variants=2)
    with caplog.at_level(logging.WARNING, logger="kernelgen.runtime"):
        seen = []
        for n in (5, 40, 300, 400):
            x = torch.randn(n, 33)
            torch.testing.assert_close(f(x), softmax(x))
            what = f.explain(x)
            seen.append((what["source"], what["config"]["rows_per_task"], what["family_kernels"], what["variants"]))
    assert seen[:2] == [("bucket", 1, 1, 1), ("bucket", 2, 2, 2)]
    # bucket(300) == 512: past the cap, a kernel the family built runs instead of building the third config
    assert seen[2][0] == "default" and seen[2][1] in (1, 2) and seen[2][2:] == (2, 2)
    assert seen[3] == seen[2]
    assert f.variants == 2
    assert len([r for r in caplog.records if "limit of 2" in r.getMessage()]) == 1


def test_auto_tuning_stops_at_the_variant_cap(tmp_path, tuning_runs, caplog):
    """A tuned bucket config is a kernel to build: past the cap a new bucket is not tuned (the tuning could not
    run here), it runs the family's kernel, and the cap is said once."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    f = compile(softmax, backend="cpp", dynamic=True, tune="auto", trials=1, db=url, max_variants=1)
    with caplog.at_level(logging.WARNING, logger="kernelgen.runtime"):
        for n in (5, 20, 30, 100):  # buckets 8, 32, 32, 128
            x = torch.randn(n, 33)
            torch.testing.assert_close(f(x), softmax(x))
    assert [g.workload_key for g, _ in tuning_runs] == [kernelgen.trace(softmax, torch.randn(8, 33)).workload_key]
    what = f.explain(torch.randn(20, 33))
    assert (what["source"], what["family_kernels"], what["variants"]) == ("default", 1, 1)
    assert len([r for r in caplog.records if "limit of 1" in r.getMessage()]) == 1


OPS = '''
import torch
def bias_relu(x, b):
    return torch.relu(x + b)
'''


@pytest.mark.parametrize("sizes, family", [
    ("{rows = {min = 1, max = 20}, hidden = 16}", True),  # the range is the batch: a shape family's buckets
    ("{rows = 8, hidden = {min = 4, max = 16}}", False),  # a range over an inner dim: static graphs, as before
])
def test_manifest_batch_range_tunes_the_generic_kernels(tmp_path, monkeypatch, sizes, family):
    from kernelgen.tune.manifest import load_manifest, workload_implementations

    module = f"kg_ops_dyn_range_{family}"
    (tmp_path / f"{module}.py").write_text(OPS)
    (tmp_path / "workloads.toml").write_text(
        f'[[workload]]\nname = "bias_relu"\nfunction = "{module}:bias_relu"\nsizes = {sizes}\n'
        'inputs = [{shape = ["rows", "hidden"], dtype = "float32"}, {shape = ["hidden"], dtype = "float32"}]\n')
    monkeypatch.chdir(tmp_path)
    (workload,) = load_manifest(tmp_path / "workloads.toml")
    assert (workload.family is not None) == family
    target = get_backend("cpp").target()
    for graph in workload.graphs:
        impls = workload_implementations(workload, graph)
        rows = graph.signature[0].shape[0]
        generic = family and rows >= 2  # size 1 is specialised at run time: its own static kernel
        assert all(isinstance(i, BucketMember) == generic for i in impls), rows
        if generic:
            (member,) = impls
            assert member.graph.workload_key == graph.workload_key  # recorded under the static graph's key
            source = Path(member.build(member.default_config(target), target).source_file).read_text()
            assert "n0" in source  # measured: the generic kernel
