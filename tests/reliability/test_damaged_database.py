"""A bulk write into a SQLite file with a damaged page is refused before anything is written.

Before: ``kernelgen db import`` into a database with a corrupt page "succeeded" silently.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kernelgen.db import open_db
from kernelgen.db.jsonl import write_records
from tests.db import factories as f
from tests.reliability.conftest import cli, one_line_error


def _damaged(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "damaged.sqlite"
    url = f"sqlite:///{path}"
    with open_db(url) as db:
        db.commit_many(f.many(300))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    with open(path, "r+b") as handle:  # scribble over the cells of a page in the middle of the records
        handle.seek(page * (pages // 5) + 100)
        handle.write(b"\xff" * 500)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA quick_check").fetchall() != [("ok",)]  # the premise: it is damaged
    return url, path


def _export(tmp_path: Path) -> Path:
    out = tmp_path / "new.jsonl"
    write_records(out, sorted(f.many(10, prefix="new"), key=lambda r: r.record_id))
    return out


def test_import_into_a_damaged_database_is_refused(tmp_path, capsys) -> None:
    url, path = _damaged(tmp_path)
    before = path.read_bytes()
    code, _, err = cli(capsys, "db", "import", str(_export(tmp_path)), "--db", url)
    one_line_error(code, err, "is damaged", "quick_check", "nothing was imported")
    assert path.read_bytes() == before


def test_merge_into_a_damaged_database_is_refused(tmp_path, capsys) -> None:
    url, path = _damaged(tmp_path)
    source = f"sqlite:///{tmp_path / 'source.sqlite'}"
    with open_db(source) as db:
        db.commit_many(f.many(5, prefix="src"))
    before = path.read_bytes()
    code, _, err = cli(capsys, "db", "merge", source, "--db", url)
    one_line_error(code, err, "is damaged", "nothing was merged")
    assert path.read_bytes() == before
