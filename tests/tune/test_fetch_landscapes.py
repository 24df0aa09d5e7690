"""benchmarks/fetch_landscapes.py: pinned fixtures are checked before anything is written (no network here)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

from kernelgen.tune.landscape import load_landscape

_SPEC = importlib.util.spec_from_file_location(
    "fetch_landscapes", Path(__file__).resolve().parents[2] / "benchmarks" / "fetch_landscapes.py")
fetch = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fetch)

CACHE = {"device_name": "Fake GPU", "kernel_name": "k", "tune_params_keys": ["bx"], "tune_params": {"bx": [32, 64]},
         "objective": "time", "cache": {"32": {"bx": 32, "time": 2.0}, "64": {"bx": 64, "time": "RuntimeFailedConfig"}}}
SPEC = {"KernelSpecification": {"KernelName": "k"}}


def make_sdist(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(f"pkg-1.0/{fetch.FIXTURES}{member}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Pin the digests of a small cache and spec in place of the real release's."""
    files = {"cache.json": json.dumps(CACHE).encode(), "spec.json": json.dumps(SPEC).encode()}
    monkeypatch.setattr(fetch, "FILES", {
        "cache.json": ("conv/FakeGPU.json.gz", hashlib.sha256(files["cache.json"]).hexdigest()),
        "spec.json": ("kernels/conv.json", hashlib.sha256(files["spec.json"]).hexdigest()),
    })
    return files


def test_matching_fixtures_are_written_in_the_replay_layout(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    written = fetch.extract(make_sdist(tmp_path / "pkg.tar.gz", pinned), tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in written) == \
        ["conv/FakeGPU.json.gz", "kernels/conv.json"]
    land = load_landscape(tmp_path / "out" / "conv" / "FakeGPU.json.gz")
    assert land.optimum_ms == 2.0
    assert json.loads((tmp_path / "out" / "kernels" / "conv.json").read_text()) == SPEC


def test_a_changed_fixture_is_refused_and_nothing_is_written(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    tampered = dict(pinned, **{"spec.json": b'{"KernelSpecification": {}}'})
    with pytest.raises(fetch.FetchError, match="spec.json .* does not match its pinned SHA-256"):
        fetch.extract(make_sdist(tmp_path / "pkg.tar.gz", tampered), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_missing_fixture_names_the_member(tmp_path: Path, pinned: dict[str, bytes]) -> None:
    sdist = make_sdist(tmp_path / "pkg.tar.gz", {"cache.json": pinned["cache.json"]})
    with pytest.raises(fetch.FetchError, match="has no .*spec.json"):
        fetch.extract(sdist, tmp_path / "out")
    assert not (tmp_path / "out").exists()
