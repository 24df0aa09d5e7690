"""``kernelgen registry list`` and ``kernelgen registry check``: the custom calls registered here, their
status on this machine, and a check of each against its reference (non-zero exit on any failure)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from kernelgen.custom_calls.base import gpu_platform
from kernelgen.custom_calls.verify import check_entry, describe
from kernelgen.errors import RegistryError
from kernelgen.registry import entries


def _interpret_triton_without_gpu() -> None:
    """Without a GPU, run Triton kernels under the interpreter (set before anything imports triton)."""
    import os

    if gpu_platform() is None:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Hand-written custom-call kernels: list them, check them here.",
                        no_args_is_help=True)
    app.add_typer(group, name="registry")

    @group.command("list")
    def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
        """Every registered call: language, platforms, params and status here (runnable / compile-only /
        unavailable, with the reason), and the outcome of its last check."""
        _interpret_triton_without_gpu()

        rows = [describe(entry) for entry in entries()]
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        table = Table(title="kernelgen custom calls")
        for column in ("implementation", "platforms", "params", "status", "last check"):
            table.add_column(column, overflow="fold")
        for row in rows:
            status = row["status"] + (f" on {row['platform']}" if row["platform"] else "")
            if row["reason"]:
                status += f": {row['reason']}"
            params = ", ".join(f"{k}={v}" for k, v in row["params"].items()) or "-"
            table.add_row(row["implementation"], ", ".join(row["platforms"]), params, status, row["check"])
        Console(width=160).print(table)

    @group.command("check")
    def check(
        name: list[str] = typer.Option([], "--name", help="Only calls with this name (repeatable)."),
        all_configs: bool = typer.Option(False, "--all-configs", help="Check every valid config, not the default."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON results."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds one build or one run of a check may take."),
    ) -> None:
        """Compile every call whose toolchain is here and run every call whose platform is here against its
        reference on its examples (Triton under its interpreter when there is no GPU), each in a worker
        process: a kernel that crashes or hangs fails its check. Exits 1 if any fails."""
        if not timeout > 0:
            raise RegistryError(f"--timeout {timeout} is impossible: give a positive number of seconds")
        _interpret_triton_without_gpu()
        selected = [e for e in entries() if not name or e.name in name]
        if name and not selected:
            raise RegistryError(f"no custom call named {', '.join(name)}; see `kernelgen registry list`")
        results = []
        for entry in selected:
            for result in check_entry(entry, all_configs, timeout):
                results.append(result)
                if not as_json:
                    colour = {"passed": "green", "compiled": "green", "failed": "red"}.get(result["status"], "yellow")
                    outcome = f"{result['outcome']}: " if result.get("outcome") else ""
                    typer.echo(f"{typer.style(result['status'], fg=colour):>8}  {result['implementation']}: "
                               f"{outcome}{' '.join(result['message'].split())}")
        failed = sum(r["status"] == "failed" for r in results)
        if as_json:
            typer.echo(json.dumps(results, indent=2))
        else:
            counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "compiled", "skipped", "failed")}
            typer.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
        if failed:
            names = sorted({r["implementation"] for r in results if r["status"] == "failed"})
            raise RegistryError(f"{failed} check(s) failed: {', '.join(names)}; a failed call is never dispatched")
