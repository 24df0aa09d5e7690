"""On/off switches read from the environment (``KERNELGEN_MALLOC``, ``KERNELGEN_ADAPT_THREADS``, ...).

Every switch accepts the usual spellings and refuses anything else in one line: a value such as ``off`` or
``disable`` used to leave the feature on without a word, since only the exact string ``0`` turned it off.
"""

from __future__ import annotations

import os

from kernelgen.errors import KernelgenError

# Off: no packed-weight choice for a constant weight (a convolution's, ``kernelgen.templates.vendor_conv``; a Linear's,
# ``kernelgen.templates.vendor_gemm``), for code
# that updates weights where a tensor's version counter cannot see it (through ``param.data``).
PACK_WEIGHTS = "KERNELGEN_PACK_WEIGHTS"

# Off: every graph compiles through kernelgen, even one whose whole-step verdict says it runs faster eagerly
# (``kernelgen.runtime.step_verdicts``): to look at its regions' kernels, or to test their dispatch.
STEP_VERDICTS = "KERNELGEN_STEP_VERDICTS"

# Compared after stripping surrounding whitespace and lower-casing.
SPELLINGS = {"1": True, "on": True, "true": True, "yes": True, "0": False, "off": False, "false": False, "no": False}


def env_flag(name: str, default: bool) -> bool:
    """The switch ``$name``: ``default`` when it is unset or empty; raises ``KernelgenError`` naming the variable,
    its value and the accepted spellings when it is none of ``SPELLINGS``. Read where the switch is used (never
    at import: a typo must fail the command that meets it, not ``import kernelgen``)."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    value = SPELLINGS.get(raw.strip().lower())
    if value is None:
        raise KernelgenError(f"{name}={raw!r} is not understood; set it to 1, on, true or yes (on) or to 0, off, "
                             "false or no (off), or unset it")
    return value


__all__ = ["PACK_WEIGHTS", "SPELLINGS", "STEP_VERDICTS", "env_flag"]
