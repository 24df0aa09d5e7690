"""Replay of recorded landscapes: loading, failures as data, determinism, and the ``kernelgen replay`` CLI."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from kernelgen.cli import main
from kernelgen.ir.values import Config, Status
from kernelgen.tune.landscape import LandscapeError, load_landscape, replay


def write_landscape(path: Path) -> dict:
    """A small Kernel Tuner cache: a bowl over two tile sizes, one failing corner, a few configs not stored."""
    params = {"block_x": [16, 32, 64, 128], "tile": [1, 2, 4], "unroll": [0]}
    cache = {}
    for bx in params["block_x"]:
        for tile in params["tile"]:
            if bx * tile > 256:  # outside the kernel's constraints: Kernel Tuner does not store it
                continue
            time = 1.0 + (math.log2(bx) - 5) ** 2 + (math.log2(tile) - 1) ** 2
            if bx == 128 and tile == 2:
                time = "CompilationFailedConfig"
            if bx == 16 and tile == 4:
                time = "RuntimeFailedConfig"
            cache[f"{bx},{tile},0"] = {"block_x": bx, "tile": tile, "unroll": 0, "time": time,
                                       "times": [time] * 3 if isinstance(time, float) else []}
    data = {"device_name": "Fake GPU", "kernel_name": "bowl", "problem_size": [1024],
            "tune_params_keys": list(params), "tune_params": params, "objective": "time", "cache": cache}
    text = json.dumps(data)
    path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    return data


@pytest.fixture(params=["bowl.json.gz", "bowl.json"])
def landscape_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / request.param
    return path, write_landscape(path)


def test_load_turns_the_cache_into_a_space_and_recorded_outcomes(landscape_file) -> None:
    path, data = landscape_file
    land = load_landscape(path)
    stored = {(e["block_x"], e["tile"]) for e in data["cache"].values()}
    assert {(c["block_x"], c["tile"]) for c in land.space} == stored
    assert land.optimum_ms == 1.0
    best = land.measure(Config(block_x=32, tile=2, unroll=0))
    assert best.ok and best.time.median == pytest.approx(1e-3)
    assert land.measure(Config(block_x=128, tile=2, unroll=0)).status is Status.COMPILE_ERROR
    assert land.measure(Config(block_x=16, tile=4, unroll=0)).status is Status.RUNTIME_ERROR


def test_replay_prints_exactly_budget_unique_recorded_evaluations(landscape_file, capsys) -> None:
    path, data = landscape_file
    assert main(["replay", str(path), "--budget", "6", "--seed", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["evaluated"]
    evaluated = out["evaluated"]
    assert len(evaluated) == 6
    keys = [f"{e['config']['block_x']},{e['config']['tile']},{e['config']['unroll']}" for e in evaluated]
    assert len(set(keys)) == 6 and all(k in data["cache"] for k in keys)
    for key, entry in zip(keys, evaluated):
        assert set(entry) == {"config", "time"}
        recorded = data["cache"][key]["time"]
        assert entry["time"] == (None if isinstance(recorded, str) else pytest.approx(recorded))


def test_replay_is_deterministic_for_a_seed(landscape_file, capsys) -> None:
    path, _ = landscape_file
    runs = []
    for _ in range(2):
        assert main(["replay", str(path), "--budget", "7", "--seed", "11", "--json", "--sampler", "auto"]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]
    land = load_landscape(path)
    assert replay(land, 7, 11, "tpe") == replay(land, 7, 11, "tpe")


def test_replay_stops_when_the_landscape_is_exhausted(landscape_file) -> None:
    path, data = landscape_file
    evaluated = replay(load_landscape(path), 100, 0, "random")
    assert len(evaluated) == len(data["cache"])
    assert sum(e["time"] is None for e in evaluated) == 2  # both recorded failures were spent and told


def test_replay_without_json_prints_a_summary(landscape_file, capsys) -> None:
    path, _ = landscape_file
    assert main(["replay", str(path), "--budget", "5", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "5 evaluations" in out and "best" in out


@pytest.mark.parametrize("content", [None, b"{not json", b"[1, 2]", b'{"tune_params": {"x": [1]}}',
                                     gzip.compress(b'{"tune_params": {"x": [1]}, "cache": {"1": {"x": 2, "time": 1}}}', mtime=0),
                                     b"\x1f\x8b\x08 truncated gzip"])
def test_bad_landscape_files_give_one_line_errors(tmp_path: Path, capsys, content: bytes | None) -> None:
    path = tmp_path / "land.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LandscapeError):
        load_landscape(path)
    assert main(["replay", str(path), "--budget", "3"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: landscape") and "\n" not in err and "Traceback" not in err


def test_unknown_sampler_and_bad_budget_exit_non_zero(landscape_file, capsys) -> None:
    path, _ = landscape_file
    assert main(["replay", str(path), "--budget", "3", "--sampler", "simplex"]) == 1
    assert "unknown sampler" in capsys.readouterr().err
    assert main(["replay", str(path), "--budget", "0"]) != 0


def test_recorded_landscapes_load_when_present() -> None:
    root = Path(__file__).resolve().parents[3] / "shared" / "landscapes"
    files = sorted(root.glob("convolution/*.json.gz"))
    if not files:
        pytest.skip(f"no recorded landscapes under {root}")
    land = load_landscape(files[0])
    failed = sum(isinstance(t, Status) for t in land.times.values())
    assert len(land.times) > 1000 and failed > 0
    evaluated = replay(land, 5, 0, "random")
    assert len({json.dumps(e["config"], sort_keys=True) for e in evaluated}) == 5
