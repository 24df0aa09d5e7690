"""``kernelgen tune --model``: a model's regions tuned once each, under the keys dispatch looks up; a later
process runs them with no tuning, no measuring and no compile; records exported and imported onto a clean
machine give the same choices; bad input gives one line and a non-zero exit. (Two processes splitting a model's
regions through one database: ``tests/db/test_model_split.py``, on PostgreSQL where a server can start.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgen.cli import main
from kernelgen.db import open_db
from kernelgen.errors import NoTemplateError
from kernelgen.tune.model import ModelSpec, tune_model

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(600)


def env_for(cache: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "KERNELGEN_CACHE_DIR": str(cache)}


def _second_process(factory: str, mode: str, url: str, cache: Path) -> dict:
    # (the regions' records are what these later processes check: a tiny model's whole-step check may well find
    # eager's step faster and say so, which would run it eagerly; tests/tune/test_step_verdicts.py covers that)
    proc = subprocess.run([sys.executable, str(HERE / "model_second_process.py"), factory, mode, url],
                          capture_output=True, text=True, timeout=400,
                          env={**env_for(cache), "KERNELGEN_STEP_VERDICTS": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tune_cli(factory: str, mode: str, url: str, cache: Path, trials: int = 3) -> subprocess.Popen:
    return subprocess.Popen([str(Path(sys.executable).parent / "kernelgen"), "tune", "--model", factory, "--mode", mode,
                             "--db", url, "--trials", str(trials), "--json"], cwd=HERE, env=env_for(cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_tuned_model_runs_its_records_in_a_later_process_with_zero_measurements(tmp_path):
    url, cache = f"sqlite:///{tmp_path / 'team.sqlite'}", tmp_path / "kernels"
    proc = tune_cli("model_fakes:make", "train", url, cache)
    out, err = proc.communicate(timeout=500)
    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(out)["models"][0]
    assert doc["ok"] and doc["regions_done"] == doc["regions_total"] > 0
    keys = [r["workload_key"] for r in doc["regions"]]
    assert len(keys) == len(set(keys))  # forward and backward regions, each distinct one tuned once
    assert all(r["implementation"] and r["measured"] > 0 for r in doc["regions"])
    assert all(r["share"] > 0 for r in doc["regions"])  # shares of eager's step, largest first
    assert [r["share"] for r in doc["regions"]] == sorted((r["share"] for r in doc["regions"]), reverse=True)

    later = _second_process("model_fakes:make", "train", url, cache)
    assert later["tunings"] == 0 and later["workers"] == 0 and later["compiles"] == 0, later
    chosen = {r["workload_key"]: r["implementation"] for r in doc["regions"]}
    ran = {r["workload_key"]: r for r in later["regions"]}
    assert set(chosen) <= set(ran)
    for key, impl in chosen.items():  # every region runs the record tuning declared, found in the database
        assert ran[key]["source"] == "db" and ran[key]["implementation"] == impl, ran[key]
    assert later["max_err"] < 1e-4

    # kernelgen report --model: the same regions, each with its record and its speedup over its ATen ops
    report = subprocess.run([str(Path(sys.executable).parent / "kernelgen"), "report", "--model", "model_fakes:make",
                             "--mode", "train", "--db", url, "--json"], cwd=HERE, env=env_for(cache),
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    shown = json.loads(report.stdout)
    assert {r["workload_key"]: r["implementation"] for r in shown["regions"]} == chosen
    assert shown["regions_done"] == shown["regions_total"] and shown["kernelgen_step_ms"] > 0
    assert all(r["speedup_vs_aten"] == 1.0 if r["implementation"] == "aten" else r["speedup_vs_aten"] > 0
               for r in shown["regions"])

    # A clean machine: another database fed only by the export file, and an empty kernel cache.
    export = tmp_path / "model.jsonl"
    assert main(["db", "export", str(export), "--db", url]) == 0
    clean = f"sqlite:///{tmp_path / 'clean.sqlite'}"
    assert main(["db", "import", str(export), "--db", clean]) == 0
    fresh = _second_process("model_fakes:make", "train", clean, tmp_path / "empty-cache")
    assert fresh["tunings"] == 0, fresh  # zero tuning; its kernels are compiled and checked once, as on any machine
    imported = {r["workload_key"]: r for r in fresh["regions"]}
    for key, impl in chosen.items():  # the same choices, from the imported records
        assert imported[key]["source"] == "db" and imported[key]["implementation"] == impl, imported[key]
    assert fresh["max_err"] < 1e-4


def test_speedup_over_aten_comes_from_rounds_that_timed_both_side_by_side(tmp_path):
    """After the verdict's rounds between implementations refused to declare (their leader in doubt, common for
    microsecond kernels on a busy machine), dispatch runs the fastest confirmed finalist, which may come from its
    implementation's own rounds, where the ATen ops never ran: its speedup goes through the implementation's
    winner, timed in both rounds (it was None, and report --model showed a tuned region without one)."""
    from types import SimpleNamespace

    from kernelgen.ir.values import Evidence
    from kernelgen.tune.model import speedup_over_aten
    from tests.db.factories import TARGET, record

    db = open_db(f"sqlite:///{tmp_path / 'rounds.sqlite'}")
    at = iter(range(100))

    def rounds(tag: str, implementation: str, config: dict, median: float, refused: bool = False):
        message = f"confirmed: fastest round median of 6 interleaved rounds (rounds {tag}) against the top 3 configs"
        r = record(implementation=implementation, implementation_hash="h-" + implementation, config=config,
                   median=median, message=message + ("; no verdict: in doubt" if refused else ""),
                   evidence=Evidence.CONFIRMED, created_at=1_700_000_000.0 + next(at))
        db.commit(r)
        return r

    default, other = {"block": 16384}, {"block": 4096}
    target = SimpleNamespace(fingerprint=TARGET)
    # the implementation's own rounds: the default kept within their spread, another config a hair faster
    fastest = rounds("aaaaaaa1", "pointwise", other, 2.0e-6)
    kept = rounds("aaaaaaa1", "pointwise", default, 2.2e-6)
    assert speedup_over_aten(db, fastest, target) is None  # no rounds with the ATen ops yet
    # the verdict's rounds, refused: the default beside the ATen ops
    rounds("bbbbbbb2", "pointwise", default, 4.4e-6, refused=True)
    rounds("bbbbbbb2", "aten", {}, 44e-6, refused=True)
    assert speedup_over_aten(db, kept, target) == pytest.approx(44 / 4.4 * 2.2 / 2.2)
    assert speedup_over_aten(db, fastest, target) == pytest.approx(44 / 4.4 * 2.2 / 2.0)
    # rounds with the ATen ops of the record itself come first
    own = rounds("ccccccc3", "pointwise", other, 3.0e-6)
    rounds("ccccccc3", "aten", {}, 60e-6)
    assert speedup_over_aten(db, own, target) == pytest.approx(20.0)
    assert speedup_over_aten(db, rounds("ddddddd4", "aten", {}, 1e-5), target) == 1.0
    db.close()


def test_a_region_whose_candidates_all_fail_keeps_the_others(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    calls = []

    def fake_tune(graph, **kwargs):
        calls.append((graph.workload_key, kwargs["trials"], kwargs["seconds"]))
        if len(calls) == 1:
            raise NoTemplateError("every candidate failed its check")
        return _FakeResult(graph)

    with open_db(f"sqlite:///{tmp_path / 'db.sqlite'}") as db:
        result = tune_model(ModelSpec("model_fakes:make", "infer"), db=db, trials=2, tune=fake_tune)
    assert len(calls) == len(result.regions) > 1 and all(t == 2 for _, t, _ in calls)
    first, *rest = result.outcomes
    assert first.error and "every candidate failed" in first.error and first.implementation is None
    assert all(o.implementation == "fake" and o.error is None for o in rest) and result.ok


def test_a_time_budget_decides_every_region_at_its_defaults_before_searching(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    calls = []

    def fake_tune(graph, **kwargs):
        calls.append((graph.workload_key, kwargs["trials"], kwargs["seconds"]))
        return _FakeResult(graph)

    with open_db(f"sqlite:///{tmp_path / 'db.sqlite'}") as db:
        result = tune_model(ModelSpec("model_fakes:make", "infer"), db=db, seconds=60, tune=fake_tune)
    n = len(result.regions)
    order = [r.key for r in result.regions]
    assert [k for k, _, _ in calls] == order + order  # both passes in the order of their shares
    assert all(t == 1 and s is None for _, t, s in calls[:n])  # defaults, side by side with ATen
    assert all(t is None and s > 0 for _, t, s in calls[n:])  # then the searches, sharing the time left


class _FakeResult:
    def __init__(self, graph):
        from types import SimpleNamespace

        self.graph, self.measured, self.note, self.stop_reasons = graph, 1, "", {}
        # an implementation no region has: nothing to check or build
        self.best = SimpleNamespace(implementation="fake", config={"block": 1},
                                    measurement=SimpleNamespace(time=None, message=""))


@pytest.mark.parametrize(("factory", "says"), [
    ("no_such_module:make", "cannot import module 'no_such_module'"),
    ("model_fakes:raises", "raised RuntimeError: the checkpoint is missing"),
    ("model_fakes:not_a_pair", "it must return (model, inputs)"),
    ("model_fakes:wrong_inputs", "its inputs do not fit it"),
    ("model_fakes:uncapturable", "found no region to tune"),
])
def test_bad_models_give_one_line_and_a_non_zero_exit(tmp_path, monkeypatch, capsys, factory, says):
    monkeypatch.chdir(HERE)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert main(["tune", "--model", factory, "--db", url, "--seconds", "5", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)["models"][0]
    assert not doc["ok"] and says in doc["error"] and "\n" not in doc["error"]


def test_manifest_model_tables_load_into_specs(tmp_path):
    from kernelgen.tune.model import load_models

    manifest = tmp_path / "m.toml"
    manifest.write_text('[[model]]\nname = "mlp"\nfactory = "model_fakes:make"\nmode = "train"\nseconds = 90\n'
                        '[[model]]\nfactory = "model_fakes:make_deep"\ndynamic = false\n')
    first, second = load_models(str(manifest))
    assert (first.label, first.mode, first.seconds, first.backend) == ("mlp", "train", 90.0, "cpp")
    assert (second.label, second.mode, second.dynamic) == ("make_deep", "infer", False)


def test_manifest_model_tables_are_validated_before_anything_runs(tmp_path, capsys):
    manifest = tmp_path / "m.toml"
    manifest.write_text('[[model]]\nfactory = "model_fakes:make"\nmode = "sideways"\n')
    assert main(["tune", str(manifest), "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"]) == 1
    assert "mode 'sideways' is not understood" in capsys.readouterr().err
    manifest.write_text('[[model]]\nfactory = "model_fakes:make"\nlayers = 3\n')
    assert main(["tune", str(manifest)]) == 1
    assert "unknown key 'layers'" in capsys.readouterr().err
    assert main(["tune"]) == 1
    assert "nothing to tune" in capsys.readouterr().err
