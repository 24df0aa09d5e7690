"""Turn a database URL into a configured SQLAlchemy engine, and driver errors into one-line DatabaseErrors.

SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for write transactions so several processes can
write one file at once; PostgreSQL gets a short connect timeout so an unreachable server fails fast.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import event, exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.pool import StaticPool

from kernelgen.errors import DatabaseError, ReadOnlyDatabaseError

CONNECT_TIMEOUT_S = 5  # fail fast on an unreachable server
SQLITE_BUSY_TIMEOUT_MS = 60_000  # writers queue behind each other instead of failing with "locked"
_WRITE_OPTION = "kernelgen_write"
_SINGLE_READ_OPTION = "kernelgen_single_read"
_URL_EXAMPLES = "e.g. sqlite:////home/me/tuning.sqlite or postgresql+psycopg://user@host:5432/dbname"


def _mask(raw: str) -> str:
    """Hide the password of a URL that did not even parse."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", raw)


def parse_url(url: str) -> URL:
    """Parse and normalise a SQLAlchemy URL; ``postgresql://`` means the psycopg (3) driver."""
    if not isinstance(url, str) or "://" not in url:
        raise DatabaseError(f"{_mask(str(url))!r} is not a database URL: use a SQLAlchemy URL, {_URL_EXAMPLES}")
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError) as err:
        raise DatabaseError(f"{_mask(url)!r} is not a valid database URL ({_mask(str(err))}): "
                            f"use {_URL_EXAMPLES}") from None
    if parsed.get_backend_name() == "sqlite" and parsed.query:
        raise DatabaseError(f"SQLite URL options {sorted(parsed.query)} in {shown(parsed)} are not supported: use "
                            "sqlite:///path/to/file.sqlite (for read-only use pass it as --team-db)")
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown(url: URL) -> str:
    """The URL as it may appear in messages and logs: password hidden."""
    return url.render_as_string(hide_password=True)


def is_sqlite_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or is_sqlite_memory(url):
        return None
    database = url.database or ""
    if database.startswith("file:"):  # URI form: sqlite:///file:path?mode=ro&uri=true
        database = database[5:].split("?", 1)[0]
    return Path(os.path.expanduser(database))


def make_engine(url: URL, *, read_only: bool) -> Engine:
    """A configured engine for ``url``; raises DatabaseError for an unknown dialect or a missing file."""
    backend = url.get_backend_name()
    kwargs: dict = {}
    connect_args: dict = {}
    if backend == "sqlite":
        path = sqlite_path(url)
        if path is None:
            kwargs["poolclass"] = StaticPool  # one shared connection, else each checkout is a new empty DB
            connect_args["check_same_thread"] = False
        elif read_only:
            if not path.exists():
                raise DatabaseError(f"no tuning database at {path} (opened read-only): check the path or "
                                    f"create it with `kernelgen db upgrade --db {shown(url)}`")
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise DatabaseError(f"cannot create the directory of {shown(url)}: {err.strerror}; "
                                    "check the path and its permissions") from None
        connect_args["timeout"] = SQLITE_BUSY_TIMEOUT_MS / 1000
    elif backend == "postgresql":
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if read_only:  # defence in depth: the server itself refuses writes from a consumer
            given = url.query.get("options", "")
            given = " ".join(given) if isinstance(given, tuple) else given  # keep e.g. -csearch_path=team
            connect_args["options"] = f"{given} -c default_transaction_read_only=on".strip()
    try:
        engine = create_engine(url, connect_args=connect_args, **kwargs)
    except (sa_exc.NoSuchModuleError, ModuleNotFoundError, ImportError) as err:
        raise DatabaseError(f"no SQLAlchemy driver for {shown(url)} ({err}): install the driver or use "
                            f"{_URL_EXAMPLES}") from None
    except sa_exc.ArgumentError as err:
        raise DatabaseError(f"bad database URL {shown(url)} ({err}): use {_URL_EXAMPLES}") from None
    if backend == "sqlite":
        _configure_sqlite(engine, memory=sqlite_path(url) is None, read_only=read_only)
    return engine


def _configure_sqlite(engine: Engine, *, memory: bool, read_only: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        # Take transaction control from the sqlite3 module; the "begin" hook below emits BEGIN itself.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if read_only:
            cursor.execute("PRAGMA query_only = ON")
        elif not memory:
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")  # persistent: readers never block the writer
            cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: crash-safe, fsync at checkpoints
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front, so two writers never deadlock upgrading read locks.
        options = conn.get_execution_options()
        if options.get(_SINGLE_READ_OPTION):
            return  # one SELECT is atomic on its own: skip the BEGIN/COMMIT round trips
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE_OPTION) else "BEGIN")


@contextlib.contextmanager
def transaction(engine: Engine, url: URL, *, write: bool, read_only: bool,
                single_read: bool = False) -> Iterator[Connection]:
    """The one place every transaction comes from: commit on success, roll back on any error.

    Driver errors become DatabaseError naming the (password-less) URL; a write on a read-only database
    raises ReadOnlyDatabaseError before touching it.
    """
    if write and read_only:
        raise ReadOnlyDatabaseError(f"{shown(url)} is opened read-only (a team database): write to your "
                                    "local database instead (--db / KERNELGEN_DB)")
    try:
        with _writer_queue(url if write else None), engine.connect() as conn:
            if write:
                conn.execution_options(**{_WRITE_OPTION: True})
            elif single_read:
                # One SELECT needs no transaction: skip the BEGIN/COMMIT round trips (SQLite: in _on_begin).
                if conn.dialect.name == "postgresql":
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.execution_options(**{_SINGLE_READ_OPTION: True})
            with conn.begin():
                yield conn
    except sa_exc.DBAPIError as err:
        raise translate(err, url) from None


@contextlib.contextmanager
def _writer_queue(url: URL | None) -> Iterator[None]:
    """Queue SQLite writers on an OS file lock next to the database.

    SQLite's busy handler polls with sleeps of up to 100 ms, so eight waiting writers leave the lock idle
    most of the time; a blocking ``flock`` wakes the next writer as soon as the previous one is done.
    The busy timeout stays as the fallback (other programs, platforms without ``fcntl``).
    """
    path = sqlite_path(url) if url is not None else None
    fd = None
    if path is not None and fcntl is not None:
        try:
            fd = os.open(f"{path}-lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # e.g. a read-only directory: SQLite's own locking still applies
            fd = None
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def translate(err: sa_exc.DBAPIError, url: URL) -> DatabaseError:
    """A one-line DatabaseError for a driver error, naming the URL and what to check."""
    detail = str(getattr(err, "orig", None) or err).strip().splitlines()
    first = detail[0] if detail else type(err).__name__
    for line in detail[1:]:  # psycopg puts the useful part ("Connection refused") on a later line
        if line.strip() and not line.startswith(("(Background", "[SQL")):
            first = f"{first} {line.strip()}"
            break
    text = first.lower()
    where = shown(url)
    if "read-only" in text or "readonly" in text or "query_only" in text:
        return ReadOnlyDatabaseError(f"{where} refused a write ({first}): it is read-only; write to your "
                                     "local database instead")
    if isinstance(err, sa_exc.OperationalError) and url.get_backend_name() == "postgresql":
        return DatabaseError(f"cannot use the PostgreSQL database {where}: {first}; check the host, port, "
                             "user, password and that the server is running and reachable")
    if "unable to open" in text or "not a database" in text:
        return DatabaseError(f"cannot open the SQLite database {where}: {first}; check the path, its "
                             "permissions and that the file is a SQLite database")
    if "locked" in text or "busy" in text:
        return DatabaseError(f"{where} stayed locked for {SQLITE_BUSY_TIMEOUT_MS // 1000} s ({first}): "
                             "another process holds a long write; retry when it is done")
    return DatabaseError(f"database error on {where}: {first}")
