"""``kernelgen devices``: print the fingerprint of every device kernelgen can tune for here."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from kernelgen.backends import backend_names, get_backend


def register(app: typer.Typer) -> None:
    @app.command()
    def devices(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
        """Show this machine's targets: CPU (C++ backend) and GPU (Triton), with fingerprint and family."""
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
        # One block per backend, one field per line: fingerprints and families are what people copy
        # (into --target, exports, bug reports), so they must never be cut to fit a column.
        console = Console()
        for row in rows:
            block = Table(title=f"{row['backend']} backend", title_justify="left", show_header=False, box=None,
                          padding=(0, 2, 0, 0))
            block.add_column(style="bold", no_wrap=True)
            block.add_column(overflow="fold")
            t = row["target"]
            if t is None:
                block.add_row("status", f"unavailable: {row['reason']}")
            else:
                for label, value in _fields(t, row):
                    block.add_row(label, value)
            console.print(block)
            console.print()


def _fields(t: dict, row: dict) -> list[tuple[str, str]]:
    """The lines shown for one available target, in reading order."""
    fields = [("device", t["device_name"]), ("arch", t["arch"]), ("kind", t["kind"]),
              ("cores", str(t["cores"]))]
    if t.get("memory"):
        fields.append(("memory", f"{t['memory'] / 2**30:.1f} GiB"))
    if t.get("features"):
        fields.append(("features", " ".join(t["features"])))
    if t.get("caches"):
        fields.append(("caches", "  ".join(f"{k} {v // 1024} KiB" for k, v in t["caches"].items())))
    if t.get("limits"):
        fields.append(("limits", "  ".join(f"{k} {v}" for k, v in t["limits"].items())))
    for name, version in t.get("versions", {}).items():
        fields.append((name, str(version)))
    fields += [("family", row["family"]), ("fingerprint", row["fingerprint"])]
    return fields
