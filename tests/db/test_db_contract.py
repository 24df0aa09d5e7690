"""The TuningDB contract, run on a SQLite file, SQLite in memory and PostgreSQL."""

from __future__ import annotations

import pytest

from kernelgen.db import TuningDB, open_db
from kernelgen.db import store as store_module
from kernelgen.db.schema import head_revision, schema_number
from kernelgen.errors import DatabaseError
from kernelgen.ir.values import CONFIRM_PREFIX, DECLARED_PREFIX, Status
from tests.db import factories as f


def test_commit_is_idempotent_on_content(store: TuningDB) -> None:
    rec = f.record()
    assert store.commit(rec) is True
    assert store.commit(rec) is False
    # Same content, other provenance (another host re-importing it): still the same record.
    assert store.commit(f.record(host="elsewhere", user="someone", created_at=5.0)) is False
    assert store.count() == 1
    assert list(store.records()) == [rec]


def test_commit_many_counts_new_records_in_one_batch(store: TuningDB) -> None:
    recs = f.many(30)
    assert store.commit_many(recs[:10]) == 10
    assert store.commit_many(recs + recs[:5]) == 20  # duplicates in the batch and in the DB count once
    assert store.count() == 30
    assert store.commit_many([]) == 0


def test_records_round_trip_losslessly(store: TuningDB) -> None:
    recs = f.many(40) + [f.record(status=s, seed=i) for i, s in enumerate(Status) if s is not Status.OK]
    store.commit_many(recs)
    back = list(store.records())
    assert sorted(r.to_json().__repr__() for r in back) == sorted(r.to_json().__repr__() for r in recs)
    assert [r.record_id for r in back] == sorted(r.record_id for r in recs)


def test_best_is_the_fastest_ok_record_on_that_exact_target(store: TuningDB) -> None:
    fast_failure = f.record(seed=1, status=Status.WRONG_RESULT)
    slow, fast = f.record(seed=2, median=3e-4), f.record(seed=3, median=1e-4)
    elsewhere = f.record(seed=4, median=1e-6, target="other-target")
    other_workload = f.record(seed=5, median=1e-6, workload="wk-other")
    store.commit_many([fast_failure, slow, fast, elsewhere, other_workload])
    assert store.best(f.record().workload_key, f.TARGET) == fast
    assert store.best("wk-missing", f.TARGET) is None


def test_best_breaks_ties_by_record_id(store: TuningDB) -> None:
    a, b = f.record(seed=10, median=2e-4), f.record(seed=11, median=2e-4)
    store.commit_many([a, b])
    assert store.best(a.workload_key, f.TARGET) == min((a, b), key=lambda r: r.record_id)


def test_best_ranks_the_tuners_verdict_above_faster_single_samples(store: TuningDB) -> None:
    lucky_trial = f.record(seed=1, median=1e-5)
    finalist = f.record(seed=2, median=3e-5, message=f"{CONFIRM_PREFIX}: re-measured")
    verdict = f.record(seed=3, median=4e-5, implementation="custom:gelu/cpp", implementation_hash="c1",
                       message=f"{DECLARED_PREFIX}: won the rounds")
    store.commit_many([lucky_trial, finalist])
    assert store.best(lucky_trial.workload_key, f.TARGET) == finalist  # confirmed beats a lucky sample
    store.commit(verdict)
    assert store.best(lucky_trial.workload_key, f.TARGET) == verdict  # the verdict beats both
    # restricted to implementations the verdict is not about, the confirmed finalist is next
    assert store.best(lucky_trial.workload_key, f.TARGET, implementations={"pointwise": "impl-h1"}) == finalist


def test_best_takes_the_newest_verdict_even_if_an_older_one_was_faster(store: TuningDB) -> None:
    old = f.record(seed=1, median=1e-5, created_at=1_000.0, message=f"{DECLARED_PREFIX}: first tuning")
    new = f.record(seed=2, median=5e-5, created_at=2_000.0, implementation="custom:gelu/cpp",
                   implementation_hash="c1", message=f"{DECLARED_PREFIX}: retuned with a new custom call")
    store.commit_many([new, old])
    assert store.best(old.workload_key, f.TARGET) == new


def test_best_matches_implementation_hashes_exactly(store: TuningDB) -> None:
    old = f.record(seed=1, median=1e-6, implementation_hash="stale")
    current = f.record(seed=2, median=5e-5)
    custom = f.record(seed=3, median=2e-5, implementation="custom:gelu/cpp", implementation_hash="c1")
    store.commit_many([old, current, custom])
    wk = current.workload_key
    assert store.best(wk, f.TARGET) == old
    assert store.best(wk, f.TARGET, implementations={"pointwise": "impl-h1"}) == current
    assert store.best(wk, f.TARGET, implementations={"pointwise": "impl-h1", "custom:gelu/cpp": "c1"}) == custom
    assert store.best(wk, f.TARGET, implementations={"custom:gelu/cpp": "c2"}) is None
    assert store.best(wk, f.TARGET, implementations={}) is None


def test_best_matches_the_toolchain_exactly(store: TuningDB) -> None:
    new_torch = dict(f.TOOLCHAIN, torch="2.14.0")
    a = f.record(seed=1, median=1e-6, toolchain=new_torch)
    b = f.record(seed=2, median=1e-4)
    store.commit_many([a, b])
    assert store.best(a.workload_key, f.TARGET, toolchain=dict(reversed(list(f.TOOLCHAIN.items())))) == b
    assert store.best(a.workload_key, f.TARGET, toolchain=new_torch) == a
    assert store.best(a.workload_key, f.TARGET, toolchain={"kernelgen": "9"}) is None


def test_trials_include_failures_oldest_first(store: TuningDB) -> None:
    recs = [f.record(seed=i, created_at=100.0 - i, status=Status.TIMEOUT if i % 2 else Status.OK) for i in range(6)]
    other_impl = f.record(seed=9, implementation="custom:x", implementation_hash="h9")
    store.commit_many(recs + [other_impl, f.record(seed=7, target="t2")])
    wk = recs[0].workload_key
    assert store.trials(wk, f.TARGET, implementation="pointwise") == sorted(recs, key=lambda r: r.provenance.created_at)
    assert store.trials(wk, f.TARGET, implementation_hash="h9") == [other_impl]
    assert len(store.trials(wk, f.TARGET)) == 7


def test_nearest_prefers_sibling_targets_then_close_shapes(store: TuningDB) -> None:
    wk, fam = "wk-1024", "wf-gelu"
    here = dict(workload_family=fam, target_family=f.FAMILY)
    exact = f.record(workload=wk, family=fam, seed=1, median=1e-6)
    sibling_slow = f.record(workload=wk, family=fam, target="sib-1", seed=2, median=9e-5)
    sibling_fast = f.record(workload=wk, family=fam, target="sib-1", seed=3, median=4e-5)
    sibling2 = f.record(workload=wk, family=fam, target="sib-2", seed=4, median=6e-5)
    foreign = f.record(workload=wk, family=fam, target="gpu-1", target_family="triton:cuda:sm_90", seed=5, median=1e-9)
    near = f.record(workload="wk-512", family=fam, shape=(512, 1024), seed=6, median=8e-5)
    near_slower = f.record(workload="wk-512", family=fam, shape=(512, 1024), seed=7, median=9e-5)
    far = f.record(workload="wk-64", family=fam, shape=(64, 1024), seed=8, median=1e-7)
    other_graph = f.record(workload="wk-x", family="wf-other", shape=(1024, 1024), seed=9, median=1e-7)
    failed = f.record(workload="wk-1000", family=fam, shape=(1000, 1024), seed=10, status=Status.INVALID)
    store.commit_many([exact, sibling_slow, sibling_fast, sibling2, foreign, near, near_slower, far, other_graph, failed])
    got = store.nearest(workload_key=wk, target_fingerprint=f.TARGET, signature=exact.signature, **here)
    assert got == [sibling_fast, sibling2, near, far]
    assert store.nearest(workload_key=wk, target_fingerprint=f.TARGET, signature=exact.signature, limit=2, **here) \
        == [sibling_fast, sibling2]
    assert store.nearest(workload_key=wk, target_fingerprint=f.TARGET, signature=exact.signature,
                         implementation="custom:none", **here) == []


def test_records_filter_by_target_and_workload_prefix(store: TuningDB) -> None:
    a = f.record(workload="wk_a%1", seed=1)
    b = f.record(workload="wk_a%2", seed=2, target="t-b", target_family="fam-b")
    c = f.record(workload="wkXaY3", seed=3)  # would match if _ and % were wildcards
    store.commit_many([a, b, c])
    assert {r.record_id for r in store.records(workload="wk_a%")} == {a.record_id, b.record_id}
    assert list(store.records(target="fam-b")) == [b]
    assert list(store.records(target="t-b", workload="wk_a%1")) == []
    assert {r.record_id for r in store.records(target=f.FAMILY)} == {a.record_id, c.record_id}


def test_records_pages_through_large_results(store: TuningDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_PAGE", 7)
    recs = f.many(30)
    store.commit_many(recs)
    assert [r.record_id for r in store.records()] == sorted(r.record_id for r in recs)


def test_stats_count_what_was_committed(store: TuningDB) -> None:
    recs = f.many(21, workloads=3, targets=2)
    store.commit_many(recs)
    stats = store.stats()
    assert stats["records"] == 21
    assert stats["by_status"] == {"compile_error": 3, "ok": 18}
    assert stats["workloads"] == 3
    assert sum(t["records"] for t in stats["targets"]) == 21 and len(stats["targets"]) == 2
    assert stats["schema"] == schema_number(head_revision())


def test_prune_needs_a_criterion_and_removes_only_matches(store: TuningDB) -> None:
    old = f.record(seed=1, created_at=1000.0)
    old_v = f.record(seed=2, created_at=1000.0, toolchain=dict(f.TOOLCHAIN, kernelgen="0.0.9"))
    new = f.record(seed=3, created_at=4e9)
    store.commit_many([old, old_v, new])
    with pytest.raises(DatabaseError, match="criterion"):
        store.prune()
    assert store.count() == 3
    assert store.prune(kernelgen_version="0.0.9", target="no-such-target") == 0
    assert store.prune_summary(kernelgen_version="0.0.9")[0]["records"] == 1
    assert store.prune(kernelgen_version="0.0.9") == 1
    assert store.prune(older_than_days=30) == 1
    assert list(store.records()) == [new]
    assert store.prune(target=f.FAMILY) == 1 and store.count() == 0


def test_export_import_is_lossless_and_deterministic(store: TuningDB, tmp_path) -> None:
    recs = f.many(50) + [f.record(seed=99, status=Status.RUNTIME_ERROR)]
    store.commit_many(recs)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert store.export(first) == 51
    other = open_db(f"sqlite:///{tmp_path / 'other.sqlite'}", team_url="")
    assert other.import_file(first) == (51, 0)
    assert other.import_file(first) == (0, 51)
    assert {r.record_id: r.to_json() for r in other.records()} == {r.record_id: r.to_json() for r in recs}
    other.export(second)
    assert second.read_bytes() == first.read_bytes()
    other.close()


def test_export_filters(store: TuningDB, tmp_path) -> None:
    store.commit_many(f.many(20, targets=2))
    path = tmp_path / "t.jsonl"
    assert store.export(path, target=f"{f.TARGET}-1") == 10
    assert store.export(path, workload="wk-r-1") == 2  # wk-r-1 only (no wk-r-1x keys exist)
    assert len(path.read_text().splitlines()) == 3


def test_merge_from_url_file_and_open_db(store: TuningDB, tmp_path) -> None:
    src_url = f"sqlite:///{tmp_path / 'src.sqlite'}"
    src = open_db(src_url, team_url="")
    src.commit_many(f.many(12, prefix="src"))
    store.commit_many(f.many(12, prefix="src")[:4])
    assert store.merge(src_url) == (8, 4)
    src.commit_many(f.many(3, prefix="more"))
    assert store.merge(src) == (3, 12)
    path = tmp_path / "x.jsonl"
    src.export(path)
    assert store.merge(str(path)) == (0, 15)
    src.close()
    assert store.count() == 15


def test_portable_insert_path_without_returning(store: TuningDB, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dialects without INSERT ... RETURNING (SQLite < 3.35, others) skip present ids instead."""
    monkeypatch.setattr(store._engine.dialect, "insert_returning", False)
    recs = f.many(20)
    assert store.commit_many(recs[:5]) == 5
    assert store.commit_many(recs) == 15
    assert store.commit(recs[0]) is False
    assert store.count() == 20
