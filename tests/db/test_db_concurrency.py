"""Several processes writing one database at once, and a writer killed mid-write."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelgen.db import open_db

ROOT = Path(__file__).resolve().parents[2]
WRITERS, COMMITS = 8, 200


def _spawn(url: str, worker: int, count: int, batch: int = 1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.db.writer", url, str(worker), str(count), str(batch)],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_writers(url: str) -> None:
    procs = [_spawn(url, w, COMMITS) for w in range(WRITERS)]
    try:
        # Every writer opens the (possibly fresh) database before any starts writing.
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert "locked" not in err
        assert out.strip() == f"done {COMMITS}"


def test_eight_writers_on_one_sqlite_file(sqlite_url: str) -> None:
    _run_writers(sqlite_url)  # the file does not exist yet: the writers also race to create the schema
    with open_db(sqlite_url, team_url="") as db:
        assert db.count() == WRITERS * COMMITS


@pytest.mark.postgres
def test_eight_writers_on_postgresql(pg_url: str) -> None:
    _run_writers(pg_url)
    with open_db(pg_url, team_url="") as db:
        assert db.count() == WRITERS * COMMITS


def test_sigkilled_writer_leaves_a_sound_sqlite_file(sqlite_url: str) -> None:
    batch = 40
    path = sqlite_url.removeprefix("sqlite:///")
    for round_ in range(3):
        proc = _spawn(sqlite_url, round_, 0, batch)
        try:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 60
            with open_db(sqlite_url, team_url="") as db:
                start = db.count()
                while db.count() < start + 3 * batch and time.monotonic() < deadline:
                    time.sleep(0.02)
            time.sleep(0.013 * (round_ + 1))  # land the kill at different points of a transaction
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        with open_db(sqlite_url, team_url="") as db:
            count = db.count()
            assert count > 0 and count % batch == 0  # whole transactions only
            assert len(list(db.records())) == count
