"""A throw-away PostgreSQL cluster for tests: initdb + pg_ctl in a temporary directory, on a free
loopback port, as an unprivileged user when the tests run as root (postgres refuses to run as root).

``KERNELGEN_TEST_PG_URL`` (an admin URL of an existing server) is used instead when set. ``start()``
returns a cluster or a one-line reason why none could start, which the fixtures turn into a skip.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "kgtest"


def _find(tool: str) -> str | None:
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"),
                        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """A running server; ``database()`` makes a fresh empty database and returns its URL."""

    def __init__(self, admin_url: str, stop: list[str] | None = None, root: Path | None = None) -> None:
        self.admin_url = admin_url  # postgresql+psycopg://user@host:port/postgres
        self._stop = stop
        self._root = root

    def _admin(self):
        import psycopg

        return psycopg.connect(self.admin_url.replace("postgresql+psycopg", "postgresql"), autocommit=True)

    def database(self) -> str:
        """A new database (tables in its ``public`` schema); slower: copies a template database."""
        name = f"kg_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.admin_url.rsplit("/", 1)[0] + f"/{name}"

    def schema(self) -> str:
        """A new, empty schema made the connection's default through the URL (cheap: one catalog row)."""
        name = f"kg_{uuid.uuid4().hex[:12]}"
        with self._admin() as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.admin_url}?options=-csearch_path%3D{name}"

    def stop(self) -> None:
        if self._stop:
            subprocess.run(self._stop, capture_output=True, timeout=60)
            self._stop = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def start(max_connections: int = 60) -> Cluster | str:
    """Start a cluster (or use ``KERNELGEN_TEST_PG_URL``, whatever its limit); on failure return the reason as a
    string. ``max_connections``: the server's limit on connections, every client's together."""
    external = os.environ.get("KERNELGEN_TEST_PG_URL")
    if external:
        return Cluster(external)
    initdb, pg_ctl = _find("initdb"), _find("pg_ctl")
    if not initdb or not pg_ctl:
        return "PostgreSQL is not installed (no initdb/pg_ctl): apt-get install postgresql, or set KERNELGEN_TEST_PG_URL"
    prefix: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="kernelgen-pg-"))
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if not runuser:
            shutil.rmtree(root, ignore_errors=True)
            return "running as root and runuser is missing: cannot start postgres as an unprivileged user"
        prefix = [runuser, "-u", "nobody", "--"]
        os.chown(root, 65534, 65534)
    data, port = root / "data", _free_port()
    try:
        init = subprocess.run([*prefix, initdb, "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8",
                               "--no-sync", "--no-instructions"], capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {(init.stderr or init.stdout).strip().splitlines()[-1:]}")
        # A throw-away cluster: durability off makes CREATE DATABASE and commits fast.
        options = (f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c synchronous_commit=off "
                   f"-c full_page_writes=off -c max_connections={max_connections}")
        started = subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60",
                                  "-o", options, "start"], capture_output=True, text=True, timeout=120)
        if started.returncode != 0:
            log = (root / "log").read_text(errors="replace").strip().splitlines()[-1:] if (root / "log").exists() else []
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()} {log}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        shutil.rmtree(root, ignore_errors=True)
        return f"could not start a throw-away PostgreSQL cluster: {err}"
    cluster = Cluster(f"postgresql+psycopg://{USER}@127.0.0.1:{port}/postgres",
                      stop=[*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], root=root)
    atexit.register(cluster.stop)  # also when the session ends without running fixture finalizers
    return cluster
