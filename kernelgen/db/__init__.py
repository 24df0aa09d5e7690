"""The tuning database: every measured trial, any SQLAlchemy URL, optionally layered over a team database.

``open_db()`` is the entry point; ``TuningDB`` is one database, ``LayeredDB`` a local one over a
read-only team one. ``upgrade_db()`` migrates an older schema (``kernelgen db upgrade``).
"""

from __future__ import annotations

import os

from kernelgen.db.engine import make_engine, parse_url, same_database, shown
from kernelgen.db.jsonl import FORMAT as EXPORT_FORMAT
from kernelgen.db.jsonl import VERSION as EXPORT_VERSION
from kernelgen.db.layered import LayeredDB
from kernelgen.db.schema import schema_number, upgrade
from kernelgen.db.store import TuningDB
from kernelgen.errors import DatabaseError
from kernelgen.paths import default_db_url

TEAM_DB_ENV = "KERNELGEN_TEAM_DB"

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "LayeredDB", "TEAM_DB_ENV", "TuningDB", "open_db", "open_local", "upgrade_db"]


def open_db(url: str | None = None, *, team_url: str | None = None, read_only: bool = False) -> "TuningDB | LayeredDB":
    """Open the tuning database at ``url`` (default: ``KERNELGEN_DB`` or the per-user SQLite file, created on
    first use), layered over the read-only team database ``team_url`` (default: ``KERNELGEN_TEAM_DB`` if set).
    Raises DatabaseError when both name one database, however spelt (the writes would land in the team's).
    """
    if team_url is None:
        team_url = os.environ.get(TEAM_DB_ENV) or None
    if team_url:
        _refuse_same(url, team_url)
    local = TuningDB(url, read_only=read_only)
    if not team_url:
        return local
    try:
        team = TuningDB(team_url, read_only=True)
    except BaseException:
        local.close()
        raise
    return LayeredDB(local, team)


def open_local(url: str | None = None) -> TuningDB:
    """The local database alone, for writes that never involve the team layer (import, merge, prune); refuses
    the team database ``KERNELGEN_TEAM_DB`` however spelt, as ``open_db`` does: a consumer's writes must not
    land in it."""
    team_url = os.environ.get(TEAM_DB_ENV) or None
    if team_url:
        _refuse_same(url, team_url)
    return TuningDB(url)


def _refuse_same(url: str | None, team_url: str) -> None:
    """A team database is read-only; layered over itself, a consumer's writes would land in it."""
    local = parse_url(url if url is not None else default_db_url())
    team = parse_url(team_url)
    if same_database(local, team):
        raise DatabaseError(f"the local database {shown(local)} and the team database {shown(team)} are the same "
                            "database: pass another --db (or KERNELGEN_DB) for your own records, or drop "
                            f"--team-db (or unset {TEAM_DB_ENV})")


def upgrade_db(url: str | None = None) -> tuple[str, str]:
    """Migrate the database at ``url`` to this kernelgen's schema; returns (schema before, schema after).

    Creates the schema in an empty database; refuses (SchemaVersionError) a schema newer than this kernelgen.
    """
    parsed = parse_url(url if url is not None else default_db_url())
    engine = make_engine(parsed, read_only=False)
    try:
        before, after = upgrade(engine, parsed)
    finally:
        engine.dispose()
    return schema_number(before), schema_number(after)
