"""Look at ``kernelgen report`` as a person would: write the report of a tuning database and screenshot it
in headless Chromium.

    python benchmarks/report_screenshot.py [--db URL] [--out-dir DIR] [--width 1400] [--height 3000]

Writes DIR/report.html (the report of ``--db``, default ``KERNELGEN_DB`` or the per-user database) and
DIR/report.png (its first ``--height`` pixels), then prints both paths and their sizes. Open the PNG and
check the plots drew: the trials with the ★, the parameter panels, the tables. Needs Chromium
(`apt-get install chromium`, or KERNELGEN_CHROMIUM=/path/to/chrome). Prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from kernelgen.db import open_db
    from kernelgen.errors import KernelgenError
    from kernelgen.report import write_report
    from kernelgen.report.screenshot import screenshot

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="tuning database URL (default: KERNELGEN_DB or the per-user file)")
    parser.add_argument("--out-dir", default=".", help="where report.html and report.png go")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=3000)
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page, png = out / "report.html", out / "report.png"
    try:
        with open_db(args.db, read_only=True) as db:
            start = time.perf_counter()
            workloads = write_report(db, page)
            built = time.perf_counter() - start
        start = time.perf_counter()
        screenshot(page, png, width=args.width, height=args.height)
        shot = time.perf_counter() - start
    except KernelgenError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{page}: {workloads} workload(s), {page.stat().st_size / 2**20:.1f} MiB, written in {built:.1f} s")
    print(f"{png}: {args.width}x{args.height}, {png.stat().st_size / 2**10:.0f} KiB, taken in {shot:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
