"""Finding registrations: registry folders (the project's ``registry/``, ``$KERNELGEN_REGISTRY_PATH``) and
the ``kernelgen.registry`` entry-point group.

A registry folder holds one package per call (``<folder>/<call>/__init__.py``, which registers its
kernels; sibling files such as Triton kernels are imported relatively) and/or plain modules
(``<folder>/<name>.py``). Any error while importing one becomes a one-line ``RegistryError`` naming it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path

from kernelgen.errors import RegistryError
from kernelgen.ir.values import content_hash

ENTRY_POINT_GROUP = "kernelgen.registry"
PATH_ENV = "KERNELGEN_REGISTRY_PATH"


def project_registry() -> Path | None:
    """The top-level ``registry/`` of the kernelgen source checkout this package runs from, if any.

    Only beside kernelgen's own ``pyproject.toml``: an installed kernelgen must never import some other
    ``registry`` folder that happens to sit next to it in site-packages.
    """
    root = Path(__file__).resolve().parent.parent.parent
    try:
        is_checkout = 'name = "kernelgen"' in (root / "pyproject.toml").read_text()
    except OSError:
        return None
    folder = root / "registry"
    return folder if is_checkout and folder.is_dir() else None


_FOLDER_OF_MODULE: dict[str, str] = {}  # synthetic module name -> the registry folder it was loaded from


def folder_of(module_name: str | None) -> str | None:
    """The registry folder a module was loaded from by ``load_folder``, or None."""
    return _FOLDER_OF_MODULE.get(module_name or "")


def env_folders() -> list[Path]:
    return [Path(p).expanduser() for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p.strip()]


def _error(path: Path, exc: BaseException) -> RegistryError:
    if isinstance(exc, RegistryError):
        return RegistryError(f"{path}: {exc}")
    if isinstance(exc, SystemExit):
        return RegistryError(f"loading custom calls from {path} failed: it called sys.exit({exc.code!r}); a registry "
                             "module may only register custom calls: remove the exit")
    where = ""
    tb = exc.__traceback__
    while tb is not None:  # the deepest frame inside the folder being loaded names the line
        if str(path.parent) in tb.tb_frame.f_code.co_filename:
            where = f" (line {tb.tb_lineno} of {tb.tb_frame.f_code.co_filename})"
        tb = tb.tb_next
    return RegistryError(f"loading custom calls from {path} failed{where}: {type(exc).__name__}: {exc}")


def _exec(module_name: str, file: Path, package_dir: Path | None) -> None:
    spec = importlib.util.spec_from_file_location(
        module_name, file, submodule_search_locations=[str(package_dir)] if package_dir else None)
    if spec is None or spec.loader is None:
        raise RegistryError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # relative imports inside a call package need it
    _FOLDER_OF_MODULE[module_name] = str(file.parent.parent if package_dir else file.parent)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        # SystemExit too: a registry module that calls sys.exit must not end kernelgen (a tune that never ran
        # would exit 0 and pass CI); loading it is an error like any other.
        raise _error(file, exc) from exc


def load_folder(folder: str | Path) -> list[Path]:
    """Import every call package and module in ``folder``; return the files imported, in order."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise RegistryError(f"registry folder {folder} does not exist; fix {PATH_ENV} or the path given")
    prefix = f"_kernelgen_registry_{content_hash(str(folder), 10)}"
    loaded = []
    for child in sorted(folder.iterdir()):
        if child.name.startswith((".", "_")):
            continue
        if child.is_dir() and (child / "__init__.py").is_file():
            _exec(f"{prefix}_{child.name}", child / "__init__.py", child)
            loaded.append(child / "__init__.py")
        elif child.is_file() and child.suffix == ".py":
            _exec(f"{prefix}_{child.stem}", child, None)
            loaded.append(child)
    return loaded


def load_entry_points() -> list[str]:
    """Load every ``kernelgen.registry`` entry point: a module (registers on import) or a function to call."""
    names = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, type):
                obj()
        except (Exception, SystemExit) as exc:  # an entry point that exits must not end kernelgen either
            raise RegistryError(f"entry point {ep.name} = {ep.value} in group {ENTRY_POINT_GROUP} failed: "
                                f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
        names.append(ep.name)
    return names
