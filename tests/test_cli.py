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
