"""The model half of ``kernelgen tune``: ``--model pkg.module:make [--mode train]`` or a manifest's ``[[model]]``
tables, tuned region by region (``kernelgen.tune.model``) with progress (regions done / total, share of the
step covered, best speedup so far) and one table per model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.progress import Progress
from rich.table import Table

from kernelgen.errors import DatabaseError, KernelgenError
from kernelgen.report.units import fmt_time
from kernelgen.tune.model_spec import CAPTURE_TIMEOUT, ModelSpec, load_models, model_spec

CAPTURE_TIMEOUT_HELP = ("Seconds each stage of building and capturing a model may take (its factory, its first step, "
                        "the capture and profiled steps); past it the run ends in one line naming the stage.")


def model_specs(manifest: str | None, model: str | None, mode: str,
                capture_timeout: float = CAPTURE_TIMEOUT) -> list[ModelSpec]:
    """The models to tune: the manifest's ``[[model]]`` tables, then the command line's ``--model``, each stage of
    their capture limited to ``capture_timeout`` seconds."""
    if not capture_timeout > 0:
        raise KernelgenError(f"--capture-timeout {capture_timeout:g} is impossible; give a positive number of seconds")
    specs = load_models(manifest) if manifest is not None else []
    if model is not None:
        specs.append(model_spec({"factory": model, "mode": mode}, f"--model {model}"))
    return [replace(spec, capture_timeout=capture_timeout) for spec in specs]


def tune_one_model(spec: ModelSpec, db: Any, progress: Progress, *, seconds: float | None, trials: int | None,
                   workers: int, timeout: float, retune: bool) -> dict[str, Any]:
    """Tune one model; its JSON summary (``ok`` False, with ``error``, when it could not be captured or no
    region could be tuned)."""
    from kernelgen.tune.model import tune_model  # deferred: torch, Dynamo and Optuna, which only tuning needs

    task = progress.add_task(f"{spec.label} ({spec.mode})", total=None, best="capturing")
    best: list[float] = []

    def on_region(outcome: Any, result: Any) -> None:
        done = [o for o in result.outcomes if o.implementation is not None]
        if outcome.speedup:
            best.append(outcome.speedup)
        covered = sum(o.region.share for o in done)
        progress.update(task, total=len(result.regions), completed=len(result.outcomes),
                        best=f"{100 * covered:.0f}% of the step tuned, best region {max(best, default=0):.2f}x ATen")

    try:
        result = tune_model(spec, db=db, seconds=seconds, trials=trials, workers=workers, timeout=timeout,
                            retune=retune, on_region=on_region)
    except DatabaseError as exc:
        raise stopped(exc, f"model {spec.label}") from None
    except KernelgenError as exc:
        progress.update(task, best="failed")
        return {"model": spec.label, "factory": spec.factory, "mode": spec.mode, "ok": False, "error": str(exc),
                "regions": []}
    entry = result.to_json()
    entry["error"] = None if result.ok else "no region of the model could be tuned"
    return entry


def stopped(exc: DatabaseError, what: str) -> DatabaseError:
    """A database that fails ends the whole run (``what`` is where), not just one model or workload: every later
    trial would fail alike, and none could be recorded."""
    return type(exc)(f"{exc}; tuning stopped at {what}: the records committed before it are kept; once the database "
                     "can be written (or with another --db), rerun to resume")


def check_line(check: dict[str, Any] | None) -> str | None:
    """The whole-step check in one line: each variant's step and what was kept (``kernelgen.tune.model_check``)."""
    if not check:
        return None
    steps = ", ".join(f"{variant} {ms:.2f} ms" for variant, ms in check["step_ms"].items())
    line = (f"step checked as a whole ({check['rounds']} interleaved rounds): {steps}; kept {check['kept']}, "
            f"{check['changed']} region(s) changed by it")
    if check.get("eager_step"):
        line += "; eager's step beat every compiled one: torch.compile(model, backend=\"kernelgen\") runs it eagerly"
    return line


def model_table(entry: dict[str, Any]) -> Table:
    """One model: each distinct region with its share of eager's step, what runs, its speedup over its ATen ops."""
    title = f"{entry['model']} ({entry['factory']}, {entry['mode']})"
    if entry.get("step_ms") is not None:
        title += (f": eager step {entry['step_ms']:.2f} ms on one thread, {entry['regions_done']}/{entry['regions_total']} regions, "
                  f"{100 * entry['share_covered']:.0f}% of the step tuned in {entry['seconds']:.0f} s")
    table = Table(title=title, title_justify="left", caption=check_line(entry.get("check")), caption_justify="left")
    for column in ("region", "calls", "share", "ATen time", "implementation", "config", "vs ATen", "note"):
        table.add_column(column, justify="right" if column in ("calls", "share", "ATen time", "vs ATen") else "left",
                         overflow="fold")
    if entry.get("error") and not entry["regions"]:
        table.add_row("-", "-", "-", "-", "error", entry["error"], "-", "-")
    for r in entry["regions"]:
        config = "-" if not r["config"] else " ".join(f"{k}={v}" for k, v in sorted(r["config"].items()))
        ratio = "-" if r["speedup_vs_aten"] is None else f"{r['speedup_vs_aten']:.2f}x"
        note = r["error"] or r["note"] or ("" if r["measured"] else "already tuned")
        table.add_row(f"{r['template']} {r['workload_key'][:8]}", str(r["calls"]), f"{100 * r['share']:.1f}%",
                      fmt_time(r["aten_ms"] * 1e-3), r["implementation"] or "-", config, ratio, note)
    return table
