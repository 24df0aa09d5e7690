"""The one exception root of kernelgen and its named subclasses.

Every message names the offending value and the fix; the CLI prints ``str(error)`` on one line and
exits non-zero. Per-configuration failures during tuning are *not* exceptions: they are
``Measurement`` values with a status (see ``kernelgen.ir.values``).
"""

from __future__ import annotations

import contextlib
import errno
import signal
from collections.abc import Iterator


class KernelgenError(Exception):
    """Root of every error kernelgen raises on purpose. ``str()`` is a one-line message."""

    exit_code = 1

    def __str__(self) -> str:  # one line, whatever the caller passed
        return " ".join(super().__str__().split())


class TraceError(KernelgenError):
    """A function could not be traced into a kernelgen ``Graph`` (e.g. an unsupported op)."""


class UnsupportedOpError(TraceError):
    """The traced function uses an op kernelgen has no lowering for."""


class ShapePropagationError(TraceError):
    """Running a traced function on meta / fake tensors failed: the inputs do not fit it, or an op has no
    meta kernel (``compile`` then runs it eagerly and reports eager's failure as ``InputMismatchError``)."""


class InputMismatchError(KernelgenError):
    """A call passed tensors whose rank, shape, dtype, device or layout the kernel cannot take."""


class NoTemplateError(KernelgenError):
    """No template covers a graph (``compile`` falls back to eager and logs this reason)."""


class ToolchainUnavailableError(KernelgenError):
    """A compiler or runtime (g++, nvcc, hipcc, dpctl, a GPU) is missing; the message says how to get it."""


class CompileError(KernelgenError):
    """A rendered source failed to compile; the message carries the path of the source."""


class EnvironmentFailure(KernelgenError):
    """The machine failed, not the candidate: a full disk, too many open files, no memory, a compiler killed
    by a signal. Retryable: the tuner records it as such (``Measurement.retryable``) and measures the config
    again once the cause is gone; it is never a verdict on the config."""


CACHE_FIX = "free space (or point KERNELGEN_CACHE_DIR elsewhere) and rerun"
# errno values that say the machine ran out of something, whichever file or config hit them.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.ENOMEM}
# What compilers print when the machine, not the source, failed them.
_ENVIRONMENT_MARKERS = ("No space left on device", "Disk quota exceeded", "Too many open files",
                        "Cannot allocate memory", "out of memory allocating", "Killed signal terminated program",
                        "virtual memory exhausted")


def environment_cause(exc: BaseException) -> str | None:
    """A one-line description when ``exc`` is the environment's failure (``EnvironmentFailure``, or an
    ``OSError`` such as ENOSPC or EMFILE), else None."""
    if isinstance(exc, EnvironmentFailure):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return None


@contextlib.contextmanager
def environment_failures(what: str, fix: str) -> Iterator[None]:
    """Turn an ``OSError`` of the environment (``environment_cause``) in the with-block into
    ``EnvironmentFailure("<what>: <cause>; <fix>")``; other errors pass through unchanged."""
    try:
        yield
    except OSError as exc:
        cause = environment_cause(exc)
        if cause is None:
            raise
        raise EnvironmentFailure(f"{what}: {cause}; {fix}") from None


def compiler_failure(tool: str, source: object, returncode: int, output: str) -> KernelgenError:
    """The error for a compiler that exited with ``returncode``: ``EnvironmentFailure`` when a signal killed
    it (the OOM killer) or its ``output`` names an exhausted resource, else ``CompileError`` with the first
    error line and the source's path."""
    lines = output.splitlines()
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            how = f"signal {-returncode}"
        return EnvironmentFailure(f"{tool} was killed by {how} compiling {source} (out of memory?); nothing is "
                                  "wrong with the candidate: free memory and rerun")
    marker = next((line for line in lines if any(m in line for m in _ENVIRONMENT_MARKERS)), None)
    if marker is not None:
        return EnvironmentFailure(f"{tool} failed on {source}: {marker.strip()}; nothing is wrong with the "
                                  "candidate: free the resource and rerun")
    first = next((line for line in lines if "error" in line.lower()), " ".join(lines)[:300])
    return CompileError(f"{tool} failed on {source}: {first.strip()}")


class DatabaseError(KernelgenError):
    """The tuning database is unreachable, malformed or refuses an operation."""


class SchemaVersionError(DatabaseError):
    """The database schema is older (run ``kernelgen db upgrade``) or newer than this kernelgen."""


class ReadOnlyDatabaseError(DatabaseError):
    """A write was attempted on a database opened read-only (a team database seen by a consumer)."""


class TooManyConnectionsError(DatabaseError, EnvironmentFailure):
    """The database server has no connection slot left (its ``max_connections``): the machine's failure, not the
    tuning's. Retryable: nothing is judged by it, and a rerun once slots are free goes on where it stopped."""


class ImportFormatError(DatabaseError):
    """An import file is malformed, truncated or from a newer format version; nothing was imported."""


class ManifestError(KernelgenError):
    """A workload manifest is malformed or names something that cannot be loaded."""


class RegistryError(KernelgenError):
    """A custom-call registration is invalid (duplicate name, bad params, bad reference signature)."""
