"""Recorded tuning landscapes (Kernel Tuner cache files): a ``SearchSpace`` plus a measurer replaying them.

The space is the file's ``tune_params``; a config is valid exactly when the file stores it (the recording
kept only configs inside the kernel's constraints). A stored failure replays as a failed measurement, so
the unchanged search runs over a whole GPU landscape without a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.input_limits import read_bounded
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.values import Config, Measurement, Status, TimeStats
from kernelgen.tune.search import run_search

# Failure strings Kernel Tuner stores in "time", and the status each replays as.
FAILURES = {"CompilationFailedConfig": Status.COMPILE_ERROR, "RuntimeFailedConfig": Status.RUNTIME_ERROR,
            "InvalidConfig": Status.INVALID}


class LandscapeError(KernelgenError):
    """A landscape file is missing or is not a Kernel Tuner cache file."""


@dataclass(frozen=True)
class Landscape:
    """A recorded space: ``times[values]`` is milliseconds, or a ``Status`` for a recorded failure."""

    path: str
    names: tuple[str, ...]
    space: SearchSpace
    times: dict[tuple[Any, ...], float | Status]

    def key(self, config: Config) -> tuple[Any, ...]:
        return tuple(config[name] for name in self.names)

    def measure(self, config: Config) -> Measurement:
        """The recorded outcome of ``config`` (times are stored in ms; Measurements are in seconds)."""
        recorded = self.times.get(self.key(config))
        if recorded is None:
            return Measurement.failure(config, Status.INVALID, "configuration not recorded in the landscape")
        if isinstance(recorded, Status):
            return Measurement.failure(config, recorded, f"recorded as failed ({recorded.value})")
        seconds = recorded / 1000.0
        return Measurement(config, Status.OK, TimeStats(median=seconds, min=seconds, spread=0.0, repeats=1))

    @property
    def optimum_ms(self) -> float:
        return min(t for t in self.times.values() if not isinstance(t, Status))


def _fail(path: Path, what: str) -> LandscapeError:
    return LandscapeError(f"landscape {path}: {what} (expected a Kernel Tuner cache file, .json or .json.gz)")


def load_landscape(path: str | Path) -> Landscape:
    """Read and validate a landscape; raises ``LandscapeError`` with a one-line reason."""
    path = Path(path)
    if not path.is_file():
        raise LandscapeError(f"landscape {path}: no such file; pass a .json or .json.gz Kernel Tuner cache file")
    try:
        text = read_bounded(path)  # decompressed in a stream, at most KERNELGEN_MAX_FILE_BYTES: no gzip bomb
    except KernelgenError as exc:
        raise LandscapeError(f"landscape {exc}") from None
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _fail(path, f"unreadable ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise _fail(path, "top level is not a JSON object")
    params, cache = data.get("tune_params"), data.get("cache")
    if not isinstance(params, dict) or not params:
        raise _fail(path, "missing 'tune_params' (parameter name -> list of values)")
    if not isinstance(cache, dict):
        raise _fail(path, "missing 'cache' (recorded configurations)")
    names = data.get("tune_params_keys", list(params))
    if not isinstance(names, list) or sorted(map(str, names)) != sorted(params):
        raise _fail(path, "'tune_params_keys' does not list the names of 'tune_params'")
    try:
        space_params = [Param(name, tuple(params[name])) for name in names]
    except (TypeError, ValueError) as exc:
        raise _fail(path, f"bad 'tune_params': {exc}") from None
    choices = {p.name: set(p.choices) for p in space_params}
    times: dict[tuple[Any, ...], float | Status] = {}
    objective = data.get("objective", "time")
    objective = objective if isinstance(objective, str) else "time"
    for key, entry in cache.items():
        if not isinstance(entry, dict) or any(name not in entry for name in names):
            raise _fail(path, f"cache entry {key!r} lacks parameter values")
        values = tuple(entry[name] for name in names)
        if any(v not in choices[n] for n, v in zip(names, values)):
            raise _fail(path, f"cache entry {key!r} has a value outside 'tune_params'")
        value = entry.get(objective, entry.get("time"))
        if isinstance(value, str):
            times[values] = FAILURES.get(value, Status.RUNTIME_ERROR)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            times[values] = float(value)
        else:
            raise _fail(path, f"cache entry {key!r} has no usable {objective!r}")
    if not any(not isinstance(t, Status) for t in times.values()):
        raise _fail(path, "no configuration with a recorded time")
    stored = frozenset(times)
    ordered = tuple(names)
    constraint = Constraint("configuration recorded in the landscape",
                            lambda c: tuple(c[n] for n in ordered) in stored)
    return Landscape(str(path), ordered, SearchSpace(space_params, [constraint]), times)


def replay(landscape: Landscape, budget: int, seed: int | None, sampler: str = "auto") -> list[dict[str, Any]]:
    """Run the search for ``budget`` evaluations over the landscape; ``[{"config", "time" (ms or None)}]``."""
    result = run_search(landscape.space, landscape.measure, trials=budget, sampler=sampler, seed=seed)
    return [{"config": m.config.to_json(), "time": None if m.time is None else m.time.median * 1000.0}
            for m in result.evaluated]
