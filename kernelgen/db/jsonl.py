"""The shareable text format of tuning records: JSON lines, a header line, then one record per line.

Records are written in canonical JSON sorted by ``record_id`` so files diff and merge cleanly in git.
Reading validates every line (``TuningRecord.from_json``, then the limits every supported database
enforces, ``kernelgen.db.limits``) before anything is returned: a malformed, truncated, oversized or
newer-version file raises ImportFormatError naming the line. Files are data: parsed with
``json``, never executed or unpickled.

Format 2 adds each record's workload ``name`` and ``evidence``; format 1 files (neither field) still read,
their names absent and their evidence derived from the measurement message, as kernelgen did then.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from kernelgen.db.limits import MAX_JSON_DEPTH, MAX_RECORD_CHARS, checked_row, json_depth_ok
from kernelgen.errors import ImportFormatError, KernelgenError
from kernelgen.input_limits import MAX_RECORDS_ENV, bounded_lines, max_records, too_large
from kernelgen.ir.values import TuningRecord, canonical_json
from kernelgen.paths import refuse_overwrite

FORMAT = "kernelgen-tuning-records"
VERSION = 2
_V1_FIELDS = frozenset({"workload_key", "workload_family", "signature", "implementation", "implementation_hash",
                        "backend", "target_fingerprint", "target_family", "device", "toolchain", "measurement",
                        "provenance"})
# The record fields each format version may hold: a field a version does not define is refused, not dropped.
RECORD_FIELDS = {1: _V1_FIELDS, 2: _V1_FIELDS | {"name", "evidence"}}


def header() -> dict[str, Any]:
    # Nothing that changes between exports (no date, no count): two branches' headers never conflict.
    return {"format": FORMAT, "version": VERSION, "order": "record_id"}


def write_records(path: str | os.PathLike, records: Iterable[TuningRecord],
                  protected: Mapping[Path, str] | None = None) -> int:
    """Write ``records`` (ascending ``record_id``, as ``records()`` yields them) atomically; returns the count.

    Streams to a temporary file in the target directory and renames it over ``path``, so a reader sees
    the old file or the complete new one. ``path`` must not be one of ``protected`` (the database being
    exported) nor any SQLite database: ``paths.refuse_overwrite``.
    """
    target = Path(path)
    refuse_overwrite(target, protected or {})
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise KernelgenError(f"cannot write {target}: {err.strerror or err}; choose a path in a writable "
                             "directory") from None
    count, last = 0, None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            out.write(canonical_json(header()) + "\n")
            for record in records:
                rid = record.record_id
                if last is not None and rid <= last:
                    if rid == last:
                        continue  # the same record from two layers
                    raise ValueError("write_records needs records sorted by record_id")
                out.write(canonical_json(record.to_json()) + "\n")
                count, last = count + 1, rid
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):  # e.g. the disk filled up, or the target is a directory
            raise KernelgenError(f"cannot write {target}: {exc.strerror or exc}; choose another path or free "
                                 "space") from None
        raise
    return count


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a valid JSON number")


class _Oversized(ValueError):
    """A line too long or nested too deeply to be a record (valid JSON or not: it is not parsed further)."""


def _parse(line: str) -> Any:
    if len(line) > MAX_RECORD_CHARS:
        raise _Oversized(f"the line is {len(line)} characters long, a record may have at most {MAX_RECORD_CHARS}")
    deep = _Oversized(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        data = json.loads(line, parse_constant=_reject_constant)
    except RecursionError:  # json recurses per nesting level
        raise deep from None
    if not json_depth_ok(data):
        raise deep
    return data


def check_header(data: Any, where: str) -> int:
    """Validate a header line; returns its format version."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportFormatError(f"{where} line 1: not a {FORMAT} header (expected {canonical_json(header())}); "
                                "export files with `kernelgen db export`")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ImportFormatError(f"{where} line 1: format version {version!r} is not a positive integer")
    if version > VERSION:
        raise ImportFormatError(f"{where} is format version {version}, this kernelgen reads up to {VERSION}: "
                                "upgrade kernelgen (pip install -U kernelgen); nothing was imported")
    return version


def parse_record(data: Any, version: int = VERSION) -> TuningRecord:
    """One record line's JSON of format ``version``, validated; raises ValueError naming the problem."""
    if not isinstance(data, dict):
        raise ValueError(f"a record must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - RECORD_FIELDS[version])
    if unknown:  # silently dropping fields would make a newer file's import lossy
        raise ValueError(f"unknown record field(s) {unknown} for format version {version} "
                         "(written by a newer kernelgen?)")
    try:
        record = TuningRecord.from_json(data)
    except (TypeError, KeyError, AttributeError, OverflowError) as err:
        raise ValueError(f"malformed record ({type(err).__name__}: {err})") from None
    checked_row(record)  # what some supported database would refuse is refused here, before any write
    return record


def read_records(path: str | os.PathLike) -> list[TuningRecord]:
    """Every record of a file, validated; raises ImportFormatError (naming the line) on the first bad one.

    Streams the file line by line under ``kernelgen.input_limits``: a line longer than a record can be, more
    bytes than ``KERNELGEN_MAX_FILE_BYTES`` or more records than ``KERNELGEN_MAX_IMPORT_RECORDS`` stop the
    read with an error naming the limit (``/dev/zero`` and ``/dev/urandom`` end in one line, not in memory).
    """
    where = str(path)
    try:
        with open(path, "rb") as handle:
            return _read_lines(handle, where)
    except FileNotFoundError:
        raise ImportFormatError(f"no such file {where}: check the path") from None
    except IsADirectoryError:
        raise ImportFormatError(f"{where} is a directory: pass a .jsonl file") from None
    except ImportFormatError:
        raise
    except KernelgenError as err:  # a limit of input_limits
        raise ImportFormatError(str(err)) from None
    except OSError as err:
        raise ImportFormatError(f"cannot read {where}: {err.strerror}") from None


def _read_lines(handle: BinaryIO, where: str) -> list[TuningRecord]:
    records: list[TuningRecord] = []
    version, limit, offset = VERSION, max_records(), 0
    # A record line is at most MAX_RECORD_CHARS characters of UTF-8 (4 bytes each at most), plus a "\r".
    for number, raw in bounded_lines(handle, where, 4 * MAX_RECORD_CHARS + 1):
        ended = raw.endswith(b"\n")
        body = raw[:-1] if ended else raw
        try:
            line = body.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as err:
            raise ImportFormatError(f"{where} is not UTF-8 text (byte {offset + err.start}): pass a file written by "
                                    "`kernelgen db export`") from None
        offset += len(raw)
        if number == 1 and not line.strip():
            raise ImportFormatError(f"{where} is empty: expected a {FORMAT} header line")
        if number > 1 and not line.strip():
            continue  # blank lines (e.g. left by a hand merge) carry nothing
        try:
            data = _parse(line)
        except _Oversized as err:
            raise ImportFormatError(f"{where} line {number}: {err}; nothing was imported") from None
        except ValueError as err:
            hint = " (the file looks truncated)" if not ended else ""
            raise ImportFormatError(f"{where} line {number}: not valid JSON{hint} ({err}); "
                                    "nothing was imported") from None
        if number == 1:
            version = check_header(data, where)
            continue
        if len(records) >= limit:
            raise too_large(where, "records", limit, MAX_RECORDS_ENV)
        try:
            records.append(parse_record(data, version))
        except ValueError as err:
            raise ImportFormatError(f"{where} line {number}: {err}; nothing was imported") from None
    if offset == 0:
        raise ImportFormatError(f"{where} is empty: expected a {FORMAT} header line")
    return records
