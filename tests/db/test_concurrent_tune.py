"""Two `kernelgen tune` processes at once on one fresh database (SQLite file, PostgreSQL): both succeed,
no config is measured twice, and the workload gets exactly one verdict."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelgen.db import open_db
from kernelgen.ir.values import Evidence
from tests.db.verdicts import assert_one_verdict_or_said_why

OPS = ("import torch\nimport torch.nn.functional as F\ndef relu_add(x, y):\n    return torch.relu(x + y)\n"
       "def bias_gelu(x, b):\n    return F.gelu(x + b)\n")
MANIFEST = '''
[[workload]]
name = "relu_add"
function = "kg_concurrent_ops:relu_add"
inputs = [{shape = [32, 32], dtype = "float32"}, {shape = [32, 32], dtype = "float32"}]
trials = 4
'''


def _tune_twice_at_once(tmp_path: Path, url: str, manifest_text: str = MANIFEST) -> list[subprocess.CompletedProcess]:
    (tmp_path / "kg_concurrent_ops.py").write_text(OPS)
    manifest = tmp_path / "workloads.toml"
    manifest.write_text(textwrap.dedent(manifest_text))
    cmd = [sys.executable, "-m", "kernelgen", "tune", str(manifest), "--db", url, "--json", "--sampler", "random"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done


def _check(url: str, done: list[subprocess.CompletedProcess], workload_key: str | None = None, budget: int = 4) -> None:
    for result in done:
        assert result.returncode == 0, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        assert all(w["error"] is None for w in json.loads(result.stdout)["workloads"])
    with open_db(url, team_url="") as db:
        records = [r for r in db.records() if workload_key is None or r.workload_key == workload_key]
    searched = collections.Counter((r.implementation, json.dumps(r.config.to_json(), sort_keys=True))
                                   for r in records if r.evidence is Evidence.TRIAL)
    assert searched and max(searched.values()) == 1, searched  # no config measured twice in the search
    # One trials budget (4) for both processes: at most one trial each already in flight when the other
    # spent the budget.
    per_implementation = collections.Counter(impl for impl, _ in searched)
    assert max(per_implementation.values()) <= budget + len(done) - 1, searched
    assert_one_verdict_or_said_why(records, [result.stdout for result in done], workloads=1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_tune_processes_on_a_fresh_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh' / 'tuning.sqlite'}"
    _check(url, _tune_twice_at_once(tmp_path, url))


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(300)
def test_two_tune_processes_on_a_fresh_postgresql_database(tmp_path: Path, pg_url: str) -> None:
    _check(pg_url, _tune_twice_at_once(tmp_path, pg_url))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_tune_processes_with_competing_implementations(tmp_path: Path) -> None:
    """bias_gelu has a template and a registered custom call: their showdown declares the one verdict."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    manifest = MANIFEST.replace("relu_add", "bias_gelu").replace(
        'inputs = [{shape = [32, 32], dtype = "float32"}, {shape = [32, 32], dtype = "float32"}]',
        'inputs = [{shape = [32, 64], dtype = "float32"}, {shape = [64], dtype = "float32"}]')
    _check(url, _tune_twice_at_once(tmp_path, url, manifest))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_tune_processes_on_an_existing_sqlite_file(tmp_path: Path) -> None:
    """Records of a neighbouring shape become warm starts queued in the new study, which both processes
    take from at once (before: one config measured twice, then UpdateFinishedTrialError)."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    first = _tune_twice_at_once(tmp_path, url)
    _check(url, first)
    keys = {json.loads(r.stdout)["workloads"][0]["results"][0]["workload_key"] for r in first}
    second = _tune_twice_at_once(tmp_path, url, MANIFEST.replace("[32, 32]", "[32, 48]"))
    (key,) = {json.loads(r.stdout)["workloads"][0]["results"][0]["workload_key"] for r in second} - keys
    _check(url, second, key)
