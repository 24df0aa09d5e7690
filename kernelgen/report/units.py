"""How the report, ``kernelgen tune``'s table and the benchmarks write times and ratios."""

from __future__ import annotations


def fmt_time(seconds: float | None) -> str:
    """Seconds in the unit that keeps 1-3 digits before the point: ``"2.45 ms"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_ratio(time: float | None, best: float | None) -> str:
    """``time`` as a multiple of ``best`` (``"1.35×"``), ``"-"`` when either is missing."""
    if time is None or not best:
        return "-"
    return f"{time / best:.2f}×"


__all__ = ["fmt_ratio", "fmt_time"]
