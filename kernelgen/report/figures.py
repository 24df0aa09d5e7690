"""The report's plotly figures, drawn from a ``WorkloadSummary``: the trials with the best so far, and the
effect of each tunable parameter. Times are on a log axis (a search spans orders of magnitude); every point's
hover shows its implementation, time and config.
"""

from __future__ import annotations

import html
import math
import sys
from typing import Any

from kernelgen.ir.values import Evidence, TuningRecord
from kernelgen.report.data import TrialPoint, WorkloadSummary
from kernelgen.report.units import fmt_time

# Implementations in a fixed order of colours (plotly's qualitative palette without its gold, which is the ★'s).
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880")
STAR = "#E5B000"
STATUS_COLOURS = {"invalid": "#7f7f7f", "compile_error": "#d62728", "runtime_error": "#9467bd",
                  "timeout": "#8c564b", "wrong_result": "#e377c2"}
REFERENCE_DASH = {"eager": "dash", "torch.compile": "dot"}
MANTISSAS = ((3.0, (1,)), (1.0, (1, 2, 5)), (0.0, (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)))  # (decades spanned, ticks)
HOVER = "%{customdata}<extra></extra>"


def colours(summary: WorkloadSummary) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(summary.implementations)}


def config_text(record: TuningRecord) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(record.config.items())) or "(no parameters)"


def _hover(record: TuningRecord, head: str) -> str:
    m = record.measurement
    lines = [head, f"<b>{html.escape(record.implementation)}</b>", html.escape(config_text(record))]
    lines.append(fmt_time(m.time.median) if m.time is not None else f"{m.status.value}: {_wrap(m.message)}")
    return "<br>".join(lines)


def _wrap(text: str, width: int = 90, limit: int = 400) -> str:
    text = text if len(text) <= limit else text[:limit] + " …"
    return "<br>".join(html.escape(text[i:i + width]) for i in range(0, len(text), width))


def trials_figure(summary: WorkloadSummary) -> Any:
    """Each search trial (colour: implementation), the best so far, the confirmed finalists and the ★ after
    the search, the baselines of the ★'s rounds as horizontal lines; failed trials in a strip below."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    failures = summary.failures
    rows = 2 if failures else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        row_heights=[0.78, 0.22] if rows == 2 else [1.0])
    colour = colours(summary)
    n = len(summary.points)
    after = n + 1  # the confirmation rounds, after the last search trial
    for impl in summary.implementations:
        pts = [p for p in summary.points if p.record.implementation == impl and p.time is not None]
        if pts:
            fig.add_trace(go.Scatter(
                x=[p.number for p in pts], y=[p.time for p in pts], mode="markers", name=impl,
                legendgroup=impl, marker=dict(color=colour[impl], size=7, opacity=0.8),
                customdata=[_hover(p.record, f"trial {p.number}") for p in pts], hovertemplate=HOVER), row=1, col=1)
    steps = [p for p in summary.points if p.best_so_far is not None]
    if steps:
        fig.add_trace(go.Scatter(
            x=[p.number for p in steps] + [n + 0.5], y=[p.best_so_far for p in steps] + [steps[-1].best_so_far],
            mode="lines", line=dict(color="#333", width=1.5, shape="hv"), name="best so far (search)",
            hoverinfo="skip"), row=1, col=1)
    best = summary.best
    finalists = [r for r in summary.finalists if r is not best]  # [] when the best is a search trial
    if finalists:
        fig.add_trace(go.Scatter(
            x=[after] * len(finalists), y=[r.measurement.time.median for r in finalists],  # type: ignore[union-attr]
            mode="markers", name="confirmed finalists",
            marker=dict(symbol="diamond", size=9, color=[colour[r.implementation] for r in finalists],
                        line=dict(color="#333", width=1)),
            customdata=[_hover(r, "confirmed in the ★'s rounds") for r in finalists], hovertemplate=HOVER),
            row=1, col=1)
    confirmed = best is not None and best.evidence is not Evidence.TRIAL
    if best is not None and best.measurement.time is not None:
        x = after if confirmed else _trial_number(summary.points, best)
        fig.add_trace(go.Scatter(
            x=[x], y=[best.measurement.time.median], mode="markers", name="★ best (what dispatch runs)",
            marker=dict(symbol="star", size=18, color=STAR, line=dict(color="#333", width=1)),
            customdata=[_hover(best, "★ best: what dispatch runs")], hovertemplate=HOVER), row=1, col=1)
    for ref in summary.references:
        if ref.time is not None:
            label = f"{html.escape(ref.name)} {fmt_time(ref.time.median)}"
            fig.add_trace(go.Scatter(
                x=[0.5, after + 0.5], y=[ref.time.median] * 2, mode="lines", name=label,
                line=dict(color="#555", width=1.2, dash=REFERENCE_DASH.get(ref.name, "dashdot")),
                customdata=[f"<b>{label}</b><br>timed in the ★'s rounds, on the same inputs"] * 2,
                hovertemplate=HOVER), row=1, col=1)
    if confirmed:
        fig.add_vline(x=n + 0.5, line=dict(color="#aaa", width=1, dash="dot"), row=1, col=1)
    if failures:
        for status in sorted({p.record.measurement.status.value for p in failures}):
            pts = [p for p in failures if p.record.measurement.status.value == status]
            fig.add_trace(go.Scatter(
                x=[p.number for p in pts], y=[status] * len(pts), mode="markers", name=f"{status} ({len(pts)})",
                marker=dict(symbol="x", size=9, color=STATUS_COLOURS.get(status, "#333")),
                customdata=[_hover(p.record, f"trial {p.number}") for p in pts], hovertemplate=HOVER), row=2, col=1)
        fig.update_yaxes(type="category", title_text="failed", row=2, col=1)
    fig.update_yaxes(row=1, col=1, **time_axis(_times(summary)))
    fig.update_xaxes(title_text="trial, in measuring order (then the confirmation rounds)", row=rows, col=1)
    step = max(1, math.ceil(n / 12))
    ticks = list(range(1, n + 1, step))
    fig.update_xaxes(range=[0.3, after + 0.7], tickvals=ticks + ([after] if confirmed else []),
                     ticktext=[str(t) for t in ticks] + (["confirmed"] if confirmed else []))
    fig.update_layout(template="plotly_white", height=460 if rows == 2 else 380, margin=dict(l=80, r=20, t=45, b=50),
                      legend=dict(font=dict(size=11)), hoverlabel=dict(align="left"))
    return fig


def time_axis(times: list[float], title: str = "time (median)") -> dict[str, Any]:
    """A log time axis whose ticks read as times (``"50 µs"``): at 1-2-5 steps over a wide range, at evenly
    spaced round values over a narrow one (plotly's own log ticks label every minor step and pile up, or
    show none at all inside one decade)."""
    axis: dict[str, Any] = dict(type="log", title_text=title)
    positive = [t for t in times if t and t > 0]
    if not positive:
        return axis
    ticks = log_ticks(min(positive), max(positive))
    if ticks:
        axis.update(tickvals=ticks, ticktext=[fmt_time(t) for t in ticks])
    return axis


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values between ``lo`` and ``hi`` (a little beyond), three to about ten of them."""
    if hi <= lo * 1.001:  # one value: plotly's range around it is its own, so one tick, at it
        return [lo]
    lo, hi = lo / 1.01, min(hi * 1.01, sys.float_info.max)  # a time near the largest float stays finite
    # Decades a float can hold (10.0 ** 309 overflows): a hand-made record of 1e308 s must still draw.
    decades = range(max(math.floor(math.log10(lo)) - 1, -323), min(math.ceil(math.log10(hi)) + 2, 308) + 1)
    for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):
        candidates = [t for t in (m * 10.0 ** e for e in decades for m in mantissas) if math.isfinite(t)]
        inside = [t for t in candidates if lo <= t <= hi]
        inside = inside[::max(1, -(-len(inside) // 10))] if len(mantissas) == 1 else inside  # many decades: ~10
        if len(inside) >= 3:
            # One more on each side: the axis pads the data, and a tick there, if shown, is read too.
            below, above = [t for t in candidates if t < lo][-1:], [t for t in candidates if t > hi][:1]
            return below + inside + above
    # A narrow range: evenly spaced round values (step 1, 2, 2.5 or 5 times a power of ten).
    raw = (hi - lo) / 5
    base = 10.0 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)
    first = math.ceil(lo / step)
    ticks = [k * step for k in range(first, math.floor(hi / step) + 1)]
    labels = [fmt_time(t) for t in ticks]
    # Too narrow for distinct labels (one value, or a few within 0.1%): one tick, at the data.
    return ticks if len(ticks) >= 2 and len(set(labels)) == len(labels) else [math.sqrt(lo * hi)]


def _times(summary: WorkloadSummary) -> list[float]:
    out = [p.time for p in summary.points if p.time is not None]
    out += [r.measurement.time.median for r in summary.finalists if r.measurement.time is not None]
    out += [r.time.median for r in summary.references if r.time is not None]
    return out


def _trial_number(points: list[TrialPoint], record: TuningRecord) -> int:
    return next((p.number for p in points if p.record.record_id == record.record_id), len(points))


def _ordered(values: list[Any]) -> list[str]:
    """A parameter's distinct values in their natural order (numbers numerically), as axis categories."""
    distinct = list(dict.fromkeys(values))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct)
    return [str(v) for v in (sorted(distinct) if numeric else sorted(distinct, key=str))]


def parameters_figure(summary: WorkloadSummary) -> Any | None:
    """One panel per (implementation, parameter): every ok trial's time against the parameter's value, with
    a box per value; None when no trial ran ok or nothing is tunable."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    effects = summary.parameter_effects()
    if not effects:
        return None
    several = len({impl for impl, _ in effects}) > 1
    cols = min(3, len(effects))
    rows = math.ceil(len(effects) / cols)
    titles = [f"{impl} · {name}" if several else name for impl, name in effects]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08,
                        vertical_spacing=0.5 / rows if rows > 1 else 0.1)
    colour = colours(summary)
    shown: set[str] = set()
    for k, ((impl, name), pairs) in enumerate(effects.items()):
        row, col = k // cols + 1, k % cols + 1
        fig.add_trace(go.Box(
            x=[str(v) for v, _ in pairs], y=[p.time for _, p in pairs], name=impl, legendgroup=impl,
            showlegend=impl not in shown, boxpoints="all", jitter=0.35, pointpos=0, marker=dict(color=colour[impl],
                                                                                                size=5),
            line=dict(width=1), customdata=[_hover(p.record, f"trial {p.number}") for _, p in pairs],
            hovertemplate=HOVER), row=row, col=col)
        shown.add(impl)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=_ordered([v for v, _ in pairs]),
                         row=row, col=col)
        fig.update_yaxes(row=row, col=col, **time_axis([p.time for _, p in pairs], "time" if col == 1 else ""))
    fig.update_layout(template="plotly_white", height=90 + 260 * rows, margin=dict(l=70, r=20, t=40, b=40),
                      showlegend=several, boxmode="group")
    return fig


__all__ = ["PALETTE", "STAR", "colours", "config_text", "parameters_figure", "trials_figure"]
