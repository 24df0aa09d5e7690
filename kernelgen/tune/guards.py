"""Guards around the code a user hands ``kernelgen tune`` and ``kernelgen report --model`` (a module imported to find a
function, a model factory, a model's step): whatever it does, exit, raise or never return, the command ends in one
line that names it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from kernelgen.errors import KernelgenError


@contextlib.contextmanager
def contained(what: str, fix: str, error: type[KernelgenError]) -> Iterator[None]:
    """Run user code: a ``sys.exit`` in it, or a ``BaseException`` that is not an ``Exception``, becomes ``error``
    naming ``what`` (``fix`` says what to change after an exit). An exit would otherwise end kernelgen with the
    user's status (0: a tune that tuned nothing passes CI, with no output) and any other ``BaseException`` would
    print a traceback. Ctrl-C still interrupts; an ``Exception`` passes unchanged, for the caller to word."""
    try:
        yield
    except (Exception, KeyboardInterrupt):
        raise
    except SystemExit as exc:
        raise error(f"{what} called sys.exit({exc.code!r}); {fix}") from None
    except BaseException as exc:
        detail = f": {exc}" if str(exc) else ""
        raise error(f"{what} raised {type(exc).__name__} (a BaseException){detail}") from None


@contextlib.contextmanager
def time_limit(what: str, seconds: float | None, fix: str) -> Iterator[None]:
    """End the process with exit status 1 and one line on stderr, ``error: <what> did not return within <seconds>
    s; <fix>``, when the with-block runs longer than ``seconds`` (None: no limit).

    The process, not an exception: the block runs user code (a factory, a model's forward) that may hang in C (a
    blocked read, a deadlocked OpenMP barrier), where neither an exception sent to its thread nor a SIGALRM handler
    ever runs (and signals reach only the main thread); a watchdog thread still sees the time pass. Ending the
    process loses nothing: the block commits no record (every record before it was committed in a transaction of its
    own, and a transaction cut short is rolled back whole), and measurement workers exit with their parent."""
    if seconds is None:
        yield
        return
    line = f"error: {what} did not return within {seconds:g} s; {fix}\n"
    watchdog = threading.Timer(seconds, _end_process, (line,))
    watchdog.daemon = True
    watchdog.name = "kernelgen-time-limit"
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


def _end_process(line: str) -> None:
    for stream in (sys.stdout, sys.stderr):  # what was printed before the hang comes out first
        with contextlib.suppress(Exception):
            stream.flush()
    os.write(2, line.encode())  # not through sys.stderr, whose lock the hung thread may hold
    os._exit(KernelgenError.exit_code)


__all__ = ["contained", "time_limit"]
