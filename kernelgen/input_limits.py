"""Bounds on what kernelgen reads from a file it is given (an import, a merge, a replayed landscape).

A hostile or mistaken input (``/dev/zero``, ``/dev/urandom``, a gzip bomb, a billion tiny lines) must end in a
one-line error, not in the memory of the machine. Every bound is named in its error with the variable that
raises it. Reading is streaming: at most the bound (plus one line) is ever held as bytes.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from kernelgen.errors import KernelgenError

MAX_BYTES_ENV = "KERNELGEN_MAX_FILE_BYTES"
MAX_RECORDS_ENV = "KERNELGEN_MAX_IMPORT_RECORDS"
# 20x the largest tuning landscape we know (12 MB of JSON) and ~350k exported records (~1 GB once parsed).
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MAX_RECORDS = 1_000_000
GZIP_MAGIC = b"\x1f\x8b"


def bound(env: str, default: int) -> int:
    """The positive integer in ``$env``, else ``default``; a malformed value is an error naming it."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise KernelgenError(f"{env}={raw!r} is not a positive integer; unset it or give e.g. {default}")
    return value


def max_bytes() -> int:
    return bound(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)


def max_records() -> int:
    return bound(MAX_RECORDS_ENV, DEFAULT_MAX_RECORDS)


def too_large(where: str, what: str, limit: int, env: str) -> KernelgenError:
    return KernelgenError(f"{where} holds more than {limit} {what}, the limit ({env}); if the file is genuine, "
                          f"raise it, e.g. {env}={limit * 4}")


def open_maybe_gzip(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading bytes, through gzip when it starts with gzip's magic number."""
    handle = open(path, "rb")
    try:
        magic = handle.read(2)
        handle.seek(0)
    except OSError:  # a pipe or a character device: read it as it comes
        return handle
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
    return handle


def read_bounded(path: str | os.PathLike) -> bytes:
    """The bytes of ``path`` (decompressed when gzip), at most ``max_bytes()``: else KernelgenError naming the
    limit. A gzip bomb stops at the limit: decompression streams."""
    limit = max_bytes()
    with open_maybe_gzip(path) as handle:
        try:
            data = handle.read(limit + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise KernelgenError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    if len(data) > limit:
        raise too_large(str(path), "bytes (decompressed)", limit, MAX_BYTES_ENV)
    return data


def bounded_lines(handle: BinaryIO, where: str, line_limit: int) -> Iterator[tuple[int, bytes]]:
    """(number, line with its newline, if any) of a binary stream; KernelgenError when a line exceeds
    ``line_limit`` bytes or the stream ``max_bytes()``. Never holds more than one line."""
    limit, total = max_bytes(), 0
    number = 0
    while True:
        line = handle.readline(line_limit + 1)
        if not line:
            return
        number += 1
        total += len(line)
        if total > limit:
            raise too_large(where, "bytes", limit, MAX_BYTES_ENV)
        if len(line) > line_limit and not line.endswith(b"\n"):
            raise KernelgenError(f"{where} line {number}: longer than {line_limit} bytes, more than any record "
                                 "can be; nothing was imported: pass a file written by `kernelgen db export`")
        yield number, line


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_RECORDS", "MAX_BYTES_ENV", "MAX_RECORDS_ENV", "bound", "bounded_lines",
           "max_bytes", "max_records", "open_maybe_gzip", "read_bounded", "too_large"]
