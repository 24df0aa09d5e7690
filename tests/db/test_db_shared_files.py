"""The project's shared records in tuning_db/ stay importable, and each file holds only its own family."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelgen.db.jsonl import read_records

FILES = sorted((Path(__file__).resolve().parents[2] / "tuning_db").glob("*.jsonl"))


def test_there_are_shared_record_files() -> None:
    assert FILES, "tuning_db/ should hold at least one <target-family>.jsonl file"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_shared_file_is_valid_and_named_after_its_family(path: Path) -> None:
    records = read_records(path)  # raises ImportFormatError naming the bad line
    for record in records:
        assert record.target_family.replace(":", "-") == path.stem, record.record_id
