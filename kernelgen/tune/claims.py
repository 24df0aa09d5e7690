"""Claims on tuning work that another process may take over: a lease in the database (``kernelgen.db.leases``)
that a daemon thread renews only while the work advances.

A model's regions are split between the processes sharing a database, and one process at a time confirms a
study or declares a workload's verdict. Each such piece of work is claimed with a lease (``hold``):

- **owner**: the holder's process as ``kernelgen.tune.leases.owner`` describes it (host, boot id, PID namespace,
  pid, a random token), kept in the lease's row; the holder in the compare-and-set is random per lease taken.
- **period**: ``KERNELGEN_LEASE_S`` seconds (default ``LEASE_S``). A daemon thread renews the lease every period /
  ``RENEWALS`` while the work advances (``Progress.advance``: a measurement finished, or a wait for another
  holder's lease polled) at least once in its patience: ``STALL_PERIODS`` periods, and at least three measurement
  timeouts. A stopped holder (SIGSTOP, a hung host) renews nothing, so its lease lapses one period after its last
  renewal; a holder whose tuning thread is stuck (a measurement hung past every timeout, a deadlock) lets it
  lapse once its patience is spent.
- **take-over**: any process may take a lease that has lapsed; one that wants the work polls every ``POLL_S``.
  The taker resumes the work: committed trials stand, and the Optuna trials the old holder left RUNNING are
  failed and their configs queued again (``Progress.superseded``, read by ``kernelgen.tune.leases.fail_stale``).
- **a holder that lost its lease** (woken by SIGCONT, or its thread came unstuck) learns it at its next renewal,
  or at the next ``Progress.advance`` or ``check`` (after every measurement, and before confirmation rounds are
  committed), which raise ``LeaseLost``: the measurement in flight is dropped (the taker measures that config)
  and nothing more of that work is committed, so no verdict is declared twice. ``kernelgen.tune.model`` then
  moves on to its other regions and comes back to this one when the taker is done (a lookup).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

from kernelgen.db.leases import MAX_PERIOD_S, LeaseState
from kernelgen.errors import KernelgenError
from kernelgen.tune.leases import Owner, owner

log = logging.getLogger("kernelgen.tune")

LEASE_ENV = "KERNELGEN_LEASE_S"
LEASE_S = 60.0  # a lease lapses this long after its holder's last renewal
RENEWALS = 4  # renewals per period: three may fail (a database hiccup) before the lease lapses
STALL_PERIODS = 10  # work that has not advanced for this many periods is stuck: its leases are not renewed
POLL_S = 0.5  # how often a process waiting for another's lease looks again


def lease_period() -> float:
    """``KERNELGEN_LEASE_S`` when it is a number of seconds in (0, ``MAX_PERIOD_S``], else ``LEASE_S``."""
    raw = os.environ.get(LEASE_ENV)
    if raw is None:
        return LEASE_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_PERIOD_S:  # (nan too)
        log.warning("%s=%r is not a number of seconds in (0, %.0f]: leases last %.0f s", LEASE_ENV, raw,
                    MAX_PERIOD_S, LEASE_S)
        return LEASE_S
    return value


class LeaseLost(KernelgenError):
    """This process's lease on some work was taken over by another (it stalled for longer than the lease's
    period): it must not commit anything more of that work."""

    def __init__(self, lease: "Lease") -> None:
        super().__init__(f"lost the lease on {lease.name} to another process: this one made no progress for longer "
                         f"than the lease's {lease.period:g} s, so the other took the work over; this one stops it")
        self.lease = lease


class Progress:
    """How far one piece of tuning work has got, and the leases it holds. Call ``advance()`` after every finished
    measurement (from any thread): the leases are renewed only while it is called, and it raises ``LeaseLost``
    once one of them was taken over (``check()`` only raises). ``superseded``: tokens of the owners whose lapsed
    leases this work took over, whose RUNNING trials are stale."""

    def __init__(self, patience_s: float = 0.0) -> None:
        self.patience_s = patience_s  # at least this long without advancing before the leases stop renewing
        self.last = time.monotonic()
        self.superseded: set[str] = set()
        self._leases: list[Lease] = []
        self._lock = threading.Lock()

    def advance(self) -> None:
        self.last = time.monotonic()
        self.check()

    def check(self) -> None:
        with self._lock:
            held = list(self._leases)
        for lease in held:  # outermost first: losing a model's region ends its confirmation too
            lease.check()

    def idle_s(self) -> float:
        return time.monotonic() - self.last

    def attach(self, lease: "Lease") -> None:
        with self._lock:
            self._leases.append(lease)

    def detach(self, lease: "Lease") -> None:
        with self._lock:
            self._leases.remove(lease)


class Lease:
    """A lease this process holds on ``name`` in ``db``, renewed from a daemon thread while ``progress`` advances
    (none for a database no other process can open: its leases get the longest period instead)."""

    def __init__(self, db: Any, name: str, progress: Progress, period: float) -> None:
        self.db, self.name, self.progress = db, name, progress
        self.period = MAX_PERIOD_S if db.private else period
        self.holder = secrets.token_hex(16)
        self.lost = False
        self.renewed = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one renewal at a time: the thread's or a check's

    def acquire(self) -> LeaseState:
        state = self.db.acquire_lease(self.name, self.holder, owner(), self.period)
        self.renewed = time.monotonic()
        return state

    def start(self) -> None:
        if not self.db.private:
            threading.Thread(target=self._run, daemon=True, name=f"kernelgen-lease {self.name[:40]}").start()

    def check(self) -> None:
        """Raise ``LeaseLost`` when the lease is not ours any more. Free while the renewal thread keeps up; when
        it has not renewed for half a period (this process was stopped, or the work stalled) it asks the
        database, so a woken holder learns of a take-over before it commits anything."""
        if not self.lost and time.monotonic() - self.renewed > self.period / 2:
            self._renew()
        if self.lost:
            raise LeaseLost(self)

    def _renew(self) -> None:
        with self._lock:
            if self.lost:
                return
            try:
                held = self.db.renew_lease(self.name, self.holder, self.period)
            except KernelgenError as exc:  # the database is unreachable for now: the next renewal tries again
                log.debug("renewing the lease on %s failed: %s", self.name, exc)
                return
            if held:
                self.renewed = time.monotonic()
            else:
                self.lost = True
                log.warning("kernelgen tune: the lease on %s was taken over by another process (this one made no "
                            "progress for longer than %g s)", self.name, self.period)

    def _run(self) -> None:
        patience = max(STALL_PERIODS * self.period, self.progress.patience_s)
        stalled = False
        while not self._stop.wait(self.period / RENEWALS) and not self.lost:
            if self.progress.idle_s() > patience:
                if not stalled:  # said once per stall
                    log.warning("kernelgen tune: %s has not advanced for %.0f s (a measurement or the database is "
                                "stuck); its lease is not renewed, so another process may take the work over",
                                self.name, self.progress.idle_s())
                stalled = True
                continue
            stalled = False
            self._renew()

    def release(self) -> None:
        self._stop.set()
        if self.lost:
            return  # the taker's now
        try:
            self.db.release_lease(self.name, self.holder)
        except KernelgenError as exc:  # it lapses by itself
            log.debug("releasing the lease on %s failed: %s", self.name, exc)


@contextlib.contextmanager
def hold(db: Any, name: str, progress: Progress, *, wait: bool, period: float | None = None) -> Iterator[Lease | None]:
    """Hold the lease on ``name`` for the with-block, renewed while ``progress`` advances, and yield it. When a live
    holder has it: with ``wait``, look again every ``POLL_S`` until it is released or lapses (each look advances
    ``progress``: waiting for a holder that renews is this work's progress, and it raises ``LeaseLost`` when
    another lease of this work was lost meanwhile); without, yield None at once."""
    lease = Lease(db, name, progress, lease_period() if period is None else period)
    while True:
        state = lease.acquire()
        if state.held:
            break
        if not wait:
            yield None
            return
        progress.advance()
        time.sleep(POLL_S)
    if state.previous is not None:
        _took_over(name, state.previous, progress)
    progress.attach(lease)
    lease.start()
    try:
        yield lease
    finally:
        lease.release()
        progress.detach(lease)


def _took_over(name: str, previous: dict[str, Any], progress: Progress) -> None:
    """Make the taker resume the work: the old holder's RUNNING trials of it are stale (not this process's own)."""
    was = Owner.of(previous)
    if was.token is not None and was.token != owner()["token"]:
        progress.superseded.add(was.token)
    log.warning("kernelgen tune: took %s over from %s: its lease lapsed (that process stopped or stalled); its "
                "committed trials stand, the trials it left running are measured again", name, was.named())


__all__ = ["LEASE_ENV", "LEASE_S", "POLL_S", "RENEWALS", "STALL_PERIODS", "Lease", "LeaseLost", "Progress", "hold",
           "lease_period"]
