"""The ``kernelgen`` command: thin typer commands over the public API.

Each command group lives in its own module exposing ``register(app)``; this module wires them together
and turns every ``KernelgenError`` into one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from kernelgen import logs
from kernelgen.errors import KernelgenError
from kernelgen.version import __version__

app = typer.Typer(
    name="kernelgen",
    help="Trace fused PyTorch subgraphs into tiled kernels, autotune them, share the results.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in --help order. A module not written yet is skipped, never half-registered.
_COMMAND_MODULES = ("devices", "tune", "explain", "replay", "report", "db", "registry")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kernelgen {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="Print the version and exit."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                help="Log more: -v decisions, builds and trials (INFO), -vv everything (DEBUG)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log errors only (no warnings, no trial lines)."),
) -> None:
    """kernelgen: tiled kernels from PyTorch functions, tuned per device."""
    logs.configure_cli(verbose, quiet)


for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"kernelgen.cli.{_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"kernelgen.cli.{_name}":
            raise
        continue
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        app(args=argv, prog_name="kernelgen")
    except KernelgenError as exc:
        typer.echo(f"error: {exc}", err=True)
        return getattr(exc, "exit_code", 1) or 1
    except SystemExit as exc:  # typer exits through SystemExit; keep its code
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        typer.echo("interrupted: committed trials are kept; rerun to resume", err=True)
        return 130
    return 0


def run() -> None:
    sys.exit(main())
