"""Where ``kernelgen tune``'s table and older callers import the report from; it lives in ``kernelgen.report``."""

from __future__ import annotations

from kernelgen.report.data import WorkloadSummary, best_so_far, summarise
from kernelgen.report.page import render_report, write_report
from kernelgen.report.units import fmt_time

__all__ = ["WorkloadSummary", "best_so_far", "fmt_time", "render_report", "summarise", "write_report"]
