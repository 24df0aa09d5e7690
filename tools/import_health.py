"""Import health of a package tree: modules in import cycles, function-local imports, private cross-module imports.

Reads the source with ``ast`` (nothing is imported), so it runs on any checkout, old or new:

    python tools/import_health.py [--root .] [--package kernelgen] [--list]

- cycles: strongly connected components of the graph of every import between the package's modules (top-level
  and function-local alike, since a deferred import still runs); an edge ``from a import b`` goes to module
  ``a.b`` when that is a module, else to ``a``. Imports under ``if TYPE_CHECKING:`` never run and are left out.
- local imports: imports of the package's own modules inside a function body (a deferred optional dependency
  such as torch is not counted; only the package's own); "uncommented" ones have no comment saying why they
  are deferred (on the import, or heading the group of imports it is in).
- private imports: statements ``from m import _name, ...`` where ``m`` is another module of the package and ``_name`` is not a
  module (importing a private *module* such as ``templates._gemm_cpp_kernels`` from its own package is fine).

Exit status 0 always; the figures are printed (``--json`` for a machine-readable line).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Health:
    """What ``scan`` found: the cycle components, the function-local and private imports, as (module, text)."""

    modules: int
    cycles: list[list[str]] = field(default_factory=list)
    local_imports: list[tuple[str, str]] = field(default_factory=list)
    uncommented_local_imports: list[tuple[str, str]] = field(default_factory=list)
    private_imports: list[tuple[str, str]] = field(default_factory=list)

    @property
    def modules_in_cycles(self) -> int:
        return sum(len(c) for c in self.cycles)

    def as_dict(self) -> dict[str, int]:
        return {"modules": self.modules, "modules_in_cycles": self.modules_in_cycles, "cycles": len(self.cycles),
                "function_local_imports": len(self.local_imports),
                "uncommented_local_imports": len(self.uncommented_local_imports),
                "private_imports": len(self.private_imports)}


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``: dotted name → file (a package is its ``__init__``)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module):
    """(node, inside a function) for every import that runs: not under ``if TYPE_CHECKING:``."""
    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                       ast.Lambda)))
    yield from walk(tree, False)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def scan(root: Path, package: str) -> Health:
    """The import health of ``package`` (a directory under ``root``)."""
    modules = module_names(root, package)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    health = Health(modules=len(modules))
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source, str(path))
        for node, in_function in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names if alias.name.split(".")[0] == package]
            else:
                source = _absolute(module, is_package, node)
                if source.split(".")[0] != package:
                    continue
                private = []
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules:
                        targets.append(sub)
                    else:
                        targets.append(source)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and source != module:
                            private.append(alias.name)
                if private:
                    health.private_imports.append((module, f"from {source} import {', '.join(private)}"))
            targets = [t for t in targets if t in modules and t != module]
            if not targets:
                continue
            edges[module].update(targets)
            if in_function:
                health.local_imports.append((module, ast.unparse(node)))
                if not _commented(lines, node):
                    health.uncommented_local_imports.append((module, ast.unparse(node)))
        for used in sorted(_private_attributes(tree, module, is_package, modules)):
            health.private_imports.append((module, used))
    health.cycles = [sorted(c) for c in _strongly_connected(edges) if len(c) > 1]
    health.cycles.sort(key=len, reverse=True)
    return health


def _commented(lines: list[str], node: ast.stmt) -> bool:
    """Whether an import says why it is deferred: a comment on its own lines, or on the lines just above it
    (a comment heading a group of deferred imports covers the group)."""
    if any("#" in lines[i] for i in range(node.lineno - 1, node.end_lineno)):
        return True
    i = node.lineno - 2
    while i >= 0 and lines[i].strip().startswith(("from ", "import ")):
        i -= 1
    return i >= 0 and lines[i].strip().startswith("#")


def _private_attributes(tree: ast.Module, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """``alias._name`` where ``alias`` names another of the package's modules (``from kernelgen import lowering``
    then ``lowering._arg``): a private import by another spelling."""
    aliases: dict[str, str] = {}
    for node, _ in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    aliases[alias.asname or alias.name] = alias.name if alias.asname else alias.name.split(".")[0]
        else:
            source = _absolute(module, is_package, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        spelt = ast.unparse(node.value)
        head, _, rest = spelt.partition(".")
        if head not in aliases:
            continue
        target = aliases[head] + ("." + rest if rest else "")
        if target in modules and target != module:
            found.add(f"{spelt}.{node.attr} ({target})")
    return found


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules, recursion would do, but why risk it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--package", default="kernelgen")
    parser.add_argument("--list", action="store_true", help="list each cycle, local import and private import")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    health = scan(args.root, args.package)
    if args.json:
        print(json.dumps(health.as_dict()))
        return 0
    figures = health.as_dict()
    print(f"{figures['modules']} modules; {figures['modules_in_cycles']} in {figures['cycles']} import cycle(s); "
          f"{figures['function_local_imports']} function-local {args.package} imports "
          f"({figures['uncommented_local_imports']} without a comment); "
          f"{figures['private_imports']} private cross-module imports")
    if args.list:
        for cycle in health.cycles:
            print(f"cycle ({len(cycle)}): {' '.join(cycle)}")
        uncommented = set(health.uncommented_local_imports)
        for module, text in health.local_imports:
            print(f"local{'!' if (module, text) in uncommented else ' '}  {module}: {text}")
        for module, text in health.private_imports:
            print(f"private {module}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
