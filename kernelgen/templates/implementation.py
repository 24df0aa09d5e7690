"""A template family applied to the problem it matched, as the ``Implementation`` the tuner and dispatcher see."""

from __future__ import annotations

from typing import Any

from kernelgen.backends import get_backend
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config

REBUILD = "kernelgen.templates.candidates:rebuild"  # how a measurement worker rebuilds a template implementation


class TemplateImplementation(Implementation):
    """A template family applied to the problem it matched."""

    worker_factory = REBUILD

    def __init__(self, template: Any, problem: Any, backend: str) -> None:
        self.template = template
        self.problem = problem
        self.backend = backend
        self.graph = problem.graph
        self.name = template.name
        self.worker_args = {"name": self.name}

    def source_hash(self) -> str:
        return self.template.source_hash(self.backend)

    def space(self, target: Target) -> SearchSpace:
        return self.template.space(self.problem, target)

    def render(self, config: Config, target: Target) -> Any:
        return self.template.render(self.problem, config, target)

    def build(self, config: Config, target: Target) -> Launcher:
        return get_backend(self.backend).compile(self.render(config, target))

    def tolerance(self, dtype: str) -> tuple[float, float] | None:
        return self.template.tolerance(self.problem, dtype)

    def shape_generic(self, target: Target) -> bool:
        """True when the template renders the batch size as a kernel argument on this backend (its source
        says so in ``meta["dynamic"]``); a template that bakes it in, or fails to render, is not generic."""
        if not self.graph.dynamic:
            return False
        try:
            return "dynamic" in self.render(self.default_config(target), target).meta
        except Exception:  # noqa: BLE001 - a renderer bug on this graph: the caller compiles per size instead
            return False

    def __repr__(self) -> str:
        return f"TemplateImplementation({self.name!r}, backend={self.backend!r})"


__all__ = ["REBUILD", "TemplateImplementation"]
