"""Isolated measurement: a worker subprocess speaking JSON lines, and the parent-side ``IsolatedMeasurer``.

The worker rebuilds the implementation from its graph JSON and backend with the implementation's own
``worker_factory = "module:callable"``, called with ``(graph, backend, **worker_args)`` (``worker_args`` an
optional JSON-able dict on the implementation), then builds and measures configs on request. The parent enforces a timeout per request: a worker that dies (even from a segfault) gives a
``runtime_error`` measurement, one that hangs is killed and gives ``timeout``; either way a fresh worker
replaces it and the tuning run goes on. Otherwise a worker lives for the parent's session: the parent's pool lends
it to one request at a time, across implementations, phases and graphs (a ``kernelgen tune`` run starts one per
measuring thread, plus one per fault), and it keeps every implementation of the current graph set up.

Protocol (one JSON object per line; the worker's own stdout is redirected to stderr so kernels that
print cannot corrupt it): ``setup`` -> ``{"ok": true}`` | ``{"error": msg}`` (a setup the worker holds, one of
the current graph's implementations, is selected, not rebuilt); ``build`` / ``run`` with a
config -> ``{"measurement": ...}`` (``build`` answers ``{"ok": true}`` when the config compiled);
``check`` with a built config -> ``{"ok": true}`` | ``{"measurement": failure}`` (one run compared with the
reference, not timed: the first check of a config in dispatch and ``registry check``);
``eager`` -> ``{"time": ...}``; ``compiled`` (torch.compile of the reference) -> ``{"time": ...}`` |
``{"skipped": reason}``.
"""

from __future__ import annotations

import atexit
import importlib
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kernelgen.check.baselines import COMPILE_TIMEOUT, ReferenceSkipped
from kernelgen.check.measure import Bench, TimingPolicy, pin_threads
from kernelgen.check.sample import read_sample
from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import Graph
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Measurement, Status, TimeStats

log = logging.getLogger(__name__)
WORKER_FACTORY_ATTR = "worker_factory"  # optional "module:callable" on an Implementation, see module docstring
WORKER_ARGS_ATTR = "worker_args"  # optional keyword arguments (JSON) the factory is called with
SETUP_TIMEOUT = 180.0  # importing torch and computing the reference; generous on a loaded machine
BUILD_TIMEOUT = 600.0  # compiling one config, when no timeout is given
HELD_BENCHES = 16  # implementations of one graph a worker keeps set up (a showdown takes turns between them)
_T = TypeVar("_T")


class WorkerDied(Exception):
    """The worker exited or hung; ``status`` says which (runtime_error or timeout)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------ parent side

class WorkerProcess:
    """One worker subprocess and a request/response call with a deadline. Not thread-safe: one per thread."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ)
        # The worker must import what the parent can (fake implementations in tests, user packages).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["OMP_NUM_THREADS"] = str(threads)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelgen.check.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=env, start_new_session=True,  # Ctrl-C reaches the parent only
        )
        log.debug("started measurement worker pid %d (%d threads)", self.proc.pid, threads)
        self._buffer = b""
        self.setup_key: str | None = None
        self.setups = 0  # implementations set up so far (more than 0: reused from the pool)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send ``request``; the response, or ``WorkerDied`` when the worker dies or exceeds ``timeout``."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(Status.RUNTIME_ERROR, self._death_message()) from None
        line = self._read_line(time.monotonic() + timeout)
        if line is None:
            if self.alive():
                self.kill()
                log.warning("measurement worker pid %d gave no answer to %r within %g s; killed it",
                            self.proc.pid, request.get("op"), timeout)
                raise WorkerDied(Status.TIMEOUT, f"no answer within {timeout:g} s; the worker was killed")
            raise WorkerDied(Status.RUNTIME_ERROR, self._death_message())
        return json.loads(line)

    def _read_line(self, deadline: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:  # EOF: the worker is gone
                    self.proc.wait()
                    return None
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _death_message(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return f"worker {how}; stderr: {self.stderr_tail() or '(empty)'}"

    def stderr_tail(self, limit: int = 400) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return " ".join(self._stderr.read().decode(errors="replace").split())
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: compilers die with it
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self._stderr.close()


_POOL: list[WorkerProcess] = []
_POOL_LOCK = threading.Lock()


def _acquire(threads: int) -> WorkerProcess:
    """An idle live worker, else a fresh one: the workers of a process live for its session (importing torch,
    and on a GPU initialising CUDA, costs seconds), reused across implementations, phases and graphs, and a
    new one starts only when every live worker is busy (``--workers``) or after a fault. One started with
    ``threads`` threads is preferred; any other serves too, since setting an implementation up pins the
    worker's threads to its timing policy (the tuner's count follows the machine's load)."""
    with _POOL_LOCK:
        for dead in [w for w in _POOL if not w.alive()]:
            _POOL.remove(dead)
            dead.close()
        if _POOL:
            i = next((i for i, w in enumerate(_POOL) if w.threads == threads), len(_POOL) - 1)
            return _POOL.pop(i)
    return WorkerProcess(threads)


def _release(worker: WorkerProcess) -> None:
    if not worker.alive():
        worker.close()
        return
    with _POOL_LOCK:
        _POOL.append(worker)


@atexit.register
def _shutdown_pool() -> None:
    with _POOL_LOCK:
        workers, _POOL[:] = list(_POOL), []
    for w in workers:
        w.close()


def implementation_spec(impl: Any) -> dict[str, Any]:
    """What a worker needs to rebuild ``impl``: its name, backend, optional factory (and its arguments) and
    source hash."""
    spec = {"implementation": impl.name, "backend": impl.backend, "factory": getattr(impl, WORKER_FACTORY_ATTR, None),
            "source_hash": impl.source_hash()}
    args = getattr(impl, WORKER_ARGS_ATTR, None)
    if args:
        spec["factory_args"] = args
    return spec


class IsolatedMeasurer:
    """Measures configs of one implementation in a worker process with timeouts; replaces dead workers.

    Each request borrows a worker from the process-wide pool and gives it back after the answer, so measurers
    that take turns (the phases and implementations of a tuning, the interleaved rounds between them) share
    one process; a worker that died or hung is closed instead, and the next request gets a fresh one.
    ``measure(config)`` never raises for a per-config failure. One request at a time per measurer; measurers
    used at once (one per measuring thread) get a worker each.
    """

    def __init__(self, impl: Any, *, seed: int = 0, policy: Any = None, timeout: float = 60.0,
                 build_timeout: float | None = None) -> None:
        self.policy = policy or TimingPolicy()
        self.threads = self.policy.resolved_threads()
        # One --timeout bounds building (compiling, a Python builder) as it bounds running.
        self.timeout, self.build_timeout = timeout, timeout if build_timeout is None else build_timeout
        # sys.path as the parent has it now: a pooled worker started earlier must still import a module
        # the parent can import (a team's registering module added to the path since).
        self._setup = {"op": "setup", "graph": impl.graph.to_json(), **implementation_spec(impl), "seed": seed,
                       "policy": {**self.policy.to_json(), "threads": self.threads},
                       "sys_path": [p for p in sys.path if p]}
        self._key = json.dumps(self._setup, sort_keys=True)
        self._worker: WorkerProcess | None = None  # the worker lent to the request in flight
        self.restarts = 0  # workers lost to a fault (each replaced by the next request)

    def _request(self, send: Callable[[WorkerProcess], _T]) -> _T:
        """``send(worker)`` with a worker set up for this implementation, borrowed for this one request."""
        worker = self._ready()
        self._worker = worker
        try:
            return send(worker)
        except BaseException:
            worker.kill()  # interrupted mid-request: its answer may still be on the way
            raise
        finally:
            self._worker = None
            if not worker.alive():
                self.restarts += 1
                log.info("measurement worker pid %d is gone; the next request of %s starts a fresh one",
                         worker.proc.pid, self._setup["implementation"])
            _release(worker)  # closes a dead one

    def _ready(self) -> WorkerProcess:
        worker = _acquire(self.threads)
        if worker.setup_key == self._key:
            return worker
        try:
            reply = self._call_setup(worker)
            if "error" in reply and worker.setups:
                log.debug("pooled worker could not set up %s (%s); starting a fresh one",
                          self._setup["implementation"], reply["error"])
                # A pooled worker keeps what it imported for earlier graphs (a registration since edited or
                # replaced): a fresh one starts from the sources as they are now.
                worker.close()
                worker = WorkerProcess(self.threads)
                reply = self._call_setup(worker)
        except BaseException:
            _release(worker)
            raise
        if "error" in reply:
            _release(worker)
            raise KernelgenError(f"the measurement worker cannot set up {self._setup['implementation']!r}: "
                                 f"{reply['error']}")
        worker.setup_key = self._key
        worker.threads = self.threads  # what the setup pinned it to
        worker.setups += 1
        return worker

    def _call_setup(self, worker: WorkerProcess) -> dict[str, Any]:
        worker.setup_key = None  # whatever the answer, the worker no longer runs the implementation before
        try:
            return worker.call(self._setup, SETUP_TIMEOUT)
        except WorkerDied as exc:
            raise KernelgenError(f"the measurement worker failed to start: {exc}") from None

    def measure(self, config: Config) -> Measurement:
        reply = self._build_then("run", config)
        return reply if isinstance(reply, Measurement) else Measurement.from_json(reply["measurement"])

    def check(self, config: Config, *, classes: bool = False, data: list[dict[str, Any]] | None = None) -> Measurement | None:
        """Build ``config`` and run it once against the reference in the worker, untimed: a failure
        ``Measurement`` (compile_error, runtime_error for a crash, timeout, wrong_result), or None when it
        passes; with ``classes``, then on each value class and on ``data`` (``check.sample`` files). Raises
        ``KernelgenError`` only when the worker cannot set the implementation up."""
        reply = self._build_then("check", config, {"classes": classes, "data": data} if classes else {})
        if isinstance(reply, Measurement):
            return reply
        return Measurement.from_json(reply["measurement"]) if "measurement" in reply else None

    def _build_then(self, op: str, config: Config, extra: dict[str, Any] | None = None) -> Measurement | dict[str, Any]:
        """Build ``config`` in the worker (bounded by ``build_timeout``), then ask ``op`` of it (bounded by
        ``timeout``): the worker's reply, or the failure ``Measurement`` of whichever step failed."""
        return self._request(partial(self._build_in, op, config, extra))

    def _build_in(self, op: str, config: Config, extra: dict[str, Any] | None,
                  worker: WorkerProcess) -> Measurement | dict[str, Any]:
        payload = {"config": config.to_json()}
        try:
            built = worker.call({"op": "build", **payload}, self.build_timeout)
            reply: Measurement | dict[str, Any] = Measurement.from_json(built["measurement"]) \
                if "measurement" in built else worker.call({"op": op, **payload, **(extra or {})}, self.timeout)
        except WorkerDied as exc:
            log.info("%s %s: the worker died or hung (%s): %s", self._setup["implementation"], dict(config),
                     exc.status.value, exc)
            worker.setup_key = None
            return Measurement(config=config, status=exc.status, message=" ".join(str(exc).split())[:2000],
                               threads=self.threads)
        if isinstance(reply, dict) and "error" in reply:
            return Measurement(config=config, status=Status.RUNTIME_ERROR, message=reply["error"], threads=self.threads)
        failure = reply if isinstance(reply, Measurement) else \
            Measurement.from_json(reply["measurement"]) if "measurement" in reply else None
        if failure is not None and failure.retryable:
            # The machine failed (no space, no file descriptors, no memory): the worker may be what ran short,
            # so it is not reused; the next request starts a fresh one.
            worker.kill()
        return reply

    def eager(self) -> TimeStats | None:
        """Time the eager reference in the worker; None when it fails."""
        try:
            reply = self._request(lambda worker: worker.call({"op": "eager"}, self.timeout))
        except WorkerDied:
            return None
        return TimeStats.from_json(reply["time"]) if "time" in reply else None

    def compiled(self) -> TimeStats | None:
        """Time torch.compile of the reference in the worker (compiling it on the first call); None when
        unsteady; ``ReferenceSkipped`` when it cannot be compiled or the worker dies on it."""
        try:
            reply = self._request(lambda worker: worker.call({"op": "compiled"},
                                                             max(self.build_timeout, COMPILE_TIMEOUT)))
        except WorkerDied as exc:
            raise ReferenceSkipped(f"torch.compile: {exc}") from None
        if "skipped" in reply:
            raise ReferenceSkipped(reply["skipped"])
        return TimeStats.from_json(reply["time"]) if "time" in reply else None

    def close(self) -> None:
        pass  # each request gave its worker back

    def kill(self) -> None:
        """Stop the worker of the request in flight, if any; thread-safe enough to call from another thread."""
        worker = self._worker
        if worker is not None:
            worker.kill()

    def __enter__(self) -> "IsolatedMeasurer":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class InProcessMeasurer:
    """The same measurement without a worker (``isolate=False``): fast, but a crash ends the process."""

    def __init__(self, impl: Any, *, seed: int = 0, policy: Any = None, **_: Any) -> None:
        self.bench = Bench(impl, Target.current(impl.backend), seed=seed, policy=policy or TimingPolicy())
        self.restarts = 0

    def measure(self, config: Config) -> Measurement:
        return self.bench.measure(config)

    def check(self, config: Config, *, classes: bool = False, data: list[dict[str, Any]] | None = None) -> Measurement | None:
        return checked(self.bench, config, classes, data)

    def eager(self) -> TimeStats | None:
        return self.bench.time_eager()

    def compiled(self) -> TimeStats | None:
        return self.bench.time_compiled()

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass

    def __enter__(self) -> "InProcessMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checked(bench: Bench, config: Config, classes: bool, data: list[dict[str, Any]] | None) -> Measurement | None:
    """The one check, in or out of a worker: build, run on random normals; with ``classes``, then on each value
    class and on the call's own data (``check.sample``) when given."""
    failure = bench.build(config) or bench.check(config)
    if failure is None and classes:
        failure = bench.check_classes(config, read_sample(data, bench.graph.signature) if data else None)
    return failure


# ------------------------------------------------------------------------------------------ worker side

def rebuild_implementation(graph: Graph, name: str, backend: str, factory: str | None,
                           factory_args: dict[str, Any] | None = None) -> Any:
    """The implementation a setup request names, made by its factory (``"module:callable"``, called with
    ``(graph, backend, **factory_args)``): the implementation itself says where it comes from, so this layer
    never needs the templates' or the registry's catalogue."""
    if not factory:
        raise KernelgenError(f"implementation {name!r} names no worker_factory, so a worker cannot rebuild it; "
                             "give it one, or measure it in this process (isolate=False)")
    module_name, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module_name), attr)(graph, backend, **(factory_args or {}))


class _Session:
    """The worker's state: the ``Bench`` of every implementation set up for the current graph (at most
    ``HELD_BENCHES``), so measurers taking turns on one worker (the interleaved rounds between implementations)
    switch with a setup that only selects; a setup for another graph drops the others' benches."""

    def __init__(self) -> None:
        self.bench: Any = None
        self.held: dict[str, tuple[str, Any]] = {}  # setup request (as JSON) -> (its graph as JSON, its Bench)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "setup":
            key = json.dumps(request, sort_keys=True)
            if key not in self.held:
                return self._setup(request, key)
            self.bench = self.held[key][1]
            pin_threads(self.bench.threads)  # the measurer before may have timed with another thread count
            return {"ok": True}
        if self.bench is None:
            return {"error": "worker not set up"}
        if op == "eager":
            stats = self.bench.time_eager()
            return {} if stats is None else {"time": stats.to_json()}
        if op == "compiled":
            try:
                stats = self.bench.time_compiled()
            except ReferenceSkipped as exc:
                return {"skipped": str(exc)}
            return {} if stats is None else {"time": stats.to_json()}
        config = Config.from_json(request["config"])
        if op == "build":
            failure = self.bench.build(config)
            return {"ok": True} if failure is None else {"measurement": failure.to_json()}
        if op == "run":
            return {"measurement": self.bench.run(config).to_json()}
        if op == "check":
            failure = checked(self.bench, config, bool(request.get("classes")), request.get("data"))
            return {"ok": True} if failure is None else {"measurement": failure.to_json()}
        return {"error": f"unknown request {op!r}"}

    def _setup(self, request: dict[str, Any], key: str) -> dict[str, Any]:
        self.bench = None
        graph_json = json.dumps(request["graph"], sort_keys=True)
        for other in [k for k, (g, _) in self.held.items() if g != graph_json]:
            del self.held[other]  # another graph's inputs and references (device memory on a GPU) go
        while len(self.held) >= HELD_BENCHES:
            del self.held[next(iter(self.held))]
        try:
            sys.path.extend(p for p in request.get("sys_path", ()) if p not in sys.path)
            policy = TimingPolicy.from_json(request["policy"])
            pin_threads(policy.resolved_threads())
            graph = Graph.from_json(request["graph"])
            impl = rebuild_implementation(graph, request["implementation"], request["backend"], request.get("factory"),
                                          request.get("factory_args"))
            expected = request.get("source_hash")
            if expected and impl.source_hash() != expected:  # e.g. a stale registration in a pooled worker
                raise KernelgenError(f"the worker rebuilt {impl.name} from another source (hash {impl.source_hash()}, "
                                     f"expected {expected}); restart the process after editing a kernel")
            self.bench = Bench(impl, Target.current(impl.backend), seed=int(request.get("seed", 0)), policy=policy)
        except Exception as exc:  # reported to the parent, which raises it as a KernelgenError
            self.bench = None
            return {"error": f"{type(exc).__name__}: {exc}"}
        self.held[key] = (graph_json, self.bench)
        return {"ok": True}


def _exit_with_parent(interval: float = 1.0) -> None:
    """Exit when the parent dies (e.g. SIGKILL), even while a kernel hangs: ctypes calls release the GIL."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="kernelgen-parent-watch").start()


def main() -> None:
    _exit_with_parent()
    # Protocol on a private copy of stdout; anything printed by kernels or libraries goes to stderr.
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a worker stops
    session = _Session()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = session.handle(json.loads(line))
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        channel.write(json.dumps(reply) + "\n")
        channel.flush()


__all__ = ["InProcessMeasurer", "IsolatedMeasurer", "WORKER_ARGS_ATTR", "WORKER_FACTORY_ATTR", "WorkerDied",
           "WorkerProcess", "implementation_spec", "rebuild_implementation"]


if __name__ == "__main__":
    main()

