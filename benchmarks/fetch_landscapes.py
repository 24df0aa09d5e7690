"""Fetch a recorded landscape that is not in ../shared/landscapes, to check a sampler on data it was not chosen on.

The sampler defaults were chosen on six landscapes (convolution and dedispersion on A100/A4000/A6000). The
``autotuning-methodology`` sdist on PyPI (MIT licence) ships, as a test fixture, a whole Kernel Tuner cache of
the same convolution kernel recorded on a GeForce RTX 2080 Ti with a different space (block sizes from 1,
tiles up to 8x8, no shared-memory switch; 6768 configs, 1512 failed). This script downloads that sdist with
pip (PyPI is reachable where the landscapes are), checks the files against pinned SHA-256 digests, and writes
them in the layout ``bench_search.py`` reads. The files are read as JSON data only, never executed. Example:

    python benchmarks/fetch_landscapes.py /tmp/heldout
    python benchmarks/bench_search.py --dir /tmp/heldout --seeds 60 --jobs 2 --samplers auto,random
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "autotuning-methodology==1.1.0"
FIXTURES = "tests/autotuning_methodology/integration/mockfiles/"
# member under FIXTURES -> (path written under the output folder, SHA-256 of the member)
FILES = {
    "mock_gpu.json": ("convolution/RTX2080Ti.json.gz",
                      "fc2e58f8a9e65e4cb1799621c091dbcd89e4c827ed12d112edc5881d4a149939"),
    "mocktest_kernel_convolution.json": ("kernels/convolution_rtx2080ti.json",
                                         "fa95433352a1c6a7e3d714bf9c5d4df6a3fbfcc74ac29680e3fcae7ed669879d"),
}


class FetchError(Exception):
    """The sdist could not be downloaded, or it does not hold the pinned files."""


def download_sdist(into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
           PACKAGE, "-d", str(into)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(into.glob("*.tar.gz"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no sdist written"])[-1]
        raise FetchError(f"pip download {PACKAGE} failed ({last}); check that PyPI is reachable")
    return found[0]


def extract(sdist: Path, out: Path) -> list[Path]:
    """Write each pinned fixture under ``out`` (caches gzipped); nothing is written unless every digest matches."""
    checked = {}
    with tarfile.open(sdist, "r:gz") as tar:
        members = {m.name.split("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
        for member, (target, digest) in FILES.items():
            info = members.get(FIXTURES + member)
            handle = tar.extractfile(info) if info is not None else None
            if handle is None:
                raise FetchError(f"{sdist.name} has no {FIXTURES + member}; the pinned release changed")
            data = handle.read()
            if hashlib.sha256(data).hexdigest() != digest:
                raise FetchError(f"{member} in {sdist.name} does not match its pinned SHA-256; not using it")
            checked[target] = data
    written = []
    for target, data in checked.items():
        path = out / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data, mtime=0) if target.endswith(".gz") else data)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to write KERNEL/GPU.json.gz and kernels/ into")
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="kg-fetch-") as tmp:
            written = extract(download_sdist(Path(tmp)), args.out)
    except (FetchError, OSError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
