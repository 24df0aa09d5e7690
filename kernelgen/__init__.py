"""kernelgen: trace small fused PyTorch subgraphs into tiled kernels, autotune them, share the results."""

from __future__ import annotations

__version__ = "0.1.0"

from kernelgen.errors import KernelgenError
from kernelgen.ir import Graph, trace
from kernelgen.space import Constraint, Param, SearchSpace
from kernelgen.target import Target
from kernelgen.values import Config, Measurement, Source, Status, TensorSpec, TimeStats, TuningRecord

__all__ = sorted([
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
    "trace",
])
