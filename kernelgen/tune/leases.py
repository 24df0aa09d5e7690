"""Who is measuring a RUNNING Optuna trial, and what happens to it when that process is gone.

A trial is RUNNING from ``ask`` until ``tell``. A tuner killed in between (SIGKILL, the OOM killer, a lost
host) leaves it RUNNING for ever, and the search treats a RUNNING config as taken: no later run, ``--retune``
included, would ever measure it. So every asked trial carries its owner (host, boot, pid and the pid's start
time) and a heartbeat that a daemon thread renews while the owner lives. When a study is opened,
``fail_stale`` fails each RUNNING trial whose owner is provably gone (same host and boot: the pid is dead
or is another process now; same host, another boot) or, on another host, whose heartbeat is older than
``GRACE_S``, and enqueues its config again so the next ``ask`` measures it (at most ``MAX_RETRIES`` times:
a config that keeps killing its tuner is not retried for ever).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState

log = logging.getLogger(__name__)

ATTR_OWNER = "kg_owner"  # {"host", "boot", "pid", "started"}: the process measuring a RUNNING trial
ATTR_BEAT = "kg_heartbeat"  # wall time of the owner's last heartbeat
ATTR_RETRIES = "kg_stale_retries"  # how many owners of this config died mid-trial before
HEARTBEAT_S = 30.0
# A trial on another host is stale after this long without a heartbeat: many heartbeats, plus clock skew.
GRACE_S = 300.0
MAX_RETRIES = 3


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


def owner() -> dict[str, Any]:
    """This process, as a trial's owner attribute."""
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"), "pid": os.getpid(),
            "started": _start_ticks(os.getpid())}


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    return not started or _start_ticks(pid) in ("", started)


def stale_reason(trial: FrozenTrial, me: dict[str, Any], now: float) -> str:
    """Why ``trial`` (RUNNING) has no live owner, or "" when it may still be measured by someone."""
    who = trial.user_attrs.get(ATTR_OWNER)
    if isinstance(who, dict) and who.get("host") == me["host"]:
        if who.get("boot") and me["boot"] and who["boot"] != me["boot"]:
            return f"its owner (pid {who.get('pid')}) ran before this machine rebooted"
        if isinstance(who.get("pid"), int) and not _alive(who["pid"], str(who.get("started", ""))):
            return f"its owner, pid {who['pid']} on this host, is gone"
        return ""
    beat = trial.user_attrs.get(ATTR_BEAT)
    if not isinstance(beat, (int, float)):  # a trial of an older kernelgen: no owner, no heartbeat
        start = trial.datetime_start or datetime.datetime.now()
        beat = start.timestamp()
    if now - beat > GRACE_S:
        where = who.get("host") if isinstance(who, dict) else "an unknown host"
        return f"no heartbeat from its owner on {where} for {now - beat:.0f} s"
    return ""


def fail_stale(study: optuna.Study) -> list[dict[str, Any]]:
    """Fail every stale RUNNING trial of ``study`` and enqueue its params again (see the module docstring);
    returns the params enqueued. Call it under the study's storage lock, so two openers do not both retry."""
    me, now, retried = owner(), time.time(), []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = stale_reason(trial, me, now)
        if not why:
            continue
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, ValueError, RuntimeError):
            continue  # finished or failed by someone else meanwhile
        params = dict(trial.params or trial.system_attrs.get("fixed_params", {}))
        retries = int(trial.user_attrs.get(ATTR_RETRIES, 0))
        if not params:
            continue
        if retries >= MAX_RETRIES:
            log.warning("trial %d %s: %s; its owners died %d times measuring it, so it is not retried again "
                        "(it may be what kills the tuner)", trial.number, params, why, retries + 1)
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
        self._me = owner()
        self._trials: dict[int, Trial] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def claim(self, trial: Trial) -> None:
        trial.set_user_attr(ATTR_OWNER, self._me)
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


__all__ = ["ATTR_BEAT", "ATTR_OWNER", "ATTR_RETRIES", "GRACE_S", "HEARTBEAT_S", "Heartbeat", "MAX_RETRIES",
           "fail_stale", "owner", "stale_reason"]
