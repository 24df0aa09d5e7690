"""The template contract: match a ``Graph``, offer a ``SearchSpace``, render a ``Source`` per backend.

A template family lives in ``kernelgen/templates/<family>.py`` (matching and the ``Problem`` it
extracts) and one module per backend, ``<family>_cpp.py`` and ``<family>_triton.py``, each exposing:

    space(problem, target) -> SearchSpace        # includes the target's resource limits as constraints
    render(problem, config, target) -> Source     # raises ValueError for a config the space rejects

Backend modules are imported lazily, so a machine without Triton can still render C++.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

from kernelgen.errors import KernelgenError
from kernelgen.ir import Graph
from kernelgen.space import SearchSpace
from kernelgen.target import Target
from kernelgen.values import Config, Source


@dataclass(frozen=True)
class Problem:
    """What a template extracted from a graph. Families subclass it with their own fields."""

    graph: Graph


class Template(ABC):
    """A tiled kernel family. Stateless; instances are shared and thread-safe."""

    name: ClassVar[str]
    backends: ClassVar[tuple[str, ...]] = ("cpp", "triton")
    shared_modules: ClassVar[tuple[str, ...]] = ()  # codegen helpers whose text is part of source_hash

    @abstractmethod
    def match(self, graph: Graph) -> Problem | None:
        """The problem this template would solve for ``graph``, or None when it does not cover it."""

    def backend_module(self, backend: str) -> ModuleType:
        if backend not in self.backends:
            raise KernelgenError(f"template {self.name!r} has no {backend!r} renderer; it supports {self.backends}")
        return importlib.import_module(f"kernelgen.templates.{self.name}_{backend}")

    def space(self, problem: Problem, target: Target) -> SearchSpace:
        return self.backend_module(target.backend).space(problem, target)

    def default_config(self, problem: Problem, target: Target) -> Config:
        return self.space(problem, target).default()

    def render(self, problem: Problem, config: Config, target: Target) -> Source:
        space = self.space(problem, target)
        problems = space.violations(config)
        if problems:
            raise ValueError(f"config {dict(config)} is invalid for {self.name}: {'; '.join(problems)}")
        return self.backend_module(target.backend).render(problem, config, target)

    def source_hash(self, backend: str) -> str:
        """Hash of every module that shapes this template's code for ``backend``: a change is a new key."""
        return _modules_hash((type(self).__module__, f"kernelgen.templates.{self.name}_{backend}",
                              *self.shared_modules))


@functools.lru_cache(maxsize=None)
def _modules_hash(module_names: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    names = list(module_names)
    for name in names:
        try:
            module = importlib.import_module(name)
            digest.update(inspect.getsource(module).encode())
        except (ImportError, OSError, TypeError):
            digest.update(f"missing:{name}".encode())
            continue
        # a codegen module split into several (the renderers' op tables) names the others it renders with
        names.extend(n for n in getattr(module, "SOURCE_DEPENDENCIES", ()) if n not in names)
    return digest.hexdigest()[:16]
