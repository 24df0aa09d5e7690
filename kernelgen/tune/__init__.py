"""Autotuning: search over a template's SearchSpace (Optuna), measure in workers, confirm, record; budgets,
manifests and replay of recorded landscapes.

- ``tuner``: ``tune_graph`` / ``tune_workload``, with ``trial_loop`` (trials in worker threads) and ``confirm``
  (interleaved rounds that declare the verdict); ``preflight`` (budgets, usable implementations).
- ``search`` and ``samplers`` (+ ``domain``, ``gp``): the search strategies, Optuna studies in the database.
- ``manifest`` (workloads of functions and models), ``bucket`` (size ranges of shape families),
  ``landscape`` (replay of recorded timings), ``auto`` (``tune="auto"``, the runtime's ``Tuner``).

Names are imported on first use, so importing the package does not import Optuna.
"""

import importlib
from typing import Any

_EXPORTS = {
    "Landscape": "kernelgen.tune.landscape", "LandscapeError": "kernelgen.tune.landscape",
    "load_landscape": "kernelgen.tune.landscape", "replay": "kernelgen.tune.landscape",
    "SAMPLERS": "kernelgen.tune.search", "SearchResult": "kernelgen.tune.search", "Searcher": "kernelgen.tune.search",
    "run_search": "kernelgen.tune.search",
    "Workload": "kernelgen.tune.manifest", "load_manifest": "kernelgen.tune.manifest",
    "TimingPolicy": "kernelgen.check.measure",
    "TrialEvent": "kernelgen.tune.tuner", "TuneResult": "kernelgen.tune.tuner", "tune_graph": "kernelgen.tune.tuner",
    "tune_workload": "kernelgen.tune.tuner",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernelgen.tune' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
