"""Schema versions: a fresh database is created at head, an older one is refused until upgraded, a newer
one is refused and left untouched, and the migrations build exactly the models' schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from kernelgen.db import open_db, upgrade_db
from kernelgen.db.engine import make_engine, parse_url
from kernelgen.db.models import RECORDS_TABLE, VERSION_TABLE, Base
from kernelgen.db.schema import head_revision, schema_number
from kernelgen.errors import DatabaseError, SchemaVersionError
from kernelgen.ir.values import CONFIRM_PREFIX, DECLARED_PREFIX
from tests.db import factories as f


def _version(url: str) -> str | None:
    engine = make_engine(parse_url(url), read_only=False)
    with engine.connect() as conn:
        value = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    engine.dispose()
    return value


def _indexes(url: str) -> set[str]:
    engine = make_engine(parse_url(url), read_only=False)
    names = {ix["name"] for ix in inspect(engine).get_indexes(RECORDS_TABLE)}
    engine.dispose()
    return names


def test_a_new_postgresql_database_in_its_public_schema(pg_cluster) -> None:
    if isinstance(pg_cluster, str):
        pytest.skip(pg_cluster)
    url = pg_cluster.database()
    with open_db(url, team_url="") as db:
        db.commit(f.record())
    with open_db(url, team_url="", read_only=True) as db:
        assert db.count() == 1
    assert _version(url) == head_revision()


def test_fresh_database_is_created_at_head_with_its_own_version_table(persistent_url: str) -> None:
    open_db(persistent_url, team_url="").close()
    assert _version(persistent_url) == head_revision()
    engine = make_engine(parse_url(persistent_url), read_only=False)
    assert not inspect(engine).has_table("alembic_version")  # left free for Optuna
    engine.dispose()


def test_known_revisions_are_the_migration_scripts() -> None:
    from alembic.script import ScriptDirectory

    from kernelgen.db.schema import REVISIONS, alembic_config

    scripts = ScriptDirectory.from_config(alembic_config())
    assert tuple(reversed([s.revision for s in scripts.walk_revisions()])) == REVISIONS
    assert scripts.get_current_head() == head_revision()


def test_migrations_build_exactly_the_models(persistent_url: str) -> None:
    open_db(persistent_url, team_url="").close()
    engine = make_engine(parse_url(persistent_url), read_only=False)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def test_older_schema_is_refused_until_upgraded(persistent_url: str) -> None:
    rec = f.record()
    f.database_at(persistent_url, "0001", [rec])
    with pytest.raises(SchemaVersionError) as info:
        open_db(persistent_url, team_url="")
    message = str(info.value)
    head = schema_number(head_revision())
    assert "schema 1" in message and f"needs {head}" in message and "kernelgen db upgrade --db" in message
    assert _version(persistent_url) == "0001"  # refusing changed nothing
    assert "ix_kgrec_neighbours" not in _indexes(persistent_url)
    assert upgrade_db(persistent_url) == ("1", head)
    assert "ix_kgrec_neighbours" in _indexes(persistent_url)
    with open_db(persistent_url, team_url="") as db:
        assert list(db.records()) == [rec]
    assert upgrade_db(persistent_url) == (head, head)


def test_upgrade_to_schema_3_ranks_existing_verdicts_and_confirmations_above_trials(persistent_url: str) -> None:
    lucky = f.record(seed=1, median=1e-5)
    confirmed = f.record(seed=2, median=3e-5, message=f"{CONFIRM_PREFIX}: median of 3 rounds")
    declared = f.record(seed=3, median=4e-5, implementation="custom:gelu/cpp", implementation_hash="c1",
                        message=f"{DECLARED_PREFIX}: median of 3 rounds")
    f.database_at(persistent_url, "0002", [lucky, confirmed, declared])
    upgrade_db(persistent_url)
    with open_db(persistent_url, team_url="") as db:
        assert db.best(lucky.workload_key, f.TARGET) == declared
        assert db.best(lucky.workload_key, f.TARGET, implementations={"pointwise": "impl-h1"}) == confirmed


def test_newer_schema_is_refused_and_never_modified(persistent_url: str) -> None:
    f.database_at(persistent_url, "head", [f.record()])
    engine = make_engine(parse_url(persistent_url), read_only=False)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0099'"))
    engine.dispose()
    for attempt in (lambda: open_db(persistent_url, team_url=""), lambda: upgrade_db(persistent_url),
                    lambda: open_db(persistent_url, team_url="", read_only=True)):
        with pytest.raises(SchemaVersionError, match="newer than this kernelgen"):
            attempt()
    assert _version(persistent_url) == "0099"


def test_optuna_tables_can_share_the_database(sqlite_url: str) -> None:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = open_db(sqlite_url, team_url="")
    study = optuna.create_study(storage=db.optuna_storage_url, study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    db.commit(f.record())
    db.close()
    with open_db(sqlite_url, team_url="") as again:
        assert again.count() == 1
    assert len(optuna.load_study(study_name="s", storage=sqlite_url).trials) == 2


def test_a_foreign_records_table_is_not_adopted(sqlite_url: str) -> None:
    engine = make_engine(parse_url(sqlite_url), read_only=False)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {RECORDS_TABLE} (x INTEGER)"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="not made by kernelgen"):
        open_db(sqlite_url, team_url="")


def test_read_only_open_never_creates_a_schema(persistent_url: str, tmp_path) -> None:
    path = parse_url(persistent_url).database
    if persistent_url.startswith("sqlite"):  # an existing but empty file
        Path(path).parent.mkdir(parents=True)
        Path(path).touch()
    with pytest.raises(DatabaseError, match="holds no kernelgen tuning database.*kernelgen db upgrade"):
        open_db(persistent_url, team_url="", read_only=True)
    engine = create_engine(parse_url(persistent_url))
    assert not inspect(engine).has_table(RECORDS_TABLE)
    engine.dispose()
    missing = tmp_path / "absent.sqlite"
    with pytest.raises(DatabaseError, match="no tuning database"):
        open_db(f"sqlite:///{missing}", team_url="", read_only=True)
    assert not missing.exists()
