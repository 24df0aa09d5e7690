"""``kernelgen report``: the tuning database as one self-contained, offline HTML file built with plotly.

``data`` derives what is shown from the records (trials, best, finalists, baselines, failures, device),
``figures`` draws it, ``page`` lays it out; ``units`` formats times.

Names are imported on first use, so the tuner's progress lines can format times (``units``) without importing
the database layer that ``data`` reads records through.
"""

import importlib
from typing import Any

_EXPORTS = {"WorkloadSummary": "data", "best_so_far": "data", "summarise": "data", "render_report": "page",
            "write_report": "page", "fmt_time": "units"}

__all__ = ["WorkloadSummary", "best_so_far", "fmt_time", "render_report", "summarise", "write_report"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernelgen.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kernelgen.report.{_EXPORTS[name]}"), name)
