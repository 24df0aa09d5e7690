"""Who is measuring a RUNNING Optuna trial, and what happens to it when that process is gone or silent.

A trial is RUNNING from ``ask`` until ``tell``. A tuner killed in between (SIGKILL, the OOM killer, a lost
host) leaves it RUNNING for ever, and the search treats a RUNNING config as taken: no later run, ``--retune``
included, would ever measure it. So every asked trial carries its owner (``owner()``: host, boot, PID namespace,
pid, the pid's start time and a random token of the process) and a heartbeat that a daemon thread renews while
the owner lives. When a study is opened, ``fail_stale`` fails each RUNNING trial that ``stale_reason`` finds
without a live owner, and enqueues its config again so the next ``ask`` measures it (at most ``MAX_RETRIES``
times: a config that keeps killing its tuner is not retried for ever). A trial is stale when

- its owner is provably gone: on this host, boot and PID namespace (the only place where a pid names one
  process), its pid is dead or is another process now;
- its owner's lease on the work was taken over (``superseded``: the owner stalled, ``kernelgen.tune.claims``);
- or, anywhere else and whatever the pid says, its heartbeat is older than ``GRACE_S``: a process in another
  container (its own PID namespace, with the same hostname and boot id), on another host (another boot id: this
  host before a reboot, or another machine with the same hostname, which nothing tells apart), stopped (SIGSTOP)
  or hung.

Every attribute is read from a database anyone may edit: an owner, pid, heartbeat or retry count of the wrong
type, out of range, not finite or in the future counts as absent, so the heartbeat rule (from the trial's start
when no heartbeat is valid) decides: never an exception, never RUNNING for ever.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState

log = logging.getLogger(__name__)

ATTR_OWNER = "kg_owner"  # owner(): the process measuring a RUNNING trial
ATTR_BEAT = "kg_heartbeat"  # wall time of the owner's last heartbeat
ATTR_RETRIES = "kg_stale_retries"  # how many owners of this config were lost mid-trial before
HEARTBEAT_S = 30.0
# A trial whose owner is not provably gone is stale after this long without a heartbeat: many heartbeats, plus
# clock skew between hosts. A heartbeat further than this in the future is no clock's: it is malformed.
GRACE_S = 300.0
MAX_RETRIES = 3
PID_MAX = 2**22  # the kernel's largest pid_max (PID_MAX_LIMIT): pids are below it
_TEXT_MAX = 255  # an owner's host, boot id, namespace or token: longer is not ours


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), "" where unknown:
    with the pid it names one process, even after the pid is reused."""
    stat = _read(f"/proc/{pid}/stat")
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_namespace() -> str:
    """This process's PID namespace ("device:inode" of ``/proc/self/ns/pid``), "" where unknown: a pid names a
    process only in its namespace, and containers on one host share the hostname and boot id, not this."""
    try:
        st = os.stat("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


_TOKEN = secrets.token_hex(8)  # this process, wherever it runs: pids repeat across namespaces and hosts


def _new_token() -> None:
    global _TOKEN
    _TOKEN = secrets.token_hex(8)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_token)  # a forked child is another owner


def owner() -> dict[str, Any]:
    """This process, as a trial's (or a lease's) owner attribute."""
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "pidns": _pid_namespace(), "pid": os.getpid(), "started": _start_ticks(os.getpid()), "token": _TOKEN}


@dataclass(frozen=True)
class Owner:
    """An owner attribute as read back, each field validated: None where it is missing or malformed."""

    host: str | None
    boot: str | None
    pidns: str | None
    pid: int | None
    started: str | None
    token: str | None

    @classmethod
    def of(cls, value: Any) -> "Owner":
        value = value if isinstance(value, dict) else {}

        def text(key: str) -> str | None:
            v = value.get(key)
            return v if isinstance(v, str) and 0 < len(v) <= _TEXT_MAX else None

        pid = value.get("pid")
        pid = pid if type(pid) is int and 0 < pid < PID_MAX else None  # type(): True is no pid
        started = text("started")
        return cls(text("host"), text("boot"), text("pidns"), pid, started if started and started.isdigit() else None,
                   text("token"))

    def here(self, me: "Owner") -> bool:
        """Whether this owner's pid names a process of ours: same host, boot and PID namespace, all known."""
        return (self.pid is not None and None not in (self.host, self.boot, self.pidns)
                and (self.host, self.boot, self.pidns) == (me.host, me.boot, me.pidns))

    def named(self) -> str:
        return f"pid {self.pid if self.pid is not None else '?'} on {self.host or 'an unknown host'}"


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return not started or _start_ticks(pid) in ("", started)


def _heartbeat(value: Any, now: float) -> float | None:
    """A heartbeat attribute as a time, None when it is not one a clock could have written."""
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0 or value > now + GRACE_S:
        return None
    return float(value)


def _started(trial: FrozenTrial) -> float | None:
    start = trial.datetime_start
    return start.timestamp() if isinstance(start, datetime.datetime) else None


def stale_reason(trial: FrozenTrial, me: dict[str, Any], now: float, superseded: Collection[str] = ()) -> str:
    """Why ``trial`` (RUNNING) has no live owner, or "" when it may still be measured by someone (the rules are
    the module docstring's). ``superseded``: tokens of owners whose lease on this work was taken over."""
    who, mine = Owner.of(trial.user_attrs.get(ATTR_OWNER)), Owner.of(me)
    if who.token is not None and who.token in superseded:
        return f"its owner ({who.named()}) stalled and its lease on this work was taken over"
    if who.here(mine) and not _alive(who.pid, who.started):  # type: ignore[arg-type]
        return f"its owner, pid {who.pid} on this host, is gone"
    # Not provably gone: the heartbeat decides (an older kernelgen's trial, or a malformed one: from its start).
    beat = _heartbeat(trial.user_attrs.get(ATTR_BEAT), now)
    last = beat if beat is not None else _started(trial)
    if last is None:
        return "it carries neither a valid heartbeat nor a start time"
    if now - last > GRACE_S:
        return f"no heartbeat from its owner ({who.named()}) for {now - last:.0f} s"
    return ""


def _retries(value: Any) -> int:
    """A retry count as read back: a malformed one counts as none (the next failure writes a valid count)."""
    return min(value, MAX_RETRIES) if type(value) is int and value >= 0 else 0


def fail_stale(study: optuna.Study, superseded: Collection[str] = ()) -> list[dict[str, Any]]:
    """Fail every stale RUNNING trial of ``study`` and enqueue its params again (see the module docstring);
    returns the params enqueued. Call it under the study's storage lock, so two openers do not both retry."""
    me, now, retried = owner(), time.time(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = stale_reason(trial, me, now, superseded)
        if not why:
            continue
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, ValueError, RuntimeError):
            continue  # finished or failed by someone else meanwhile
        fixed = trial.system_attrs.get("fixed_params")
        params = dict(trial.params or (fixed if isinstance(fixed, dict) else {}))
        retries = _retries(trial.user_attrs.get(ATTR_RETRIES, 0))
        if not params:
            continue
        if retries >= MAX_RETRIES:
            log.warning("trial %d %s: %s; its owners were lost %d times measuring it, so it is not retried "
                        "again (it may be what kills or hangs the tuner)", trial.number, params, why, retries + 1)
            continue
        log.info("trial %d %s was left running: %s; failed it and queued the config again", trial.number, params,
                 why)
        study.enqueue_trial(params, user_attrs={ATTR_RETRIES: retries + 1})
        retried.append(params)
    return retried


class Heartbeat:
    """Marks trials as this process's and renews their heartbeat every ``HEARTBEAT_S`` from a daemon thread
    (it dies with the process: that is the point). Thread-safe."""

    def __init__(self) -> None:
        self._trials: dict[int, Trial] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def claim(self, trial: Trial) -> None:
        trial.set_user_attr(ATTR_OWNER, owner())  # (not cached: a forked child is another owner)
        trial.set_user_attr(ATTR_BEAT, time.time())
        with self._lock:
            self._trials[trial.number] = trial
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="kernelgen-trial-heartbeat")
                self._thread.start()

    def release(self, trial: Trial) -> None:
        with self._lock:
            self._trials.pop(trial.number, None)

    def _run(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            with self._lock:
                trials = list(self._trials.values())
            for trial in trials:
                try:
                    trial.set_user_attr(ATTR_BEAT, time.time())
                except (UpdateFinishedTrialError, RuntimeError, ValueError):
                    self.release(trial)  # told meanwhile
                except Exception as exc:  # an unreachable database: the next beat tries again
                    log.debug("heartbeat of trial %d failed: %s", trial.number, exc)


__all__ = ["ATTR_BEAT", "ATTR_OWNER", "ATTR_RETRIES", "GRACE_S", "HEARTBEAT_S", "Heartbeat", "MAX_RETRIES", "Owner",
           "PID_MAX", "fail_stale", "owner", "stale_reason"]
