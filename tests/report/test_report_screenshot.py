"""The report seen in a real browser: headless Chromium screenshots a report of a small database, and the
image shows drawn plots (the ★'s gold, the trial markers' colour), not a blank or script-less page."""

from __future__ import annotations

import numpy as np
import pytest

from kernelgen.report.figures import PALETTE, STAR
from kernelgen.report.screenshot import find_browser, screenshot
from tests.report.png import read_png
from tests.report.records import workload_records

pytest.importorskip("plotly")
pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium to screenshot with (apt-get install chromium)")


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])


def _pixels_near(image: np.ndarray, hex_colour: str, tolerance: int = 12) -> int:
    return int((np.abs(image[..., :3].astype(int) - _rgb(hex_colour)).max(axis=-1) <= tolerance).sum())


def test_a_screenshot_of_the_report_shows_its_plots(tmp_path) -> None:
    from kernelgen.db import open_db
    from kernelgen.report import write_report

    with open_db(f"sqlite:///{tmp_path / 'tuning.sqlite'}") as db:
        db.commit_many(workload_records())
        write_report(db, tmp_path / "report.html")
    png = screenshot(tmp_path / "report.html", tmp_path / "report.png", width=1000, height=1100)
    image = read_png(png)
    assert image.shape[:2] == (1100, 1000)
    colours = np.unique(image[..., :3].reshape(-1, 3), axis=0)
    assert len(colours) > 50 and image[..., :3].std() > 10  # text, tables, plots: not a blank page
    # Colours that only plotly draws: the ★ marker and the first implementation's trial markers. Without
    # plotly.js running (a script that failed or never loaded) neither appears.
    assert _pixels_near(image, STAR) > 30
    assert _pixels_near(image, PALETTE[0]) > 30
