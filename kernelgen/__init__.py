"""kernelgen: trace small fused PyTorch subgraphs into tiled kernels, autotune them, share the results."""

from __future__ import annotations

from kernelgen import logs as _logs
from kernelgen.version import __version__

_logs.configure_from_env()  # KERNELGEN_LOG=debug|info|warning: the library's only handler, opt-in

from kernelgen.api import CompiledFunction, compile, custom_call, register_custom_call
from kernelgen.errors import KernelgenError
from kernelgen.frontend.capture import trace
from kernelgen.ir.graph import Graph
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Measurement, Source, Status, TensorSpec, TimeStats, TuningRecord

__all__ = sorted([
    "CompiledFunction",
    "Config",
    "Constraint",
    "Graph",
    "KernelgenError",
    "Measurement",
    "Param",
    "SearchSpace",
    "Source",
    "Status",
    "Target",
    "TensorSpec",
    "TimeStats",
    "TuningRecord",
    "__version__",
    "compile",
    "custom_call",
    "register_custom_call",
    "trace",
])
