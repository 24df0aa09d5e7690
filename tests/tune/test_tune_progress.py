"""Progress while tuning: plain trial lines from a piped `kernelgen tune`, INFO lines from tune="auto"."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import pytest
import torch

from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.cli import main

pytestmark = [pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++"),
              pytest.mark.timeout(300)]

TRIAL = re.compile(r"trial (\d+)/2 \S+=\S+.* ok \S+ [µmn]?s \(best \S+ [µmn]?s\)")


@pytest.fixture()
def restore_logging():
    names = ("kernelgen", "kernelgen.tune.trial_loop")
    saved = {n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers)) for n in names}
    yield
    for n, (level, handlers) in saved.items():
        logging.getLogger(n).setLevel(level)
        logging.getLogger(n).handlers[:] = handlers


@pytest.mark.slow
def test_piped_tune_prints_one_plain_line_per_trial(tmp_path: Path, monkeypatch, capsys, restore_logging) -> None:
    (tmp_path / "kg_progress_ops.py").write_text("import torch\ndef scale(x):\n    return x * 2.0\n")
    manifest = tmp_path / "w.toml"
    manifest.write_text(textwrap.dedent('''
        [[workload]]
        name = "scale"
        function = "kg_progress_ops:scale"
        inputs = [{shape = [16, 32], dtype = "float32"}]
    '''))
    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(manifest), "--db", f"sqlite:///{tmp_path / 't.sqlite'}", "--trials", "2"]) == 0
    err = capsys.readouterr().err  # capsys is not a terminal: no progress bar, log lines instead
    trials = sorted(int(m.group(1)) for m in TRIAL.finditer(err))
    assert trials == [1, 2], err
    assert "━" not in err  # no bar drawn


def test_tune_auto_logs_each_trial_at_info(tmp_path: Path, caplog) -> None:
    f = compile(lambda x: x * 3.0, backend="cpp", tune="auto", trials=2, db=f"sqlite:///{tmp_path / 't.sqlite'}")
    x = torch.randn(8, 16)
    with caplog.at_level(logging.INFO, logger="kernelgen"):
        torch.testing.assert_close(f(x), x * 3.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "kernelgen.tune.trial_loop"]
    assert sorted(int(m.group(1)) for m in map(TRIAL.search, lines) if m) == [1, 2], lines
    assert any("tuning it now" in r.getMessage() for r in caplog.records)
