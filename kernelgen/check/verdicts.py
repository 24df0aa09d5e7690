"""The first check of an (implementation, config) before anything runs it in the caller's process.

A config is built and run once against the reference in an isolated worker (``kernelgen.check.worker``)
with a timeout, so a kernel that segfaults, aborts, exits or loops costs a ``Verdict`` (runtime_error,
timeout, wrong_result, compile_error), never the caller. Dispatch and ``kernelgen registry check`` ask
here; whatever a tuning database says, a config whose check failed is not run. Verdicts are kept in this
process and on disk under a complete key (implementation and its source hash, config, workload and
signature, target fingerprint, kernelgen version, thread count, tolerances and the rule that judged it:
``kernelgen.check.compare.JUDGEMENT``), so a config is checked once per
machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import inspect

from kernelgen.check.budget import check_bytes, too_large
from kernelgen.check.compare import JUDGEMENT, tolerance
from kernelgen.check.sample import sample_folder, write_sample
from kernelgen.check.measure import TimingPolicy
from kernelgen.check.worker import InProcessMeasurer, IsolatedMeasurer
from kernelgen.env_flags import env_flag
from kernelgen.errors import KernelgenError
from kernelgen.ir.values import RETRYABLE_PREFIX, Config, Status
from kernelgen.paths import atomic_write_text, cache_dir
from kernelgen.version import __version__

log = logging.getLogger(__name__)

TIMEOUT_ENV = "KERNELGEN_CHECK_TIMEOUT"  # seconds one build or one check run may take in dispatch
ISOLATE_ENV = "KERNELGEN_ISOLATE_CHECKS"  # "0": check in this process (a crash then ends it)
DEFAULT_TIMEOUT = 60.0
_FORMAT = 2  # bump when what a check does changes: older verdicts on disk are then never read
# A timeout can be the machine's load rather than the kernel: it is kept for this process only, so
# the next process checks again instead of refusing a good kernel on this machine for ever.
_NOT_ON_DISK = {Status.TIMEOUT}
_SETUP_FAILED = "cannot be checked in an isolated worker"


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: ``status`` ok or the failure's status, and a one-line message."""

    status: Status
    message: str = ""
    cached: bool = False  # read from the on-disk cache (not run by this call)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def describe(self) -> str:
        return "passed" if self.ok else f"{self.status.value}: {self.message}"


_verdicts: dict[str, Verdict] = {}
_lock = threading.Lock()


def check_timeout() -> float:
    """``$KERNELGEN_CHECK_TIMEOUT`` seconds, else ``DEFAULT_TIMEOUT``."""
    raw = os.environ.get(TIMEOUT_ENV)
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise KernelgenError(f"{TIMEOUT_ENV}={raw!r} is not a positive number of seconds; unset it or give e.g. 60")
    return value


def _isolated() -> bool:
    return env_flag(ISOLATE_ENV, True)


def _references(impl: Any) -> dict[str, str]:
    """The source of the reference of each custom call in ``impl``'s graph: what the kernel is compared with."""
    names = sorted({n.attr("name") for n in impl.graph.nodes if n.op == "custom_call"})
    found = {}
    for name in names:
        try:
            fn = impl.custom_call_reference(name)
        except KernelgenError:
            found[name] = "missing"  # the check itself reports it
            continue
        try:
            found[name] = inspect.getsource(fn)
        except (OSError, TypeError):  # defined interactively: its name is all there is
            found[name] = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
    return found


def _key(impl: Any, config: Config, target: Any, threads: int) -> tuple[str, dict[str, Any]]:
    fields = {"format": _FORMAT, "implementation": impl.name, "backend": impl.backend,
              "source_hash": impl.source_hash(), "config": config.to_json(), "workload": impl.graph.workload_key,
              "signature": [s.to_json() for s in impl.graph.signature], "references": _references(impl),
              "target": target.fingerprint, "kernelgen": __version__, "threads": threads,
              "tolerances": [_as_list(_tolerance(impl, s.dtype)) for s in impl.graph.output_specs],
              "judgement": list(JUDGEMENT)}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return digest, fields


def _tolerance(impl: Any, dtype: str) -> tuple[float, float] | None:
    """The tolerance the check applies to ``impl``'s outputs of ``dtype``: its own, else the shared table's."""
    own = impl.tolerance(dtype)
    return own if own is not None else tolerance(dtype)


def _as_list(tol: tuple[float, float] | None) -> list[float] | None:
    return None if tol is None else list(tol)  # as JSON reads it back: the stored key compares equal


def _path(digest: str) -> Any:
    return cache_dir() / "checks" / digest[:2] / f"{digest}.json"


def _read(digest: str, fields: dict[str, Any]) -> Verdict | None:
    try:
        data = json.loads(_path(digest).read_text())
        if data.get("key") != fields:  # a hash collision or a hand-edited file: never trusted
            return None
        status = Status(data["status"])
        message = data.get("message", "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if status in _NOT_ON_DISK or not isinstance(message, str):
        return None
    return Verdict(status, message, cached=True)


def _write(digest: str, fields: dict[str, Any], verdict: Verdict) -> None:
    if verdict.status in _NOT_ON_DISK or verdict.message.startswith(RETRYABLE_PREFIX):
        return  # the machine's load or a full disk now: the next process checks again
    body = {"key": fields, "status": verdict.status.value, "message": verdict.message}
    try:
        atomic_write_text(_path(digest), json.dumps(body, sort_keys=True))
    except OSError as exc:  # a read-only cache costs a re-check in the next process, nothing more
        log.debug("could not keep the check verdict in %s: %s", _path(digest), exc)


def check(impl: Any, config: Config, target: Any, *, timeout: float | None = None, quiet: bool = False,
          data: Sequence[Any] | None = None) -> Verdict:
    """The verdict of ``impl`` with ``config`` on ``target``: cached, else built and run once in a worker.

    A hand-written kernel (``impl.check_value_classes``) is run on the value classes too (zeros, large,
    NaN/Inf) and on ``data``, the call's own input tensors, when they can be sent safely (``check.sample``).
    Never raises for a faulty kernel; a worker that cannot rebuild the implementation (a custom call
    registered in ``__main__``) is a failed verdict whose message says how to make it checkable. A failure
    is logged once as a warning unless ``quiet`` (a caller that reports it itself).
    """
    policy = TimingPolicy()
    digest, fields = _key(impl, config, target, policy.resolved_threads())
    with _lock:
        verdict = _verdicts.get(digest)
    if verdict is None:
        verdict = _read(digest, fields)
        oversized = "" if verdict is not None else too_large(check_bytes(
            s.numel * s.itemsize for s in (*impl.graph.signature, *impl.graph.output_specs)))
        if oversized:  # never run unchecked, and never ask a worker for more than the budget
            verdict = Verdict(Status.RUNTIME_ERROR, RETRYABLE_PREFIX + oversized)
        elif verdict is None:
            verdict = _run(impl, config, target, policy, check_timeout() if timeout is None else timeout, data)
            if not verdict.message.startswith(_SETUP_FAILED):  # the environment's fault, not the kernel's
                _write(digest, fields, verdict)
        with _lock:
            _verdicts[digest] = verdict
        if not verdict.ok and not quiet:
            log.warning("%s with config %s is not used for %s: %s", impl.name, dict(config),
                        [f"{s.dtype}{list(s.shape)}" for s in impl.graph.signature], verdict.describe())
        impl.note_verdict(config, verdict)
    return verdict


def _run(impl: Any, config: Config, target: Any, policy: Any, timeout: float, data: Sequence[Any] | None) -> Verdict:
    if _isolated():
        measurer: Any = IsolatedMeasurer(impl, policy=policy, timeout=timeout)
    else:
        measurer = InProcessMeasurer(impl, policy=policy)
    classes = bool(getattr(impl, "check_value_classes", False))
    try:
        with measurer, sample_folder() as folder:
            sample = write_sample(data, impl.graph.signature, folder) if classes and data is not None else None
            failure = measurer.check(config, classes=classes, data=sample)
    except KernelgenError as exc:
        return Verdict(Status.RUNTIME_ERROR, f"{_SETUP_FAILED} ({exc}); {ISOLATE_ENV}=0 checks it in this "
                                             "process instead, where a crash ends the process")
    if failure is None:
        return Verdict(Status.OK)
    return Verdict(failure.status, failure.message)


@dataclass(frozen=True)
class Checked:
    """What dispatch runs: the first (implementation, config) that passed its check, built here."""

    impl: Any
    config: Config
    launcher: Any
    fallback: bool  # not the first choice: an earlier candidate failed its check or its build


def build_checked(candidates: Sequence[tuple[Any, Config]], target: Any,
                  data: Sequence[Any] | None = None) -> Checked | None:
    """Check each (implementation, config) in order, build the first that passes; None if none does.
    ``data``: the call's own inputs, for the check of a hand-written kernel (``check``).

    Each rejection is logged once (its verdict is cached), so a caller that gets None runs eagerly.
    """
    seen: set[tuple[str, str]] = set()
    for n, (impl, config) in enumerate(candidates):
        if (impl.name, config.key()) in seen:
            continue
        seen.add((impl.name, config.key()))
        if not check(impl, config, target, data=data).ok:
            continue
        try:
            launcher = impl.build(config, target)
        except KernelgenError as exc:
            log.warning("building %s with %s failed: %s", impl.name, dict(config), exc)
            continue
        return Checked(impl, config, launcher, fallback=n > 0)
    return None


def candidates_after(first: tuple[Any, Config], impls: Sequence[Any], target: Any) -> list[tuple[Any, Config]]:
    """``first``, then every implementation's default config: the order dispatch falls back in."""
    order = [first]
    for impl in impls:
        try:
            order.append((impl, impl.default_config(target)))
        except (KernelgenError, ValueError):
            continue
    return order


def forget() -> None:
    """Drop the verdicts kept in this process (tests; after editing a kernel in a long-lived process)."""
    with _lock:
        _verdicts.clear()


__all__ = ["Checked", "DEFAULT_TIMEOUT", "ISOLATE_ENV", "TIMEOUT_ENV", "Verdict", "build_checked",
           "candidates_after", "check", "check_timeout", "forget"]
