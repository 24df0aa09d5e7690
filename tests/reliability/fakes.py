"""Small implementations and measurers for the reliability scenarios (importable by a child process as
``tests.reliability.fakes``)."""

from __future__ import annotations

import os
import signal
from typing import Any

from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Measurement, Status, TensorSpec, TimeStats


def add_graph(n: int = 64) -> Graph:
    import torch

    from kernelgen.frontend.capture import trace

    return trace(lambda x, y: torch.relu(x + y), TensorSpec((n,), "float32"), TensorSpec((n,), "float32"))


class FourConfigs(Implementation):
    """One parameter with four values, measured by an injected measurer (never built)."""

    name = "four"
    backend = "cpp"

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def source_hash(self) -> str:
        return "four-v1"

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace([Param("a", (1, 2, 3, 4))], [], default={"a": 1})

    def build(self, config: Config, target: Target) -> Any:
        raise AssertionError("measured by the injected measurer, never built")


class Counting:
    """``measure(impl, config)``: time 1 ms / a, every call counted; ``die_on`` SIGKILLs this process when asked
    to measure that value of ``a`` (a tuner killed mid-trial)."""

    def __init__(self, die_on: int | None = None) -> None:
        self.calls: list[Config] = []
        self.die_on = die_on

    def __call__(self, impl: Any, config: Config) -> Measurement:
        if config["a"] == self.die_on:
            os.kill(os.getpid(), signal.SIGKILL)
        self.calls.append(config)
        t = 1e-3 / config["a"]
        return Measurement(config, Status.OK, TimeStats(median=t, min=t, spread=0.0, repeats=5), threads=1)
