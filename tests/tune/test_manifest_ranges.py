"""Size ranges in the `kernelgen tune` manifest: one representative size per bucket, one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelgen.cli import main
from kernelgen.errors import KernelgenError
from kernelgen.runtime.dynamic import bucket
from kernelgen.tune.manifest import load_manifest

OPS = '''
import torch
def bias_relu(x, b):
    return torch.relu(x + b)
'''

RANGED = '''
[[workload]]
name = "bias_relu"
function = "OPS:bias_relu"
sizes = SIZES
inputs = [{shape = ["rows", "hidden"], dtype = "float32"}, {shape = ["hidden"], dtype = "float32"}]
'''


def _manifest(tmp_path: Path, monkeypatch, sizes: str, module: str) -> Path:
    (tmp_path / f"{module}.py").write_text(OPS)
    path = tmp_path / "workloads.toml"
    path.write_text(textwrap.dedent(RANGED).replace("OPS", module).replace("SIZES", sizes))
    monkeypatch.chdir(tmp_path)
    return path


def test_a_range_tunes_one_size_per_bucket(tmp_path, monkeypatch):
    path = _manifest(tmp_path, monkeypatch, "{rows = {min = 3, max = 100}, hidden = 16}", "kg_ops_range_ok")
    (workload,) = load_manifest(path)
    rows = [sig[0].shape[0] for sig in workload.signatures]
    assert rows == [4, 8, 16, 32, 64, 128]
    assert {bucket(r) for r in rows} == {bucket(n) for n in range(3, 101)}  # every bucket of the range, once
    assert all(sig[0].shape[1] == 16 and sig[1].shape == (16,) for sig in workload.signatures)
    assert len({g.workload_key for g in workload.graphs}) == len(rows)


def test_a_wide_range_is_capped(tmp_path, monkeypatch):
    path = _manifest(tmp_path, monkeypatch, "{rows = {min = 1, max = 65536}, hidden = 8}", "kg_ops_range_wide")
    (workload,) = load_manifest(path)
    rows = [sig[0].shape[0] for sig in workload.signatures]
    assert 2 <= len(rows) <= 12 and rows[0] == 1 and rows[-1] == 65536


BAD = {
    "min_above_max": ("{rows = {min = 9, max = 3}, hidden = 8}", "1 <= min <= max"),
    "zero_min": ("{rows = {min = 0, max = 3}, hidden = 8}", "1 <= min <= max"),
    "not_a_number": ('{rows = {min = 1, max = "big"}, hidden = 8}', "whole numbers"),
    "unknown_range_key": ("{rows = {min = 1, max = 8, step = 2}, hidden = 8}", "unknown key 'step'"),
    "missing_max": ("{rows = {min = 1}, hidden = 8}", "exactly min and max"),
    "two_ranges": ("{rows = {min = 1, max = 8}, hidden = {min = 1, max = 8}}", "both ranges"),
    "undefined_name": ("{rows = {min = 1, max = 8}}", "names size 'hidden'"),
    "bad_value": ('{rows = "many", hidden = 8}', "must be a whole number"),
    "not_a_table": ('"rows"', "sizes must be a table"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_size_range_is_one_line_error(case, tmp_path, monkeypatch, capsys):
    sizes, expected = BAD[case]
    path = _manifest(tmp_path, monkeypatch, sizes, f"kg_ops_range_{case}")
    with pytest.raises(KernelgenError, match=expected.replace("(", r"\(")):
        load_manifest(path)
    db = tmp_path / "tuning.sqlite"
    assert main(["tune", str(path), "--db", f"sqlite:///{db}"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and expected in err
    assert not db.exists()
