"""The CLI root: version, help on every command, devices output, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelgen import __version__
from kernelgen.cli import app, main


def run_cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "kernelgen", *args], capture_output=True, text=True, env=env)


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"kernelgen {__version__}"


def _command_paths() -> list[list[str]]:
    import typer.main

    click_app = typer.main.get_command(app)
    paths = []

    def walk(cmd, prefix):
        for name, sub in getattr(cmd, "commands", {}).items():
            paths.append(prefix + [name])
            walk(sub, prefix + [name])

    walk(click_app, [])
    return paths


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p))
def test_every_command_has_help(path: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out


def test_devices_json_lists_cpu_target() -> None:
    result = run_cli("devices", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["backend"]: row for row in json.loads(result.stdout)}
    assert rows["cpp"]["available"] is True
    assert rows["cpp"]["target"]["kind"] == "cpu"
    assert rows["cpp"]["family"].startswith("cpp:cpu:")


def test_devices_table_shows_whole_fingerprint_and_family_on_a_narrow_pipe() -> None:
    rows = {row["backend"]: row for row in json.loads(run_cli("devices", "--json").stdout)}
    result = run_cli("devices", env_extra={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert rows["cpp"]["fingerprint"] in result.stdout and rows["cpp"]["family"] in result.stdout
    assert rows["cpp"]["target"]["versions"]["compiler"] in result.stdout


def test_unknown_command_exits_non_zero() -> None:
    result = run_cli("no-such-command")
    assert result.returncode != 0


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def _tuned_db(tmp_path) -> str:
    from kernelgen.db import open_db
    from tests.db import factories

    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    with open_db(url, team_url="") as db:
        db.commit(factories.record(seed=1))
    return url


def test_non_utf8_manifest_is_one_line_error(tmp_path) -> None:
    manifest = tmp_path / "latin1.toml"
    manifest.write_bytes('[[workload]]\nname = "café"\n'.encode("latin-1"))
    err = _one_line_error(run_cli("tune", str(manifest), "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"))
    assert "not UTF-8" in err and str(manifest) in err
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize("command", [["db", "export"], ["report", "--out"]], ids=["db export", "report"])
def test_unwritable_output_path_is_one_line_error(command: list[str], tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "out.file"  # its parent is a file: no user, root included, can create it
    err = _one_line_error(run_cli(*command, str(out), "--db", _tuned_db(tmp_path)))
    assert str(out) in err


def test_deeply_nested_import_line_is_one_line_error(tmp_path) -> None:
    from kernelgen.db.jsonl import header
    from kernelgen.ir.values import canonical_json

    path = tmp_path / "deep.jsonl"
    path.write_text(canonical_json(header()) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    err = _one_line_error(run_cli("db", "import", str(path), "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"))
    assert "line 2" in err and "nested deeper" in err


@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "env"])
def test_same_database_as_db_and_team_db_is_refused(spelling: str, tmp_path) -> None:
    url = _tuned_db(tmp_path)
    db_args = ["--db", url]
    team, env = url, {}
    if spelling == "relative":
        team = "sqlite:///tuning.sqlite"  # relative to the working directory below
    elif spelling == "symlink":
        (tmp_path / "link.sqlite").symlink_to(tmp_path / "tuning.sqlite")
        team = f"sqlite:///{tmp_path / 'link.sqlite'}"
    team_args = ["--team-db", team]
    if spelling == "env":
        team_args, env = [], {"KERNELGEN_TEAM_DB": team}
    result = subprocess.run([sys.executable, "-m", "kernelgen", "db", "stats", *db_args, *team_args],
                            capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env})
    err = _one_line_error(result)
    assert "same database" in err
    other = subprocess.run([sys.executable, "-m", "kernelgen", "db", "stats", "--json", "--db",
                            f"sqlite:///{tmp_path / 'mine.sqlite'}", *team_args], capture_output=True, text=True,
                           cwd=tmp_path, env={**os.environ, **env})
    assert other.returncode == 0, other.stderr  # another local database over the same team one is fine
    assert json.loads(other.stdout)["team"]["records"] == 1
