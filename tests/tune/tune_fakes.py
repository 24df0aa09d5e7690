"""Fake implementations for tuner tests: tiny C++ kernels that work, crash, hang, lie or fail to compile.

Importable in a worker process (``worker_factory = "tune_fakes:make_fake"``): pytest puts this folder on
``sys.path`` and the worker inherits the parent's ``sys.path``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, TensorSpec

BODIES = {
    "ok": "for (int64_t i = 0; i < n; ++i) { float v = x[i] + y[i]; out[i] = v > 0.f ? v : 0.f; }",
    "segv": "raise(SIGSEGV);",
    "hang": "volatile int spin = 1; while (spin) {}",
    "garbage": "for (int64_t i = 0; i < n; ++i) out[i] = 42.0f;",
    "syntax": "this is not C++ at all",
    "inplace": "for (int64_t i = 0; i < n; ++i) { float v = x[i] + y[i]; out[i] = v > 0.f ? v : 0.f; x[i] = -1.f; }",
}

SOURCE = """
#include <csignal>
#include <cstdint>
extern "C" void fake_kernel(void* const* ptrs, int64_t threads) {{
  const int64_t n = {n};
  float* x = static_cast<float*>(ptrs[0]);
  float* y = static_cast<float*>(ptrs[1]);
  float* out = static_cast<float*>(ptrs[2]);
  (void)threads; (void)x; (void)y; (void)out;
  for (int rep = 0; rep < {reps}; ++rep) {{ {body} }}
}}
"""


def relu_add_graph(n: int = 256) -> Graph:
    import torch

    from kernelgen.frontend.capture import trace

    return trace(lambda x, y: torch.relu(x + y), TensorSpec((n,), "float32"), TensorSpec((n,), "float32"))


class FakeImpl(Implementation):
    """relu(x + y) with a 'mode' parameter choosing the kernel's behaviour and 'reps' its cost."""

    name = "fake"
    backend = "cpp"
    worker_factory = "tune_fakes:make_fake"

    def __init__(self, graph: Graph, modes: tuple[str, ...] = tuple(BODIES), reps: tuple[int, ...] = (1, 2, 4, 8)) -> None:
        self.graph = graph
        self.modes = modes
        self.reps = reps

    def source_hash(self) -> str:
        return "fake-v1"

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace([Param("mode", self.modes), Param("reps", self.reps)],
                           [Constraint("reps 8 is forbidden", lambda c: c["reps"] != 8)],
                           default={"mode": self.modes[0], "reps": 1})

    def build(self, config: Config, target: Target) -> Any:
        from kernelgen.backends.cpp import build_shared_library

        n = self.graph.signature[0].numel
        text = SOURCE.format(n=n, reps=config["reps"], body=BODIES[config["mode"]])
        lib = ctypes.CDLL(str(build_shared_library(text, name="fake")))
        fn = lib.fake_kernel
        fn.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64)

        def launch(*tensors: Any) -> None:
            fn((ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors]), 1)

        launch.lib = lib  # keep the library loaded
        return launch


def make_fake(graph: Graph, backend: str) -> FakeImpl:
    return FakeImpl(graph)


class LandscapeImpl(Implementation):
    """A 3-parameter space whose time comes from ``landscape_time`` (measured by an injected measurer)."""

    name = "landscape"
    backend = "cpp"

    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def source_hash(self) -> str:
        return "landscape-v1"

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace([Param("a", (1, 2, 4, 8, 16, 32, 64, 128)), Param("b", (1, 2, 4, 8, 16, 32, 64, 128)),
                            Param("c", (1, 2, 3, 4))],
                           [Constraint("a*b <= 4096", lambda c: c["a"] * c["b"] <= 4096)],
                           default={"a": 1, "b": 1, "c": 1})

    def build(self, config: Config, target: Target) -> Any:
        raise AssertionError("landscape configs are measured by the injected measurer, never built")


def landscape_time(config: Config) -> float:
    """A smooth bowl with its optimum at a=32, b=8, c=3, far from the default (1, 1, 1)."""
    import math

    return 1e-3 * (1 + (math.log2(config["a"]) - 5) ** 2 + (math.log2(config["b"]) - 3) ** 2
                   + 0.5 * (config["c"] - 3) ** 2)


class CountingMeasurer:
    """``measure(impl, config)`` for tune_graph: deterministic times, counts every call per config."""

    def __init__(self, fail: Any = None, interrupt_after: int | None = None) -> None:
        self.calls: dict[Config, int] = {}
        self.fail = fail
        self.interrupt_after = interrupt_after

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def __call__(self, impl: Any, config: Config) -> Any:
        from kernelgen.ir.values import Measurement, Status, TimeStats

        if self.interrupt_after is not None and self.total >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls[config] = self.calls.get(config, 0) + 1
        if self.fail is not None and self.fail(config):
            return Measurement.failure(config, Status.RUNTIME_ERROR, "injected failure")
        t = landscape_time(config)
        return Measurement(config, Status.OK, TimeStats(median=t, min=t, spread=0.0, repeats=5), threads=1)
