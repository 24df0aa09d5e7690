"""Named exclusive locks shared by every process, on one host or several, that uses one tuning database.

Schema creation (kernelgen's and Optuna's tables) and the confirmation that ends in a verdict must run in
one process at a time. The lock lives where the database does, so it covers every process that can reach
the database, and the operating system or the server releases it when its holder dies (no stale claims):

- PostgreSQL: a session-level advisory lock on a connection held for the duration (every host).
- SQLite: ``flock`` on a file in ``<database>-locks/`` next to the database (every process of the hosts
  that share the file; SQLite itself needs a local file system). Where that directory cannot be
  created (a read-only directory) nothing can write the database either, so no lock is needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import URL, Engine

from kernelgen.db.engine import flock_file, make_engine, parse_url, sqlite_path, translate

# One bigint key for schema changes; kernelgen.db.schema takes the same key per transaction, so alembic
# migrations and Optuna's table creation exclude each other.
SCHEMA_LOCK = "schema"
PG_SCHEMA_KEY = 0x6B65726E656C


def _pg_key(name: str) -> int:
    if name == SCHEMA_LOCK:
        return PG_SCHEMA_KEY
    # Any other name: a signed 64-bit key from its digest (a collision only serialises two unrelated names).
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def named_lock(url: "URL | str", name: str, engine: Engine | None = None, wait: bool = True) -> Iterator[bool]:
    """Hold the lock ``name`` of the database at ``url`` for the ``with`` block (blocks until it is free).

    ``engine`` (optional) is reused for PostgreSQL; otherwise a short-lived one is made. Not re-entrant:
    a process taking a lock it already holds waits forever. Yields whether the lock is held: with
    ``wait=False`` a lock held elsewhere is not waited for, and the block runs with False (a claim that
    another process has the work).
    """
    parsed = parse_url(url) if isinstance(url, str) else url
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        with _pg_lock(parsed, _pg_key(name), engine, wait) as held:
            yield held
    elif backend == "sqlite":
        with _file_lock(parsed, name, wait) as held:
            yield held
    else:  # other dialects: the re-checks made under the lock still hold, only without exclusion
        yield True


@contextlib.contextmanager
def _pg_lock(url: URL, key: int, engine: Engine | None, wait: bool = True) -> Iterator[bool]:
    own = engine is None
    if own:
        engine = make_engine(url, read_only=False)
    try:
        try:
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if wait:
                conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": key})
            elif not conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar():
                conn.close()
                yield False
                return
        except sa_exc.DBAPIError as err:
            raise translate(err, url) from None
        try:
            yield True
        finally:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            except sa_exc.DBAPIError:
                pass  # the connection is gone: the server released the lock with it
            conn.close()
    finally:
        if own:
            engine.dispose()


def lock_dir(url: URL) -> str | None:
    path = sqlite_path(url)
    return None if path is None else f"{path}-locks"


@contextlib.contextmanager
def _file_lock(url: URL, name: str, wait: bool = True) -> Iterator[bool]:
    folder = lock_dir(url)
    path = None
    if folder is not None:
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, hashlib.sha256(name.encode()).hexdigest()[:16])
        except OSError:
            path = None  # read-only location: nothing can write this database, so nothing to exclude
    if path is None:
        yield True
        return
    with flock_file(path, 0o666, wait) as held:
        yield held


__all__ = ["SCHEMA_LOCK", "named_lock"]
