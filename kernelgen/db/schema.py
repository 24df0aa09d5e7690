"""Schema versions of the tuning database: check on open, create a fresh one at head, upgrade on request.

Alembic runs programmatically (no alembic.ini) with its own version table, so Optuna's tables and its
``alembic_version`` can share the database. An older schema is refused with the upgrade command; a newer
one is refused and never modified.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import column, inspect, select, table, text
from sqlalchemy.engine import URL, Connection, Engine

from kernelgen.db.engine import shown, transaction
from kernelgen.db.locks import PG_SCHEMA_KEY
from kernelgen.db.models import RECORDS_TABLE, VERSION_TABLE
from kernelgen.errors import DatabaseError, SchemaVersionError

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Every migration under migrations/versions, oldest first (a test checks this against alembic). Kept as
# data so opening a database reads one row and never imports alembic unless it has to migrate.
REVISIONS = ("0001", "0002", "0003", "0004")


def alembic_config():
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    return REVISIONS[-1]


def known_revisions() -> tuple[str, ...]:
    """Every revision this kernelgen knows, oldest first."""
    return REVISIONS


def schema_number(revision: str | None) -> str:
    """How a revision is shown to users: ``"0002"`` -> ``"2"``."""
    if revision is None:
        return "none"
    return str(int(revision)) if revision.isdigit() else revision


def current_revision(conn: Connection) -> str | None:
    """The revision in the version table, or None when there is none (a fresh database)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    versions = conn.execute(select(column("version_num")).select_from(table(VERSION_TABLE))).scalars().all()
    if len(versions) > 1:
        raise DatabaseError(f"{VERSION_TABLE} holds several revisions {sorted(versions)}: the schema was branched "
                            "by hand; restore it from a backup or an export")
    return versions[0] if versions else None


def _lock(conn: Connection) -> None:
    # SQLite: the write transaction (BEGIN IMMEDIATE) is already the lock.
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SCHEMA_KEY})


def _migrate(conn: Connection, revision: str) -> None:
    from alembic import command

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
