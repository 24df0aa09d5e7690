"""The one exception root of kernelgen and its named subclasses.

Every message names the offending value and the fix; the CLI prints ``str(error)`` on one line and
exits non-zero. Per-configuration failures during tuning are *not* exceptions: they are
``Measurement`` values with a status (see ``kernelgen.ir.values``).
"""

from __future__ import annotations


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


class DatabaseError(KernelgenError):
    """The tuning database is unreachable, malformed or refuses an operation."""


class SchemaVersionError(DatabaseError):
    """The database schema is older (run ``kernelgen db upgrade``) or newer than this kernelgen."""


class ReadOnlyDatabaseError(DatabaseError):
    """A write was attempted on a database opened read-only (a team database seen by a consumer)."""


class ImportFormatError(DatabaseError):
    """An import file is malformed, truncated or from a newer format version; nothing was imported."""


class ManifestError(KernelgenError):
    """A workload manifest is malformed or names something that cannot be loaded."""


class RegistryError(KernelgenError):
    """A custom-call registration is invalid (duplicate name, bad params, bad reference signature)."""
