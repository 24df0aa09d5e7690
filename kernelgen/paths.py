"""Where kernelgen keeps files: the default tuning database and the compiled-kernel cache.

``KERNELGEN_DB`` (a SQLAlchemy URL) and ``KERNELGEN_CACHE_DIR`` override the per-user defaults under
``$XDG_DATA_HOME/kernelgen`` (default ``~/.local/share/kernelgen``) and ``$XDG_CACHE_HOME/kernelgen``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kernelgen.errors import KernelgenError

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kernelgen"


def cache_dir() -> Path:
    override = os.environ.get("KERNELGEN_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernelgen"


def default_db_path() -> Path:
    return data_dir() / "tuning.sqlite"


def default_db_url() -> str:
    """``KERNELGEN_DB`` if set, else the per-user SQLite file."""
    return os.environ.get("KERNELGEN_DB") or f"sqlite:///{default_db_path()}"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: by inode when both exist (hard links, symlinks), else by real path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is an existing SQLite database file (read from its header, never opened by SQLite)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def refuse_overwrite(path: str | os.PathLike, protected: Mapping[Path, str]) -> None:
    """Raise ``KernelgenError`` when writing ``path`` would replace data it must not: any of ``protected``
    (a file this command reads, e.g. the open tuning database and its -wal/-shm, mapped to how it is named in
    the message), through any spelling, symlink or hard link, or any SQLite database at all (an export or a
    report written over one would silently end it). Call it before writing; writes stay atomic."""
    target = Path(path)
    for other, what in protected.items():
        if _same_file(target, other):
            raise KernelgenError(f"refusing to write {target}: it is {what}, which this command reads; nothing "
                                 "was written: choose another output path")
    if is_sqlite_file(target):
        raise KernelgenError(f"refusing to write {target}: it is a SQLite database (a tuning database?) and "
                             "would be replaced; nothing was written: choose another output path")
