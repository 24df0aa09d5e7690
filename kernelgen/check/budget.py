"""How much memory checking a kernel takes in its worker, and the most it may take.

A check holds each input three times (the pristine values, the copy the kernel runs on, the reference's
copy) and each output three times (the kernel's, the reference's result, the kept expectation). A first call
on a 2^31-element tensor would make the worker ask for several times the caller's own memory, so a graph
whose check exceeds ``KERNELGEN_CHECK_MAX_BYTES`` is not checked at that shape: dispatch serves it through
its shape family (one generic kernel, checked at a small batch size of the same family), else eagerly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from kernelgen.input_limits import bound

MAX_BYTES_ENV = "KERNELGEN_CHECK_MAX_BYTES"
COPIES = 3  # of every input and every output, at once, in a check


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def max_check_bytes() -> int:
    """``$KERNELGEN_CHECK_MAX_BYTES``, else a quarter of the machine's memory: the caller keeps the rest."""
    return bound(MAX_BYTES_ENV, _physical_memory() // 4)


def check_bytes(tensor_bytes: Iterable[int]) -> int:
    """What a check of a graph whose inputs and outputs take ``tensor_bytes`` needs, about."""
    return COPIES * sum(tensor_bytes)


def too_large(need: int) -> str:
    """"" when a check needing ``need`` bytes may run, else why not (one line, with the way out)."""
    limit = max_check_bytes()
    if need <= limit:
        return ""
    return (f"checking it at this shape needs about {need / 2**30:.1f} GiB, more than {MAX_BYTES_ENV}="
            f"{limit} bytes; raise it to check and run a kernel at this shape")


__all__ = ["COPIES", "MAX_BYTES_ENV", "check_bytes", "max_check_bytes", "too_large"]
