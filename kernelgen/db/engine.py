"""Turn a database URL into a configured SQLAlchemy engine, and driver errors into one-line DatabaseErrors.

SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for write transactions so several processes can
write one file at once; PostgreSQL gets a short connect timeout so an unreachable server fails fast, and a
small, bounded pool: a team of tuners shares one server's ``max_connections`` (100 by default), so every
process holds at most ``MAX_CONNECTIONS`` connections to its database (``TUNING_POOL`` and ``OPTUNA_POOL``), and
a server that refuses one more is a one-line ``TooManyConnectionsError`` naming its limit and the fix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from functools import partial
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import event, exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, create_engine, make_url
from sqlalchemy.pool import StaticPool

from kernelgen.errors import DatabaseError, ReadOnlyDatabaseError, TooManyConnectionsError

CONNECT_TIMEOUT_S = 5  # fail fast on an unreachable server
# Connections to a server database, per engine and process: (pool_size: kept open between uses, max_overflow:
# opened at a peak and closed after). SQLAlchemy's default, 5 + 10 per engine, and an engine per Optuna study
# had one `kernelgen tune` hold 15-20 connections and a model's 32: five tuners filled a default server.
# The tuning database: an advisory lock held across a commit (the schema lock, or a model's whole-step check), and
# a lease's renewal from its own thread (leases hold no connection between statements: kernelgen.db.leases).
TUNING_POOL = (2, 1)
TEAM_POOL = (1, 1)  # a read-only team database: reads only
OPTUNA_POOL = (1, 1)  # Optuna's storage of the tuning database (kernelgen.tune.search): opening it takes two at once
MAX_CONNECTIONS = sum(TUNING_POOL) + sum(OPTUNA_POOL)  # what one tuner process holds to its database, at most
POOL_TIMEOUT_S = 120  # a thread waits this long for a connection another thread of the process returns
SQLITE_BUSY_TIMEOUT_MS = 60_000  # writers queue behind each other instead of failing with "locked"
_WRITE_OPTION = "kernelgen_write"
_SINGLE_READ_OPTION = "kernelgen_single_read"
_URL_EXAMPLES = "e.g. sqlite:////home/me/tuning.sqlite or postgresql+psycopg://user@host:5432/dbname"

log = logging.getLogger(__name__)

# What a server says when it has no connection slot left (PostgreSQL; the second once only reserved slots are left).
_FULL_SERVER = ("too many clients", "remaining connection slots are reserved", "too many connections")
_SERVER_LIMITS: dict[tuple[str, int], int] = {}  # (host, port) -> its max_connections, read on the first connection


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


def same_database(a: URL, b: URL) -> bool:
    """Whether two URLs name one database, however spelt: a SQLite file by relative or absolute path,
    through a symlink or a hard link; a server database by host case, default port or driver name."""
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        pa, pb = sqlite_path(a), sqlite_path(b)
        if pa is None or pb is None:
            return False  # a memory database is private to its connection
        try:
            return os.path.samefile(pa, pb)
        except OSError:  # one does not exist yet
            return os.path.realpath(pa) == os.path.realpath(pb)

    def identity(u: URL) -> tuple:
        host = (u.host or "localhost").lower()
        host = "localhost" if host in ("127.0.0.1", "::1") else host
        options = u.query.get("options", "")  # e.g. -csearch_path=team: another schema is another database
        return host, u.port or 5432, u.database, u.username, " ".join(options) if isinstance(options, tuple) else options

    return identity(a) == identity(b)


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
            uri = _read_only_uri(path, url)
            kwargs["creator"] = lambda: sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000,
                                                        check_same_thread=False)
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise DatabaseError(f"cannot create the directory of {shown(url)}: {err.strerror}; "
                                    "check the path and its permissions") from None
            _ensure_wal(path, url)
        connect_args["timeout"] = SQLITE_BUSY_TIMEOUT_MS / 1000
    elif backend == "postgresql":
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
        if read_only:  # defence in depth: the server itself refuses writes from a consumer
            given = url.query.get("options", "")
            given = " ".join(given) if isinstance(given, tuple) else given  # keep e.g. -csearch_path=team
            connect_args["options"] = f"{given} -c default_transaction_read_only=on".strip()
    if backend != "sqlite":  # a server: its connections are shared with every other process using it
        kwargs.update(pool_options(TEAM_POOL if read_only else TUNING_POOL))
    try:
        engine = create_engine(url, connect_args=connect_args, **kwargs)
    except (sa_exc.NoSuchModuleError, ModuleNotFoundError, ImportError) as err:
        raise DatabaseError(f"no SQLAlchemy driver for {shown(url)} ({err}): install the driver or use "
                            f"{_URL_EXAMPLES}") from None
    except sa_exc.ArgumentError as err:
        raise DatabaseError(f"bad database URL {shown(url)} ({err}): use {_URL_EXAMPLES}") from None
    if backend == "sqlite":
        _configure_sqlite(engine, memory=sqlite_path(url) is None, read_only=read_only)
    elif backend == "postgresql":
        event.listen(engine, "connect", partial(_remember_limit, _server(url)), once=True)
    return engine


def pool_options(bound: tuple[int, int]) -> dict[str, int]:
    """``create_engine`` arguments of a server pool of ``bound`` (pool_size, max_overflow): see ``TUNING_POOL``."""
    return {"pool_size": bound[0], "max_overflow": bound[1], "pool_timeout": POOL_TIMEOUT_S}


def _server(url: URL) -> tuple[str, int]:
    return (url.host or "localhost").lower(), url.port or 5432


def _remember_limit(server: tuple[str, int], dbapi_conn, _record) -> None:
    """Read the server's max_connections on a process's first connection to it: once every slot is taken, the
    error can still name the limit (no connection is left to ask then)."""
    if server in _SERVER_LIMITS:
        return
    try:
        cursor = dbapi_conn.cursor()
        cursor.execute("SHOW max_connections")
        _SERVER_LIMITS[server] = int(cursor.fetchone()[0])
        cursor.close()
        dbapi_conn.rollback()  # leave no transaction open: a lock's connection switches to autocommit
    except Exception:  # noqa: BLE001  (only a message is at stake)
        pass


def _is_wal(path: Path) -> bool:
    """Whether the file's header says WAL (bytes 18 and 19 are 2), read without opening it through SQLite."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"


def _ensure_wal(path: Path, url: URL) -> None:
    """Put the file in WAL mode once (persistent), under the writers' file lock so no other process is in a
    transaction: switching needs the exclusive lock, and SQLite reports "locked" at once instead of
    waiting when a reader holds the file (seen with two `kernelgen tune` racing on a fresh file)."""
    if _is_wal(path):
        return
    with _writer_queue(url):
        try:
            conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as err:
            raise DatabaseError(f"cannot open the SQLite database {shown(url)}: {err}; check the path, its "
                                "permissions and that the file is a SQLite database") from None
        try:
            for delay in (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, None):
                try:
                    conn.execute("PRAGMA journal_mode = WAL")  # readers never block the writer
                    break
                except sqlite3.OperationalError as err:
                    if delay is None or "locked" not in str(err):
                        raise DatabaseError(f"cannot set WAL mode on {shown(url)}: {err}; check that no other "
                                            "program holds the file and that it is writable") from None
                    time.sleep(delay)  # a program without our file lock holds it: retry shortly
        except sqlite3.DatabaseError as err:
            raise DatabaseError(f"cannot open the SQLite database {shown(url)}: {err}; check the path, its "
                                "permissions and that the file is a SQLite database") from None
        finally:
            conn.close()


def _read_only_uri(path: Path, url: URL) -> str:
    """The SQLite URI that reads ``path`` without ever writing it, even where nothing may be written.

    ``mode=ro`` first: SQLite never writes the database, but a WAL-mode file (kernelgen makes them) still
    needs its ``-shm`` index, which SQLite creates or maps next to the file, and the ``-wal`` holds commits
    not yet copied into the file, so this is the only mode that sees every commit and takes the owner's
    locks. In a read-only directory without a ``-shm`` that open fails; then, and only when no ``-wal``
    with content exists (everything committed is in the file itself), ``immutable=1`` reads the file alone
    with no locking and no side files. Immutable would silently miss a non-empty ``-wal`` and could read a
    page mid-write if the owner writes meanwhile, so it is never the first choice; with a non-empty
    ``-wal`` the error names what the owner can do.
    """
    base = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro"
    error = _probe(base)
    if error is None:
        return base
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise DatabaseError(f"cannot read {shown(url)} read-only ({error}): its -wal file holds commits that "
                            "need a writable -shm next to it; ask its owner to run `sqlite3 FILE "
                            "'PRAGMA wal_checkpoint(TRUNCATE)'` or give write access to its directory")
    immutable = f"{base}&immutable=1"
    error = _probe(immutable)
    if error is not None:
        raise DatabaseError(f"cannot open the SQLite database {shown(url)} read-only: {error}; check the path, "
                            "its permissions and that the file is a SQLite database")
    return immutable


def _probe(uri: str) -> str | None:
    """None when ``uri`` opens and its schema can be read, else SQLite's message."""
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as err:
        return str(err)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return None
    except sqlite3.Error as err:
        return str(err)
    finally:
        conn.close()


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
            # The journal mode is set once per file by _ensure_wal (it is persistent); changing it here, on
            # every connection, raced other processes' open transactions ("database is locked").
            cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: crash-safe, fsync at checkpoints
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front, so two writers never deadlock upgrading read locks.
        options = conn.get_execution_options()
        if options.get(_SINGLE_READ_OPTION):
            return  # one SELECT is atomic on its own: skip the BEGIN/COMMIT round trips
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE_OPTION) else "BEGIN")


def serialise_sqlite(engine: Engine) -> None:
    """Make another library's SQLite engine (Optuna's) safe for several processes, as ours is: every
    transaction begins IMMEDIATE and waits up to the busy timeout for the lock.

    Optuna hands a waiting trial out by reading its state and then updating it; with SQLite's default
    deferred transactions two processes both read WAITING and both take the trial (one config measured
    twice, then ``UpdateFinishedTrialError``). Under IMMEDIATE the read and the update are one atomic step.
    PostgreSQL needs nothing: Optuna reads that row with ``SELECT ... FOR UPDATE``.
    """
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # the "begin" hook below emits BEGIN itself
        dbapi_conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections pooled before the hooks existed are closed, so every later one has them


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
    except (sa_exc.DBAPIError, sa_exc.TimeoutError) as err:
        raise translate(err, url) from None


@contextlib.contextmanager
def _writer_queue(url: URL | None) -> Iterator[None]:
    """Queue SQLite writers on an OS file lock next to the database.

    SQLite's busy handler polls with sleeps of up to 100 ms, so eight waiting writers leave the lock idle
    most of the time; a blocking ``flock`` wakes the next writer as soon as the previous one is done.
    The busy timeout stays as the fallback (other programs, platforms without ``fcntl``).
    """
    path = sqlite_path(url) if url is not None else None
    if path is None:
        yield
        return
    # Waited for no longer than SQLite's busy timeout: a holder stopped mid-write (SIGSTOP, a debugger; its lease
    # renewal thread writes every fraction of a period) keeps its flock for as long as it is stopped, and every
    # other writer would wait for ever, silently. After the timeout the write goes on unqueued, and SQLite's own
    # lock decides: free (the holder was stopped between its flock and its BEGIN), or "database is locked" after
    # the busy timeout, one line naming the file. (In a read-only directory there is no queue: SQLite's own locking
    # still applies.)
    timeout = SQLITE_BUSY_TIMEOUT_MS / 1000
    with flock_file(f"{path}-lock", 0o644, timeout_s=timeout) as queued:
        if not queued:
            log.warning("kernelgen: another process has held the write queue of %s for %.0f s (stopped or stuck?); "
                        "writing without it", path, timeout)
        yield


@contextlib.contextmanager
def flock_file(path: str, mode: int, wait: bool = True, timeout_s: float | None = None) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created with ``mode`` if missing) for the with-block; the lock
    goes with the process if it dies. Without ``fcntl``, or where the file cannot be opened (a read-only
    location), the block runs unlocked: the callers' own re-checks and SQLite's locking remain. Yields whether
    the lock is held: with ``wait=False`` a lock another process holds is not waited for (False), with
    ``timeout_s`` it is waited for that long at most (then False)."""
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
        except OSError:
            fd = None
    if fd is None:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait and timeout_s is None else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not (wait and _flock_within(fd, timeout_s)):
                yield False
                return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def _flock_within(fd: int, timeout_s: float | None) -> bool:
    """Poll for the flock on ``fd`` until ``timeout_s`` passes (a blocking flock cannot time out). The pauses grow
    from 0.5 ms to 5 ms: a write holds the lock for milliseconds, so a waiter takes it soon after it is free (the
    100 ms sleeps of SQLite's own busy handler are what the queue replaced)."""
    deadline = time.monotonic() + (timeout_s or 0.0)
    pause = 0.0005
    while time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(2 * pause, 0.005)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            continue
    return False


def translate(err: "sa_exc.DBAPIError | sa_exc.TimeoutError", url: URL) -> DatabaseError:
    """A one-line DatabaseError for a driver error (or a pool with no free connection), naming the URL and what
    to check."""
    if isinstance(err, sa_exc.TimeoutError):  # every connection of the bounded pool stayed busy
        return DatabaseError(f"no connection to {shown(url)} came free in this process for {POOL_TIMEOUT_S} s "
                             f"(it holds at most {MAX_CONNECTIONS}): another thread holds them; retry, and report it "
                             "if it repeats")
    detail = str(getattr(err, "orig", None) or err).strip().splitlines()
    first = detail[0] if detail else type(err).__name__
    for line in detail[1:]:  # psycopg puts the useful part ("Connection refused") on a later line
        if line.strip() and not line.startswith(("(Background", "[SQL")):
            first = f"{first} {line.strip()}"
            break
    text = first.lower()
    where = shown(url)
    said = next((line for line in detail if any(marker in line.lower() for marker in _FULL_SERVER)), None)
    if said is not None:  # the server's own words, without the driver's preamble
        return _full_server(url, said.rsplit("FATAL:", 1)[-1])
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


def _full_server(url: URL, said: str) -> TooManyConnectionsError:
    limit = _SERVER_LIMITS.get(_server(url))
    limit_text = f"max_connections = {limit}" if limit is not None else "max_connections (`SHOW max_connections`)"
    return TooManyConnectionsError(
        f"the database server of {shown(url)} has no connection left ({said.strip()}): every slot of its "
        f"{limit_text} is taken. Each kernelgen process holds at most {MAX_CONNECTIONS} connections to it: raise "
        "max_connections in the server's postgresql.conf (and restart it), or run fewer tuners at once, then "
        "rerun; nothing was judged by this failure")


def database_error(exc: BaseException, url: URL) -> DatabaseError | None:
    """The one-line DatabaseError for a driver error raised inside another library (Optuna, which wraps some in
    its own exceptions), found in ``exc`` or its causes; None when ``exc`` is not the database's."""
    seen: BaseException | None = exc
    visited: set[int] = set()  # a chain of causes set by hand may loop
    while seen is not None and id(seen) not in visited:
        if isinstance(seen, (sa_exc.DBAPIError, sa_exc.TimeoutError)):
            return translate(seen, url)
        visited.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    return None
