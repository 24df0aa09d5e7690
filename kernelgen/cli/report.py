"""``kernelgen report``: write the tuning database as one self-contained HTML file (plots and tables)."""

from __future__ import annotations

import typer

from kernelgen.cli.tune_model import CAPTURE_TIMEOUT_HELP, model_specs, model_table
from kernelgen.errors import KernelgenError
from kernelgen.tune.model_spec import CAPTURE_TIMEOUT


def show_model(model: str, mode: str, db: str | None, as_json: bool,
               capture_timeout: float = CAPTURE_TIMEOUT) -> None:
    """``kernelgen report --model``: the model's regions and the records that serve them, as a table or JSON."""
    import json

    from rich.console import Console

    # deferred: SQLAlchemy, torch and Dynamo, which only this form of the command needs
    from kernelgen.db import open_db
    from kernelgen.tune.model_report import model_report

    spec = model_specs(None, model, mode, capture_timeout)[0]
    with open_db(db) as database:
        summary = model_report(spec, database)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))  # piped: do not squeeze the table into 80 columns
    console.print(model_table(summary))
    kg, eager = summary["kernelgen_step_ms"], summary["eager_step_ms"]
    speed = f"{kg:.2f} ms ({eager / kg:.2f}x eager)" if kg else "-"
    typer.echo(f"step: eager {eager:.2f} ms, kernelgen with these records {speed}; {summary['regions_done']} of "
               f"{summary['regions_total']} regions have a record, {100 * summary['share_covered']:.0f}% of "
               "eager's step")


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        db: str = typer.Option(None, "--db", help="Tuning database URL (default: KERNELGEN_DB or the per-user SQLite file)."),
        out: str = typer.Option("kernelgen-report.html", "--out", help="HTML file to write."),
        model: str = typer.Option(None, "--model", help="Show a model instead ('pkg.module:make' returning (model, "
                                  "inputs)): its regions, their share of the step, what runs, speedup over ATen."),
        mode: str = typer.Option("infer", "--mode", help="With --model: infer or train."),
        as_json: bool = typer.Option(False, "--json", help="With --model: print JSON instead of a table."),
        capture_timeout: float = typer.Option(CAPTURE_TIMEOUT, "--capture-timeout", help="With --model: "
                                              + CAPTURE_TIMEOUT_HELP),
    ) -> None:
        """Write an offline HTML report: per workload, every trial and the best so far, the ★ dispatch runs, the
        parameters' effect, the finalists beside eager and torch.compile, failures, device and toolchain. With
        --model, print what the database does for that model on this machine (profiled now) instead."""
        if model is not None:
            show_model(model, mode, db, as_json, capture_timeout)
            return
        # deferred: SQLAlchemy (the database) and plotly (the figures), which only this command needs
        from kernelgen.db import open_db
        from kernelgen.report import write_report

        with open_db(db, read_only=True) as database:
            try:
                count = write_report(database, out)
            except ModuleNotFoundError as err:  # an environment installed before plotly became a dependency
                raise KernelgenError(f"kernelgen report needs {err.name}: pip install {err.name}") from None
            except OSError as err:  # the report's path: the database's own errors are DatabaseErrors already
                raise KernelgenError(f"cannot write the report {out}: {err.strerror or err}; pass --out with a "
                                     "path in a writable directory") from None
        typer.echo(f"wrote {out}: {count} workload(s)")
