"""The report's content, checked without a browser: trial points in measuring order with the best so far, the
★ on what ``TuningDB.best`` returns (in the plot and the table alike), every failure with its message, eager
and torch.compile from the ★'s rounds, the workload's title, and a page that needs no network."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from kernelgen.ir.values import DECLARED_PREFIX, Status
from kernelgen.report.data import _workload_title, summarise
from kernelgen.report.figures import parameters_figure, trials_figure
from kernelgen.report.page import finalists_table, render_report, write_report
from kernelgen.report.units import fmt_time
from tests.report.records import COMPILED_TIME, EAGER_TIME, SEARCH, workload_records

pytest.importorskip("plotly")


@pytest.fixture
def db(tmp_path):
    from kernelgen.db import open_db

    with open_db(f"sqlite:///{tmp_path / 'tuning.sqlite'}") as database:
        yield database


def _trace(fig, name_start: str):
    return next(t for t in fig.data if (t.name or "").startswith(name_start))


def test_trial_points_follow_the_measuring_order_with_the_running_best() -> None:
    records = workload_records()
    (s,) = summarise(reversed(records))  # the order records come in does not matter: their time does
    assert [p.number for p in s.points] == list(range(1, len(SEARCH) + 1))
    assert [(p.record.implementation, dict(p.record.config)) for p in s.points] == [(i, c) for i, c, *_ in SEARCH]
    running, expected = None, []
    for *_, status, median, _ in SEARCH:
        if status == "ok":
            running = median if running is None else min(running, median)
        expected.append(running)
    assert [p.best_so_far for p in s.points] == expected
    fig = trials_figure(s)
    plotted = {(t.name, x, y) for t in fig.data if t.mode == "markers" and t.name in ("pointwise", "custom:bias_gelu/cpp")
               for x, y in zip(t.x, t.y)}
    assert plotted == {(p.record.implementation, p.number, p.time) for p in s.points if p.time is not None}


def test_the_star_is_what_the_database_dispatches_in_the_plot_and_in_the_table(db) -> None:
    records = workload_records()
    # A newer verdict, slower than the first: best() runs the newest verdict, and so must the report's ★.
    newer = replace(records[-1], measurement=replace(records[-1].measurement, message=records[-3].measurement.message),
                    provenance=replace(records[-1].provenance, created_at=records[-1].provenance.created_at + 50),
                    evidence=records[-3].evidence)
    db.commit_many([*records, newer])
    best = db.best(records[0].workload_key, records[0].target_fingerprint)
    assert best == newer and best.implementation == "custom:bias_gelu/cpp"
    (s,) = summarise(db.records(), db.best)
    assert s.best == best
    assert summarise([*records, newer])[0].best == best  # without the database: the same rule over the records
    star = _trace(trials_figure(s), "★")
    assert list(star.y) == [best.measurement.time.median] and "rows_per_task=4" in star.customdata[0]
    rows = re.findall(r'<tr class="best">(.*?)</tr>', finalists_table(s))
    assert len(rows) == 1 and "rows_per_task=4" in rows[0] and fmt_time(best.measurement.time.median) in rows[0]


def test_every_failure_is_listed_with_its_message(db, tmp_path) -> None:
    records = workload_records()
    db.commit_many(records)
    out = tmp_path / "report.html"
    assert write_report(db, out) == 1
    text = out.read_text()
    failures = [(i + 1, status, message) for i, (_, _, status, _, message) in enumerate(SEARCH) if status != "ok"]
    assert len(failures) == 3
    for number, status, message in failures:
        assert html.escape(message) in text and status in text
    fig = trials_figure(summarise(records)[0])
    strip = {(t.y[0], x) for t in fig.data if t.marker.symbol == "x" for x in t.x}
    assert strip == {(status, number) for number, status, _ in failures}
    assert "Failures (3)" in text


def test_eager_and_torch_compile_of_the_stars_rounds_are_in_the_table_and_the_plot() -> None:
    (s,) = summarise(workload_records())
    star_time = s.best.measurement.time.median
    table = finalists_table(s)
    for label, t in (("eager PyTorch", EAGER_TIME), ("torch.compile (Inductor)", COMPILED_TIME)):
        row = re.search(rf'<tr class="baseline"><td></td><td>{re.escape(label)}</td>(.*?)</tr>', table).group(1)
        assert fmt_time(t) in row and f"{t / star_time:.2f}×" in row
    lines = {t.name: t.y[0] for t in trials_figure(s).data if t.mode == "lines" and t.name != "best so far (search)"}
    assert lines == {f"eager {fmt_time(EAGER_TIME)}": EAGER_TIME, f"torch.compile {fmt_time(COMPILED_TIME)}": COMPILED_TIME}


def test_a_torch_compile_that_failed_shows_why_and_no_time() -> None:
    (s,) = summarise(workload_records(compiled_fails=True))
    row = re.search(r'<td>torch.compile \(Inductor\)</td>(.*?)</tr>', finalists_table(s)).group(1)
    assert "torch.compile failed: InductorError: CppCompileError: no compiler" in row and "<td class=\"num\">-</td>" in row
    assert not any((t.name or "").startswith("torch.compile") for t in trials_figure(s).data)


def test_rounds_that_refused_a_verdict_show_no_ratios() -> None:
    records = [replace(r, measurement=replace(r.measurement, message=r.measurement.message.replace(
        DECLARED_PREFIX, "confirmed") + "; no verdict: the machine was busy in every one of the leader's 3 rounds"))
        for r in workload_records()]
    (s,) = summarise(records)
    assert not s.verdict_trusted
    assert "×" not in finalists_table(s)  # the load's ratios, not the kernels'


def test_each_parameter_of_each_implementation_gets_a_panel_of_its_ok_trials() -> None:
    (s,) = summarise(workload_records())
    fig = parameters_figure(s)
    panels = {(t.name, t.xaxis): sorted(zip(t.x, t.y)) for t in fig.data}
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["custom:bias_gelu/cpp · rows_per_task", "pointwise · block", "pointwise · simd"]
    ok = [(i, c, m) for i, c, st, m, _ in SEARCH if st == "ok"]
    assert sorted(panels[("pointwise", "x2")]) == sorted((str(c["block"]), m) for i, c, m in ok if i == "pointwise")
    assert sorted(panels[("pointwise", "x3")]) == sorted((str(c["simd"]), m) for i, c, m in ok if i == "pointwise")


def test_the_title_is_the_workloads_name_when_records_carry_one() -> None:
    records = workload_records()
    assert _workload_title(records) == "float32[1024, 1024], float32[1024]"

    class Named:  # what a record with the coming ``name`` field looks like to the accessor
        def __init__(self, record, name):
            self._record, self.name = record, name

        def __getattr__(self, attr):
            return getattr(self._record, attr)

    assert _workload_title([Named(records[0], "bias_gelu")]) == "bias_gelu"


def test_the_page_is_self_contained_and_one_section_per_workload_and_target() -> None:
    records = workload_records() + workload_records(workload="wk-other")
    text = render_report(records)
    assert text.count("<section") == 2 and text.count('class="plotly-graph-div"') == 4
    from plotly.offline import get_plotlyjs

    assert get_plotlyjs() in text  # plotly.js itself is in the file, once ...
    ours = text.replace(get_plotlyjs(), "")
    assert not re.search(r'<script[^>]+src=|<link[^>]+href=|https?://', ours)  # ... and nothing else is fetched
    assert render_report([]).count("<section") == 0 and "kernelgen tune" in render_report([])


def test_a_workload_whose_trials_all_failed_or_never_confirmed_still_renders() -> None:
    search = [r for r in workload_records() if r.evidence.name == "TRIAL"]
    failed = [r for r in search if not r.measurement.ok]
    (s,) = summarise(failed)
    assert s.best is None and s.finalists == [] and len(s.failures) == 3
    assert "No configuration ran correctly" in render_report(failed)
    assert not any(t.name.startswith("★") for t in trials_figure(s).data) and parameters_figure(s) is None
    (s,) = summarise(search)  # a search that was interrupted before its confirmation rounds
    fastest = min((r for r in search if r.measurement.ok), key=lambda r: r.measurement.time.median)
    assert s.best == fastest and s.references == ()
    star = _trace(trials_figure(s), "★")
    assert list(star.x) == [search.index(fastest) + 1] and list(star.y) == [fastest.measurement.time.median]
    assert "a search trial (never confirmed)" in render_report(search)
