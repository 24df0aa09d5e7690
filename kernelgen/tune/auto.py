"""``tune="auto"``: the runtime's ``Tuner`` seam, implemented by the tuner (``kernelgen.api`` installs it).

The runtime never imports the tuner; this module imports it only when a signature is tuned, so compiling a
function without ``tune="auto"`` never imports Optuna.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgen.runtime.seams import Tuner
from kernelgen.tune.bucket import members


class AutoTuner(Tuner):
    """Tune on first call with ``tune_graph`` (one signature) or ``tune_bucket`` (one size bucket of a family)."""

    def tune_graph(self, graph: Any, *, backend: str, db: Any, trials: int | None, seconds: float | None,
                   name: str | None) -> Any:
        from kernelgen.tune import tuner  # deferred: Optuna costs ~1 s at import; tests replace tuner.tune_graph

        return tuner.tune_graph(graph, backend=backend, db=db, trials=trials, seconds=seconds, name=name).best

    def tune_bucket(self, generic: Sequence[Any], graph: Any, *, backend: str, db: Any, trials: int | None,
                    seconds: float | None, name: str | None) -> Any:
        """Every trial is committed under ``graph``'s workload key (a bucket's size), measuring the generic kernels
        (``members``) that run at every size of the bucket."""
        from kernelgen.tune import tuner  # deferred: Optuna costs ~1 s at import; tests replace tuner.tune_graph

        return tuner.tune_graph(graph, backend=backend, db=db, trials=trials, seconds=seconds, name=name,
                                implementations=members(generic, graph)).best


__all__ = ["AutoTuner"]
