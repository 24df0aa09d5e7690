"""``kernelgen db ...``: exit codes, output, and one-line errors that change nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgen.cli import main
from kernelgen.db import open_db
from kernelgen.db.schema import head_revision, schema_number
from tests.db import factories as f

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("KERNELGEN_TEAM_DB", raising=False)
    u = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    with open_db(u) as db:
        db.commit_many(f.many(20, workloads=4, targets=2))
    return u


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["db", *args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def count(url: str) -> int:
    with open_db(url, team_url="") as db:
        return db.count()


def test_show_json_and_best(url: str, capsys) -> None:
    code, out, _ = run(capsys, "show", "--json", "--limit", "0", "--db", url)
    assert code == 0 and len(json.loads(out)) == 20
    code, out, _ = run(capsys, "show", "--best", "--json", "--db", url, "--workload", "wk-r-1")
    rows = json.loads(out)
    assert code == 0 and {(r["workload_key"], r["target_fingerprint"]) for r in rows} == {("wk-r-1", f"{f.TARGET}-1")}
    with open_db(url) as db:
        assert rows[0]["record_id"] == db.best("wk-r-1", f"{f.TARGET}-1").record_id
    code, out, _ = run(capsys, "show", "--status", "compile_error", "--db", url)
    assert code == 0 and "compile_error" in out and "3 record(s)" in out


def test_show_rejects_an_unknown_status(url: str, capsys) -> None:
    code, _, err = run(capsys, "show", "--status", "exploded", "--db", url)
    assert code != 0 and "exploded" in err


def test_stats_json(url: str, capsys) -> None:
    code, out, _ = run(capsys, "stats", "--json", "--db", url)
    data = json.loads(out)
    assert code == 0 and data["records"] == 20 and data["workloads"] == 4


def test_export_import_merge(url: str, tmp_path, capsys) -> None:
    path = tmp_path / "shared" / "cpu.jsonl"
    code, out, _ = run(capsys, "export", str(path), "--target", f"{f.TARGET}-0", "--db", url)
    assert code == 0 and "exported 10 record(s)" in out
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    code, out, _ = run(capsys, "import", str(path), "--db", other)
    assert code == 0 and "imported 10 new record(s)" in out and "(0 already present)" in out
    code, out, _ = run(capsys, "merge", url, "--db", other)
    assert code == 0 and "merged 10 new record(s)" in out and "(10 already present)" in out
    assert count(other) == 20


def test_import_of_a_bad_file_changes_nothing(url: str, tmp_path, capsys) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format":"kernelgen-tuning-records","version":1}\n{"workload_key": "x"\n')
    code, _, err = run(capsys, "import", str(path), "--db", url)
    assert_one_line_error(code, err, "line 2", "nothing was imported")
    assert count(url) == 20


def test_prune_needs_a_criterion_and_reports_what_it_removed(url: str, capsys) -> None:
    code, _, err = run(capsys, "prune", "--db", url)
    assert_one_line_error(code, err, "criterion")
    code, out, _ = run(capsys, "prune", "--target", f"{f.TARGET}-1", "--dry-run", "--db", url)
    assert code == 0 and "would remove 10 record(s)" in out and count(url) == 20
    code, out, _ = run(capsys, "prune", "--target", f"{f.TARGET}-1", "--json", "--db", url)
    data = json.loads(out)
    assert code == 0 and data["removed"] == 10 and data["groups"][0]["records"] == 10
    assert count(url) == 10


def test_upgrade_of_an_older_schema(tmp_path, capsys) -> None:
    old = f"sqlite:///{tmp_path / 'old.sqlite'}"
    f.database_at(old, "0001", [f.record()])
    code, _, err = run(capsys, "stats", "--db", old)
    assert_one_line_error(code, err, "schema 1", f"kernelgen db upgrade --db {old}")
    code, out, _ = run(capsys, "upgrade", "--db", old)
    assert code == 0 and f"from schema 1 to {schema_number(head_revision())}" in out
    code, out, _ = run(capsys, "upgrade", "--db", old)
    assert code == 0 and f"already at schema {schema_number(head_revision())}" in out
    assert count(old) == 1


def test_team_database_is_read_only_and_layered(url: str, tmp_path, capsys, monkeypatch) -> None:
    local = f"sqlite:///{tmp_path / 'local.sqlite'}"
    code, out, _ = run(capsys, "stats", "--json", "--db", local, "--team-db", url)
    data = json.loads(out)
    assert code == 0 and data["records"] == 20 and data["local"]["records"] == 0
    monkeypatch.setenv("KERNELGEN_TEAM_DB", url)
    code, out, _ = run(capsys, "import", str(_export(url, tmp_path)), "--db", local)
    assert code == 0 and "imported 20 new record(s)" in out  # writes go to the local layer only
    assert count(local) == 20 and count(url) == 20


def _export(url: str, tmp_path) -> Path:
    path = tmp_path / "all.jsonl"
    with open_db(url, team_url="") as db:
        db.export(path)
    return path


def test_console_script_errors_are_one_line(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-m", "kernelgen", "db", "stats", "--db", "postgresql://kg:pw@127.0.0.1:1/x"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and ":pw@" not in result.stderr
