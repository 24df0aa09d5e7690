"""``kernelgen report``: the tuning database as one self-contained, offline HTML file built with plotly.

``data`` derives what is shown from the records (trials, best, finalists, baselines, failures, device),
``figures`` draws it, ``page`` lays it out; ``units`` formats times.
"""

from kernelgen.report.data import WorkloadSummary, best_so_far, summarise
from kernelgen.report.page import render_report, write_report
from kernelgen.report.units import fmt_time

__all__ = ["WorkloadSummary", "best_so_far", "fmt_time", "render_report", "summarise", "write_report"]
