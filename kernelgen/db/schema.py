"""Schema versions of the tuning database: check on open, create a fresh one at head, upgrade on request.

Alembic runs programmatically (no alembic.ini) with its own version table, so Optuna's tables and its
``alembic_version`` can share the database. An older schema is refused with the upgrade command; a newer
one is refused and never modified.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection, Engine

from kernelgen.db.engine import shown, transaction
from kernelgen.db.models import RECORDS_TABLE, VERSION_TABLE
from kernelgen.errors import DatabaseError, SchemaVersionError

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_PG_LOCK_KEY = 0x6B65726E656C  # advisory lock serialising schema changes across processes ("kernel")


def alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


@functools.lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    return _scripts().get_current_head()


def known_revisions() -> tuple[str, ...]:
    """Every revision this kernelgen knows, oldest first."""
    return tuple(reversed([s.revision for s in _scripts().walk_revisions()]))


def schema_number(revision: str | None) -> str:
    """How a revision is shown to users: ``"0002"`` -> ``"2"``."""
    if revision is None:
        return "none"
    return str(int(revision)) if revision.isdigit() else revision


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _lock(conn: Connection) -> None:
    # SQLite: the write transaction (BEGIN IMMEDIATE) is already the lock.
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})


def _migrate(conn: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def _state(conn: Connection) -> tuple[str | None, bool]:
    """(current revision, whether a records table exists)."""
    return current_revision(conn), inspect(conn).has_table(RECORDS_TABLE)


def _check(revision: str | None, has_table: bool, url: URL) -> None:
    """Raise unless ``revision`` is this kernelgen's head; ``None`` without a table is left to the caller."""
    head = head_revision()
    where = shown(url)
    if revision == head:
        return
    if revision is None:
        if has_table:
            raise DatabaseError(f"{where} has a {RECORDS_TABLE} table but no {VERSION_TABLE}: it was not made "
                                "by kernelgen; use another database URL")
        return
    if revision in known_revisions():
        raise SchemaVersionError(f"database at {where} has schema {schema_number(revision)}, this kernelgen needs "
                                 f"{schema_number(head)}: run `kernelgen db upgrade --db {where}`")
    raise SchemaVersionError(f"database at {where} has schema {schema_number(revision)}, newer than this kernelgen "
                             f"(schema {schema_number(head)}): upgrade kernelgen (pip install -U kernelgen); "
                             "the database was not modified")


def ensure_schema(engine: Engine, url: URL, *, read_only: bool) -> None:
    """Check the schema on open; create it at head in a fresh database (never in a read-only one)."""
    with transaction(engine, url, write=False, read_only=read_only) as conn:
        revision, has_table = _state(conn)
    _check(revision, has_table, url)
    if revision is not None:
        return
    if read_only:
        raise DatabaseError(f"{shown(url)} holds no kernelgen tuning database: its owner can create one with "
                            f"`kernelgen db upgrade --db {shown(url)}`")
    with transaction(engine, url, write=True, read_only=False) as conn:
        _lock(conn)
        revision, has_table = _state(conn)  # another process may have created it meanwhile
        _check(revision, has_table, url)
        if revision is None:
            _migrate(conn, "head")


def upgrade(engine: Engine, url: URL, revision: str = "head") -> tuple[str | None, str]:
    """Migrate to ``revision`` (default: head); returns (schema before, schema after). Refuses newer schemas."""
    with transaction(engine, url, write=True, read_only=False) as conn:
        _lock(conn)
        before, has_table = _state(conn)
        if before is not None and before not in known_revisions():
            _check(before, has_table, url)  # raises: newer than this kernelgen
        if before is None and has_table:
            _check(before, has_table, url)  # raises: not ours
        _migrate(conn, revision)
        after = current_revision(conn)
    return before, after or "none"
