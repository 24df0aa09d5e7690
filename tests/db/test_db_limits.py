"""Records are held to the limits every supported database enforces, before anything is written: an import
file, a commit or a merge that PostgreSQL would refuse is refused whole by SQLite too, in one line."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import insert

from kernelgen.cli import main
from kernelgen.db import open_db
from kernelgen.db.jsonl import header
from kernelgen.db.limits import MAX_JSON_DEPTH
from kernelgen.db.models import RecordRow, row_values
from kernelgen.errors import DatabaseError
from kernelgen.ir.values import TuningRecord, canonical_json
from tests.db import factories as f


def _edit(**changes) -> dict:
    data = json.loads(canonical_json(f.record(seed=1).to_json()))
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return data


# Each: a record line some supported database refuses, and the words of the one-line error.
BAD_LINES = {
    "long_workload_key": (canonical_json(_edit(workload_key="k" * 100_000)), "workload_key is 100000 characters"),
    "nul_in_text": (canonical_json(_edit(implementation="a\x00b")), "NUL"),
    "lone_surrogate": (canonical_json(_edit(backend="\ud800x")), "surrogate"),
    "infinite_time": (canonical_json(_edit(provenance__created_at=1.0)).replace('"created_at":1.0', '"created_at":1e400'),
                      "not finite"),
    "huge_integer": (canonical_json(_edit(provenance__created_at=10**400)), "malformed record"),
    "deep_json": ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_JSON_DEPTH}"),
}


def _file(tmp_path, name: str, line: str) -> str:
    good = canonical_json(f.record(seed=2).to_json())
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join([canonical_json(header()), good, line]) + "\n")
    return str(path)


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_import_refuses_what_a_database_refuses_in_one_line(case, tmp_path, capsys) -> None:
    line, words = BAD_LINES[case]
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code = main(["db", "import", _file(tmp_path, case, line), "--db", url])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "line 3" in err and words in err
    with open_db(url, team_url="") as db:
        assert db.count() == 0  # the good line before it was not imported either


def test_commit_refuses_a_batch_with_one_oversized_record(tmp_path) -> None:
    with open_db(f"sqlite:///{tmp_path / 'db.sqlite'}", team_url="") as db:
        with pytest.raises(DatabaseError, match="workload_key is 300 characters"):
            db.commit_many([f.record(seed=1), f.record(seed=2, workload="w" * 300)])
        assert db.count() == 0


def test_merge_from_a_sqlite_file_holding_an_oversized_key_writes_nothing(tmp_path) -> None:
    source = f"sqlite:///{tmp_path / 'old.sqlite'}"
    with open_db(source, team_url="") as db:
        db.commit(f.record(seed=1))
        bad = f.record(seed=3, workload="w" * 100_000)
        with db._tx(write=True) as conn:  # as an older kernelgen (no checks) stored it
            conn.execute(insert(RecordRow.__table__), [row_values(bad)])
    with open_db(f"sqlite:///{tmp_path / 'new.sqlite'}", team_url="") as db:
        with pytest.raises(DatabaseError, match="100000 characters.*nothing was written"):
            db.merge(source)
        assert db.count() == 0


@pytest.mark.postgres
@pytest.mark.parametrize("case", ["long_workload_key", "nul_in_text"])
def test_the_limits_are_postgresql_s_own(case, pg_url) -> None:
    """The refused values are refused by PostgreSQL itself when written raw (the limits are not invented)."""
    record = TuningRecord.from_json(json.loads(BAD_LINES[case][0]))
    with open_db(pg_url, team_url="") as db:
        with pytest.raises((sa_exc.DBAPIError, ValueError)):
            with db._engine.begin() as conn:
                conn.execute(insert(RecordRow.__table__), [row_values(record)])
        db.commit(f.record(seed=1))  # while a valid record goes in
        assert db.count() == 1
