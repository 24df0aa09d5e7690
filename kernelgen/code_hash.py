"""Derived implementation hashes: the text of every kernelgen module that shapes generated code, plus the
backend's compile recipe, so an edit to any of them is a new tuning key instead of a silent reuse.

The module set is not listed by hand: it is the import closure (read with ``ast``, never by importing) of
a template's own modules within the ``kernelgen`` package. Imports inside functions count for the
rendering packages (templates, codegen, backends), whose lazy imports run while rendering; elsewhere only
module-level imports count, because there they serve other jobs (``ir`` lazily imports the tracer).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_ROOT = "kernelgen"
_RENDERING_PACKAGES = ("kernelgen.templates", "kernelgen.codegen", "kernelgen.backends")


def _read_source(module: str) -> str | None:
    """The text of ``module``'s file, or None when it has no source (tests monkeypatch this)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).read_text()


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module file, found without importing it (only its parent package)."""
    parent, _, leaf = name.rpartition(".")
    try:
        spec = importlib.util.find_spec(parent)
    except (ImportError, ValueError):
        return False
    folders = spec.submodule_search_locations if spec is not None else None
    return any((Path(f) / f"{leaf}.py").is_file() or (Path(f) / leaf / "__init__.py").is_file() for f in folders or ())


def _imported(module: str, text: str) -> set[str]:
    """The ``kernelgen`` modules ``text`` (the source of ``module``) imports."""
    tree = ast.parse(text)
    nested = module.startswith(_RENDERING_PACKAGES)
    statements: Iterable[ast.AST] = ast.walk(tree) if nested else tree.body
    found: set[str] = set()
    for node in statements:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # ``from kernelgen.codegen import cpp_expr`` names a module
                full = f"{node.module}.{alias.name}"
                found.add(full if full.startswith(f"{_ROOT}.") and _is_module(full) else node.module)
    return {name for name in found if name == _ROOT or name.startswith(f"{_ROOT}.")}


def module_closure(roots: tuple[str, ...]) -> tuple[str, ...]:
    """``roots`` and every kernelgen module they import, transitively, sorted."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = _read_source(name)
        if text is not None:
            todo.extend(_imported(name, text) - seen)
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=None)
def _closure_digest(roots: tuple[str, ...], files: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in module_closure(roots):
        text = _read_source(name)
        digest.update(f"{name}\0{text if text is not None else 'missing'}\0".encode())
    for file in files:
        path = Path(file)
        digest.update(f"{path.name}\0{path.read_text() if path.exists() else 'missing'}\0".encode())
    return digest.hexdigest()


def implementation_hash(roots: Iterable[str], recipe: dict[str, Any], files: Iterable[str] = ()) -> str:
    """16 hex digits over the closure of ``roots``, the text of ``files`` and the compile ``recipe``."""
    modules = _closure_digest(tuple(sorted(set(roots))), tuple(sorted(str(f) for f in files)))
    return hashlib.sha256(f"{modules}\0{json.dumps(recipe, sort_keys=True, default=str)}".encode()).hexdigest()[:16]


def combine(source_hash: str, recipe: dict[str, Any]) -> str:
    """``source_hash`` (a custom call's own) with the compile ``recipe`` folded in, 16 hex digits."""
    return hashlib.sha256(f"{source_hash}\0{json.dumps(recipe, sort_keys=True, default=str)}".encode()).hexdigest()[:16]


def forget() -> None:
    """Drop cached digests (tests; a long-lived process after an edit of kernelgen's own files)."""
    _closure_digest.cache_clear()
