"""Leases on tuning work in the database (``kernelgen.db.leases``), on a SQLite file and on PostgreSQL: a live lease
keeps others out, only its holder renews or releases it, a lapsed one is taken over by exactly one of several
racing takers, who learn whose it was; a hand-edited expiry never holds work for ever."""

from __future__ import annotations

import threading
import time

from sqlalchemy import update

from kernelgen.db import open_db
from kernelgen.db.leases import MAX_PERIOD_S, lease_key
from kernelgen.db.models import LeaseRow

A, B = {"pid": 1, "token": "a"}, {"pid": 2, "token": "b"}


def test_a_live_lease_keeps_others_out_and_only_its_holder_renews_or_releases_it(persistent_url: str) -> None:
    with open_db(persistent_url, team_url="") as db:
        assert db.acquire_lease("work", "h-a", A, 30).held
        other = db.acquire_lease("work", "h-b", B, 30)
        assert not other.held and other.owner == A and 25 < other.left_s <= 30
        assert db.renew_lease("work", "h-a", 30) and not db.renew_lease("work", "h-b", 30)
        db.release_lease("work", "h-b")  # not B's: nothing happens
        assert not db.acquire_lease("work", "h-b", B, 30).held
        db.release_lease("work", "h-a")
        assert db.acquire_lease("work", "h-b", B, 30).held


def test_a_lapsed_lease_is_taken_over_and_its_old_holder_cannot_renew_it(persistent_url: str) -> None:
    with open_db(persistent_url, team_url="") as db:
        assert db.acquire_lease("work", "h-a", A, 0.2).held
        time.sleep(0.3)
        taken = db.acquire_lease("work", "h-b", B, 30)
        assert taken.held and taken.previous == A  # whose work it was: its trials there are stale
        assert not db.renew_lease("work", "h-a", 30)  # the stalled holder learns it lost the lease
        db.release_lease("work", "h-a")
        assert not db.acquire_lease("work", "h-c", {}, 30).held  # still B's


def test_one_of_several_racing_takers_gets_a_lapsed_lease(persistent_url: str) -> None:
    with open_db(persistent_url, team_url="") as db:
        assert db.acquire_lease("work", "h-a", A, 0.1).held
    time.sleep(0.2)
    results: list[bool] = []
    start = threading.Barrier(4)

    def take(i: int) -> None:
        with open_db(persistent_url, team_url="") as mine:  # one database connection each, as processes have
            start.wait()
            results.append(mine.acquire_lease("work", f"h-{i}", {"token": str(i)}, 30).held)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False, False, False, True]


def test_a_hand_edited_expiry_counts_as_lapsed(persistent_url: str) -> None:
    with open_db(persistent_url, team_url="") as db:
        assert db.acquire_lease("work", "h-a", A, 30).held
        with db._tx(write=True) as conn:  # a forged row: an expiry no holder writes (beyond the longest period)
            conn.execute(update(LeaseRow.__table__).where(LeaseRow.__table__.c.key == lease_key("work"))
                         .values(expires_at=time.time() + 10 * MAX_PERIOD_S))
        assert db.acquire_lease("work", "h-b", B, 30).held
