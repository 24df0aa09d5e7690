"""The limits every supported database enforces on a record, checked before anything is written.

SQLite stores almost anything: a 100,000-character workload key in a ``VARCHAR(128)``, a NUL inside text,
NaN (as NULL). PostgreSQL refuses each of them, and one such record then fails a whole merge into a team
server. So a record is held to the strictest of the databases kernelgen supports, derived from the model's
column types (lengths, integer widths), before any write to any of them: commits, imports and merges.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Float, Integer, String, Text

from kernelgen.db.models import RecordRow, row_values

# A record is a few kilobytes (a config, a signature, time statistics). 1 MiB is far above any real one
# and far below both databases' 1 GB text limit; it keeps a hostile import file from exhausting memory.
MAX_RECORD_CHARS = 1 << 20
# Records nest four levels (record > measurement > time > value). Deeper JSON is not a record, and
# Python's json and the canonical re-encoding recurse per level.
MAX_JSON_DEPTH = 32
_INT32 = (-(2**31), 2**31 - 1)  # PostgreSQL INTEGER; SQLite's is wider
_COLUMNS = RecordRow.__table__.c


def json_depth_ok(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether parsed JSON ``value`` nests at most ``limit`` levels (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _check_text(name: str, value: Any, length: int | None) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text, got {type(value).__name__}")
    if length is not None and len(value) > length:
        raise ValueError(f"{name} is {len(value)} characters long, the database allows at most {length}")
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character, which PostgreSQL text cannot hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} contains a lone surrogate, which is not UTF-8 text") from None


def check_row(row: dict[str, Any]) -> None:
    """Raise ValueError naming the first column value some supported database would refuse."""
    for name, value in row.items():
        column = _COLUMNS[name]
        kind = column.type
        if value is None:
            if not column.nullable:
                raise ValueError(f"{name} is missing")
            continue
        if isinstance(kind, Text):
            _check_text(name, value, MAX_RECORD_CHARS)
        elif isinstance(kind, String):
            _check_text(name, value, kind.length)
        elif isinstance(kind, Float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} is {value!r}: the database needs a finite number")
        elif isinstance(kind, Integer):
            if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
                raise ValueError(f"{name} is {value!r}: the database needs a 32-bit integer")


def checked_row(record: Any, record_id: str | None = None) -> dict[str, Any]:
    """The column values of ``record`` (as ``row_values``), or ValueError naming what a database refuses."""
    try:
        row = row_values(record, record_id)
    except (ValueError, TypeError, AttributeError, RecursionError) as err:
        if "out of range float" in str(err).lower():  # json reads 1e400 as infinity
            raise ValueError("it holds a number that is not finite (NaN or infinity, e.g. 1e400): every "
                             "database needs finite numbers") from None
        raise ValueError(f"not storable ({type(err).__name__}: {' '.join(str(err).split())})") from None
    check_row(row)
    return row


__all__ = ["MAX_JSON_DEPTH", "MAX_RECORD_CHARS", "check_row", "checked_row", "json_depth_ok"]
