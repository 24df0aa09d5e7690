"""Does CPU contention fool the tuner's verdict? ``kernelgen tune`` with a busy-loop hog pinned to one core.

    python benchmarks/bench_noise.py [--manifest examples/workloads.toml] [--only NAME ...] [--trials N]
                                     [--hog-core K | --no-hog]

Runs ``kernelgen tune MANIFEST --json`` (the workloads named by ``--only``, else all) on a fresh temporary
SQLite database while a busy-loop subprocess pinned to core K (``os.sched_setaffinity``) competes for the
CPU, then prints per workload and shape:

- verdict: the recorded verdict's time (the fastest round median of the confirmation rounds);
- trial: the fastest search trial of the same config, i.e. what the search measured for the config that the
  confirmation confirmed;
- ratio verdict/trial and whether it exceeds 1.5x (the goal: it never does);
- vs eager and vs default, both measured in the verdict's own interleaved rounds;
- the note of the verdict's rounds (why no verdict was declared, or that the timings were unsteady).

Then it checks the database itself: every declared verdict record against the fastest search trial of its
(implementation, config), and prints how many exceed 1.5x (the goal: none).

Prints figures, asserts nothing. Run from anywhere; the tuning runs in the repository root so that the
manifest's ``examples.ops`` functions import.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from kernelgen.report import fmt_time

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1.5  # a verdict more than this multiple of its trial was fooled by noise

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string takes JSON's escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def subset_manifest(manifest: Path, only: list[str], out: Path) -> Path:
    """``manifest`` reduced to the workloads named in ``only`` (all when empty), written to ``out``."""
    data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    workloads = data.get("workload", [])
    if only:
        unknown = sorted(set(only) - {w["name"] for w in workloads})
        if unknown:
            raise SystemExit(f"error: no workload named {', '.join(unknown)} in {manifest}")
        workloads = [w for w in workloads if w["name"] in only]
    lines = []
    for table, body in data.items():
        if isinstance(body, dict):
            lines.append(f"[{table}]")
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in body.items()]
            lines.append("")
    for w in workloads:
        lines.append("[[workload]]")
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in w.items()]
        lines.append("")
    out.write_text("\n".join(lines), encoding="utf-8")
    return out


def start_hog(core: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HOG, str(core)])


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def report(doc: dict[str, Any]) -> None:
    """Print one row per workload and shape, as ``kernelgen tune --json`` reported it."""
    head = ("workload", "shape", "implementation", "verdict", "trial", "ratio", f">{LIMIT}x", "vs eager",
            "vs default", "note")
    rows = []
    for w in doc["workloads"]:
        if w.get("error"):
            rows.append((w["name"], "-", "error", "-", "-", "-", "-", "-", "-", w["error"]))
            continue
        for r in w["results"]:
            shape = ", ".join("x".join(map(str, s["shape"])) for s in r["signature"])
            ratio = r["time"] / r["trial_time"] if r.get("time") and r.get("trial_time") else None
            refused = (r.get("note") or "").startswith("no verdict")
            flag = "-" if ratio is None else ("YES" if ratio > LIMIT else "no")
            rows.append((w["name"], shape, r["implementation"] or "-",
                         fmt_time(r["time"]) + (" (refused)" if refused else ""), fmt_time(r.get("trial_time")),
                         _x(ratio), flag,
                         _x(r["speedup_vs_eager"]), _x(r["speedup_vs_default"]), r.get("note") or ""))
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head) - 1)]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(n) for c, n in zip(row, widths)) + "  " + str(row[-1]))


def recorded_verdicts(url: str) -> tuple[int, list[float]]:
    """(declared verdicts in the database, ratio of each to the fastest search trial of its config)."""
    from kernelgen.db import open_db
    from kernelgen.ir.values import Evidence

    with open_db(url) as db:
        records = [r for r in db.records() if r.measurement.ok]
    def key(r: Any) -> tuple[str, str, str]:
        return r.workload_key, r.implementation, r.config.key()

    trials: dict[tuple[str, str, str], float] = {}
    for r in records:
        if r.evidence is Evidence.TRIAL:
            trials[key(r)] = min(trials.get(key(r), float("inf")), r.measurement.time.median)
    verdicts = [r for r in records if r.evidence is Evidence.DECLARED]
    ratios = [r.measurement.time.median / trials[key(r)] for r in verdicts if key(r) in trials]
    return len(verdicts), ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "examples" / "workloads.toml")
    parser.add_argument("--only", action="append", default=[], help="tune only this workload (repeatable)")
    parser.add_argument("--trials", type=int, default=None, help="trials per implementation (default: the manifest's)")
    parser.add_argument("--hog-core", type=int, default=None,
                        help="core the busy loop is pinned to (default: the first core this process may use)")
    parser.add_argument("--no-hog", action="store_true", help="no busy loop: the same figures on a quiet machine")
    args = parser.parse_args(argv)

    cores = sorted(os.sched_getaffinity(0))
    core = cores[0] if args.hog_core is None else args.hog_core
    with tempfile.TemporaryDirectory(prefix="kg-bench-noise-") as tmp:
        manifest = subset_manifest(args.manifest.resolve(), args.only, Path(tmp) / "workloads.toml")
        db = f"sqlite:///{Path(tmp) / 'tuning.sqlite'}"
        cmd = [sys.executable, "-m", "kernelgen", "tune", str(manifest), "--db", db, "--json"]
        if args.trials is not None:
            cmd += ["--trials", str(args.trials)]
        env = {**os.environ, "KERNELGEN_CACHE_DIR": str(Path(tmp) / "cache")}  # compile afresh, like a new user
        hog = None if args.no_hog else start_hog(core)
        print(f"# cores {cores}; hog: {'none' if hog is None else f'busy loop pinned to core {core}'}; "
              f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        print(f"# kernelgen tune: rc {done.returncode}, {time.monotonic() - start:.0f} s, "
              f"load average after: {os.getloadavg()[0]:.2f}")
        try:
            doc = json.loads(done.stdout)
        except json.JSONDecodeError:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        report(doc)
        count, ratios = recorded_verdicts(db)
    worst = f", worst {max(ratios):.2f}x" if ratios else ""
    print(f"# database: {count} declared verdicts; more than {LIMIT}x their search trial: "
          f"{sum(r > LIMIT for r in ratios)}{worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
