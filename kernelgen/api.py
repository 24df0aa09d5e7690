"""The public API's home: ``compile``, ``register_custom_call``, and the hooks that join the layers.

Lower layers never import higher ones; where one needs a service from above, it exposes a hook and this
module, imported by ``kernelgen/__init__``, installs it. The registry matches ``replaces=`` patterns with the
front end's trace.
"""

from __future__ import annotations

from kernelgen.frontend.capture import trace_pattern
from kernelgen.registry import add_pattern_tracer, custom_call, register_custom_call

add_pattern_tracer(trace_pattern)

__all__ = ["custom_call", "register_custom_call"]
