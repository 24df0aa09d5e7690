"""Autotuning: search over a template's SearchSpace (Optuna), budgets, replay of recorded landscapes.

Names are imported on first use, so dispatch can use ``kernelgen.check.verdicts`` (a worker check) without
importing Optuna.
"""

import importlib
from typing import Any

_EXPORTS = {
    "Landscape": "landscape", "LandscapeError": "landscape", "load_landscape": "landscape", "replay": "landscape",
    "SAMPLERS": "search", "SearchResult": "search", "Searcher": "search", "run_search": "search",
    "Workload": "manifest", "load_manifest": "manifest",
    "TimingPolicy": "measure",
    "TrialEvent": "tuner", "TuneResult": "tuner", "tune_graph": "tuner", "tune_workload": "tuner",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernelgen.tune' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kernelgen.tune.{_EXPORTS[name]}"), name)
