"""How many connections tuners hold on a PostgreSQL server. One `kernelgen tune` holds at most
``MAX_CONNECTIONS`` (5) to its database, so a team of tuners fits a server's ``max_connections``; a server with no
slot left is a one-line error naming its limit and the fix, the environment's failure (retryable), never a
traceback nor a verdict on a config.

Before: a manifest tune held 15-20 connections and a model's 16-32 (SQLAlchemy's 5 + 10 per engine, and an Optuna
engine per study left behind with its idle connections until the garbage collector found it): five tuners filled
a default server, and of eight at once six failed with "too many clients", one with a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from kernelgen.db import open_db
from kernelgen.db.engine import MAX_CONNECTIONS, parse_url, translate
from kernelgen.errors import EnvironmentFailure, TooManyConnectionsError, environment_cause
from tests.db import pg
from tests.db.verdicts import assert_one_verdict_or_said_why

HERE = Path(__file__).resolve().parent
OPS = ("import torch\nimport torch.nn.functional as F\ndef relu_add(x, y):\n    return torch.relu(x + y)\n"
       "def bias_gelu(x, b):\n    return F.gelu(x + b)\n")
RELU_ADD = '''
[[workload]]
name = "relu_add"
function = "kg_conn_ops:relu_add"
inputs = [{shape = [32, 32], dtype = "float32"}, {shape = [32, 32], dtype = "float32"}]
trials = 3
'''
# bias_gelu has a template, a registered custom call and its ATen ops: three studies and the verdict's showdown.
BIAS_GELU = '''
[[workload]]
name = "bias_gelu"
function = "kg_conn_ops:bias_gelu"
inputs = [{shape = [32, 64], dtype = "float32"}, {shape = [64], dtype = "float32"}]
trials = 3
'''
SMALL_SERVER = 24  # max_connections of the server the team tests share: 4 tuners fit only if each holds <= 6


def _tuner(tmp_path: Path, url: str, manifest: str | None = RELU_ADD + BIAS_GELU, model: str | None = None,
           ) -> subprocess.Popen:
    (tmp_path / "kg_conn_ops.py").write_text(OPS)
    if model is not None:  # a whole model (tests/tune/model_fakes.py): a region claim held across each tuning
        args = ["--model", model, "--mode", "infer", "--trials", "2"]
    else:
        path = tmp_path / "workloads.toml"
        path.write_text(textwrap.dedent(manifest or ""))
        args = [str(path), "--sampler", "random"]
    env = {**os.environ, "KERNELGEN_CACHE_DIR": str(tmp_path / "kernels"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE.parent / "tune"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "kernelgen", "tune", *args, "--db", url, "--json"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _admin(cluster: pg.Cluster):
    import psycopg

    return psycopg.connect(cluster.admin_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)


def _peak_connections(cluster: pg.Cluster, url: str, procs: list[subprocess.Popen]) -> tuple[int, list]:
    """The most server-side connections to ``url``'s database seen while ``procs`` run (sampled every 20 ms from
    ``pg_stat_activity``; the sampler's own connection is to another database), and their (rc, out, err)."""
    database = parse_url(url).database
    peak = 0
    done = threading.Event()
    outputs: list = [None] * len(procs)

    def wait(i: int) -> None:
        out, err = procs[i].communicate(timeout=280)
        outputs[i] = (procs[i].returncode, out, err)

    waiters = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(len(procs))]
    for w in waiters:
        w.start()
    with _admin(cluster) as admin:
        while not done.is_set():
            count = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()[0]
            peak = max(peak, count)
            done.wait(0.02)
            if not any(w.is_alive() for w in waiters):
                done.set()
    return peak, outputs


@pytest.fixture(scope="module")
def small_server() -> Iterator[pg.Cluster]:
    """A server of its own whose max_connections is SMALL_SERVER (skips when none can start)."""
    if os.environ.get("KERNELGEN_TEST_PG_URL"):
        pytest.skip("needs a throw-away server with a low max_connections, not KERNELGEN_TEST_PG_URL")
    cluster = pg.start(max_connections=SMALL_SERVER)
    if isinstance(cluster, str):
        pytest.skip(cluster)
    yield cluster
    cluster.stop()


def test_a_server_with_no_slot_left_is_the_environments_one_line_failure() -> None:
    url = parse_url("postgresql+psycopg://kg@db.example:5432/tuning")
    said = ('connection failed: connection to server at "10.0.0.5", port 5432 failed: FATAL:  sorry, too many '
            'clients already')
    error = translate(sa_exc.OperationalError("SELECT 1", {}, Exception(said)), url)
    assert isinstance(error, TooManyConnectionsError) and isinstance(error, EnvironmentFailure)
    assert environment_cause(error) is not None  # retryable wherever the tuner tells the machine's failures apart
    message = str(error)
    assert "\n" not in message and "sorry, too many clients already" in message
    assert "max_connections" in message and f"at most {MAX_CONNECTIONS} connections" in message
    assert "run fewer tuners" in message


@pytest.mark.postgres
@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", ["manifest", pytest.param("model", marks=pytest.mark.slow)])
def test_one_tuner_holds_at_most_five_connections(tmp_path, pg_cluster, what) -> None:
    if isinstance(pg_cluster, str):
        pytest.skip(pg_cluster)
    assert MAX_CONNECTIONS <= 5
    url = pg_cluster.database()  # a database of its own: pg_stat_activity counts by database
    proc = _tuner(tmp_path, url, model="model_fakes:make" if what == "model" else None)
    peak, [(rc, out, err)] = _peak_connections(pg_cluster, url, [proc])
    assert rc == 0, err[-3000:]
    assert 0 < peak <= MAX_CONNECTIONS, f"one `kernelgen tune` ({what}) held {peak} connections"


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_four_tuners_at_once_fit_a_server_of_24_connections(tmp_path, small_server) -> None:
    url = small_server.database()
    procs = [_tuner(tmp_path, url) for _ in range(4)]
    peak, outputs = _peak_connections(small_server, url, procs)
    for rc, out, err in outputs:
        assert rc == 0 and "Traceback" not in err, err[-3000:]
        assert all(w["error"] is None for w in json.loads(out)["workloads"])
    assert peak <= 4 * MAX_CONNECTIONS
    with open_db(url, team_url="") as db:
        records = db.records()
    assert_one_verdict_or_said_why(records, [out for _rc, out, _err in outputs], workloads=2)


@pytest.mark.postgres
@pytest.mark.timeout(300)
@pytest.mark.parametrize("free", [0, 1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_full_server_is_one_line_and_judges_nothing(tmp_path, small_server, free) -> None:
    """Every slot taken but ``free``: the tuner fails opening its database (0), taking its schema lock (1) or
    opening Optuna's storage (2). One line naming the limit and the fix, no traceback, no record of a failed
    config; once slots are free again the rerun tunes."""
    import psycopg

    url = small_server.database()
    held = []
    try:
        while True:  # take every slot (the test's user is a superuser: the reserved ones too)
            try:
                held.append(_admin(small_server))
            except psycopg.OperationalError:
                break
        for conn in held[:free]:
            conn.close()
        del held[:free]
        proc = _tuner(tmp_path, url, RELU_ADD)
        out, err = proc.communicate(timeout=280)
    finally:
        for conn in held:
            conn.close()
    assert proc.returncode == 1 and "Traceback" not in err, err[-3000:]
    said = err  # a database failure ends the run in one line (it is no workload's outcome)
    assert "too many clients" in said and "run fewer tuners" in said, said
    if free:  # the process's first connection read the limit
        assert f"max_connections = {SMALL_SERVER}" in said, said
    with open_db(url, team_url="") as db:
        assert all(r.measurement.ok for r in db.records())  # nothing judged by the full server
    if free == 2:
        rerun = _tuner(tmp_path, url, RELU_ADD)
        out, err = rerun.communicate(timeout=280)
        assert rerun.returncode == 0, err[-3000:]
        assert json.loads(out)["workloads"][0]["results"][0]["implementation"]
