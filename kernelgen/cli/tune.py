"""``kernelgen tune MANIFEST`` / ``kernelgen tune --model pkg.module:make``: tune every workload and model of a TOML
manifest (or one model named on the command line), with live progress and a result table.

The manifest and the budgets are validated completely before the database is opened, so bad input never
touches it. Exit status 0 when every workload (every problem size) has a result, 1 otherwise; a database that fails
mid-run (turned read-only, unreachable) ends the run there in one line, its committed records kept.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelgen import logs
from kernelgen.errors import DatabaseError, KernelgenError
from kernelgen.report.units import fmt_time
from kernelgen.cli.tune_model import CAPTURE_TIMEOUT_HELP, model_specs, model_table, stopped, tune_one_model
from kernelgen.tune.manifest import load_manifest
from kernelgen.tune.model_spec import CAPTURE_TIMEOUT
from kernelgen.tune.preflight import check_budget


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


_DTYPE_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}


def shape_label(signature: list[dict[str, Any]]) -> str:
    """``"f32 2048x1024, f32 1024"``: compact enough for a table cell."""
    return ", ".join(f"{_DTYPE_SHORT.get(s['dtype'], s['dtype'])} {'x'.join(map(str, s['shape'])) or 'scalar'}"
                     for s in signature)


def register(app: typer.Typer) -> None:
    @app.command()
    def tune(
        manifest: str = typer.Argument(None, help="TOML manifest of workload and model tables (see "
                                       "examples/workloads.toml); optional with --model."),
        model: str = typer.Option(None, "--model", help="Tune a whole model: a factory 'pkg.module:make' returning "
                                  "(model, inputs)."),
        mode: str = typer.Option("infer", "--mode", help="With --model: infer (eval, no_grad) or train (forward, "
                                 "loss, backward)."),
        db: str = typer.Option(None, "--db", help="Tuning database URL (default: KERNELGEN_DB or the per-user SQLite file)."),
        team_db: str = typer.Option(None, "--team-db", help="Read-only team database layered under --db."),
        trials: int = typer.Option(None, "--trials", help="Trials per implementation (overrides the manifest)."),
        seconds: float = typer.Option(None, "--seconds", help="Wall-time budget per implementation of a workload, "
                                      "in seconds; for a model, the whole model's budget."),
        sampler: str = typer.Option(None, "--sampler", help="Search strategy: auto, bo, random, tpe, cmaes, qmc, exhaustive."),
        workers: int = typer.Option(1, "--workers", help="Local worker processes sharing one study."),
        patience: int = typer.Option(None, "--patience", help="Stop after this many trials without a new best."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds one candidate may run before it is killed."),
        capture_timeout: float = typer.Option(CAPTURE_TIMEOUT, "--capture-timeout", help=CAPTURE_TIMEOUT_HELP),
        seed: int = typer.Option(None, "--seed", help="Sampler seed (reproducible searches)."),
        retune: bool = typer.Option(False, "--retune", help="Continue workloads that are already tuned."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    ) -> None:
        """Tune the workloads and models of MANIFEST (or --model) on this machine and record every trial in the
        tuning database."""
        from kernelgen.tune.search import SAMPLERS  # deferred: Optuna (~1 s), which only tuning needs

        check_budget(trials, seconds, patience, workers, timeout)
        if sampler is not None and sampler not in SAMPLERS:
            raise KernelgenError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
        if manifest is None and model is None:
            raise KernelgenError("nothing to tune: name a manifest (kernelgen tune my.toml) or a model "
                                 "(kernelgen tune --model pkg.module:make)")
        # every manifest error surfaces here, before the DB is opened
        workloads = load_manifest(manifest) if manifest is not None else []
        models = model_specs(manifest, model, mode, capture_timeout)

        from kernelgen.db import open_db  # deferred: SQLAlchemy, which only tuning needs

        database = open_db(db, team_url=team_db)
        try:
            database.check_writable()  # every trial is committed: a read-only database is refused in one line
        except BaseException:
            database.close()
            raise
        out = Console()
        if not out.is_terminal:
            out = Console(width=max(out.width, 160))  # piped or logged: do not squeeze configs into 80 columns
            logs.show_trial_lines()  # a CI log shows nothing of a progress bar until the end: plain trial lines
        report: list[dict[str, Any]] = []
        tuned_models: list[dict[str, Any]] = []
        try:
            with _progress(as_json or not out.is_terminal or logs.quiet()) as progress:
                for workload in workloads:
                    report.append(_tune_one(workload, database, progress, dict(
                        trials=trials, seconds=seconds, sampler=sampler, patience=patience, workers=workers,
                        seed=seed, timeout=timeout, retune=retune)))
                for spec in models:
                    tuned_models.append(tune_one_model(spec, database, progress, seconds=seconds, trials=trials, workers=workers,
                                                       timeout=timeout, retune=retune))
        finally:
            url = database.url
            database.close()
        if as_json:
            typer.echo(json.dumps({"db": url, "workloads": report, "models": tuned_models}, indent=2))
        else:
            for entry in report:
                out.print(_table(entry))
            for entry in tuned_models:
                out.print(model_table(entry))
        if not all(entry["ok"] for entry in (*report, *tuned_models)):
            raise typer.Exit(1)


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[best]}"),
                    TimeElapsedColumn(), console=Console(stderr=True), disable=quiet, transient=False)


def _tune_one(workload: Any, db: Any, progress: Progress, options: dict[str, Any]) -> dict[str, Any]:
    from kernelgen.tune.tuner import DEFAULT_TRIALS, TrialEvent, tune_workload  # deferred: Optuna (~1 s)

    budget = options["trials"] or workload.trials or (None if (options["seconds"] or workload.seconds) else DEFAULT_TRIALS)
    tasks: dict[str, Any] = {}

    def on_trial(event: TrialEvent) -> None:
        rec = event.record
        label = f"{workload.name} [{shape_label([s.to_json() for s in rec.signature])}] {rec.implementation}"
        if label not in tasks:
            tasks[label] = progress.add_task(label, total=budget, best="")
        best = f"best {fmt_time(event.best)}" if event.best is not None else "no ok config yet"
        if event.phase == "confirm":
            best = f"confirming: {best}"
        progress.update(tasks[label], completed=min(event.done, budget or event.done), best=best)

    entry: dict[str, Any] = {"name": workload.name, "function": workload.function, "results": [], "error": None}
    try:
        results = tune_workload(workload, db=db, on_trial=on_trial, **options)
    except DatabaseError as exc:
        raise stopped(exc, f"workload {workload.name}") from None
    except KernelgenError as exc:
        entry["error"] = str(exc)
        entry["ok"] = False
        return entry
    entry["results"] = [r.to_json() for r in results]
    entry["ok"] = all(r.best is not None for r in results)
    return entry


def _table(entry: dict[str, Any]) -> Table:
    table = Table(title=f"{entry['name']}  ({entry['function']})", title_justify="left")
    for column in ("shapes", "implementation", "best config", "time", "vs eager", "vs default", "trials", "failures"):
        numeric = column in ("time", "vs eager", "vs default", "trials", "failures")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric, overflow="fold")
    if entry["error"]:
        table.add_row("-", "error", entry["error"], "-", "-", "-", "-", "-")
    notes = []
    for r in entry["results"]:
        config = "none (every trial failed)" if r["config"] is None else \
            " ".join(f"{k}={v}" for k, v in sorted(r["config"].items()))
        note = "" if r["measured"] else " (already tuned)"
        time = fmt_time(r["time"])
        if r.get("note"):  # the verdict's rounds doubted it, or timed it under load: say so beside the figures
            notes.append(f"{shape_label(r['signature'])}: {r['note']}")
            time += f" [{len(notes)}]"
        # vs eager and vs default are measured in the verdict's own interleaved rounds; "-" when none ran now
        table.add_row(shape_label(r["signature"]), (r["implementation"] or "-") + note, config, time,
                      fmt_ratio(r["speedup_vs_eager"]), fmt_ratio(r["speedup_vs_default"]), str(r["trials"]),
                      str(r["failures"]))
    if notes:
        table.caption = "\n".join(f"[{i}] {n}" for i, n in enumerate(notes, 1))
        table.caption_justify = "left"
    return table
