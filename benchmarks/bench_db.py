"""Tuning-database throughput: best() lookups on 100k records and commits/s with 1 and 8 writers.

Run from the repository root: ``python benchmarks/bench_db.py`` (a temporary SQLite file), or
``--url URL`` for another database (e.g. a PostgreSQL server; it must be empty or disposable).
Prints a table; asserts nothing. Goal: under 1 ms per uncached best() on SQLite.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from kernelgen.db import TuningDB, open_db
from kernelgen.ir.values import (Config, FrozenMap, Measurement, Provenance, Status, TensorSpec, TimeStats,
                                 TuningRecord)

TOOLCHAIN = FrozenMap({"kernelgen": "0.1.0", "torch": "2.13.0", "triton": "3.9.0", "compiler": "g++ 12.2.0"})


def make_record(workload: int, target: int, trial: int, tag: str = "bench") -> TuningRecord:
    rng = random.Random(hash((workload, target, trial, tag)))
    rows, cols = 64 << (workload % 6), 128 << (workload % 5)
    config = Config({"BLOCK_M": 16 << rng.randrange(4), "BLOCK_N": 32 << rng.randrange(4), "trial": trial, "tag": tag})
    if trial % 9 == 4:
        measurement = Measurement.failure(config, Status.COMPILE_ERROR, "bench failure")
    else:
        median = rng.uniform(1e-5, 1e-3)
        measurement = Measurement(config, Status.OK, TimeStats(median, median * 0.97, 0.02, 20), threads=2)
    return TuningRecord(
        workload_key=f"wk-{workload:05d}", workload_family=f"wf-{workload % 50:03d}",
        signature=(TensorSpec((rows, cols), "float32"), TensorSpec((cols,), "float32")),
        implementation="pointwise", implementation_hash="impl-0001", backend="cpp",
        target_fingerprint=f"target-{target}", target_family="cpp:cpu:x86_64:avx2", device="bench cpu",
        toolchain=TOOLCHAIN, measurement=measurement,
        provenance=Provenance("bench-host", "bench", "0.1.0", 1.7e9 + trial))


def build(db: TuningDB, workloads: int, targets: int, trials: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) to insert everything."""
    start, cpu = time.perf_counter(), time.process_time()
    batch: list[TuningRecord] = []
    for w in range(workloads):
        for t in range(targets):
            batch.extend(make_record(w, t, k) for k in range(trials))
            if len(batch) >= 5000:
                db.commit_many(batch)
                batch = []
    db.commit_many(batch)
    return time.perf_counter() - start, time.process_time() - cpu


def time_lookups(db: TuningDB, keys: list[tuple[str, str]], **filters) -> tuple[list[float], float]:
    """Wall time of each lookup, and the CPU time per lookup (robust on a shared, busy machine)."""
    per_call = []
    cpu = time.process_time()
    for workload, target in keys:
        start = time.perf_counter()
        db.best(workload, target, **filters)
        per_call.append(time.perf_counter() - start)
    return per_call, (time.process_time() - cpu) / len(keys)


def _writer(url: str, worker: int, count: int, barrier, results) -> None:
    db = open_db(url, team_url="")
    recs = [make_record(100_000 + worker, 0, i, tag=f"w{worker}") for i in range(count)]
    barrier.wait()
    start, cpu = time.perf_counter(), time.process_time()
    for rec in recs:
        db.commit(rec)
    results.put((start, time.perf_counter(), (time.process_time() - cpu) / count))
    db.close()


def commits_per_second(url: str, writers: int, count: int) -> tuple[float, float]:
    """(commits per second of wall time over all writers, CPU seconds per commit in a writer)."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, w + writers * 1000, count, barrier, results)) for w in range(writers)]
    for p in procs:
        p.start()
    spans = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    wall = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
    return writers * count / wall, statistics.median(cpu for _, _, cpu in spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commits", type=int, default=200, help="commits per writer process")
    args = parser.parse_args()

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    tmp = tempfile.TemporaryDirectory(prefix="kernelgen-bench-db-")
    url = args.url or f"sqlite:///{Path(tmp.name) / 'bench.sqlite'}"
    trials, targets = 50, 2
    workloads = max(args.records // (trials * targets), 1)
    db = open_db(url, team_url="")
    build_s, build_cpu = build(db, workloads, targets, trials)
    total = db.count()
    rows: list[tuple[str, str]] = [("database", db.url.split("?")[0]), ("records", f"{total:,}"),
                                   ("bulk insert (commit_many, 5k/txn)",
                                    f"{total / build_s:,.0f} records/s wall; {build_cpu / total * 1e6:.0f} us CPU/record")]

    rng = random.Random(1)
    keys = [(f"wk-{rng.randrange(workloads):05d}", f"target-{rng.randrange(targets)}") for _ in range(args.lookups)]
    for label, filters in (("best()", {}),
                           ("best(implementations=, toolchain=)",
                            {"implementations": {"pointwise": "impl-0001"}, "toolchain": dict(TOOLCHAIN)})):
        medians, p90s, cpus = [], [], []
        for _ in range(args.repeats):
            rng.shuffle(keys)
            per_call, cpu = time_lookups(db, keys, **filters)
            per_call.sort()
            medians.append(statistics.median(per_call))
            p90s.append(per_call[int(0.9 * len(per_call))])
            cpus.append(cpu)
        median = statistics.median(medians)
        rows.append((f"{label} per lookup: wall median (p90); CPU",
                     f"{median * 1e6:.0f} us ({statistics.median(p90s) * 1e6:.0f} us); "
                     f"{statistics.median(cpus) * 1e6:.0f} us -> {1 / median:,.0f} lookups/s"))
    start = time.perf_counter()
    fresh = open_db(url, team_url="")
    fresh.best(*keys[0])
    rows.append(("open_db() + first best() (new process-like)", f"{(time.perf_counter() - start) * 1e3:.1f} ms"))
    fresh.close()
    if db._engine.dialect.name == "sqlite":
        # The plan of the statement best() really runs (a private detail, read here only to diagnose).
        sql, order, defaults = db._prepared_best(-1, False, False)
        values = {**defaults, "wk": keys[0][0], "tf": keys[0][1]}
        with db._engine.connect() as conn:
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql,
                                        tuple(values[n] for n in order) if order else values).all()
        rows.append(("best() query plan", "; ".join(str(r[-1]) for r in plan)))
    db.close()

    for writers in (1, 8):
        runs = [commits_per_second(url, writers, args.commits) for _ in range(3)]
        rates = [rate for rate, _ in runs]
        rows.append((f"commit() x{args.commits}/writer, {writers} writer process(es)",
                     f"{statistics.median(rates):,.0f} commits/s (runs {', '.join(f'{r:,.0f}' for r in rates)}); "
                     f"{statistics.median(cpu for _, cpu in runs) * 1e6:.0f} us CPU/commit"))

    width = max(len(k) for k, _ in rows)
    print(f"load average before/after: {load_before} / {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
