"""The record of the last check of each custom call, for ``kernelgen registry list``.

The check itself is the one templates get (``kernelgen.check.compare`` inside the isolated worker of
``kernelgen.check.verdicts``). The outcome of each first check is kept in
``<cache>/custom_calls/checks/<entry>.json`` (written atomically) so ``kernelgen registry list`` shows why
a call is never dispatched.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

from kernelgen.ir.values import Config, TensorSpec
from kernelgen.paths import atomic_write_text, cache_dir

log = logging.getLogger(__name__)


def _record_path(entry: Any) -> Any:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", entry.implementation_name)
    return cache_dir() / "custom_calls" / "checks" / f"{safe}.json"


def record(entry: Any, workload: str, specs: Sequence[TensorSpec], config: Config, message: str) -> None:
    """Keep the outcome of one check (empty ``message`` = passed; the caller logs failures)."""
    result = {"implementation": entry.implementation_name, "source_hash": entry.source_hash(),
              "workload": workload, "specs": [s.to_json() for s in specs], "config": config.to_json(),
              "ok": not message, "message": message, "time": time.time()}
    path = _record_path(entry)
    try:
        previous = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        previous = {}
    if previous.get("source_hash") != entry.source_hash():
        previous = {}
    failures = [f for f in previous.get("failures", []) if f.get("workload") != workload or f.get("config") != result["config"]]
    if message:
        failures = ([result] + failures)[:10]
    body = {"source_hash": entry.source_hash(), "last": result, "failures": failures}
    try:
        atomic_write_text(path, json.dumps(body, indent=1, sort_keys=True))
    except OSError as exc:  # a read-only cache must not turn a check into a crash
        log.warning("could not record the check of %s in %s: %s", entry.implementation_name, path, exc)


def last_checks(entry: Any) -> dict[str, Any]:
    """``{"last": result | None, "failures": [...]}`` for the entry's current source (empty if never checked)."""
    path = _record_path(entry)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"last": None, "failures": []}
    if not isinstance(data, dict) or data.get("source_hash") != entry.source_hash():
        return {"last": None, "failures": []}
    failures = data.get("failures") if isinstance(data.get("failures"), list) else []
    last = data.get("last") if isinstance(data.get("last"), dict) else None
    return {"last": last, "failures": failures}
