"""Named leases in the tuning database: a claim on a piece of work that lapses unless its holder renews it.

An OS lock (``kernelgen.db.locks``) lives as long as its holder's process or server session, so a holder that is
stopped (SIGSTOP, a hung host) keeps it for ever and every process that needs the work waits for ever. A lease
is a row of ``kernelgen_leases``: the work's name, a holder (random per lease taken), the holder's process as it
described itself (``owner``, JSON) and an expiry on the database's clock, one clock for every host sharing the
database. Whoever renews, takes over or releases does it with one conditional statement, the compare-and-set:

- renew: ``UPDATE ... SET expires_at = now + period WHERE key = :key AND holder = :me`` (no row: the lease was
  taken over, and the holder must stop working on it);
- take over: ``UPDATE ... SET holder = :me ... WHERE key = :key AND holder = :seen AND expires_at = :seen_expiry``
  once ``:seen_expiry`` has passed (no row: someone renewed or took it meanwhile);
- release: ``DELETE ... WHERE key = :key AND holder = :me``.

PostgreSQL re-evaluates an UPDATE's condition on the row version it waited for, and SQLite runs one writer at a
time, so on both exactly one of two racing takers gets the row. An expiry that is not a number, or further ahead
than ``MAX_PERIOD_S`` (no holder writes that), is a hand-edited row: it counts as lapsed, never as held for ever.
The rules of when to renew and what a holder does on losing its lease are the tuner's (``kernelgen.tune.claims``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from kernelgen.db.models import LeaseRow

L = LeaseRow.__table__
MAX_PERIOD_S = 3600.0  # the longest period a holder may ask for; an expiry beyond now + this is not a holder's
# The database's own clock in seconds since the epoch, per dialect; others use this process's clock.
_NOW_SQL = {
    "postgresql": "SELECT extract(epoch from clock_timestamp())",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}


@dataclass(frozen=True)
class LeaseState:
    """What an attempt to take a lease found: whether it is ours now, who holds it (its owner JSON, parsed; {}
    when unreadable), the holder it was taken over from (None unless a lapsed lease changed hands), and the
    seconds left before it lapses."""

    held: bool
    owner: dict[str, Any]
    previous: dict[str, Any] | None = None
    left_s: float = 0.0


def lease_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def db_now(conn: Connection) -> float:
    sql = _NOW_SQL.get(conn.dialect.name)
    return time.time() if sql is None else float(conn.exec_driver_sql(sql).scalar())


def _owner(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def _left(expires_at: Any, now: float) -> float:
    """Seconds before a lease lapses; 0 for an expiry no holder could have written (a hand-edited row)."""
    if isinstance(expires_at, bool) or not isinstance(expires_at, (int, float)) or not math.isfinite(expires_at):
        return 0.0
    left = expires_at - now
    return left if 0 < left <= MAX_PERIOD_S else 0.0


def peek(conn: Connection, name: str) -> LeaseState | None:
    """The lease on ``name`` as it stands (None: nobody holds it); ``held`` is False. A read only: callers that
    see a live holder need not take the write lock."""
    row = conn.execute(select(L.c.owner, L.c.expires_at).where(L.c.key == lease_key(name))).first()
    return None if row is None else LeaseState(False, _owner(row.owner), left_s=_left(row.expires_at, db_now(conn)))


def acquire(conn: Connection, name: str, holder: str, owner: dict[str, Any], period: float) -> LeaseState:
    """Take the lease on ``name`` for ``period`` seconds when nobody holds it or its holder let it lapse; run in a
    write transaction."""
    key, now = lease_key(name), db_now(conn)
    mine = {"holder": holder, "owner": json.dumps(owner), "expires_at": now + period, "acquired_at": now}
    row = conn.execute(select(L.c.holder, L.c.owner, L.c.expires_at).where(L.c.key == key)).first()
    if row is None:
        try:
            with conn.begin_nested():  # another taker may insert first: then its row is read below
                conn.execute(insert(L).values(key=key, name=name, **mine))
            return LeaseState(True, owner, None, period)
        except sa_exc.IntegrityError:
            row = conn.execute(select(L.c.holder, L.c.owner, L.c.expires_at).where(L.c.key == key)).first()
            if row is None:
                return LeaseState(False, {}, None, 0.0)
    left = _left(row.expires_at, now)
    if left > 0:
        return LeaseState(False, _owner(row.owner), None, left)
    taken = conn.execute(update(L).where(L.c.key == key, L.c.holder == row.holder, L.c.expires_at == row.expires_at)
                         .values(name=name, **mine)).rowcount
    if taken != 1:
        return LeaseState(False, {}, None, 0.0)  # renewed or taken by someone else meanwhile
    return LeaseState(True, owner, _owner(row.owner), period)


def renew(conn: Connection, name: str, holder: str, period: float) -> bool:
    """Extend ``holder``'s lease on ``name`` by ``period`` seconds from now; False when it is not theirs any more."""
    stmt = update(L).where(L.c.key == lease_key(name), L.c.holder == holder).values(expires_at=db_now(conn) + period)
    return conn.execute(stmt).rowcount == 1


def release(conn: Connection, name: str, holder: str) -> None:
    """Give the lease up, if it is still ``holder``'s (a lease taken over is the taker's to release)."""
    conn.execute(delete(L).where(L.c.key == lease_key(name), L.c.holder == holder))


__all__ = ["LeaseState", "MAX_PERIOD_S", "acquire", "db_now", "lease_key", "peek", "release", "renew"]
