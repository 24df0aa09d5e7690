"""``kernelgen report``: write the tuning database as one self-contained HTML file (plots and tables)."""

from __future__ import annotations

import typer

from kernelgen.errors import KernelgenError


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        db: str = typer.Option(None, "--db", help="Tuning database URL (default: KERNELGEN_DB or the per-user SQLite file)."),
        out: str = typer.Option("kernelgen-report.html", "--out", help="HTML file to write."),
    ) -> None:
        """Write an offline HTML report: per workload, every trial and the best so far, the ★ dispatch runs, the
        parameters' effect, the finalists beside eager and torch.compile, failures, device and toolchain."""
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
