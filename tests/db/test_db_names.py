"""Workload names and evidence are fields of a record: stored, shown, filtered on, and kept through
export (format 2), import, merge and the schema-4 upgrade; format 1 files and older rows still read."""

from __future__ import annotations

import json

import pytest

from kernelgen.cli import main
from kernelgen.db import EXPORT_VERSION, open_db, upgrade_db
from kernelgen.db.jsonl import FORMAT, read_records
from kernelgen.errors import ImportFormatError
from kernelgen.ir.values import CONFIRM_PREFIX, DECLARED_PREFIX, Evidence, TuningRecord, canonical_json
from tests.db import factories as f


def _v1_line(record: TuningRecord) -> str:
    """A record as kernelgen wrote it in format 1: no name, no evidence field."""
    data = record.to_json()
    data.pop("name"), data.pop("evidence")
    return canonical_json(data)


def _v1_file(tmp_path, records: list[TuningRecord]) -> str:
    path = tmp_path / "old.jsonl"
    lines = [canonical_json({"format": FORMAT, "order": "record_id", "version": 1})]
    lines += [_v1_line(r) for r in sorted(records, key=lambda r: r.record_id)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_name_and_evidence_round_trip_and_keep_the_trial_identity() -> None:
    declared = f.record(message=f"{DECLARED_PREFIX}: rounds x", name="bias_gelu")
    again = TuningRecord.from_json(json.loads(canonical_json(declared.to_json())))
    assert again == declared and again.name == "bias_gelu" and again.evidence is Evidence.DECLARED
    # The name is a label: the same trial unnamed (as an older kernelgen stored it) is the same record.
    assert f.record(message=f"{DECLARED_PREFIX}: rounds x").record_id == declared.record_id
    old = TuningRecord.from_json(json.loads(_v1_line(declared)))
    assert old.name is None and old.evidence is Evidence.DECLARED and old.record_id == declared.record_id
    # Evidence that the message does not imply is a different trial claim, and a different record.
    stated = f.record(message="a trial", evidence=Evidence.CONFIRMED)
    assert stated.evidence is Evidence.CONFIRMED and stated.record_id != f.record(message="a trial").record_id


@pytest.mark.parametrize("bad", [{"name": ""}, {"name": 3}, {"evidence": 7}, {"evidence": True}])
def test_malformed_name_or_evidence_is_refused(bad: dict) -> None:
    data = dict(f.record().to_json(), **bad)
    with pytest.raises(ValueError, match=next(iter(bad))):
        TuningRecord.from_json(data)


def test_export_is_format_2_and_import_and_merge_keep_names(sqlite_url: str, tmp_path) -> None:
    named = [f.record(seed=i, name="rmsnorm", message=f"{CONFIRM_PREFIX}: r" if i else "") for i in range(3)]
    with open_db(sqlite_url, team_url="") as db:
        db.commit_many(named)
        path = tmp_path / "out.jsonl"
        db.export(path)
    header, *lines = path.read_text().splitlines()
    assert json.loads(header)["version"] == EXPORT_VERSION == 2
    assert {json.loads(line)["name"] for line in lines} == {"rmsnorm"}
    assert sorted(json.loads(line)["evidence"] for line in lines) == [1, 1, 2]
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    with open_db(other, team_url="") as db:
        assert db.import_file(path) == (3, 0)
        assert sorted(db.records(), key=lambda r: r.record_id) == sorted(named, key=lambda r: r.record_id)
    third = f"sqlite:///{tmp_path / 'third.sqlite'}"
    with open_db(third, team_url="") as db:
        assert db.merge(sqlite_url) == (3, 0)
        assert {r.name for r in db.records()} == {"rmsnorm"}


def test_a_format_1_file_imports_without_names_and_with_derived_evidence(sqlite_url: str, tmp_path) -> None:
    records = [f.record(seed=1), f.record(seed=2, message=f"{DECLARED_PREFIX}: r")]
    path = _v1_file(tmp_path, records)
    assert [r.name for r in read_records(path)] == [None, None]
    with open_db(sqlite_url, team_url="") as db:
        assert db.import_file(path) == (2, 0)
        assert db.best(records[0].workload_key, f.TARGET).evidence is Evidence.DECLARED
        # The same trials exported again in format 2 (now named) are already present: ids did not change.
        db.export(tmp_path / "v2.jsonl")
        assert db.import_file(tmp_path / "v2.jsonl") == (0, 2)


def test_a_format_1_file_may_not_carry_format_2_fields(tmp_path) -> None:
    path = _v1_file(tmp_path, [f.record()])
    with open(path) as handle:
        text = handle.read().replace('"backend"', '"name":"x","backend"', 1)
    with open(path, "w") as handle:
        handle.write(text)
    with pytest.raises(ImportFormatError, match="unknown record field.*name.*format version 1"):
        read_records(path)


def test_upgrade_to_schema_4_keeps_old_rows_unnamed_and_working(persistent_url: str) -> None:
    old = [f.record(seed=1, median=2e-5), f.record(seed=2, median=1e-5, message=f"{CONFIRM_PREFIX}: r")]
    f.database_at(persistent_url, "0003", old)
    assert upgrade_db(persistent_url)[1] == "4"
    with open_db(persistent_url, team_url="") as db:
        assert {r.name for r in db.records()} == {None}
        assert db.best(old[0].workload_key, f.TARGET) == old[1]
        assert len(list(db.records(workload=old[0].workload_key[:6]))) == 2
        db.commit(f.record(seed=3, workload="wk-other", name="bias_gelu"))
        assert [r.workload_key for r in db.records(workload="bias_gelu")] == ["wk-other"]


def test_the_name_wins_over_a_key_prefix(sqlite_url: str) -> None:
    with open_db(sqlite_url, team_url="") as db:
        db.commit_many([f.record(seed=1, workload="abc123", name="abc"), f.record(seed=2, workload="abc999")])
        assert [r.workload_key for r in db.records(workload="abc")] == ["abc123"]
        assert [r.workload_key for r in db.records(workload="abc9")] == ["abc999"]


def test_db_show_filters_and_shows_by_name(sqlite_url: str, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("KERNELGEN_TEAM_DB", raising=False)
    with open_db(sqlite_url) as db:
        db.commit_many([f.record(seed=1, workload="wk-a", name="bias_gelu"),
                        f.record(seed=2, workload="wk-b", name="rmsnorm"), f.record(seed=3, workload="wk-c")])
    assert main(["db", "show", "--json", "--workload", "bias_gelu", "--db", sqlite_url]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["workload_key"]) for r in rows] == [("bias_gelu", "wk-a")]
    assert main(["db", "show", "--workload", "wk-", "--db", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "3 record(s)" in out and "bias_gelu" in out and "rmsnorm" in out and "name" in out
    assert main(["db", "export", "--workload", "rmsnorm", "--db", sqlite_url, str(tmp_path / "rms.jsonl")]) == 0
    assert "exported 1 record(s)" in capsys.readouterr().out


def test_sql_best_is_the_verdict_function(store) -> None:
    """``TuningDB.best`` (SQL on an index) and ``kernelgen.db.verdict`` (everything else) rank alike, ties in
    time and in the verdicts' age included."""
    from kernelgen.db.verdict import verdict

    records = []
    for i in range(40):
        evidence = (Evidence.DECLARED, Evidence.CONFIRMED, Evidence.TRIAL)[i % 3]
        records.append(f.record(workload=f"wk-{i % 4}", seed=i, median=1e-5 * (1 + i % 5),
                                created_at=1_700_000_000.0 + i % 2, evidence=evidence,
                                status="ok" if i % 7 else "timeout"))
    store.commit_many(records)
    for k in range(4):
        mine = [r for r in records if r.workload_key == f"wk-{k}"]
        assert store.best(f"wk-{k}", f.TARGET) == verdict(mine)
        trials_only = [r for r in mine if r.evidence is Evidence.TRIAL]
        assert verdict(trials_only) == min((r for r in trials_only if r.measurement.ok),
                                           key=lambda r: (r.measurement.time.median, r.record_id))
