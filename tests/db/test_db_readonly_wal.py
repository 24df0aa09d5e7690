"""A team database in WAL mode (how kernelgen creates SQLite files) that this user may only read opens
read-only: a 0444 file, or a file in a read-only directory where SQLite cannot create its ``-shm``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgen.db import open_db
from tests.db import factories as f

ROOT = Path(__file__).resolve().parents[2]
# Root ignores permission bits; without these two capabilities it obeys them like any user.
_NO_DAC = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


def _as_plain_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot drop the right to write read-only files")
    return [setpriv, *_NO_DAC, "--"]


def _team(tmp_path: Path) -> Path:
    folder = tmp_path / "team"
    path = folder / "team.sqlite"
    with open_db(f"sqlite:///{path}", team_url="") as db:
        db.commit_many(f.many(3, prefix="team"))
    assert (path.read_bytes()[18:20]) == b"\x02\x02"  # WAL mode
    return path


def _stats(tmp_path: Path, team: Path) -> subprocess.CompletedProcess:
    cmd = [*_as_plain_user(), sys.executable, "-m", "kernelgen", "db", "stats", "--json",
           "--db", f"sqlite:///{tmp_path / 'local' / 'mine.sqlite'}", "--team-db", f"sqlite:///{team}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


def _read_only_folder_with(*keep: Path) -> None:
    """Remove every other file from the folder of ``keep`` and make the folder read-only."""
    folder = keep[0].parent
    for side in folder.iterdir():
        if side not in keep:
            shutil.rmtree(side) if side.is_dir() else side.unlink()
    folder.chmod(0o555)


@pytest.mark.parametrize("where", ["file_0444", "read_only_directory"])
def test_read_only_wal_team_database_opens(where: str, tmp_path: Path) -> None:
    team = _team(tmp_path)
    before = team.read_bytes()
    team.chmod(0o444)
    if where == "read_only_directory":
        _read_only_folder_with(team)  # a clean close leaves no -wal; the lock files are ours
    try:
        result = _stats(tmp_path, team)
    finally:
        team.parent.chmod(0o755)
        team.chmod(0o644)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["team"]["records"] == 3
    assert team.read_bytes() == before  # read, never written
    if where == "read_only_directory":
        assert sorted(p.name for p in team.parent.iterdir()) == ["team.sqlite"]


def test_unreadable_wal_content_is_one_line_error(tmp_path: Path) -> None:
    """A -wal holding commits that cannot be read without a writable -shm: refused, never silently skipped."""
    team = _team(tmp_path)
    wal = team.with_name("team.sqlite-wal")
    wal.write_bytes(b"\x00" * 4096)  # stands for commits not yet checkpointed into the file
    _read_only_folder_with(team, wal)
    try:
        result = _stats(tmp_path, team)
    finally:
        team.parent.chmod(0o755)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "-wal" in result.stderr and str(team) in result.stderr
    assert stat.S_IMODE(team.stat().st_mode) == 0o644
