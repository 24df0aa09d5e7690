"""``kernelgen registry list [--json]`` and ``kernelgen registry check``: statuses, reasons and exit codes."""

from __future__ import annotations

import json

import pytest
from test_registry_loading import TEAM_CPP, make_team_folder

from kernelgen.cli import main
from kernelgen.custom_calls.implementation import forget_verdicts
from kernelgen.registry import Registry, use_registry


@pytest.fixture()
def team(tmp_path, monkeypatch):
    """A fresh active registry that loads the project's registry/ and one team folder."""
    folder = make_team_folder(tmp_path / "team")
    monkeypatch.setenv("KERNELGEN_REGISTRY_PATH", str(folder))
    forget_verdicts()
    with use_registry(Registry(), load_defaults=True):
        yield folder
    forget_verdicts()


def test_list_json_reports_status_here(team, capsys):
    assert main(["registry", "list", "--json"]) == 0
    rows = {r["implementation"]: r for r in json.loads(capsys.readouterr().out)}
    team_row = rows["custom:team_double/cpp"]
    assert team_row["status"] == "runnable" and team_row["platform"] == "cpu"
    assert team_row["replaces"] == "reference" and team_row["check"] == "never checked"
    assert rows["custom:rms_norm/cpp"]["params"]["LANES"] == [8, 32, 64]
    for row in rows.values():
        assert row["status"] in ("runnable", "compile-only", "unavailable")
        assert (row["status"] == "runnable") == (row["reason"] == "")
    dpcpp = rows["custom:rms_norm/sycl.dpcpp"]
    if dpcpp["status"] == "unavailable":
        assert "install" in dpcpp["reason"]


def test_list_table(team, capsys):
    assert main(["registry", "list"]) == 0
    out = capsys.readouterr().out
    assert "custom:team_double/cpp" in out and "runnable" in out


def test_check_passes_and_records_the_outcome(team, capsys):
    assert main(["registry", "check", "--name", "team_double"]) == 0
    out = capsys.readouterr().out
    assert "passed" in out and "1 passed" in out and "0 failed" in out
    main(["registry", "list", "--json"])
    rows = {r["implementation"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["custom:team_double/cpp"]["check"] == "passed"


def test_check_fails_with_exit_1_on_a_wrong_kernel(team, capsys):
    (team / "team_double" / "double.cpp").write_text(TEAM_CPP.replace("2.0f * x[i]", "3.0f * x[i]"))
    assert main(["registry", "check", "--name", "team_double", "--json"]) == 1
    (result,) = json.loads(capsys.readouterr().out)
    assert result["status"] == "failed" and result["outcome"] == "wrong_result" and "output 0" in result["message"]
    main(["registry", "list", "--json"])
    rows = {r["implementation"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["custom:team_double/cpp"]["check"].startswith("failed: wrong_result: output 0")


def test_check_unknown_name_is_a_one_line_error(team, capsys):
    assert main(["registry", "check", "--name", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no custom call named nope") and err.count("\n") == 1


def test_broken_team_folder_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    bad = make_team_folder(tmp_path / "bad", init="raise ValueError('boom')\n")
    monkeypatch.setenv("KERNELGEN_REGISTRY_PATH", str(bad))
    with use_registry(Registry(), load_defaults=True):
        assert main(["registry", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "__init__.py" in err and "ValueError: boom" in err
