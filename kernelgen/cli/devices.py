"""``kernelgen devices``: print the fingerprint of every device kernelgen can tune for here."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    @app.command()
    def devices(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
        """Show this machine's targets: CPU (C++ backend) and GPU (Triton), with fingerprint and family."""
        from kernelgen.backends import backend_names, get_backend

        rows = []
        for name in backend_names():
            backend = get_backend(name)
            available = backend.is_available()
            target = backend.target() if available else None
            rows.append({
                "backend": name,
                "available": available,
                "reason": backend.unavailable_reason(),
                "target": target.to_json() if target else None,
                "fingerprint": target.fingerprint if target else None,
                "family": target.family if target else None,
            })
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        table = Table(title="kernelgen devices")
        for column in ("backend", "device", "arch", "cores", "features", "family", "fingerprint"):
            table.add_column(column)
        for row in rows:
            t = row["target"]
            if t is None:
                table.add_row(row["backend"], f"unavailable: {row['reason']}", "", "", "", "", "")
                continue
            table.add_row(row["backend"], t["device_name"], t["arch"], str(t["cores"]),
                          " ".join(t["features"]), row["family"], row["fingerprint"])
        Console().print(table)
