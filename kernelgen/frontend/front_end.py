"""The front end as the runtime sees it: the ``FrontEnd`` that ``kernelgen.api`` installs in the runtime.

It describes a callable (``callables``), traces it (``capture``) and, for what no single template covers,
wraps it in ``torch.compile`` with the kernelgen backend (``dynamo_backend``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.frontend.callables import Callee, describe
from kernelgen.frontend.capture import Capture, capture
from kernelgen.frontend.dynamo_backend import kernelgen_backend
from kernelgen.runtime.seams import FrontEnd


class TorchFrontEnd(FrontEnd):
    """torch.fx capture for the direct path, Dynamo and AOTAutograd for the graph path."""

    def describe(self, fn: Any) -> Callee:
        return describe(fn)

    def capture(self, callee: Any, values: Sequence[Any], layout: Any = None, state: Sequence[Any] = ()) -> Capture:
        return capture(callee, values, layout, state)

    def compile_graph(self, fn: Any, options: dict[str, Any], dynamic: bool | None) -> Callable[..., Any]:
        import torch  # deferred: importing kernelgen stays free of torch until something is compiled

        return torch.compile(fn, backend=functools.partial(kernelgen_backend, options=options), dynamic=dynamic)


__all__ = ["TorchFrontEnd"]
