"""The public API's home: ``compile``, ``register_custom_call``, and the hooks that join the layers.

Lower layers never import higher ones; where one needs a service from above, it exposes a hook and this
module, imported by ``kernelgen/__init__``, installs it:

- the runtime's ``FrontEnd`` (``kernelgen.frontend.front_end``): how a callable is described and traced, and
  the ``torch.compile`` path for what no single template covers;
- the runtime's ``Tuner`` (``kernelgen.tune.auto``): ``tune="auto"``;
- the registry's pattern tracer (``kernelgen.frontend.capture.trace_pattern``): how a custom call's
  ``replaces=`` pattern becomes a graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgen.frontend.capture import trace_pattern
from kernelgen.frontend.front_end import TorchFrontEnd
from kernelgen.registry import add_pattern_tracer, custom_call, register_custom_call
from kernelgen.runtime import seams
from kernelgen.runtime.compiled import CompiledFunction
from kernelgen.tune.auto import AutoTuner

seams.install(front_end=TorchFrontEnd(), tuner=AutoTuner())
add_pattern_tracer(trace_pattern)


def compile(fn: Callable[..., Any], backend: str = "auto", *, tune: bool | str = False, db: Any = None,
            team_db: str | None = None, trials: int | None = None, seconds: float | None = None,
            dynamic: Any = None, max_variants: int | None = None, partition: bool = True) -> CompiledFunction:
    """Compile ``fn`` into a kernelgen-dispatched callable with eager PyTorch's results and gradients.

    ``fn``: a function of tensors (Python constants as arguments are part of the signature), an
    ``nn.Module`` (parameters and buffers read at each call), a bound method, a ``functools.partial`` or a
    callable object; anything else raises ``KernelgenError``.

    ``db``: a database URL or an open database (default: ``KERNELGEN_DB`` or the per-user SQLite file),
    layered over ``team_db`` (default: ``KERNELGEN_TEAM_DB``). ``tune="auto"`` tunes each new signature
    that has no record on first call, within ``trials`` / ``seconds`` (default 60 s); a shape family is
    tuned once per size bucket instead, on its generic kernels at the bucket's size. Calls accept
    ``out=`` (a preallocated output, or a sequence of them in the result's flattened order) and raise
    ``InputMismatchError`` for inputs that cannot run (wrong count, dtype, device, or shapes the function
    rejects). A graph kernelgen cannot run exactly as eager runs eagerly (the reason is logged once).

    ``dynamic``: which batch dims vary at run time, so one generic kernel serves every size (no compile at
    a new size): None (default) makes dim 0 dynamic once a second size is seen, True from the first call,
    False never, ``{"x": [0]}`` for named arguments (see ``kernelgen.runtime.dynamic``). ``max_variants``
    caps the shape variants compiled (default ``KERNELGEN_MAX_VARIANTS`` or 8): static kernels and each kernel
    a shape family builds (one per distinct bucket choice); past it, new shapes run eagerly and a family's
    new buckets run a kernel it has, with a warning logged once.

    ``partition``: a function no single template covers (a whole model, an op kernelgen does not lower) runs
    through ``torch.compile`` with the kernelgen backend: Dynamo, AOTAutograd, the partitioner, kernelgen
    kernels for its regions and ATen for the rest (True, default); False runs such a function eagerly.
    A function one template covers keeps the direct path: no Dynamo guards on its calls.
    """
    return CompiledFunction(fn, backend, tune=tune, db=db, team_db=team_db, trials=trials, seconds=seconds,
                            dynamic=dynamic, max_variants=max_variants, partition=partition)


__all__ = ["CompiledFunction", "compile", "custom_call", "register_custom_call"]
