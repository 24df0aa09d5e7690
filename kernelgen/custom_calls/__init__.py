"""Custom-call language plugins by name, imported lazily: ``get_language("cuda")``.

Each module ``kernelgen.custom_calls.<language>`` defines ``LANGUAGE``, an instance of
``kernelgen.custom_calls.base.Language``. Probing a toolchain happens only when an entry asks for it.
"""

from __future__ import annotations

import functools
import importlib

from kernelgen.custom_calls.base import Language
from kernelgen.errors import RegistryError

_LANGUAGES = ("cpp", "cuda", "hip", "sycl", "triton")


def language_names() -> tuple[str, ...]:
    return _LANGUAGES


@functools.lru_cache(maxsize=None)
def get_language(name: str) -> Language:
    if name not in _LANGUAGES:
        raise RegistryError(f"unknown custom-call language {name!r}; known: {', '.join(_LANGUAGES)}")
    return importlib.import_module(f"kernelgen.custom_calls.{name}").LANGUAGE


__all__ = ["Language", "get_language", "language_names"]
