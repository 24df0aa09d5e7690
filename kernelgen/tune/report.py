"""A self-contained HTML report of the tuning database: per workload, a convergence plot and the results.

The plot (best time so far against trial number, one line per implementation) is inline SVG, so the file
opens offline with no script or network access.
"""

from __future__ import annotations

import html
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelgen.values import TuningRecord

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


@dataclass
class WorkloadSummary:
    """The records of one workload on one target, grouped for the report."""

    workload_key: str
    target_fingerprint: str
    device: str
    signature: str
    by_implementation: dict[str, list[TuningRecord]]  # search trials in time order (confirmations apart)
    confirmations: list[TuningRecord]
    name: str | None = None  # the workload's human name (the newest record's), None for unnamed records

    @property
    def best(self) -> TuningRecord | None:
        """What dispatch runs: ``kernelgen.db.verdict.verdict``, the one definition ``TuningDB.best`` follows."""
        from kernelgen.db.verdict import verdict

        return verdict([*self.confirmations, *(r for rs in self.by_implementation.values() for r in rs)])


def summarise(records: Iterable[TuningRecord]) -> list[WorkloadSummary]:
    from kernelgen.tune.tuner import is_confirmation

    groups: dict[tuple[str, str], list[TuningRecord]] = defaultdict(list)
    for r in records:
        groups[(r.workload_key, r.target_fingerprint)].append(r)
    out = []
    for (key, fingerprint), rs in sorted(groups.items()):
        rs.sort(key=lambda r: (r.provenance.created_at, r.record_id))
        by_impl: dict[str, list[TuningRecord]] = defaultdict(list)
        for r in rs:
            if not is_confirmation(r):
                by_impl[r.implementation].append(r)
        signature = ", ".join(f"{s.dtype}{list(s.shape)}" for s in rs[0].signature)
        named = [r.name for r in rs if r.name]
        out.append(WorkloadSummary(key, fingerprint, rs[0].device, signature, dict(by_impl),
                                   [r for r in rs if is_confirmation(r)], named[-1] if named else None))
    return out


def best_so_far(records: Sequence[TuningRecord]) -> list[float | None]:
    """The median time of the best record (``kernelgen.db.verdict.best_key``) after each one (None until the
    first ok record): for search trials, the fastest so far."""
    from kernelgen.db.verdict import best_key

    best: TuningRecord | None = None
    out: list[float | None] = []
    for r in records:
        if r.measurement.ok and (best is None or best_key(r) < best_key(best)):
            best = r
        out.append(None if best is None else best.measurement.time.median)  # type: ignore[union-attr]
    return out


def convergence_svg(series: dict[str, list[float | None]], width: int = 520, height: int = 240) -> str:
    """An SVG line chart of best-so-far per implementation; log time axis when the range is wide."""
    left, right, top, bottom = 64, 12, 12, 36
    values = [v for s in series.values() for v in s if v is not None]
    n = max((len(s) for s in series.values()), default=1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="best time so far against trial number">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
             'fill="none" stroke="#999"/>']
    if not values:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no successful trial</text></svg>')
        return "".join(parts)
    lo, hi = min(values), max(values)
    log = hi / lo > 10 if lo > 0 else False
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    flo, fhi = f(lo), f(hi)
    span = (fhi - flo) or abs(fhi) * 0.1 or 1.0
    flo, fhi = flo - 0.05 * span, fhi + 0.05 * span

    def x(i: int) -> float:
        return left + (width - left - right) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - (f(v) - flo) / (fhi - flo))

    for frac in (0.0, 0.5, 1.0):
        v = 10 ** (flo + frac * (fhi - flo)) if log else flo + frac * (fhi - flo)
        parts.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10">{_fmt(v)}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" font-size="10">1</text>'
                 f'<text x="{width - right}" y="{height - 8}" text-anchor="end" font-size="10">{n}</text>'
                 f'<text x="{(left + width) / 2}" y="{height - 8}" text-anchor="middle" font-size="11">trial</text>')
    for k, (name, s) in enumerate(sorted(series.items())):
        colour = COLOURS[k % len(COLOURS)]
        points = [f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s) if v is not None]
        if points:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(points)}"/>')
        parts.append(f'<text x="{left + 6}" y="{top + 14 + 13 * k}" font-size="11" fill="{colour}">'
                     f'{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def fmt_time(seconds: float | None) -> str:
    """Seconds in the unit that keeps 1-3 digits before the point: ``"2.45 ms"``."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


_fmt = fmt_time


def _table(summary: WorkloadSummary) -> str:
    rows = []
    best = summary.best
    for name, rs in sorted(summary.by_implementation.items()):
        ok = [r for r in rs if r.measurement.ok]
        fastest = min(ok, key=lambda r: r.measurement.time.median) if ok else None  # type: ignore[union-attr]
        confirmed = [r for r in summary.confirmations if r.implementation == name]
        shown = min(confirmed, key=lambda r: r.measurement.time.median) if confirmed else fastest  # type: ignore[union-attr]
        if best is not None and best.implementation == name:
            shown = best  # the starred row names what dispatch runs
        failures = defaultdict(int)
        for r in rs:
            if not r.measurement.ok:
                failures[r.measurement.status.value] += 1
        cfg = "-" if shown is None else " ".join(f"{k}={v}" for k, v in sorted(shown.config.items()))
        mark = " ★" if best is not None and shown is not None and shown.implementation == best.implementation else ""
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            name + mark, cfg, _fmt(None if shown is None else shown.measurement.time.median),  # type: ignore[union-attr]
            "yes" if confirmed else "no", len(rs),
            ", ".join(f"{k}: {v}" for k, v in sorted(failures.items())) or "0")) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("implementation", "best config", "time", "confirmed", "trials", "failures"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render_report(records: Iterable[TuningRecord], *, title: str = "kernelgen tuning report", source: str = "") -> str:
    """The HTML text of the report over ``records``."""
    summaries = summarise(records)
    sections = []
    for s in summaries:
        series = {name: best_so_far(rs) for name, rs in s.by_implementation.items()}
        sections.append(
            f'<section><h2>{html.escape(f"{s.name} · {s.signature}" if s.name else s.signature)}</h2>'
            f'<p class="meta">workload {html.escape(s.workload_key)} · {html.escape(s.device)} · target '
            f'{html.escape(s.target_fingerprint)}</p>{convergence_svg(series)}{_table(s)}</section>')
    body = "".join(sections) or "<p>The database holds no tuning records yet: run <code>kernelgen tune</code>.</p>"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}"
            "table{border-collapse:collapse;margin:.5em 0 2em}td,th{border:1px solid #ccc;padding:.25em .6em;"
            "text-align:left}th{background:#f3f3f3}.meta{color:#666;font-size:.85em}section{margin-bottom:1em}"
            f"</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p class=\"meta\">{len(summaries)} workload(s) · {html.escape(source)} · generated {when}</p>"
            f"{body}</body></html>")


def write_report(db: Any, path: str | Path) -> int:
    """Write the report over every record of ``db`` to ``path`` atomically; returns the number of workloads."""
    from kernelgen.paths import atomic_write_text

    records = list(db.records())
    atomic_write_text(Path(path), render_report(records, source=getattr(db, "url", "")))
    return len(summarise(records))


__all__ = ["best_so_far", "convergence_svg", "fmt_time", "render_report", "summarise", "write_report"]
