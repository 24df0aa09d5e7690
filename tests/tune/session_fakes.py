"""Fakes that say which worker process built them, for the tests that one tuning session keeps one measuring worker.

``PidImpl`` is ``FakeImpl`` (relu(x + y) in C++) under a name of its own, whose factory and every build append
``<event> <implementation> <pid>`` to a log file named in ``worker_args``; configs whose ``reps`` is in ``crash``
raise SIGSEGV, those in ``no_space`` fail to build as on a full disk (an environment failure). Importable by a worker process (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from tune_fakes import FakeImpl

from kernelgen.ir.graph import Graph
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config


def _note(log: str, event: str, name: str) -> None:
    with open(log, "a") as f:
        f.write(f"{event} {name} {os.getpid()}\n")


class PidImpl(FakeImpl):
    worker_factory = "session_fakes:make_pid_impl"

    def __init__(self, graph: Graph, name: str, log: str, crash: tuple[int, ...] = (),
                 no_space: tuple[int, ...] = ()) -> None:
        super().__init__(graph, modes=("ok",), reps=(1, 2, 4))
        self.name, self.log, self.crash, self.no_space = name, log, tuple(crash), tuple(no_space)
        self.worker_args = {"name": name, "log": log, "crash": list(crash), "no_space": list(no_space)}

    def source_hash(self) -> str:
        return f"pid-{self.name}-v1"

    def build(self, config: Config, target: Target) -> Any:
        _note(self.log, "build", self.name)
        if config["reps"] in self.no_space:
            raise OSError(errno.ENOSPC, "No space left on device")
        if config["reps"] in self.crash:
            config = Config(mode="segv", reps=config["reps"])
        return super().build(config, target)


def make_pid_impl(graph: Graph, backend: str, name: str, log: str, crash: list[int] = (),
                  no_space: list[int] = ()) -> PidImpl:
    _note(log, "setup", name)
    return PidImpl(graph, name, log, tuple(crash), tuple(no_space))


def worker_pids(log: str, event: str | None = None) -> list[int]:
    """The pid of every logged event (of ``event`` only, when given), in order."""
    with open(log) as f:
        rows = [line.split() for line in f if line.strip()]
    return [int(pid) for ev, _, pid in rows if event is None or ev == event]
