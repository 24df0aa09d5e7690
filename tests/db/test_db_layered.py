"""A local database over a read-only team database: reads combine both, writes go local, the team layer
refuses writes (in kernelgen and, for PostgreSQL, in the server session itself)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from kernelgen.db import LayeredDB, TuningDB, open_db
from kernelgen.errors import ReadOnlyDatabaseError
from kernelgen.ir.values import DECLARED_PREFIX
from tests.db import factories as f


@pytest.fixture
def team_url(persistent_url: str) -> str:
    with open_db(persistent_url, team_url="") as team:
        team.commit_many([f.record(seed=1, median=2e-5), f.record(seed=2, median=9e-5),
                          f.record(workload="wk-team-only", seed=3), f.record(seed=4, status="timeout")])
    return persistent_url


@pytest.fixture
def layered(team_url: str, tmp_path) -> LayeredDB:
    db = open_db(f"sqlite:///{tmp_path / 'local.sqlite'}", team_url=team_url)
    assert isinstance(db, LayeredDB)
    yield db
    db.close()


def test_best_takes_the_faster_layer(layered: LayeredDB) -> None:
    wk = f.record().workload_key
    assert layered.best(wk, f.TARGET) == f.record(seed=1, median=2e-5)  # only the team knows it: no re-tuning
    layered.commit(f.record(seed=5, median=1e-5))
    assert layered.best(wk, f.TARGET) == f.record(seed=5, median=1e-5)
    assert layered.best("wk-team-only", f.TARGET) == f.record(workload="wk-team-only", seed=3)
    assert layered.best(wk, f.TARGET, implementations={"pointwise": "other"}) is None


def test_a_team_verdict_outranks_a_faster_local_trial(layered: LayeredDB, team_url: str) -> None:
    wk = f.record().workload_key
    layered.commit(f.record(seed=6, median=1e-7))  # one lucky local sample
    verdict = f.record(seed=7, median=5e-5, message=f"{DECLARED_PREFIX}: median of interleaved rounds")
    with open_db(team_url, team_url="") as team:
        team.commit(verdict)
    assert layered.best(wk, f.TARGET) == verdict


def test_reads_union_without_duplicates(layered: LayeredDB, team_url: str) -> None:
    layered.commit(f.record(seed=2, median=9e-5))  # also in the team layer
    layered.commit(f.record(seed=6, median=5e-5))
    wk = f.record().workload_key
    assert len(layered.trials(wk, f.TARGET)) == 4  # team's 3 + the new local one, the shared one once
    assert len(list(layered.records())) == 5
    assert layered.count() == 5
    stats = layered.stats()
    assert (stats["local"]["records"], stats["team"]["records"], stats["records"]) == (2, 4, 5)


def test_writes_go_local_and_the_team_layer_refuses(layered: LayeredDB, team_url: str) -> None:
    layered.commit_many(f.many(3, prefix="mine"))
    assert layered.local.count() == 3
    with pytest.raises(ReadOnlyDatabaseError, match="read-only"):
        layered.team.commit(f.record(seed=77))
    with pytest.raises(ReadOnlyDatabaseError):
        layered.team.prune(target=f.TARGET)
    with open_db(team_url, team_url="") as team:
        assert team.count() == 4


def test_nearest_combines_layers(layered: LayeredDB) -> None:
    sig = f.record().signature
    near = f.record(workload="wk-512", shape=(512, 1024), seed=8, median=3e-5)
    same_shape_faster = f.record(workload="wk-team-only", seed=30, median=5e-5)  # team has it at 1e-4
    layered.commit_many([near, same_shape_faster])
    got = layered.nearest(workload_key=f.record().workload_key, workload_family="wf-bias-gelu",
                          target_fingerprint=f.TARGET, target_family=f.FAMILY, signature=sig)
    # Same shape under another key (distance 0) ranks before (512, 1024); per key the faster layer wins.
    assert got == [same_shape_faster, near]


def test_export_of_a_layered_view(layered: LayeredDB, tmp_path) -> None:
    layered.commit(f.record(seed=9))
    path = tmp_path / "all.jsonl"
    assert layered.export(path) == 5
    with open_db("sqlite://", team_url="") as fresh:
        assert fresh.import_file(path) == (5, 0)


def test_server_side_read_only_session(pg_url: str) -> None:
    """Even a write that bypasses kernelgen's check is refused by PostgreSQL for a team connection."""
    open_db(pg_url, team_url="").close()
    team = TuningDB(pg_url, read_only=True)
    with pytest.raises(Exception, match="read-only"):
        with team._engine.begin() as conn:
            conn.execute(text("DELETE FROM kernelgen_records"))
    team.close()


def test_team_url_from_the_environment(team_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELGEN_TEAM_DB", team_url)
    with open_db(f"sqlite:///{tmp_path / 'l.sqlite'}") as db:
        assert isinstance(db, LayeredDB) and db.count() == 4
    with open_db(f"sqlite:///{tmp_path / 'l.sqlite'}", team_url="") as db:
        assert isinstance(db, TuningDB) and db.count() == 0


@pytest.mark.parametrize(("local", "team", "same"), [
    ("postgresql://kg@LOCALHOST/tuning", "postgresql+psycopg://kg@127.0.0.1:5432/tuning", True),
    ("postgresql://kg@db.example/tuning", "postgresql://kg@db.example:5433/tuning", False),
    ("postgresql://kg@db.example/tuning", "postgresql://kg@db.example/other", False),
    ("postgresql://kg@db.example/t?options=-csearch_path%3Dmine", "postgresql://kg@db.example/t?options=-csearch_path%3Dteam", False),
    ("sqlite://", "sqlite://", False),  # two memory databases are two databases
])
def test_same_database_however_spelt(local: str, team: str, same: bool) -> None:
    from kernelgen.db.engine import parse_url, same_database

    assert same_database(parse_url(local), parse_url(team)) is same


def test_layering_a_database_over_itself_is_refused(persistent_url: str, monkeypatch) -> None:
    from kernelgen.errors import DatabaseError

    with pytest.raises(DatabaseError, match="same database"):
        open_db(persistent_url, team_url=persistent_url)
    monkeypatch.setenv("KERNELGEN_DB", persistent_url)
    with pytest.raises(DatabaseError, match="same database"):
        open_db(team_url=persistent_url)  # the local default comes from the environment
