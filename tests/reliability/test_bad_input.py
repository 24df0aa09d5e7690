"""Bad input gets a one-line error naming the problem and the fix, a non-zero exit, and changes nothing.

Before, each of these was accepted (rc 0) or ended in a traceback: ``tune --timeout nan``, ``db prune
--older-than nan``, ``explain --input "float32[100000000000,1024]"``, ``explain --db foo://x``, a record with
median 1e308 then ``report`` (OverflowError), a row whose record_id does not match its content then ``db
export`` (ValueError), ``db import`` with ``KERNELGEN_DB`` equal to ``KERNELGEN_TEAM_DB`` (wrote into the team
database), and tuning against a read-only database (Optuna's message about its own tables).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from kernelgen.db import open_db
from kernelgen.db.engine import parse_url, sqlite_path
from tests.db import factories as f
from tests.reliability.conftest import ROOT, cli, count, one_line_error

MANIFEST = str(ROOT / "examples" / "workloads.toml")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_tune_refuses_a_timeout_that_is_not_a_duration(url, capsys, value: str) -> None:
    code, _, err = cli(capsys, "tune", MANIFEST, "--db", url, "--timeout", value)
    one_line_error(code, err, "timeout=", "positive, finite number of seconds")
    assert count(url) == 20


@pytest.mark.parametrize("value", ["nan", "inf", "-3"])
@pytest.mark.parametrize("dry", [True, False])
def test_prune_refuses_an_age_that_is_not_one(url, capsys, value: str, dry: bool) -> None:
    code, _, err = cli(capsys, "db", "prune", "--older-than", value, "--db", url, *(["--dry-run"] if dry else []))
    one_line_error(code, err, "--older-than", "nothing was removed")
    assert count(url) == 20


def test_explain_refuses_an_input_no_machine_here_can_hold(capsys) -> None:
    code, _, err = cli(capsys, "explain", "examples.ops:bias_gelu", "--input", "float32[100000000000,1024]",
                       "--input", "float32[1024]")
    one_line_error(code, err, "float32[100000000000, 1024]", "GiB")


@pytest.mark.parametrize("db", ["foo://x", "postgresql://nobody@127.0.0.1:1/none"])
def test_explain_refuses_a_database_it_cannot_open(capsys, db: str) -> None:
    code, _, err = cli(capsys, "explain", "examples.ops:bias_gelu", "--input", "float32[4]", "--input", "float32[4]",
                       "--db", db)
    one_line_error(code, err)


def test_report_draws_a_record_of_1e308_seconds(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'huge.sqlite'}"
    with open_db(url) as db:
        db.commit_many([f.record(median=1e308), f.record(median=1e-4, seed=1), f.record(median=5e-324, seed=2)])
    out = tmp_path / "report.html"
    code, stdout, err = cli(capsys, "report", "--db", url, "--out", str(out))
    assert code == 0 and "wrote" in stdout, err
    assert out.stat().st_size > 1000


def test_export_skips_a_row_changed_outside_kernelgen_and_says_so(url, tmp_path, capsys) -> None:
    path = sqlite_path(parse_url(url))
    with sqlite3.connect(path) as conn:
        rid, data = conn.execute("SELECT record_id, data FROM kernelgen_records ORDER BY record_id LIMIT 1 OFFSET 5"
                                 ).fetchone()
        record = json.loads(data)
        record["measurement"]["message"] = "edited by hand"
        conn.execute("UPDATE kernelgen_records SET data = ? WHERE record_id = ?", (json.dumps(record), rid))
    out = tmp_path / "records.jsonl"
    code, stdout, err = cli(capsys, "db", "export", str(out), "--db", url)
    assert code == 0 and "exported 19 record(s)" in stdout and "1 damaged row(s) skipped" in stdout, err
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    code, stdout, _ = cli(capsys, "db", "import", str(out), "--db", other)
    assert code == 0 and "imported 19 new record(s)" in stdout  # what was exported is a valid file


@pytest.mark.parametrize("command", [["import", "FILE"], ["merge", "FILE"], ["prune", "--older-than", "0"]])
def test_writes_refuse_a_local_database_that_is_the_team_database(url, tmp_path, capsys, monkeypatch, command):
    export = tmp_path / "records.jsonl"
    with open_db(url) as db:
        db.export(export)
    team = url.replace("sqlite:///", "sqlite:////") if url.startswith("sqlite:////") else url
    monkeypatch.setenv("KERNELGEN_DB", url)
    monkeypatch.setenv("KERNELGEN_TEAM_DB", team)
    args = [str(export) if a == "FILE" else a for a in command]
    code, _, err = cli(capsys, "db", *args)
    one_line_error(code, err, "are the same database")
    monkeypatch.delenv("KERNELGEN_TEAM_DB")
    assert count(url) == 20


@pytest.mark.postgres
def test_tuning_a_read_only_database_is_refused_before_the_first_trial(pg_cluster, capsys) -> None:
    if isinstance(pg_cluster, str):
        pytest.skip(pg_cluster)
    url = pg_cluster.database()
    with open_db(url) as db:
        db.commit_many(f.many(3))
    name = url.rsplit("/", 1)[1]
    with pg_cluster._admin() as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    code, _, err = cli(capsys, "tune", MANIFEST, "--db", url, "--trials", "1")
    one_line_error(code, err, "read-only")
    assert "Optuna" not in err and "study" not in err
