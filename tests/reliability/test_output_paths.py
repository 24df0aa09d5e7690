"""An output path that is the database being read (however spelt) is refused, and nothing is lost.

Before: ``kernelgen db export X.sqlite --db sqlite:///X.sqlite`` replaced the database with its export and
exited 0; every record and Optuna study was gone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelgen.db.engine import parse_url, sqlite_path
from kernelgen.paths import is_sqlite_file
from tests.reliability.conftest import cli, count, one_line_error


def _db_file(url: str) -> Path:
    path = sqlite_path(parse_url(url))
    assert path is not None
    return path


@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink", "wal"])
def test_export_over_the_database_is_refused(url: str, tmp_path: Path, capsys, monkeypatch, spelling: str) -> None:
    db = _db_file(url)
    before = count(url)
    out = {"same": db, "relative": Path(db.name), "symlink": tmp_path / "records.jsonl",
           "hardlink": tmp_path / "hard.jsonl", "wal": Path(f"{db}-wal")}[spelling]
    monkeypatch.chdir(tmp_path)
    if spelling == "symlink":
        os.symlink(db, out)
    if spelling == "hardlink":
        os.link(db, out)
    code, _, err = cli(capsys, "db", "export", str(out), "--db", url)
    one_line_error(code, err, "refusing to write", "choose another output path")
    assert is_sqlite_file(db) and count(url) == before


def test_export_over_another_sqlite_database_is_refused(url: str, tmp_path: Path, capsys) -> None:
    other = tmp_path / "other.sqlite"
    from kernelgen.db import open_db

    with open_db(f"sqlite:///{other}") as db:
        db.commit_many([])
    code, _, err = cli(capsys, "db", "export", str(other), "--db", url)
    one_line_error(code, err, "is a SQLite database")
    assert is_sqlite_file(other)


def test_report_over_the_database_is_refused(url: str, capsys) -> None:
    db = _db_file(url)
    code, _, err = cli(capsys, "report", "--out", str(db), "--db", url)
    one_line_error(code, err, "refusing to write")
    assert is_sqlite_file(db) and count(url) == 20


def test_export_still_replaces_an_earlier_export(url: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "records.jsonl"
    out.write_text("old\n")
    code, stdout, _ = cli(capsys, "db", "export", str(out), "--db", url)
    assert code == 0 and "exported 20 record(s)" in stdout
    assert out.read_text().count("\n") == 21  # the header and every record: the old text is gone
