"""A fake implementation whose builder never finishes (a Python builder stuck in a loop or a wait), for the
tests that ``--timeout`` bounds building as it bounds running. Importable by a worker process."""

from __future__ import annotations

import time
from typing import Any

from tune_fakes import FakeImpl

from kernelgen.ir.graph import Graph
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config


class StuckBuildImpl(FakeImpl):
    """relu(x + y) whose build of ``reps == stuck_reps`` sleeps for an hour; other configs build as FakeImpl's."""

    name = "stuck_build"
    worker_factory = "isolation_fakes:make_stuck_build"
    stuck_reps = 2

    def source_hash(self) -> str:
        return "stuck-build-v1"

    def build(self, config: Config, target: Target) -> Any:
        if config["reps"] == self.stuck_reps:
            time.sleep(3600)
        return super().build(config, target)


def make_stuck_build(graph: Graph, backend: str) -> StuckBuildImpl:
    return StuckBuildImpl(graph)


class StuckDefaultBuildImpl(StuckBuildImpl):
    """The same, stuck on its default config (what a one-trial tuning measures first)."""

    name = "stuck_default_build"
    worker_factory = "isolation_fakes:make_stuck_default_build"
    stuck_reps = 1


def make_stuck_default_build(graph: Graph, backend: str) -> StuckDefaultBuildImpl:
    return StuckDefaultBuildImpl(graph)
