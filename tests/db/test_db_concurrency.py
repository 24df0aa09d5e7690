"""Several processes writing one database at once, and a writer killed mid-write."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from kernelgen.db import engine, open_db
from tests.db import factories, writer

WRITERS, COMMITS = 8, 200


def _run_writers(url: str, workers: list[int], count: int = COMMITS) -> list[int]:
    """Run one writer process per entry of ``workers`` (its record set); returns what each added."""
    ctx = writer.context()
    barrier, results = ctx.Barrier(len(workers)), ctx.Queue()
    procs = [ctx.Process(target=writer.write, args=(url, w, count, 1, barrier, results)) for w in workers]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=300) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [err for _, _, err in outcomes if err] == []
    assert all(p.exitcode == 0 for p in procs)
    return [added for _, added, _ in outcomes]


def test_identical_records_racing_are_stored_once(persistent_url: str) -> None:
    added = _run_writers(persistent_url, [7, 7, 7, 7], count=100)  # four writers, the same 100 records
    assert sum(added) == 100
    with open_db(persistent_url, team_url="") as db:
        assert db.count() == 100


def test_eight_writers_on_one_sqlite_file(sqlite_url: str) -> None:
    assert _run_writers(sqlite_url, list(range(WRITERS))) == [COMMITS] * WRITERS  # the file does not exist yet: the writers also race to create the schema
    with open_db(sqlite_url, team_url="") as db:
        assert db.count() == WRITERS * COMMITS


@pytest.mark.postgres
def test_eight_writers_on_postgresql(pg_url: str) -> None:
    assert _run_writers(pg_url, list(range(WRITERS))) == [COMMITS] * WRITERS
    with open_db(pg_url, team_url="") as db:
        assert db.count() == WRITERS * COMMITS


def test_sigkilled_writer_leaves_a_sound_sqlite_file(sqlite_url: str) -> None:
    batch = 40
    path = sqlite_url.removeprefix("sqlite:///")
    ctx = writer.context()
    for round_ in range(3):
        barrier, results = ctx.Barrier(1), ctx.Queue()
        proc = ctx.Process(target=writer.write, args=(sqlite_url, round_, 0, batch, barrier, results))
        proc.start()
        try:
            deadline = time.monotonic() + 60
            with open_db(sqlite_url, team_url="") as db:
                start = db.count()
                while db.count() < start + 3 * batch and time.monotonic() < deadline and proc.is_alive():
                    time.sleep(0.01)
            time.sleep(0.007 * (round_ + 1))  # land the kill at different points of a transaction
        finally:
            proc.kill()
            proc.join()
        assert proc.exitcode == -signal.SIGKILL
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        with open_db(sqlite_url, team_url="") as db:
            count = db.count()
            assert count >= 3 * batch and count % batch == 0  # whole transactions only
            assert len(list(db.records())) == count


def test_one_instance_shared_by_threads(persistent_url: str) -> None:
    import threading

    db = open_db(persistent_url, team_url="")
    errors: list[str] = []

    def work(thread: int) -> None:
        try:
            for i in range(50):
                db.commit(factories.record(seed=i, config={"thread": thread, "i": i}))
                db.best(factories.record().workload_key, factories.TARGET)
        except Exception as err:  # collected: an assertion in a thread would be lost
            errors.append(repr(err))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert db.count() == 200
    db.close()


def test_a_writer_stopped_holding_the_write_queue_delays_others_by_the_busy_timeout_only(sqlite_url: str, monkeypatch,
                                                                                          caplog) -> None:
    """A process stopped (SIGSTOP) while it held the SQLite write queue's flock, between its writes: another
    writer waits the busy timeout at most, says so, and writes (before, it waited for as long as the holder was
    stopped: for ever, silently)."""
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 500)
    lock = sqlite_url.removeprefix("sqlite:///") + "-lock"
    open_db(sqlite_url, team_url="").close()  # the file and its directory
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, time\n"
                               f"fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT, 0o644)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGSTOP)
        with open_db(sqlite_url, team_url="") as db:
            t0 = time.monotonic()
            db.commit(factories.record(seed=1))
            waited = time.monotonic() - t0
            assert db.count() == 1
    finally:
        holder.kill()
        holder.wait()
    assert 0.5 <= waited < 30, waited
    assert "held the write queue" in caplog.text and "stopped or stuck" in caplog.text
