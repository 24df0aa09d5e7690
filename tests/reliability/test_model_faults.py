"""Tuning a model under faults: a factory, its module or a model's step that exits or raises a ``BaseException``
is a one-line error and a non-zero exit, never kernelgen's own exit; Ctrl-C still ends the run with 130.

A database that can no longer be written mid-run ends the run in one line naming it; what was committed stays. A
factory or a model's step that never returns ends the run after ``--capture-timeout`` seconds, in one line naming
the stage.

Before: a factory calling ``sys.exit(0)`` made ``kernelgen tune --model`` (and a manifest's ``[[model]]``, and
``kernelgen report --model``) exit 0 with no output and nothing tuned; ``sys.exit(3)`` exited 3, silently; a
``BaseException`` that is not an ``Exception`` printed a 51-line traceback. A database turned read-only in the middle
of ``tune --model`` left every later region "not tuned" with Optuna's message about "invalid data in the commit", and
the run exited 0. A factory that never returned kept ``tune --model ... --seconds 20 --timeout 10`` running, silent,
for as long as anyone waited (240 s and counting).
"""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from kernelgen.db import open_db
from kernelgen.errors import ReadOnlyDatabaseError
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.values import Config
from kernelgen.tune import tuner
from kernelgen.tune.search import Searcher
from tests.reliability.conftest import cli, cli_process, count, one_line_error
from tests.reliability.fakes import Counting, FourConfigs

FAKES = "tests.tune.model_fakes"


@pytest.mark.parametrize(("factory", "says"), [
    ("exits", "model factory 'tests.tune.model_fakes:exits' called sys.exit(0); a factory must return (model, "
              "inputs), not exit"),
    ("exits_3", "model factory 'tests.tune.model_fakes:exits_3' called sys.exit(3)"),
    ("booms", "model factory 'tests.tune.model_fakes:booms' raised Boom (a BaseException): the factory gave up"),
    ("exiting_forward", "model exiting_forward: its step called sys.exit(0); a model's forward must return"),
])
def test_a_factory_or_step_that_exits_is_a_failed_model(tmp_path, capsys, factory, says):
    code, out, _ = cli(capsys, "tune", "--model", f"{FAKES}:{factory}", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}",
                       "--seconds", "5", "--json")
    assert code == 1
    doc = json.loads(out)["models"][0]
    assert not doc["ok"] and says in doc["error"] and "\n" not in doc["error"], doc["error"]


def test_a_manifest_model_whose_factory_exits_fails_the_run(tmp_path, capsys):
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[model]]\nfactory = "{FAKES}:exits"\n')
    code, out, _ = cli(capsys, "tune", str(manifest), "--db", f"sqlite:///{tmp_path / 'db.sqlite'}", "--json")
    assert code == 1 and "called sys.exit(0)" in json.loads(out)["models"][0]["error"]


@pytest.mark.parametrize("exit_code", ["0", "None"])
def test_a_module_that_exits_on_import_is_a_failed_model(tmp_path, capsys, monkeypatch, exit_code):
    (tmp_path / f"leaves_{exit_code}.py").write_text(f"import sys\nsys.exit({exit_code})\ndef make():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = cli(capsys, "tune", "--model", f"leaves_{exit_code}:make", "--db",
                       f"sqlite:///{tmp_path / 'db.sqlite'}", "--json")
    assert code == 1
    error = json.loads(out)["models"][0]["error"]
    assert f"importing 'leaves_{exit_code}' called sys.exit({exit_code})" in error and "__main__" in error, error


@pytest.mark.parametrize(("factory", "says"), [("exits", "called sys.exit(0)"), ("booms", "raised Boom")])
def test_report_model_says_it_in_one_line(tmp_path, capsys, factory, says):
    code, _, err = cli(capsys, "report", "--model", f"{FAKES}:{factory}", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}")
    one_line_error(code, err, f"model factory '{FAKES}:{factory}'", says)


def test_ctrl_c_in_a_factory_still_interrupts(tmp_path, capsys):
    code, _, _ = cli(capsys, "tune", "--model", f"{FAKES}:interrupted", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert code == 130  # (typer turns Ctrl-C into exit status 130)


# --- a database that turns read-only in the middle of a run ----------------------------------------------------

@pytest.fixture
def read_only_from_now():
    """Call it to make every SQLite connection read-only from then on (``PRAGMA query_only`` as each is taken from
    its pool), as remounting the file system read-only does (root ignores file modes: chmod cannot)."""
    def query_only(dbapi_conn, _record, _proxy):
        dbapi_conn.execute("PRAGMA query_only = ON")

    def turn() -> None:
        if not event.contains(Pool, "checkout", query_only):
            event.listen(Pool, "checkout", query_only)
    yield turn
    if event.contains(Pool, "checkout", query_only):
        event.remove(Pool, "checkout", query_only)


def test_a_search_whose_database_turns_read_only_says_so(tmp_path, read_only_from_now):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    open_db(url).close()
    space = SearchSpace([Param("a", (1, 2, 3))], [], default={"a": 1})
    searcher = Searcher(space, storage=url, study_name="s")
    config = searcher.ask()
    read_only_from_now()
    with pytest.raises(ReadOnlyDatabaseError, match="refused a write .*readonly"):
        searcher.tell(config, Counting()(None, Config({"a": 1})))
    with pytest.raises(ReadOnlyDatabaseError, match=f"{tmp_path / 'db.sqlite'} refused a write"):
        Searcher(space, storage=url, study_name="another")  # Optuna's message blamed "invalid data" here


def test_tune_model_ends_in_one_line_when_its_database_turns_read_only(tmp_path, capsys, monkeypatch,
                                                                       read_only_from_now):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    real, tuned = tuner.tune_graph, []

    def tune_fast(graph, **options):  # measured by a fake (no compiler); the database is real
        if tuned:
            read_only_from_now()  # after the first region's records are committed
        tuned.append(graph.workload_key)
        return real(graph, implementations=[FourConfigs(graph)], measure=Counting(), **options)

    monkeypatch.setattr(tuner, "tune_graph", tune_fast)
    code, _, err = cli(capsys, "tune", "--model", f"{FAKES}:make", "--db", url, "--trials", "2")
    one_line_error(code, err, str(tmp_path / "db.sqlite"), "read-only", "tuning stopped at model make",
                   "records committed before it are kept")
    assert len(tuned) == 2  # no region after the failure was tried
    with open_db(url) as db:  # the first region's records stay
        assert db.count() > 0


# --- a factory or a step that never returns ------------------------------------------------------------------

@pytest.mark.parametrize(("command", "factory", "stage"), [
    ("tune", "hangs", "model factory 'tests.tune.model_fakes:hangs' (importing its module and building the model)"),
    ("tune", "hangs_in_c", "model factory 'tests.tune.model_fakes:hangs_in_c'"),
    ("tune", "hanging_forward", "model hanging_forward: its first eager step"),
    ("report", "hangs", "model factory 'tests.tune.model_fakes:hangs'"),
])
def test_a_stage_that_never_returns_ends_the_run_in_one_line(url, command, factory, stage):
    start = time.monotonic()
    done = cli_process(command, "--model", f"{FAKES}:{factory}", "--db", url, "--capture-timeout", "2", timeout=120)
    one_line_error(done.returncode, done.stderr, stage, "did not return within 2 s", "--capture-timeout")
    assert time.monotonic() - start < 60
    assert count(url) == 20  # the database's records are all there


def test_an_impossible_capture_timeout_is_refused(tmp_path, capsys):
    code, _, err = cli(capsys, "tune", "--model", f"{FAKES}:make", "--capture-timeout", "0",
                       "--db", f"sqlite:///{tmp_path / 'db.sqlite'}")
    one_line_error(code, err, "--capture-timeout 0 is impossible")
