"""The template contract: match a ``Graph``, offer a ``SearchSpace``, render a ``Source`` per backend.

A template family lives in ``kernelgen/templates/<family>.py`` (matching and the ``Problem`` it
extracts) and one module per backend, ``<family>_cpp.py`` and ``<family>_triton.py``, each exposing:

    space(problem, target) -> SearchSpace        # includes the target's resource limits as constraints
    render(problem, config, target) -> Source     # raises ValueError for a config the space rejects

Backend modules are imported lazily, so a machine without Triton can still render C++.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

from kernelgen import code_hash
from kernelgen.backends import get_backend
from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import Graph
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Source


@dataclass(frozen=True)
class Problem:
    """What a template extracted from a graph. Families subclass it with their own fields."""

    graph: Graph


class Template(ABC):
    """A tiled kernel family. Stateless; instances are shared and thread-safe."""

    name: ClassVar[str]
    backends: ClassVar[tuple[str, ...]] = ("cpp", "triton")
    text_files: ClassVar[tuple[str, ...]] = ()  # template text files (paths) whose content is part of source_hash

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

    def tolerance(self, problem: Problem, dtype: str) -> tuple[float, float] | None:
        """``(rtol, atol)`` this template's outputs of ``dtype`` are checked with for ``problem``, or None for the
        shared per-dtype table (a template whose sums cancel by construction says how far they may drift)."""
        return None

    def source_hash(self, backend: str) -> str:
        """Hash of everything that shapes this template's code for ``backend``: the kernelgen modules its
        family and renderer modules import (transitively), its text files and the backend's compile
        recipe (``kernelgen.code_hash``). A change of any of them is a new key, never a silent reuse."""
        compiler = get_backend(backend)  # its module too: it adds code (launch wrappers) to what it compiles
        roots = (type(self).__module__, f"kernelgen.templates.{self.name}_{backend}", type(compiler).__module__)
        return code_hash.implementation_hash(roots, compiler.recipe(), self.text_files)
