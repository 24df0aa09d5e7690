"""What the vendor-call implementations (``aten_gemm``, ``aten_conv``) share: the pointwise epilogue after the
vendor's op, as the pointwise template's implementation; its parameters inside their search space (prefixed
``epilogue_``); and the source hash of an implementation whose code is its module, the pointwise renderer and the
backend's recipe, plus the torch version whose op it calls."""

from __future__ import annotations

from typing import Any

from kernelgen import code_hash
from kernelgen.backends import get_backend
from kernelgen.ir.graph import Graph
from kernelgen.ir.space import Constraint, Param
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config
from kernelgen.templates.implementation import TemplateImplementation
from kernelgen.templates.pointwise import TEMPLATE as POINTWISE

EPILOGUE = "epilogue_"  # prefix of the pointwise template's parameters in a vendor implementation's space


def pointwise_epilogue(found: tuple[Graph, tuple[int, ...]] | None, backend: str, what: str
                       ) -> tuple[Any, tuple[int, ...]]:
    """``(the epilogue's TemplateImplementation or None, the original input positions it reads)`` for ``found``, an
    ``epilogue_graph`` result (None: the vendor's op writes the output itself); ``what`` names the workload in the
    error of an epilogue that is not pointwise (the templates match only pointwise epilogues: cannot happen)."""
    if found is None:
        return None, ()
    graph, args = found
    problem = POINTWISE.match(graph)
    if problem is None:
        raise ValueError(f"the epilogue of {what} is not pointwise")
    return TemplateImplementation(POINTWISE, problem, backend), args


def epilogue_space(epilogue: Any, target: Target) -> tuple[list[Param], list[Constraint], dict[str, Any]]:
    """The epilogue's parameters, constraints and default, prefixed for a vendor implementation's space (nothing
    for no epilogue)."""
    if epilogue is None:
        return [], [], {}
    inner = epilogue.space(target)
    params = [Param(EPILOGUE + p.name, p.choices) for p in inner.params]
    constraints = [Constraint(c.description, lambda cfg, c=c: c(epilogue_config(cfg))) for c in inner.constraints]
    return params, constraints, {EPILOGUE + k: v for k, v in inner.default().items()}


def epilogue_config(config: Config) -> Config:
    """The epilogue's own config inside a vendor implementation's config."""
    return Config({k[len(EPILOGUE):]: v for k, v in config.items() if k.startswith(EPILOGUE)})


def vendor_source_hash(module: str, backend: str) -> str:
    """The derived hash of ``module``'s closure with the pointwise renderer of ``backend``, the backend's recipe and
    the torch version whose op the implementation calls."""
    import torch

    compiler = get_backend(backend)
    roots = (module, f"kernelgen.templates.pointwise_{backend}", type(compiler).__module__)
    return code_hash.implementation_hash(roots, {**compiler.recipe(), "torch": torch.__version__})


__all__ = ["EPILOGUE", "epilogue_config", "epilogue_space", "pointwise_epilogue", "vendor_source_hash"]
