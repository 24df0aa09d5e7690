"""The report as one self-contained HTML file: plotly.js embedded once, then a section per workload (the ★,
the trials plot, the finalists with eager and torch.compile, the parameter effects, the failures with their
messages, the device and toolchain). It opens offline: nothing is fetched.
"""

from __future__ import annotations

import html
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernelgen.db.verdict import note_of
from kernelgen.ir.values import Evidence, TuningRecord
from kernelgen.paths import atomic_write_text, refuse_overwrite
from kernelgen.report.data import BestLookup, WorkloadSummary, summarise
from kernelgen.report.figures import config_text, parameters_figure, trials_figure
from kernelgen.report.units import fmt_ratio, fmt_time

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;
color:#222}
h1{margin-bottom:.2em}h2{margin:1.6em 0 .2em;padding-top:.6em;border-top:2px solid #ddd}h3{margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.92em}
td,th{border:1px solid #d5d5d5;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.best td{background:#fff6d5;font-weight:600}tr.baseline td{background:#f6f8fb}
.meta{color:#666;font-size:.88em}.verdict{font-size:1.05em;margin:.5em 0}.star{color:#c99a00}
.note{color:#a15c00}code{font-size:.92em}td.msg{font-family:ui-monospace,monospace;font-size:.85em;
max-width:60em;word-break:break-word}nav li{margin:.15em 0}
"""
BASELINE_LABELS = {"eager": "eager PyTorch", "torch.compile": "torch.compile (Inductor)"}


def _cell(value: Any, cls: str = "") -> str:
    return f'<td class="{cls}">{html.escape(str(value))}</td>' if cls else f"<td>{html.escape(str(value))}</td>"


def _table(head: Iterable[str], rows: Iterable[str], cls: str = "") -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _time(record: TuningRecord | None) -> float | None:
    return None if record is None or record.measurement.time is None else record.measurement.time.median


def verdict_line(s: WorkloadSummary) -> str:
    best = s.best
    if best is None:
        return '<p class="verdict">No configuration ran correctly: nothing to dispatch (eager runs).</p>'
    how = {Evidence.DECLARED: "the tuner's verdict", Evidence.CONFIRMED: "a confirmed finalist (no verdict declared)",
           Evidence.TRIAL: "a search trial (never confirmed)"}[best.evidence]
    t = best.measurement.time.median  # type: ignore[union-attr]
    parts = [f'<span class="star">★</span> <b>{html.escape(best.implementation)}</b> '
             f"<code>{html.escape(config_text(best))}</code> — <b>{fmt_time(t)}</b> ({how}, what dispatch runs)"]
    for ref in s.references:
        if ref.time is not None and s.verdict_trusted:  # refused rounds: their ratios are the load's
            r = ref.time.median
            name = html.escape(ref.name)
            parts.append(f"{r / t:.2f}× faster than {name}" if r >= t else f"{t / r:.2f}× slower than {name}")

    note = note_of(best)
    text = " · ".join(parts)
    return f'<p class="verdict">{text}</p>' + (f'<p class="note">{html.escape(note)}</p>' if note else "")


def finalists_table(s: WorkloadSummary) -> str:
    """The ★'s rounds: every finalist and every baseline, each timed in the same interleaved rounds."""
    finalists = s.finalists
    if not finalists:
        return "<p>No finalist was confirmed.</p>"
    best_time = _time(s.best)
    trusted = s.verdict_trusted
    rows = []
    for r in finalists:
        mark = "★" if r is s.best or (s.best is not None and r.record_id == s.best.record_id) else ""
        rows.append(f'<tr class="{"best" if mark else ""}">' + "".join((
            _cell(mark), _cell(r.implementation), _cell(config_text(r)), _cell(fmt_time(_time(r)), "num"),
            _cell(fmt_ratio(_time(r), best_time) if trusted else "-", "num"),
            _cell(r.measurement.threads or "-", "num"))) + "</tr>")
    for ref in s.references:
        t = None if ref.time is None else ref.time.median
        label = BASELINE_LABELS.get(ref.name, ref.name)
        rows.append('<tr class="baseline">' + "".join((
            _cell(""), _cell(label), _cell(ref.message or "same inputs, same rounds"), _cell(fmt_time(t), "num"),
            _cell(fmt_ratio(t, best_time) if trusted else "-", "num"),
            _cell(finalists[0].measurement.threads or "-", "num"))) + "</tr>")
    if not s.references and s.best is not None and s.best.evidence is not Evidence.TRIAL:
        rows.append('<tr class="baseline"><td></td><td colspan="5">eager and torch.compile were not timed in these '
                    "rounds (records of an older kernelgen, or tuned with <code>time_eager=False</code>)</td></tr>")
    rounds = "the search (no confirmation rounds)" if s.best is not None and s.best.evidence is Evidence.TRIAL \
        else "the same interleaved confirmation rounds"
    return (f'<p class="meta">Measured in {rounds}; time / ★ is each time as a multiple of the ★\'s.</p>'
            + _table(("", "contestant", "config", "time", "time / ★", "threads"), rows, "finalists"))


def implementations_table(s: WorkloadSummary) -> str:
    rows = []
    for impl, recs in s.by_implementation.items():
        ok = [r for r in recs if r.measurement.ok]
        fastest = min(ok, key=lambda r: r.measurement.time.median) if ok else None  # type: ignore[union-attr]
        failed = Counter(r.measurement.status.value for r in recs if not r.measurement.ok)
        hashes = sorted({r.implementation_hash for r in recs})
        rows.append("<tr>" + "".join((
            _cell(impl), _cell(len(recs), "num"), _cell(len(ok), "num"),
            _cell(", ".join(f"{k}: {v}" for k, v in sorted(failed.items())) or "0"),
            _cell(fmt_time(_time(fastest)), "num"), _cell("-" if fastest is None else config_text(fastest)),
            _cell(" ".join(hashes)))) + "</tr>")
    return _table(("implementation", "trials", "ok", "failed", "fastest trial", "its config", "source hash"), rows)


def failures_table(s: WorkloadSummary) -> str:
    failures = s.failures
    if not failures:
        return "<p>None: every trial built, ran and matched eager PyTorch.</p>"
    rows = ["<tr>" + "".join((_cell(p.number, "num"), _cell(p.record.implementation),
                              _cell(p.record.measurement.status.value), _cell(config_text(p.record)),
                              _cell(p.record.measurement.message or "(no message)", "msg"))) + "</tr>"
            for p in failures]
    return _table(("trial", "implementation", "status", "config", "message"), rows, "failures")


def details_table(s: WorkloadSummary) -> str:
    return _table(("", ""), ("<tr>" + _cell(k) + _cell(v) + "</tr>" for k, v in s.details()), "details")


def _figure_html(fig: Any) -> str:
    height = fig.layout.height or 400
    return fig.to_html(full_html=False, include_plotlyjs=False, default_height=f"{height}px",
                       config={"displaylogo": False, "responsive": True})


def section(s: WorkloadSummary, anchor: str) -> str:
    effects = parameters_figure(s)
    heading = html.escape(s.title)
    sub = "" if s.title == s.signature else f" <span class=\"meta\">{html.escape(s.signature)}</span>"
    failures = len(s.failures)
    return (
        f'<section id="{anchor}"><h2>{heading}{sub}</h2>'
        f'<p class="meta">workload {html.escape(s.workload_key)} · {html.escape(s.device)} · target '
        f"{html.escape(s.target_fingerprint)} · {len(s.points)} trials, {failures} failed, "
        f"{len(s.confirmations)} confirmation records</p>"
        f"{verdict_line(s)}"
        f"<h3>Trials</h3>{_figure_html(trials_figure(s))}"
        f"<h3>Confirmed finalists, eager and torch.compile</h3>{finalists_table(s)}"
        f"<h3>Implementations</h3>{implementations_table(s)}"
        + (f"<h3>Parameter effect</h3>{_figure_html(effects)}" if effects is not None else "")
        + f"<h3>Failures ({failures})</h3>{failures_table(s)}"
        f"<h3>Device and toolchain</h3>{details_table(s)}</section>")


def render_report(records: Iterable[TuningRecord], *, title: str = "kernelgen tuning report", source: str = "",
                  best: BestLookup | None = None) -> str:
    """The HTML text of the report over ``records``; ``best`` is dispatch's lookup (``TuningDB.best``)."""
    from plotly.offline import get_plotlyjs

    summaries = summarise(records, best)
    anchors = [f"w{i}" for i in range(len(summaries))]
    toc = "".join(f'<li><a href="#{a}">{html.escape(s.title)}</a> <span class="meta">{html.escape(s.signature)} · '
                  f"{fmt_time(_time(s.best))}</span></li>" for a, s in zip(anchors, summaries))
    body = "".join(section(s, a) for s, a in zip(summaries, anchors)) or \
        "<p>The database holds no tuning records yet: run <code>kernelgen tune</code>.</p>"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<h1>{html.escape(title)}</h1>"
            f'<p class="meta">{len(summaries)} workload(s) · {html.escape(source)} · generated {when}</p>'
            + (f"<nav><ul>{toc}</ul></nav>" if summaries else "") + f"{body}</body></html>")


def write_report(db: Any, path: str | Path) -> int:
    """Write the report over every record of ``db`` to ``path`` atomically; returns the number of workloads."""
    files = getattr(db, "files", None)
    refuse_overwrite(path, files() if files is not None else {})  # a report written over the database ends it
    records = list(db.records())
    lookup = getattr(db, "best", None)
    atomic_write_text(Path(path), render_report(records, source=_shown_url(db), best=lookup))
    return len({(r.workload_key, r.target_fingerprint) for r in records})


def _shown_url(db: Any) -> str:
    return str(getattr(db, "url", ""))


__all__ = ["render_report", "section", "write_report"]
