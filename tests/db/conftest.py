"""Fixtures of the database tests: one throw-away PostgreSQL cluster per session, and ``db_url`` /
``store`` parametrized over a SQLite file, SQLite in memory and PostgreSQL (the contract suite)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelgen.db import TuningDB, open_db
from tests.db import pg


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg.Cluster | str]:
    cluster = pg.start()
    yield cluster
    if isinstance(cluster, pg.Cluster):
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: pg.Cluster | str) -> str:
    """A fresh, empty PostgreSQL schema (skips with the reason when no server can start)."""
    if isinstance(pg_cluster, str):
        pytest.skip(pg_cluster)
    return pg_cluster.schema()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'sub' / 'tuning.sqlite'}"


@pytest.fixture(params=["sqlite-file", "sqlite-memory", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite-file":
        return request.getfixturevalue("sqlite_url")
    if request.param == "sqlite-memory":
        return "sqlite://"
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite-file", pytest.param("postgresql", marks=pytest.mark.postgres)])
def persistent_url(request: pytest.FixtureRequest) -> str:
    """A URL that can be opened twice and see the same data (no in-memory database)."""
    if request.param == "sqlite-file":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(db_url: str) -> Iterator[TuningDB]:
    db = open_db(db_url, team_url="")
    yield db
    db.close()
