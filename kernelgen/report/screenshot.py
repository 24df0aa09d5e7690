"""A screenshot of an HTML file in headless Chromium: how the report is looked at, as a person would see it,
before it ships (``benchmarks/report_screenshot.py`` and the report's screenshot test use it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernelgen.errors import KernelgenError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "install Chromium (Debian/Ubuntu: `apt-get install chromium`) or set KERNELGEN_CHROMIUM to its path"


def find_browser() -> str | None:
    """The Chromium to use: ``KERNELGEN_CHROMIUM`` when set, else the first of ``BROWSERS`` on PATH."""
    chosen = os.environ.get("KERNELGEN_CHROMIUM")
    if chosen:
        return shutil.which(chosen) or (chosen if Path(chosen).is_file() else None)
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def screenshot(page: str | Path, png: str | Path, *, width: int = 1400, height: int = 3000,
               timeout: float = 120.0) -> Path:
    """Render ``page`` at ``width`` x ``height`` CSS pixels and write the PNG to ``png``; its path.

    Scripts get a few seconds of virtual time first (plotly draws its figures on load). Raises
    ``KernelgenError`` when no Chromium is installed or it writes no image.
    """
    browser = find_browser()
    if browser is None:
        raise KernelgenError(f"no Chromium found for a screenshot (tried {', '.join(BROWSERS)}); {INSTALL_HINT}")
    page, png = Path(page).resolve(), Path(png).resolve()
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernelgen-chromium-") as profile:
        # --no-sandbox: root in containers and CI has no user namespace for Chromium's sandbox. A throw-away
        # profile keeps runs independent of each other and of a person's own browser.
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=5000",
               f"--screenshot={png}", page.as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KernelgenError(f"{browser} took more than {timeout:g} s to screenshot {page}") from None
    if not png.is_file() or png.stat().st_size == 0:
        tail = " ".join((done.stderr or "").split()[-40:])
        raise KernelgenError(f"{browser} wrote no screenshot of {page} (exit code {done.returncode}): {tail}")
    return png


__all__ = ["BROWSERS", "find_browser", "screenshot"]
