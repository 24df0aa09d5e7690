"""What a tuning checks before it measures anything: budgets no run can meet (before the database is touched),
and implementations whose search space cannot be built on the target (a renderer not written yet, a
toolchain missing), which are skipped with the reason."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kernelgen.errors import KernelgenError
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.target import Target


def check_budget(trials: int | None, seconds: float | None, patience: int | None, workers: int = 1,
                 timeout: float | None = None) -> None:
    """Raise ``KernelgenError`` for budgets no run can meet (before anything touches the database)."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise KernelgenError(f"timeout={timeout!r} is impossible: give a positive, finite number of seconds")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise KernelgenError(f"trials={trials!r} is impossible: give a whole number of at least 1")
    if seconds is not None and (not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0):
        raise KernelgenError(f"seconds={seconds!r} is impossible: give a positive number of seconds")
    if patience is not None and (not isinstance(patience, int) or patience < 1):
        raise KernelgenError(f"patience={patience!r} is impossible: give a whole number of at least 1")
    if not isinstance(workers, int) or workers < 1:
        raise KernelgenError(f"workers={workers!r} is impossible: give a whole number of at least 1")


def usable_implementations(impls: Sequence[Implementation], target: Target) -> tuple[list[Implementation], list[str]]:
    """The implementations whose search space can be built on ``target``, and why the others cannot."""
    usable, reasons = [], []
    for impl in impls:
        try:
            impl.space(target).default()
        except Exception as exc:  # a renderer not written yet, a toolchain missing: skip, say why
            reasons.append(f"{impl.name}: {type(exc).__name__}: {exc}")
            continue
        usable.append(impl)
    return usable, reasons


__all__ = ["check_budget", "usable_implementations"]
