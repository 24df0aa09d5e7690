"""Two ``kernelgen tune --model`` processes on one database (PostgreSQL where a server can start, as hosts of a
team share it; else a SQLite file) split the model's regions: each region searched by one of them, both busy; and
when one of them stops mid-region, the other takes the region over once its lease lapses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelgen.db import open_db
from kernelgen.ir.values import Evidence
from tests.db import pg
from tests.tune.test_model_tune import HERE, tune_cli

LEASE_ENV = "KERNELGEN_LEASE_S"  # a lease's period in seconds (kernelgen.tune.claims)

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


def _holder(url: str, marker: str, period: str, stage: str, to_be_stopped: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "model_lease_holder.py"), url, marker, stage,
                             *(["--to-be-stopped"] if to_be_stopped else [])],
                            env={**os.environ, LEASE_ENV: period}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _searched(url: str) -> dict[str, list[int]]:
    """Each region's search trials (their configs' ``a``) and verdicts, as kernelgen's records hold them."""
    out: dict[str, list[int]] = {}
    with open_db(url, team_url="") as db:
        for r in db.records():
            if r.evidence is not Evidence.CONFIRMED:
                out.setdefault(f"{r.workload_key[:8]} {r.evidence.name}", []).append(r.config["a"])
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "b_searched"), [("search", [3, 4]), ("confirm", [0, 4])])
def test_a_stopped_holder_loses_its_region_to_a_second_process_and_exits_cleanly_when_woken(tmp_path, persistent_url,
                                                                                          stage, b_searched):
    """Process A claims the first region and is stopped (SIGSTOP) mid-trial, or mid-confirmation; B takes the region
    over once A's lease lapses (2 s here), resumes it (A's committed trials stand, the one it left running is
    measured again, the confirmation is B's) and tunes both regions. Woken (SIGCONT), A finds its lease taken over,
    drops the region and exits 0. Before: A's lock outlived its use, and B waited for it for ever."""
    marker = str(tmp_path / "a")
    a, b = _holder(persistent_url, marker, "2", stage, to_be_stopped=True), None
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(marker + ".measuring"):
            assert a.poll() is None and time.monotonic() < deadline, a.communicate()
            time.sleep(0.05)
        os.kill(a.pid, signal.SIGSTOP)
        stopped = time.time()
        b = _holder(persistent_url, str(tmp_path / "b"), "2", stage)
        b_out, b_err = b.communicate(timeout=300)
        assert b.returncode == 0, b_err[-3000:]
        Path(marker + ".woken").touch()
        os.kill(a.pid, signal.SIGCONT)
        a_out, a_err = a.communicate(timeout=300)
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.kill()
    assert a.returncode == 0 and "Traceback" not in a_err, a_err[-3000:]
    assert "lost the lease on model-search:" in a_err  # it noticed, and moved on
    took = [line for line in b_err.splitlines() if "took model-search:" in line]
    assert len(took) == 1 and f"pid {a.pid} on" in took[0], b_err[-3000:]
    assert float(took[0].split()[1]) - stopped < 60  # a lease of 2 s lapsed (generous: a loaded machine)
    docs = [json.loads(out) for out in (a_out, b_out)]
    assert all(r["implementation"] == "four" for d in docs for r in d["regions"])  # both report both regions tuned
    # B searched the second region and what A had not committed of the first (stopped mid-search: a=1 stands);
    # A, woken, found both tuned (its unfinished work on the first was dropped, not reported)
    assert [r["searched"] for r in docs[1]["regions"]] == b_searched
    assert [r["searched"] for r in docs[0]["regions"]] == [0, 0]
    # every config searched once (the trial A left running was failed and measured by B, A's in-flight measurement
    # was dropped) and one verdict per region, not two
    records = _searched(persistent_url)
    assert sorted(records.values()) == [[1, 2, 3, 4], [1, 2, 3, 4], [4], [4]], records
