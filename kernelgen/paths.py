"""Where kernelgen keeps files: the default tuning database and the compiled-kernel cache.

``KERNELGEN_DB`` (a SQLAlchemy URL) and ``KERNELGEN_CACHE_DIR`` override the per-user defaults under
``$XDG_DATA_HOME/kernelgen`` (default ``~/.local/share/kernelgen``) and ``$XDG_CACHE_HOME/kernelgen``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
