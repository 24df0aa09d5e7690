"""Writer processes for the concurrency tests, forked from one preloaded forkserver so eight of them
start in milliseconds instead of each importing kernelgen.

``write(url, worker, count, batch, barrier, results)`` opens the database, waits on ``barrier`` (so all
writers start together), then commits ``count`` records (one transaction each when ``batch`` is 1);
``count`` 0 means commit batches until killed. It puts ``(worker, added, error)`` on ``results``.
"""

from __future__ import annotations

import multiprocessing
import traceback

from kernelgen.db import open_db
from tests.db import factories


def context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["kernelgen.db", "tests.db.factories", "tests.db.writer"])
    return ctx


def write(url: str, worker: int, count: int, batch: int, barrier, results) -> None:
    try:
        db = open_db(url, team_url="")
        barrier.wait(timeout=120)
        added, i = 0, 0
        while count == 0 or i < count:
            n = batch if count == 0 else min(batch, count - i)
            recs = [factories.record(workload=f"wk-w{worker}-{(i + k) % 17}", seed=i + k,
                                     config={"worker": worker, "i": i + k, "pad": "x" * 200},
                                     median=1e-5 * (1 + (i + k) % 13)) for k in range(n)]
            added += db.commit(recs[0]) if n == 1 else db.commit_many(recs)
            i += n
        db.close()
        results.put((worker, added, None))
    except BaseException:
        results.put((worker, -1, traceback.format_exc()))
        raise
