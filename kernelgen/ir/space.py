"""Search spaces: named tunable parameters with their choices, plus constraints a config must satisfy.

A ``SearchSpace`` is what a template (or custom call, or recorded landscape) offers the tuner. The tuner
never measures a config for which ``is_valid`` is False; templates put the target's resource limits
(shared memory, registers, threads per block, cache sizes) into constraints.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.ir.values import Config


@dataclass(frozen=True)
class Param:
    """One tunable: a name and its ordered choices (numbers ascending where that means anything)."""

    name: str
    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        if not self.choices:
            raise ValueError(f"parameter {self.name!r} has no choices")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"parameter {self.name!r} repeats a choice: {self.choices}")


@dataclass(frozen=True)
class Constraint:
    """A predicate over a config with a human description (shown when a config is rejected)."""

    description: str
    check: Callable[[Config], bool]

    def __call__(self, config: Config) -> bool:
        return bool(self.check(config))


class SearchSpace:
    """Named parameters with choices and constraints. Immutable; safe to share between threads."""

    def __init__(self, params: Sequence[Param], constraints: Sequence[Constraint] = (),
                 default: Config | dict | None = None) -> None:
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        self.params: tuple[Param, ...] = tuple(params)
        self.constraints: tuple[Constraint, ...] = tuple(constraints)
        self._by_name = {p.name: p for p in self.params}
        self._default = None if default is None else Config(dict(default))
        if self._default is not None and self.violations(self._default):
            raise ValueError(f"default config {dict(self._default)} breaks: {self.violations(self._default)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def param(self, name: str) -> Param:
        return self._by_name[name]

    def violations(self, config: Config) -> list[str]:
        """Descriptions of everything wrong with ``config``; empty when it is valid."""
        problems = []
        if set(config) != set(self._by_name):
            problems.append(f"config keys {sorted(config)} differ from parameters {sorted(self._by_name)}")
            return problems
        for p in self.params:
            if config[p.name] not in p.choices:
                problems.append(f"{p.name}={config[p.name]!r} is not one of {p.choices}")
        if problems:
            return problems
        return [c.description for c in self.constraints if not c(config)]

    def is_valid(self, config: Config) -> bool:
        return not self.violations(config)

    def cardinality(self) -> int:
        """Size of the Cartesian product, before constraints."""
        n = 1
        for p in self.params:
            n *= len(p.choices)
        return n

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in lexicographic order of choices."""
        for values in itertools.product(*(p.choices for p in self.params)):
            config = Config(dict(zip(self.names, values)))
            if all(c(config) for c in self.constraints):
                yield config

    def default(self) -> Config:
        """The template's stated default, else the first valid config."""
        if self._default is not None:
            return self._default
        for config in self:
            return config
        raise ValueError("the search space has no valid config")
