"""A writer process for the concurrency tests: ``python -m tests.db.writer URL WORKER COUNT [BATCH]``.

Opens the database, prints ``ready``, waits for a line on stdin (so all writers start together), then
commits COUNT records (one transaction each when BATCH is 1). COUNT 0 means: commit batches forever
(until killed). Prints ``done ADDED`` on success; any error goes to stderr with exit code 1.
"""

from __future__ import annotations

import sys

from kernelgen.db import open_db
from tests.db import factories


def main(url: str, worker: int, count: int, batch: int = 1) -> int:
    db = open_db(url, team_url="")
    print("ready", flush=True)
    sys.stdin.readline()
    added, i = 0, 0
    while count == 0 or i < count:
        n = batch if count == 0 else min(batch, count - i)
        recs = [factories.record(workload=f"wk-w{worker}-{(i + k) % 17}", seed=i + k,
                                 config={"worker": worker, "i": i + k, "pad": "x" * 200}, median=1e-5 * (1 + (i + k) % 13))
                for k in range(n)]
        added += db.commit(recs[0]) if n == 1 else db.commit_many(recs)
        i += n
    print(f"done {added}", flush=True)
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *(int(a) for a in sys.argv[4:5])))
