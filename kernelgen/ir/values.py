"""The frozen, hashable, JSON round-trippable values that cross kernelgen's seams.

``TensorSpec``, ``Config``, ``Source``, ``TimeStats``, ``Measurement``, ``Provenance`` and
``TuningRecord``. ``Target`` lives in ``kernelgen.ir.target`` and ``Graph`` in ``kernelgen.ir.graph``. Every value
has ``to_json()`` (plain dicts, lists, str, int, float, bool, None) and ``from_json()``; ``from_json``
validates its input and raises ``ValueError`` naming the bad field, so imported files stay data.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from kernelgen.version import __version__

SUPPORTED_DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
)

JSONScalar = str | int | float | bool | None


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the text every content hash is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def content_hash(value: Any, length: int = 16) -> str:
    """A short, stable hex digest of ``canonical_json(value)``; equal across processes and hosts."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable ``str -> JSON scalar`` mapping with a deterministic order (sorted keys)."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(items or {}, **kwargs)
        for key, value in merged.items():
            _require(isinstance(key, str), f"key {key!r} must be a string")
            _require(
                value is None or isinstance(value, (str, int, float, bool)),
                f"value of {key!r} must be a JSON scalar, got {type(value).__name__}",
            )
        self._items = tuple(sorted(merged.items()))
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> "FrozenMap":
        return type(self)(dict(self._items), **changes)

    def to_json(self) -> dict[str, Any]:
        return dict(self._items)

    @classmethod
    def from_json(cls, data: Any) -> "FrozenMap":
        _require(isinstance(data, dict), f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
        return cls(data)


class Config(FrozenMap):
    """A point of a search space: tunable parameter name -> value."""

    def key(self) -> str:
        """A stable short id of this config, for tables and logs."""
        return content_hash(self.to_json(), 12)


@dataclass(frozen=True)
class TensorSpec:
    """Shape, dtype and strides of one tensor; ``strides=None`` means contiguous (row-major)."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        _require(all(s >= 0 for s in self.shape), f"shape {self.shape} has a negative size")
        _require(self.dtype in SUPPORTED_DTYPES, f"dtype {self.dtype!r} is not one of {SUPPORTED_DTYPES}")
        if self.strides is not None:
            strides = tuple(int(s) for s in self.strides)
            _require(len(strides) == len(self.shape), f"strides {strides} do not match shape {self.shape}")
            # Normalise: contiguous strides are spelled None so equal layouts hash equal.
            object.__setattr__(self, "strides", None if strides == self.contiguous_strides() else strides)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
                "int16": 2, "int32": 4, "int64": 8, "bool": 1}[self.dtype]

    @property
    def is_contiguous(self) -> bool:
        return self.strides is None

    def contiguous_strides(self) -> tuple[int, ...]:
        strides, acc = [], 1
        for size in reversed(self.shape):
            strides.append(acc)
            acc *= max(size, 1)
        return tuple(reversed(strides))

    def effective_strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else self.contiguous_strides()

    @classmethod
    def of(cls, tensor: Any) -> "TensorSpec":
        """The spec of a torch tensor (dtype names follow torch: ``torch.float32`` -> ``"float32"``)."""
        return cls(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), tuple(tensor.stride()))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.strides is not None:
            data["strides"] = list(self.strides)
        return data

    @classmethod
    def from_json(cls, data: Any) -> "TensorSpec":
        _require(isinstance(data, dict), "a tensor spec must be an object with shape and dtype")
        _require(isinstance(data.get("shape"), list), "tensor spec needs 'shape': a list of sizes")
        _require(all(isinstance(s, int) and not isinstance(s, bool) for s in data["shape"]),
                 f"shape {data['shape']} must hold integers")
        _require(isinstance(data.get("dtype"), str), "tensor spec needs 'dtype': a string such as 'float32'")
        strides = data.get("strides")
        _require(strides is None or isinstance(strides, list), "'strides' must be a list when given")
        return cls(tuple(data["shape"]), data["dtype"], None if strides is None else tuple(strides))


class Status(str, Enum):
    """Outcome of measuring one configuration. Anything but OK is a failure recorded as data."""

    OK = "ok"
    INVALID = "invalid"  # breaks the search space's constraints or the target's resource limits
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"  # crashed (including segfaults in the isolated worker)
    TIMEOUT = "timeout"  # hung past the measurement timeout
    WRONG_RESULT = "wrong_result"  # ran, but disagreed with the eager reference


# Prefixes of Measurement.message that mark re-measurements, for people reading a record. The evidence itself
# is a field of the record (``TuningRecord.evidence``); ``Evidence.of`` derives it from the message only for
# records written before it was one (format 1 files, schema-3 rows).
CONFIRM_PREFIX = "confirmed"  # re-measured interleaved with the other finalists
DECLARED_PREFIX = "confirmed best"  # ... and declared the workload's best by the tuner
# Prefix of a failure's message when the machine failed, not the config (a full disk, no file descriptors, a
# killed compiler): a record of it says what happened, but it is no verdict, and the config is measured again.
RETRYABLE_PREFIX = "retryable (environment): "


class Evidence(IntEnum):
    """How strongly a record says "this is the fastest": lower is stronger. ``best()`` ranks on it before
    time, so dispatch runs what the tuner declared, never one lucky sample of a search trial."""

    DECLARED = 0  # the tuner's verdict: fastest in interleaved rounds against every other finalist
    CONFIRMED = 1  # a finalist, re-measured in those rounds
    TRIAL = 2  # measured once, during the search

    @classmethod
    def of(cls, message: str) -> "Evidence":
        """The evidence an older record's message implies (records without an ``evidence`` field)."""
        if message.startswith(DECLARED_PREFIX):
            return cls.DECLARED
        return cls.CONFIRMED if message.startswith(CONFIRM_PREFIX) else cls.TRIAL


@dataclass(frozen=True)
class TimeStats:
    """Run-time statistics of one configuration, in seconds."""

    median: float
    min: float
    spread: float  # interquartile range / median: relative noise of the repeats
    repeats: int

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "spread": self.spread, "repeats": self.repeats}

    @classmethod
    def from_json(cls, data: Any) -> "TimeStats":
        _require(isinstance(data, dict), "time statistics must be an object")
        for name in ("median", "min", "spread"):
            _require(isinstance(data.get(name), (int, float)) and not isinstance(data.get(name), bool),
                     f"time statistic {name!r} must be a number")
            _require(data[name] >= 0, f"time statistic {name!r} must not be negative")
        _require(isinstance(data.get("repeats"), int) and data["repeats"] >= 1, "'repeats' must be a positive integer")
        return cls(float(data["median"]), float(data["min"]), float(data["spread"]), int(data["repeats"]))

    @classmethod
    def from_samples(cls, samples: list[float]) -> "TimeStats":
        ordered = sorted(samples)
        n = len(ordered)
        _require(n > 0, "no timing samples")

        def quantile(q: float) -> float:
            pos = q * (n - 1)
            lo = int(pos)
            hi = min(lo + 1, n - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

        median = quantile(0.5)
        spread = (quantile(0.75) - quantile(0.25)) / median if median > 0 else 0.0
        return cls(median=median, min=ordered[0], spread=spread, repeats=n)


@dataclass(frozen=True)
class Reference:
    """A baseline timed beside the finalists in the same confirmation rounds (eager PyTorch, torch.compile):
    its time over those rounds, or none and why (``message``: skipped, failed, every round disturbed)."""

    name: str
    time: TimeStats | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "time": None if self.time is None else self.time.to_json(), "message": self.message}

    @classmethod
    def from_json(cls, data: Any) -> "Reference":
        _require(isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"] != "",
                 "a reference must be an object with a non-empty 'name'")
        message = data.get("message", "")
        _require(isinstance(message, str), f"reference {data['name']!r}: 'message' must be a string")
        time_data = data.get("time")
        return cls(data["name"], None if time_data is None else TimeStats.from_json(time_data), message)


@dataclass(frozen=True)
class Measurement:
    """What measuring one config produced: a status, time statistics when OK, and a message."""

    config: Config
    status: Status
    time: TimeStats | None = None
    message: str = ""
    threads: int | None = None  # CPU threads the kernel ran with; recorded so timings compare fairly
    # Baselines of the confirmation rounds this measurement came from (empty for search trials). Written to
    # JSON only when present, so records without them keep their format and record_id.
    references: tuple[Reference, ...] = ()

    def __post_init__(self) -> None:
        _require((self.status is Status.OK) == (self.time is not None),
                 f"a measurement has time statistics exactly when its status is ok (status={self.status.value})")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def retryable(self) -> bool:
        """A failure of the environment (``RETRYABLE_PREFIX``), not of the config: measure it again."""
        return not self.ok and self.message.startswith(RETRYABLE_PREFIX)

    @classmethod
    def failure(cls, config: Config, status: Status, message: str) -> "Measurement":
        return cls(config=config, status=status, time=None, message=" ".join(message.split())[:2000])

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.to_json(),
            "status": self.status.value,
            "time": None if self.time is None else self.time.to_json(),
            "message": self.message,
            "threads": self.threads,
            **({"references": [r.to_json() for r in self.references]} if self.references else {}),
        }

    @classmethod
    def from_json(cls, data: Any) -> "Measurement":
        _require(isinstance(data, dict), "a measurement must be an object")
        try:
            status = Status(data.get("status"))
        except ValueError:
            raise ValueError(f"unknown status {data.get('status')!r}; expected one of {[s.value for s in Status]}") from None
        time_data = data.get("time")
        message = data.get("message", "")
        _require(isinstance(message, str), "'message' must be a string")
        threads = data.get("threads")
        _require(threads is None or (isinstance(threads, int) and threads > 0), "'threads' must be a positive integer")
        references = data.get("references", [])
        _require(isinstance(references, list), "'references' must be a list when given")
        return cls(
            config=Config.from_json(data.get("config")),
            status=status,
            time=None if time_data is None else TimeStats.from_json(time_data),
            message=message,
            threads=threads,
            references=tuple(Reference.from_json(r) for r in references),
        )


@dataclass(frozen=True)
class Source:
    """Rendered kernel text for one backend: language, text, entry point and compile options."""

    language: str  # "cpp", "triton", "cuda", "hip", "sycl"
    text: str
    entry: str
    options: tuple[str, ...] = ()
    meta: FrozenMap = field(default_factory=FrozenMap)  # launch facts the backend needs (e.g. grid)

    @property
    def hash(self) -> str:
        return content_hash({"language": self.language, "text": self.text, "entry": self.entry,
                             "options": list(self.options), "meta": self.meta.to_json()})


@dataclass(frozen=True)
class Provenance:
    """Who measured a record, where and when (seconds since the epoch, UTC)."""

    host: str
    user: str
    kernelgen_version: str
    created_at: float

    @classmethod
    def here(cls) -> "Provenance":
        try:
            user = getpass.getuser()
        except Exception:  # no passwd entry in some containers
            user = "unknown"
        return cls(host=socket.gethostname(), user=user, kernelgen_version=__version__, created_at=time.time())

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "user": self.user, "kernelgen_version": self.kernelgen_version,
                "created_at": self.created_at}

    @classmethod
    def from_json(cls, data: Any) -> "Provenance":
        _require(isinstance(data, dict), "provenance must be an object")
        for name in ("host", "user", "kernelgen_version"):
            _require(isinstance(data.get(name), str), f"provenance {name!r} must be a string")
        _require(isinstance(data.get("created_at"), (int, float)), "provenance 'created_at' must be a number")
        return cls(data["host"], data["user"], data["kernelgen_version"], float(data["created_at"]))


@dataclass(frozen=True)
class TuningRecord:
    """One measured trial: which workload, which implementation, on which target, with what result.

    ``record_id`` is a hash of the content that identifies the trial: everything but provenance and the
    workload's human ``name`` (a label: the same trial under another name is the same trial). ``evidence``
    joins the hash only when it differs from what the message implies (``Evidence.of``), so a record written
    before evidence was a field keeps its id, and an old export re-imported is not stored twice.
    """

    workload_key: str  # hash of the graph structure and the problem signature (shapes, dtypes, strides)
    workload_family: str  # hash of the graph structure alone: neighbouring shapes share it
    signature: tuple[TensorSpec, ...]  # the inputs' specs, kept for nearest-shape warm starts
    implementation: str  # template name ("gemm") or custom-call name ("custom:rms_norm/cpp")
    implementation_hash: str  # hash of the template's or custom call's source
    backend: str
    target_fingerprint: str
    target_family: str
    device: str
    toolchain: FrozenMap  # kernelgen, torch, triton, compiler versions
    measurement: Measurement
    provenance: Provenance
    # The workload's human name: the manifest's ``name``, else the function's ``module.qualname``; None for
    # records written before names were stored.
    name: str | None = None
    # How strongly this record says "fastest" (best() ranks on it); None: derived from the message.
    evidence: Evidence = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        _require(self.name is None or (isinstance(self.name, str) and self.name != ""),
                 f"record name {self.name!r} must be a non-empty string or None")
        if self.evidence is None:
            object.__setattr__(self, "evidence", Evidence.of(self.measurement.message))
        else:
            object.__setattr__(self, "evidence", Evidence(self.evidence))

    @property
    def config(self) -> Config:
        return self.measurement.config

    @property
    def label(self) -> str:
        """The name to show for this record's workload: its human name, else a short workload key."""
        return self.name or self.workload_key[:16]

    @property
    def record_id(self) -> str:
        body = self.to_json()
        body.pop("provenance")
        body.pop("name")
        if self.evidence is Evidence.of(self.measurement.message):
            body.pop("evidence")
        return content_hash(body, 32)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload_key": self.workload_key,
            "workload_family": self.workload_family,
            "signature": [s.to_json() for s in self.signature],
            "implementation": self.implementation,
            "implementation_hash": self.implementation_hash,
            "backend": self.backend,
            "target_fingerprint": self.target_fingerprint,
            "target_family": self.target_family,
            "device": self.device,
            "toolchain": self.toolchain.to_json(),
            "measurement": self.measurement.to_json(),
            "provenance": self.provenance.to_json(),
            "name": self.name,
            "evidence": int(self.evidence),
        }

    @classmethod
    def from_json(cls, data: Any) -> "TuningRecord":
        """A record from ``to_json``'s output; ``name`` and ``evidence`` may be absent (older records)."""
        _require(isinstance(data, dict), "a tuning record must be a JSON object")
        for name in ("workload_key", "workload_family", "implementation", "implementation_hash", "backend",
                     "target_fingerprint", "target_family", "device"):
            _require(isinstance(data.get(name), str) and data[name] != "", f"record field {name!r} must be a non-empty string")
        _require(isinstance(data.get("signature"), list), "record field 'signature' must be a list of tensor specs")
        label = data.get("name")
        _require(label is None or (isinstance(label, str) and label != ""),
                 "record field 'name' must be a non-empty string or null")
        evidence = data.get("evidence")
        if evidence is not None:
            _require(isinstance(evidence, int) and not isinstance(evidence, bool)
                     and evidence in {int(e) for e in Evidence},
                     f"record field 'evidence' must be one of {[int(e) for e in Evidence]}, got {evidence!r}")
        return cls(
            workload_key=data["workload_key"],
            workload_family=data["workload_family"],
            signature=tuple(TensorSpec.from_json(s) for s in data["signature"]),
            implementation=data["implementation"],
            implementation_hash=data["implementation_hash"],
            backend=data["backend"],
            target_fingerprint=data["target_fingerprint"],
            target_family=data["target_family"],
            device=data["device"],
            toolchain=FrozenMap.from_json(data.get("toolchain")),
            measurement=Measurement.from_json(data.get("measurement")),
            provenance=Provenance.from_json(data.get("provenance")),
            name=label,
            evidence=None if evidence is None else Evidence(evidence),
        )
