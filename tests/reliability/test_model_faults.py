"""Tuning a model under faults: a factory, its module or a model's step that exits or raises a ``BaseException``
is a one-line error and a non-zero exit, never kernelgen's own exit; Ctrl-C still ends the run with 130.

Before: a factory calling ``sys.exit(0)`` made ``kernelgen tune --model`` (and a manifest's ``[[model]]``, and
``kernelgen report --model``) exit 0 with no output and nothing tuned; ``sys.exit(3)`` exited 3, silently; a
``BaseException`` that is not an ``Exception`` printed a 51-line traceback.
"""

from __future__ import annotations

import json

import pytest

from tests.reliability.conftest import cli, one_line_error

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
