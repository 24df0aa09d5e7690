"""Leases on tuning work (``kernelgen.tune.claims``) in one process, with periods of a fraction of a second: a
holder whose tuning thread is stuck (alive, its renewal thread running) stops renewing, and another takes the
region over; the stuck one, once it advances again, learns it lost the lease and moves on; a process waiting for a
confirmation takes a lapsed lease over; a lost lease is raised at the next advance, before anything is committed.
(Two real processes, one of them stopped with SIGSTOP: ``tests/db/test_model_split.py``.)"""

from __future__ import annotations

import threading
import time

import pytest

from kernelgen.db import open_db
from kernelgen.tune import claims
from kernelgen.tune.claims import LeaseLost, Progress, hold
from kernelgen.tune.model import ModelSpec, tune_model
from tests.reliability.fakes import add_graph
from tests.tune.test_model_tune import _FakeResult


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'leases.sqlite'}"


def test_a_stuck_holder_lets_its_region_lapse_to_another_and_moves_on_when_it_comes_unstuck(url, monkeypatch):
    from kernelgen.tune import model
    from kernelgen.tune.model_capture import Captured, ModelRegion

    monkeypatch.setenv(claims.LEASE_ENV, "0.2")
    monkeypatch.setattr(claims, "STALL_PERIODS", 5)  # stuck after 1 s without progress (and 3 timeouts of 0.3 s)
    region = ModelRegion(add_graph(), "pointwise", calls=1, aten_s=1e-3, share=1.0)
    monkeypatch.setattr(model, "capture", lambda spec, db: Captured([region], 1e-3, [], None, None))
    entered, unstuck, calls = threading.Event(), threading.Event(), []

    def stuck_once(graph, **kwargs):  # the first call hangs (its renewal thread lives on), then it advances
        calls.append("a" if not calls else "later")
        if len(calls) == 1:
            entered.set()
            unstuck.wait(60)
            kwargs["progress"].advance()  # what tune_graph does after a measurement: the lease is gone by now
            raise AssertionError("advance() must raise: the lease was taken over")
        return _FakeResult(graph)

    results = {}

    def holder() -> None:
        with open_db(url) as db:
            results["a"] = tune_model(ModelSpec("fake:one"), db=db, trials=1, timeout=0.3, tune=stuck_once,
                                      check_step=False)

    a = threading.Thread(target=holder)
    a.start()
    assert entered.wait(60)
    start = time.monotonic()
    with open_db(url) as db:  # waits for the stuck holder's lease to lapse, then tunes the region
        taker = tune_model(ModelSpec("fake:one"), db=db, trials=1, timeout=0.3, check_step=False,
                           tune=lambda graph, **kwargs: calls.append("b") or _FakeResult(graph))
    took = time.monotonic() - start
    unstuck.set()
    a.join(60)
    assert not a.is_alive()
    assert calls == ["a", "b", "later"]  # B tuned it; A, unstuck, lost it, then came back to a tuned region
    assert [o.implementation for o in taker.outcomes] == ["fake"]
    assert [o.implementation for o in results["a"].outcomes] == ["fake"] and not results["a"].outcomes[0].error
    assert took < 30  # patience (1 s) and a lease (0.2 s), on a loaded machine


def test_a_waiting_process_takes_a_lapsed_lease_over(url):
    with open_db(url) as db:
        assert db.acquire_lease("confirm:study", "stalled", {"token": "t-stalled", "pid": 1}, 0.3).held
        progress = Progress()
        start = time.monotonic()
        with hold(db, "confirm:study", progress, wait=True, period=5) as lease:
            assert lease is not None and time.monotonic() - start < 10
            assert progress.superseded == {"t-stalled"}  # its trials of this work are stale now
        assert db.acquire_lease("confirm:study", "next", {}, 5).held  # released on leaving


def test_a_lost_lease_is_raised_at_the_next_advance(url):
    with open_db(url) as db:
        progress = Progress()
        with hold(db, "model-search:r", progress, wait=False, period=0.2) as lease:
            assert lease is not None
            progress.advance()
            lease._stop.set()  # this process stalls: nothing renews
            time.sleep(0.4)
            with open_db(url) as other:
                assert other.acquire_lease("model-search:r", "taker", {}, 30).held
            with pytest.raises(LeaseLost, match="model-search:r"):
                progress.advance()
        assert not db.acquire_lease("model-search:r", "third", {}, 30).held  # the taker's lease was not released


def test_a_taker_resumes_a_half_searched_region_instead_of_skipping_it(url, monkeypatch):
    """Under a time budget a region someone searched is skipped (its records stand); one whose searcher stalled and
    lost its lease is resumed: the search goes on, and is confirmed, by the taker."""
    from kernelgen.backends import get_backend
    from kernelgen.tune import model
    from kernelgen.tune.model_capture import Captured, ModelRegion

    region = ModelRegion(add_graph(), "pointwise", calls=1, aten_s=1e-3, share=1.0)
    monkeypatch.setattr(model, "capture", lambda spec, db: Captured([region], 1e-3, [], None, None))
    monkeypatch.setattr(model, "_searched", lambda *args: True)  # the stalled one had searched beyond the defaults
    calls = []

    def fake_tune(graph, **kwargs):
        calls.append((kwargs["trials"], kwargs["retune"], set(kwargs["progress"].superseded)))
        return _FakeResult(graph)

    with open_db(url) as db:
        fingerprint = get_backend("cpp").target().fingerprint
        assert db.acquire_lease(f"model-search:{region.key}:{fingerprint}", "stalled", {"token": "t-old", "pid": 7},
                                0.1).held
        time.sleep(0.2)
        tune_model(ModelSpec("fake:one"), db=db, seconds=30, tune=fake_tune, check_step=False)
    assert calls == [(1, False, set()), (None, True, {"t-old"})]  # defaults, then the search it resumed
