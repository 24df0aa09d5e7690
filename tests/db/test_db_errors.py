"""Bad URLs, unreachable servers and unreadable files give one-line DatabaseErrors naming the URL
(without its password) and what to check; nothing is created or changed on the way."""

from __future__ import annotations

import socket

import pytest

from kernelgen.db import open_db, upgrade_db
from kernelgen.errors import DatabaseError


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens here once the socket is closed


@pytest.mark.parametrize("url, fragment", [
    ("tuning.sqlite", "not a database URL"),
    ("", "not a database URL"),
    ("nosuchdialect://host/db", "nosuchdialect"),
    ("postgresql+nodriver://u@localhost/db", "nodriver"),
    ("mysql://u@h/db", "no SQLAlchemy driver"),
    ("sqlite:///x.sqlite?mode=ro&uri=true", "not supported"),
    ("postgresql://kg:hunter2@host:notaport/db", "not a valid database URL"),
])
def test_bad_urls(url: str, fragment: str) -> None:
    with pytest.raises(DatabaseError) as info:
        open_db(url, team_url="")
    message = str(info.value)
    assert fragment in message and "\n" not in message and "hunter2" not in message


def test_unreachable_server_names_the_url_but_not_the_password() -> None:
    url = f"postgresql://kg:hunter2@127.0.0.1:{_closed_port()}/tuning"
    with pytest.raises(DatabaseError) as info:
        open_db(url, team_url="")
    message = str(info.value)
    assert "127.0.0.1" in message and "hunter2" not in message and "check the host" in message
    with pytest.raises(DatabaseError, match="127.0.0.1"):
        upgrade_db(url)


def test_unreachable_team_server_closes_the_local_layer(tmp_path) -> None:
    with pytest.raises(DatabaseError, match="127.0.0.1"):
        open_db(f"sqlite:///{tmp_path / 'l.sqlite'}", team_url=f"postgresql://127.0.0.1:{_closed_port()}/t")


def test_a_file_that_is_not_sqlite(tmp_path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(DatabaseError, match="not a database"):
        open_db(f"sqlite:///{path}", team_url="")
    assert path.read_text().startswith("these are my notes")


def test_a_directory_that_cannot_be_created(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatabaseError, match="cannot create the directory"):
        open_db(f"sqlite:///{blocker / 'sub' / 'db.sqlite'}", team_url="")
