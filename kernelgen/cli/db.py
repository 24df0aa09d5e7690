"""``kernelgen db``: inspect, share and maintain the tuning database (show, stats, export, import, merge,
prune, upgrade). Thin commands over ``kernelgen.db``; errors surface as one line from the CLI root.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelgen.ir.values import Status
from kernelgen.paths import default_db_url

DbOption = typer.Option(None, "--db", metavar="URL",
                        help="Tuning database URL (default: $KERNELGEN_DB or the per-user SQLite file).")
TeamOption = typer.Option(None, "--team-db", metavar="URL",
                          help="Read-only team database layered under --db (default: $KERNELGEN_TEAM_DB).")
JsonOption = typer.Option(False, "--json", help="Print JSON instead of a table.")
TargetOption = typer.Option(None, "--target", help="Only records of this target fingerprint or family.")
WorkloadOption = typer.Option(
    None, "--workload", metavar="NAME|KEY",
    help="Only records of the workload with this name (manifest name or module.qualname); when no record "
         "carries that name, those whose workload key is this or starts with it. The name wins.")


def _open(db: Optional[str], team_db: Optional[str] = None):
    from kernelgen.db import open_db  # deferred: SQLAlchemy, which only database commands need

    return open_db(db, team_url=team_db)


def _open_local(db: Optional[str]):
    from kernelgen.db import open_local  # deferred: SQLAlchemy, which only database commands need

    return open_local(db)  # writes never involve the team layer, and never land in it


def _short(text: str, n: int = 14) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    if title:
        typer.echo(title)
    table = Table()
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(c) for c in row))
    Console(width=200).print(table)


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="db", help="Inspect, share and maintain the tuning database.", no_args_is_help=True)
    app.add_typer(group, name="db")

    @group.command()
    def show(
        target: Optional[str] = TargetOption,
        workload: Optional[str] = WorkloadOption,
        status: Optional[str] = typer.Option(None, "--status", help="Only this status (ok, invalid, compile_error, ...)."),
        best: bool = typer.Option(False, "--best", help="Only the record dispatch runs per workload and target (kernelgen.db.verdict: the tuner's verdict, else the fastest)."),
        limit: int = typer.Option(50, "--limit", help="At most this many rows (0: all)."),
        as_json: bool = JsonOption,
        db: Optional[str] = DbOption,
        team_db: Optional[str] = TeamOption,
    ) -> None:
        """List records: name, workload key, implementation, target, status, median time, config."""
        from kernelgen.db.verdict import verdicts  # deferred: SQLAlchemy (kernelgen.db), as above

        if status is not None and status not in {s.value for s in Status}:
            raise typer.BadParameter(f"{status!r} is not one of {[s.value for s in Status]}", param_hint="--status")
        with _open(db, team_db) as store:
            records = [r for r in store.records(target=target, workload=workload)
                       if status is None or r.measurement.status.value == status]
        if best:
            records = list(verdicts(records).values())  # what dispatch would run
        records.sort(key=lambda r: (r.workload_key, r.target_fingerprint, r.measurement.status.value != "ok",
                                    r.measurement.time.median if r.measurement.time else 0.0, r.record_id))
        matched = len(records)
        if limit > 0:
            records = records[:limit]
        if as_json:
            typer.echo(json.dumps([dict(r.to_json(), record_id=r.record_id) for r in records], indent=2))
            return
        rows = [[r.name or "-", _short(r.workload_key), r.implementation, _short(r.target_family, 24), _short(r.target_fingerprint, 16),
                 r.measurement.status.value, _fmt_time(r.measurement.time.median if r.measurement.time else None),
                 json.dumps(r.config.to_json(), separators=(",", ":")), r.record_id[:10]] for r in records]
        more = f" of {matched} (--limit 0 shows all)" if matched > len(rows) else ""
        _print_table(f"{len(rows)} record(s){more}", ["name", "workload", "implementation", "family", "target", "status",
                                                "median", "config", "record"], rows)

    @group.command()
    def stats(as_json: bool = JsonOption, db: Optional[str] = DbOption, team_db: Optional[str] = TeamOption) -> None:
        """Counts by status, target and kernelgen version; distinct workloads; schema."""
        with _open(db, team_db) as store:
            data = store.stats()
        if as_json:
            typer.echo(json.dumps(data, indent=2))
            return
        for layer_name, layer in ([("local", data["local"]), ("team", data["team"])] if "team" in data else [("", data)]):
            title = f"{layer_name + ': ' if layer_name else ''}{layer['url']} (schema {layer['schema']})"
            rows = [["records", layer["records"]], ["workloads", layer["workloads"]],
                    ["workload families", layer["workload_families"]], ["implementations", layer["implementations"]]]
            rows += [[f"status {k}", v] for k, v in layer["by_status"].items()]
            rows += [[f"kernelgen {k}", v] for k, v in layer["kernelgen_versions"].items()]
            rows += [[f"target {t['target_family']} {t['target_fingerprint']}", t["records"]] for t in layer["targets"]]
            _print_table(title, ["what", "count"], rows)

    @group.command("export")
    def export_(
        file: str = typer.Argument(..., help="The .jsonl file to write (replaced atomically)."),
        target: Optional[str] = TargetOption,
        workload: Optional[str] = WorkloadOption,
        db: Optional[str] = DbOption,
        team_db: Optional[str] = TeamOption,
    ) -> None:
        """Write records to a versioned JSON-lines file that diffs and merges well in git."""
        with _open(db, team_db) as store:
            n = store.export(file, target=target, workload=workload)
            damaged = f" ({len(store.damaged_rows)} damaged row(s) skipped: see the warnings)" if store.damaged_rows else ""
            typer.echo(f"exported {n} record(s) from {store.url} to {file}{damaged}")

    @group.command("import")
    def import_(file: str = typer.Argument(..., help="A file written by `kernelgen db export`."),
                db: Optional[str] = DbOption) -> None:
        """Import an export file, all or nothing; records already present are skipped."""
        with _open_local(db) as store:
            added, present = store.import_file(file)
            typer.echo(f"imported {added} new record(s) from {file} into {store.url} ({present} already present)")

    @group.command()
    def merge(source: str = typer.Argument(..., help="An export file or another database URL (opened read-only)."),
              db: Optional[str] = DbOption) -> None:
        """Add every record of SOURCE not yet present (identity = content; provenance kept)."""
        with _open_local(db) as store:
            added, present = store.merge(source)
            typer.echo(f"merged {added} new record(s) from {source} into {store.url} ({present} already present)")

    @group.command()
    def prune(
        older_than: Optional[float] = typer.Option(None, "--older-than", metavar="DAYS",
                                                   help="Records measured more than DAYS days ago."),
        kernelgen_version: Optional[str] = typer.Option(None, "--kernelgen-version",
                                                        help="Records measured with this kernelgen version."),
        target: Optional[str] = TargetOption,
        dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be removed."),
        as_json: bool = JsonOption,
        db: Optional[str] = DbOption,
    ) -> None:
        """Remove records matching ALL given criteria (at least one is required)."""
        criteria = {"older_than_days": older_than, "kernelgen_version": kernelgen_version, "target": target}
        with _open_local(db) as store:
            groups = store.prune_summary(**criteria)
            removed = 0 if dry_run else store.prune(**criteria)
            url = store.url
        if as_json:
            typer.echo(json.dumps({"removed": removed, "dry_run": dry_run, "groups": groups}, indent=2))
            return
        verb = "would remove" if dry_run else "removed"
        count = sum(g["records"] for g in groups) if dry_run else removed
        typer.echo(f"{verb} {count} record(s) from {url}")
        if groups:
            _print_table("", ["target family", "kernelgen", "implementation", "records"],
                         [[g["target_family"], g["kernelgen_version"], g["implementation"], g["records"]] for g in groups])

    @group.command()
    def upgrade(db: Optional[str] = DbOption) -> None:
        """Migrate the database to this kernelgen's schema (creates it when empty; refuses newer schemas)."""
        # deferred: SQLAlchemy, which only database commands need
        from kernelgen.db import upgrade_db
        from kernelgen.db.engine import parse_url, shown

        before, after = upgrade_db(db)
        where = shown(parse_url(db or default_db_url()))
        if before == after:
            typer.echo(f"{where} is already at schema {after}")
        else:
            typer.echo(f"upgraded {where} from schema {before} to {after}")
