"""``kernelgen replay``: run the unchanged search over a recorded tuning landscape (no GPU needed)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kernelgen.errors import KernelgenError


def register(app: typer.Typer) -> None:
    @app.command()
    def replay(
        landscape: Path = typer.Argument(..., help="Kernel Tuner cache file (.json or .json.gz)."),
        budget: int = typer.Option(..., "--budget", min=1, help="Unique evaluations to spend."),
        seed: int = typer.Option(0, "--seed", help="Random seed (the same seed replays identically)."),
        sampler: str = typer.Option("auto", "--sampler", help="Search strategy name."),
        as_json: bool = typer.Option(False, "--json", help="Print the evaluations as JSON."),
    ) -> None:
        """Replay a search over LANDSCAPE: each evaluation answers with the recorded time or failure."""
        # deferred: the search imports Optuna (~1 s), which only this command needs
        from kernelgen.tune.landscape import load_landscape, replay as run_replay
        from kernelgen.tune.search import SAMPLERS

        if sampler not in SAMPLERS:
            raise KernelgenError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
        land = load_landscape(landscape)
        evaluated = run_replay(land, budget, seed, sampler)
        if as_json:
            typer.echo(json.dumps({"evaluated": evaluated}))
            return
        times = [e["time"] for e in evaluated if e["time"] is not None]
        best = min(times) if times else None
        failed = sum(e["time"] is None for e in evaluated)
        typer.echo(f"{len(evaluated)} evaluations ({failed} failed) with sampler {sampler!r}, seed {seed}")
        if best is None:
            typer.echo("no configuration ran")
        else:
            config = next(e["config"] for e in evaluated if e["time"] == best)
            typer.echo(f"best {best:.4g} ms = {best / land.optimum_ms:.3f} x the landscape's optimum "
                       f"({land.optimum_ms:.4g} ms): {json.dumps(config, sort_keys=True)}")
