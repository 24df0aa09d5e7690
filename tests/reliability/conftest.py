"""Fixtures of the reliability scenarios: a small tuning database per test (``url``), the CLI run in this process or
as a real subprocess (for what only a process shows: its exit status, a kill), and the throw-away
PostgreSQL cluster of the database tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgen.cli import main
from tests.db.conftest import pg_cluster, pg_url  # noqa: F401  (fixtures: the cluster is started on first use)
# ``url``: a SQLite tuning database holding 20 records of 4 workloads on 2 targets, as the db CLI tests use it
from tests.db.test_db_cli import count, url  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """``kernelgen ARGS`` in this process: (exit status, stdout, stderr)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
                memory_mb: int | None = None) -> subprocess.CompletedProcess:
    """``kernelgen ARGS`` as its own process (its exit status is the one a shell sees); ``memory_mb`` caps
    its address space, so a command that reads without bound fails the test instead of the machine."""
    def limit() -> None:
        if memory_mb is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return subprocess.run([sys.executable, "-c", "import sys; from kernelgen.cli import run; sys.argv[0] = 'kernelgen'; run()",
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})}, preexec_fn=limit)


def one_line_error(code: int, err: str, *fragments: str) -> None:
    """A refusal as the CLI promises it: non-zero status, one ``error:`` line naming each fragment, no traceback."""
    assert code != 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


