"""``kernelgen explain``: what dispatch runs for a workload, and the generated source it compiled.

Two forms, mirroring the manifest: ``kernelgen explain MANIFEST [--workload NAME]`` for its workloads, or
``kernelgen explain module:fn --input "float32[2048, 1024]" --input "float32[1024]"`` for one function
(an ``--input`` is ``dtype[shape]`` or the manifest's own ``{shape = [...], dtype = "..."}``). For each
problem size it prints the implementation, its hash, the config and where it came from, then the source
file (syntax-highlighted on a terminal, plain text otherwise).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.syntax import Syntax

from kernelgen.api import CompiledFunction
from kernelgen.errors import KernelgenError, ManifestError
from kernelgen.tune.manifest import load_manifest, workload_from_table

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

_SPEC = re.compile(r"^\s*(?P<dtype>[a-z0-9_]+)\s*\[(?P<shape>[\d,\s]*)\]\s*$")
_LEXER = {".cpp": "cpp", ".cu": "cuda", ".hip": "cpp", ".py": "python"}


def parse_input(text: str) -> dict[str, Any]:
    """``"float32[2048, 1024]"`` or ``'{shape = [2048, 1024], dtype = "float32"}'`` as a manifest input table."""
    if text.strip().startswith("{"):
        try:
            return tomllib.loads(f"input = {text}")["input"]
        except tomllib.TOMLDecodeError as exc:
            raise ManifestError(f"--input {text!r} is not a TOML inline table: {exc}") from None
    found = _SPEC.match(text)
    if found is None:
        raise ManifestError(f"--input {text!r} is not understood; write dtype[shape] such as \"float32[2048, 1024]\" "
                            "or a manifest table such as '{shape = [2048, 1024], dtype = \"float32\"}'")
    shape = [int(d) for d in found["shape"].replace(" ", "").split(",") if d]
    return {"shape": shape, "dtype": found["dtype"]}


def _workloads(target: str, workload: str | None, inputs: list[str], backend: str | None) -> list[Any]:
    if Path(target).is_file() or target.endswith(".toml"):
        if inputs:
            raise ManifestError(f"--input describes a function's inputs; {target} is a manifest that has them")
        found = load_manifest(target)
        if workload is not None:
            found = [w for w in found if w.name == workload]
            if not found:
                names = ", ".join(w.name for w in load_manifest(target))
                raise ManifestError(f"{target} has no workload named {workload!r}; it has: {names}")
        return found
    if not inputs:
        raise ManifestError(f"give the inputs of {target}: --input \"float32[2048, 1024]\" once per tensor argument")
    entry = {"name": workload or target, "function": target, "inputs": [parse_input(i) for i in inputs],
             "backend": backend or "cpp"}
    return [workload_from_table(entry, f"explain {target}")]


def _example(spec: Any) -> Any:
    """A tensor matching ``spec`` (values only matter to the first check, which compares with eager); an input
    this machine cannot hold is a one-line error, not an allocator's traceback."""
    import torch

    dtype = getattr(torch, spec.dtype)
    strides = spec.strides or spec.contiguous_strides()
    need = (1 + sum((n - 1) * s for n, s in zip(spec.shape, strides))) * spec.itemsize if spec.numel else 0
    if need > _memory():
        raise KernelgenError(f"--input {spec.dtype}{list(spec.shape)} needs {need / 2**30:.1f} GiB, more than this "
                             f"machine's {_memory() / 2**30:.1f} GiB: explain runs a first call on example inputs; "
                             "give the shape you will call it with on this machine")
    try:
        tensor = torch.empty_strided(spec.shape, strides, dtype=dtype)
    except RuntimeError as exc:  # the allocator refused it (e.g. the memory is in use)
        raise KernelgenError(f"cannot allocate an example input {spec.dtype}{list(spec.shape)}: "
                             f"{str(exc).splitlines()[0][:200]}") from None
    return tensor.normal_() if dtype.is_floating_point else tensor.zero_()


def _memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def explain_workloads(workloads: list[Any], db: str | None, team_db: str | None) -> list[dict[str, Any]]:
    """``CompiledFunction.explain`` of every problem size of ``workloads``, with name and inputs."""
    rows = []
    for w in workloads:
        compiled = CompiledFunction(w.fn, w.backend, db=db, team_db=team_db)
        for specs in w.signatures:
            explained = compiled.explain(*[_example(s) for s in specs])
            rows.append({"name": w.name, "function": w.function, "backend": w.backend,
                         "inputs": [s.to_json() for s in specs], **explained})
    return rows


def _label(inputs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{s['dtype']}{list(s['shape'])}" for s in inputs)


def _print(console: Console, row: dict[str, Any], show_source: bool) -> None:
    console.print(f"[bold]{row['name']}[/bold]  {_label(row['inputs'])}  ({row['function']}, {row['backend']})",
                  highlight=False, soft_wrap=True)
    config = "-" if row["config"] is None else " ".join(f"{k}={v}" for k, v in sorted(row["config"].items()))
    for label, value in (("implementation", row["implementation"]), ("hash", row["implementation_hash"] or "-"),
                         ("config", config), ("origin", f"{row['source']}: {row['reason']}"),
                         ("source", row["source_path"] or "-")):
        console.print(f"  {label:<15}{value}", highlight=False, soft_wrap=True)
    path = row["source_path"]
    if show_source and path:
        text = Path(path).read_text()
        if console.is_terminal:
            console.print(Syntax(text, _LEXER.get(Path(path).suffix, "text"), line_numbers=True))
        else:
            typer.echo(text)
    console.print()


def register(app: typer.Typer) -> None:
    @app.command()
    def explain(
        target: str = typer.Argument(..., help="A TOML manifest, or a function as module:function."),
        workload: str = typer.Option(None, "--workload", help="Only this workload of the manifest."),
        inputs: list[str] = typer.Option(None, "--input", help="One tensor argument of the function: "
                                         "dtype[shape] (float32[2048, 1024]) or a manifest input table; repeat."),
        backend: str = typer.Option(None, "--backend", help="Backend for the module:function form (default cpp)."),
        db: str = typer.Option(None, "--db", help="Tuning database URL (default: KERNELGEN_DB or the per-user file)."),
        team_db: str = typer.Option(None, "--team-db", help="Read-only team database layered under --db."),
        source: bool = typer.Option(True, "--source/--no-source", help="Print the generated source."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document (paths, not source text)."),
    ) -> None:
        """Show what dispatch runs for each problem size (implementation, hash, config and its origin) and
        print the generated C++/Triton source."""
        if backend is not None and (Path(target).is_file() or target.endswith(".toml")):
            raise KernelgenError("--backend is for the module:function form; a manifest names its backend per workload")
        workloads = _workloads(target, workload, inputs or [], backend)
        from kernelgen.db import open_db  # deferred: SQLAlchemy, only to refuse a database that cannot open

        open_db(db, team_url=team_db).close()  # what explain reports comes from it: an unusable one is an error
        rows = explain_workloads(workloads, db, team_db)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        console = Console()
        for row in rows:
            _print(console, row, source)
