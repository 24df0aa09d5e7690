"""Two ``kernelgen tune --model`` processes on one database (PostgreSQL where a server can start, as hosts of a
team share it; else a SQLite file) split the model's regions: each region searched by one of them, both busy."""

from __future__ import annotations

import json

import pytest

from tests.db import pg
from tests.tune.test_model_tune import tune_cli

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def shared_url(pg_cluster: pg.Cluster | str, tmp_path) -> str:
    if isinstance(pg_cluster, str):  # no server here: the same claims through SQLite's lock files
        return f"sqlite:///{tmp_path / 'shared.sqlite'}"
    return pg_cluster.schema()


@pytest.mark.slow
def test_two_processes_split_the_regions_through_the_database(tmp_path, shared_url):
    url, cache = shared_url, tmp_path / "kernels"
    procs = [tune_cli("model_fakes:make_deep", "infer", url, cache) for _ in range(2)]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=500)
        assert proc.returncode == 0, err[-3000:]
        docs.append(json.loads(out)["models"][0])
    # (a process may re-run another's confirmation rounds when they were too disturbed to declare a verdict,
    # as any rerun does: the search itself is never repeated)
    tuned_by = [{r["workload_key"] for r in d["regions"] if r["searched"] > 0} for d in docs]
    every = {r["workload_key"] for d in docs for r in d["regions"]}
    assert not tuned_by[0] & tuned_by[1]  # no region searched twice
    assert tuned_by[0] | tuned_by[1] == every  # and every region tuned by one of them
    assert tuned_by[0] and tuned_by[1], tuned_by  # the work was shared
    assert all(r["implementation"] for d in docs for r in d["regions"])  # each saw every region done
