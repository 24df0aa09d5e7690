"""What kernelgen reads from a file it is given is bounded: line length, bytes (decompressed) and record
count, each refused in one line that names the limit and how to raise it. The hostile inputs run as real
processes under an address-space cap, so a read without bound fails the test, not the machine.

Before: ``kernelgen db import /dev/zero`` (or ``/dev/urandom``, or ``db merge``) read until memory ran out,
and a 2 MB gzip bomb given to ``kernelgen replay`` peaked at 6 GB.
"""

from __future__ import annotations

import gzip

import pytest

from kernelgen.db.jsonl import write_records
from kernelgen.input_limits import MAX_BYTES_ENV, MAX_RECORDS_ENV
from tests.db import factories as f
from tests.reliability.conftest import cli, cli_process, count, one_line_error

CAP_MB = 1500  # far below what an unbounded read of these inputs needs, far above what a bounded one does


@pytest.mark.parametrize("command", ["import", "merge"])
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_devices_end_in_one_line(url: str, command: str, device: str) -> None:
    done = cli_process("db", command, device, "--db", url, timeout=120, memory_mb=CAP_MB)
    one_line_error(done.returncode, done.stderr, device)
    assert "MemoryError" not in done.stderr
    assert count(url) == 20


def test_a_gzip_bomb_given_to_replay_stops_at_the_limit(tmp_path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    member = gzip.compress(b" " * (1 << 20), compresslevel=9)
    bomb.write_bytes(member * 2048)  # 2 MB of gzip members, 2 GiB of JSON whitespace
    done = cli_process("replay", str(bomb), "--budget", "3", timeout=120, memory_mb=CAP_MB)
    one_line_error(done.returncode, done.stderr, MAX_BYTES_ENV, "raise it")


def _export(tmp_path, n: int):
    path = tmp_path / "records.jsonl"
    write_records(path, sorted(f.many(n, prefix="lim"), key=lambda r: r.record_id))
    return path


def test_more_records_than_the_limit_are_refused_and_the_limit_can_be_raised(url, tmp_path, capsys, monkeypatch):
    path = _export(tmp_path, 12)
    monkeypatch.setenv(MAX_RECORDS_ENV, "10")
    code, _, err = cli(capsys, "db", "import", str(path), "--db", url)
    one_line_error(code, err, "more than 10 records", f"{MAX_RECORDS_ENV}=40")
    assert count(url) == 20
    monkeypatch.setenv(MAX_RECORDS_ENV, "40")
    code, out, _ = cli(capsys, "db", "import", str(path), "--db", url)
    assert code == 0 and "imported 12 new record(s)" in out


def test_more_bytes_than_the_limit_are_refused(url, tmp_path, capsys, monkeypatch) -> None:
    path = _export(tmp_path, 12)
    monkeypatch.setenv(MAX_BYTES_ENV, "2000")
    code, _, err = cli(capsys, "db", "import", str(path), "--db", url)
    one_line_error(code, err, "more than 2000 bytes", MAX_BYTES_ENV)
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    code, _, err = cli(capsys, "db", "import", str(path), "--db", url)
    one_line_error(code, err, f"{MAX_BYTES_ENV}='lots' is not a positive integer")
    assert count(url) == 20


def test_merge_from_a_database_with_more_records_than_the_limit_is_refused(url, tmp_path, capsys, monkeypatch):
    from kernelgen.db import open_db

    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    with open_db(other) as db:
        db.commit_many(f.many(8, prefix="big"))
    monkeypatch.setenv(MAX_RECORDS_ENV, "5")
    code, _, err = cli(capsys, "db", "merge", other, "--db", url)
    one_line_error(code, err, "more than 5 records", MAX_RECORDS_ENV)
    assert count(url) == 20
