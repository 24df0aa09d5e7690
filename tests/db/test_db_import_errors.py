"""Import files are data: every malformed, truncated or newer-version file is refused with a one-line
ImportFormatError naming the line, and the database is left exactly as it was (all or nothing)."""

from __future__ import annotations

import json
import pickle

import pytest

from kernelgen.db import EXPORT_VERSION, TuningDB, open_db
from kernelgen.errors import ImportFormatError
from kernelgen.ir.values import canonical_json
from tests.db import factories as f


@pytest.fixture
def target(tmp_path) -> TuningDB:
    db = open_db(f"sqlite:///{tmp_path / 'target.sqlite'}", team_url="")
    db.commit_many(f.many(5, prefix="existing"))
    yield db
    db.close()


@pytest.fixture
def good_file(tmp_path) -> str:
    src = open_db("sqlite://", team_url="")
    src.commit_many(f.many(12, prefix="incoming"))
    path = tmp_path / "good.jsonl"
    src.export(path)
    src.close()
    return str(path)


def _lines(path: str) -> list[str]:
    with open(path) as handle:
        return handle.read().splitlines()


def _write(tmp_path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


def _assert_refused(db: TuningDB, path: str, *fragments: str) -> None:
    before = sorted(r.record_id for r in db.records())
    with pytest.raises(ImportFormatError) as info:
        db.import_file(path)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert sorted(r.record_id for r in db.records()) == before


def test_truncated_last_line(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    text = "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]
    _assert_refused(target, _write(tmp_path, "cut.jsonl", text), f"line {len(lines)}", "truncated")


def test_non_json_line_in_the_middle(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    lines.insert(4, "<<<<<<< HEAD")  # an unresolved git conflict
    _assert_refused(target, _write(tmp_path, "conflict.jsonl", "\n".join(lines) + "\n"), "line 5", "not valid JSON")


def test_newer_format_version(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    header = json.loads(lines[0])
    header["version"] = EXPORT_VERSION + 1
    lines[0] = json.dumps(header)
    _assert_refused(target, _write(tmp_path, "next.jsonl", "\n".join(lines) + "\n"),
                    f"format version {EXPORT_VERSION + 1}", f"reads up to {EXPORT_VERSION}", "upgrade kernelgen")


@pytest.mark.parametrize("header", ['{"format": "something-else", "version": 1}', "[1, 2]", '{"format": '
                                    '"kernelgen-tuning-records", "version": "one"}'])
def test_bad_header(target: TuningDB, good_file: str, tmp_path, header: str) -> None:
    lines = _lines(good_file)
    lines[0] = header
    _assert_refused(target, _write(tmp_path, "h.jsonl", "\n".join(lines) + "\n"), "line 1")


def test_missing_header(target: TuningDB, good_file: str, tmp_path) -> None:
    _assert_refused(target, _write(tmp_path, "nohead.jsonl", "\n".join(_lines(good_file)[1:]) + "\n"),
                    "line 1", "header")


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d.pop("measurement"), "measurement"),
    (lambda d: d.update(workload_key=""), "workload_key"),
    (lambda d: d["measurement"].update(status="exploded"), "exploded"),
    (lambda d: d["measurement"].update(time=None), "time statistics exactly when"),
    (lambda d: d["measurement"]["config"].update(BLOCK=[1, 2]), "BLOCK"),
    (lambda d: d["signature"][0].update(dtype="float128"), "float128"),
    (lambda d: d.update(signature="1024x1024"), "signature"),
    (lambda d: d.update(measurement=[]), "measurement"),
    (lambda d: d.update(future_field=1), "future_field"),
], ids=["no-measurement", "empty-key", "bad-status", "ok-without-time", "bad-config", "bad-dtype",
        "bad-signature", "measurement-list", "unknown-field"])
def test_invalid_record_anywhere_rejects_the_whole_file(target, good_file, tmp_path, mutate, fragment) -> None:
    lines = _lines(good_file)
    data = json.loads(lines[7])
    mutate(data)
    lines[7] = json.dumps(data)
    _assert_refused(target, _write(tmp_path, "bad.jsonl", "\n".join(lines) + "\n"), "line 8", fragment)


def test_nan_is_not_a_number_here(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    lines[2] = lines[2].replace('"median":', '"median":NaN,"x":', 1)
    _assert_refused(target, _write(tmp_path, "nan.jsonl", "\n".join(lines) + "\n"), "line 3")


def test_binary_pickle_and_empty_files(target: TuningDB, tmp_path) -> None:
    payload = pickle.dumps([f.record().to_json()])
    _assert_refused(target, _write(tmp_path, "x.pkl", payload), "not UTF-8")
    _assert_refused(target, _write(tmp_path, "x.jsonl", b""), "empty")
    _assert_refused(target, str(tmp_path / "missing.jsonl"), "no such file")
    _assert_refused(target, str(tmp_path), "directory")


def test_header_only_and_blank_lines_are_fine(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    assert target.import_file(_write(tmp_path, "h.jsonl", lines[0] + "\n")) == (0, 0)
    spaced = "\n\n".join(lines) + "\n\n"  # as a careless hand merge may leave it
    assert target.import_file(_write(tmp_path, "s.jsonl", spaced)) == (12, 0)


def test_union_merged_file_with_duplicates_imports_once(target: TuningDB, good_file: str, tmp_path) -> None:
    lines = _lines(good_file)
    doubled = [lines[0]] + lines[1:] + lines[1:6]  # what `merge=union` of two branches can produce
    assert target.import_file(_write(tmp_path, "u.jsonl", "\n".join(doubled) + "\n")) == (12, 0)


def test_lines_are_canonical_json(good_file: str) -> None:
    lines = _lines(good_file)
    for line in lines:
        assert line == canonical_json(json.loads(line))
    ids = [f.record().__class__.from_json(json.loads(line)).record_id for line in lines[1:]]
    assert ids == sorted(ids)
