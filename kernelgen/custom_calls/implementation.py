"""A registered custom call applied to one graph: the ``Implementation`` the tuner and dispatcher see.

``build(config, target)`` loads (compiles, cached) the kernel and wraps the entry's launcher in one that
validates the tensors it is given; it runs nothing. The check against the reference happens in an
isolated worker (``kernelgen.check.verdicts``) with the checker templates use (``kernelgen.check.compare``), under
the entry's registered ``tolerance=`` when it has one; ``note_verdict`` records each outcome for
``kernelgen registry list``. ``factory_for`` names how a worker rebuilds one (``kernelgen.custom_calls.rebuild``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kernelgen import code_hash
from kernelgen.backends import get_backend
from kernelgen.check.compare import tolerance
from kernelgen.check.verdicts import forget
from kernelgen.custom_calls import checks, get_language
from kernelgen.custom_calls.loading import folder_of
from kernelgen.errors import InputMismatchError, KernelgenError
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, TensorSpec
from kernelgen.registry import pattern_tracer_names, reference_for

REBUILD_MODULE = "kernelgen.custom_calls.rebuild"  # where a worker's factory of a custom call lives


def factory_for(entry: Any) -> str:
    """The ``worker_factory`` string of ``entry``'s implementations: ``REBUILD_MODULE``'s ``r_<hex JSON>``, the
    JSON saying where the registration came from (a module, or a registry folder) and the implementation."""
    module = entry.module or getattr(entry.launcher, "__module__", None)
    spec: dict[str, Any] = {"impl": entry.implementation_name}
    tracers = pattern_tracer_names()
    if tracers:  # the forms a pattern is matched in here (a region's ATen graph): the worker adds the same
        spec["tracers"] = tracers
    folder = folder_of(module)
    if folder is not None:
        spec["folder"] = folder
    elif module and module != "__main__":
        spec["module"] = module
    return f"{REBUILD_MODULE}:r_{json.dumps(spec, sort_keys=True).encode().hex()}"


class _BoundLauncher:
    """The entry's launcher with its kernel and config bound; called with inputs then outputs."""

    def __init__(self, entry: Any, graph: Graph, kernel: Any, config: Config, device: str) -> None:
        self.entry, self.kernel, self.config, self.device = entry, kernel, config, device
        self.specs: tuple[TensorSpec, ...] = graph.signature + graph.output_specs
        self.n_inputs = len(graph.signature)

    @property
    def num_threads(self) -> int | None:
        return getattr(self.kernel, "num_threads", None)

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        # The tuner pins the thread count it records; native kernels hand it to their launchers.
        if hasattr(self.kernel, "num_threads"):
            self.kernel.num_threads = value

    @property
    def source_file(self) -> Any:
        """The source compiled into the cache (a native library's ``.cpp`` beside it), else the registered file."""
        compiled = getattr(self.kernel, "source_file", None)
        library = getattr(self.kernel, "library_path", None)
        if compiled is None and library is not None and library.with_suffix(".cpp").exists():
            compiled = library.with_suffix(".cpp")
        return compiled or self.entry.source_path

    def check(self, tensors: tuple[Any, ...]) -> None:
        if len(tensors) != len(self.specs):
            raise InputMismatchError(f"{self.entry.implementation_name} takes {len(self.specs)} tensors "
                                     f"(inputs then outputs), got {len(tensors)}")
        for i, (t, spec) in enumerate(zip(tensors, self.specs)):
            if not hasattr(t, "data_ptr"):
                raise InputMismatchError(f"argument {i} of {self.entry.implementation_name} must be a torch tensor")
            actual = TensorSpec.of(t)
            if actual != spec:
                raise InputMismatchError(f"argument {i} is {actual.dtype}{list(actual.shape)} strides "
                                         f"{list(actual.effective_strides())}; {self.entry.implementation_name} "
                                         f"was built for {spec.dtype}{list(spec.shape)} (contiguous)")
            if t.device.type != self.device:
                raise InputMismatchError(f"argument {i} is on {t.device.type}; "
                                         f"{self.entry.implementation_name} runs on {self.device} tensors")

    def launch(self, *tensors: Any) -> None:
        inputs, outputs = list(tensors[: self.n_inputs]), list(tensors[self.n_inputs:])
        if self.entry.wants_kernel:
            self.entry.launcher(inputs, outputs, self.config, kernel=self.kernel)
        else:
            self.entry.launcher(inputs, outputs, self.config)

    def __call__(self, *tensors: Any) -> None:
        self.check(tensors)
        self.launch(*tensors)


class CustomCallImplementation(Implementation):
    """One registered custom call (``entry``) implementing ``graph`` on ``backend`` (platform ``platform``)."""

    check_value_classes = True  # hand-written: checked on zeros, large, NaN/Inf and the first call's data too

    def __init__(self, entry: Any, graph: Graph, backend: str, platform: str) -> None:
        self.entry = entry
        self.graph = graph
        self.backend = backend
        self.platform = platform
        self.name = entry.implementation_name

    @property  # type: ignore[override]
    def worker_factory(self) -> str:
        """How an isolated tuning worker rebuilds this implementation (see ``custom_calls.rebuild``)."""
        return factory_for(self.entry)

    @property
    def device(self) -> str:
        return "cuda" if self.platform in ("cuda", "hip") else "cpu"

    def source_hash(self) -> str:
        """The entry's own hash (source, launcher, params) with the backend's compile recipe folded in."""
        return code_hash.combine(self.entry.source_hash(), get_backend(self.backend).recipe())

    def space(self, target: Target) -> SearchSpace:
        return self.entry.space(self.graph.signature, target)

    def build(self, config: Config, target: Target) -> Launcher:
        config = Config(dict(config))
        problems = self.space(target).violations(config)
        if problems:
            raise KernelgenError(f"config {dict(config)} is invalid for {self.name}: {'; '.join(problems)}")
        kernel = get_language(self.entry.language).load(self.entry, config)
        return _BoundLauncher(self.entry, self.graph, kernel, config, self.device)

    def tolerance(self, dtype: str) -> tuple[float, float] | None:
        """The registered ``tolerance=`` as both rtol and atol, else the shared table."""
        return tolerance(dtype, self.entry.tolerance)

    def custom_call_reference(self, name: str) -> Callable[..., Any]:
        """The registered reference of custom call ``name`` (the registry's, loading its default folders)."""
        return reference_for(name)

    def note_verdict(self, config: Config, verdict: Any) -> None:
        checks.record(self.entry, self.graph.workload_key, self.graph.signature, config,
                      "" if verdict.ok else verdict.describe())

    def __repr__(self) -> str:
        return f"CustomCallImplementation({self.name!r}, backend={self.backend!r}, platform={self.platform!r})"


def forget_verdicts() -> None:
    """Drop the in-process check results (tests; after editing a kernel in a long-lived process)."""
    forget()
