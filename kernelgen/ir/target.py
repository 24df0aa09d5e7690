"""The device a kernel is tuned for: ``Target.current()`` fingerprints this machine, ``Target.gpu()`` names one.

A ``fingerprint`` changes with anything that can change a timing (device, driver, compiler, library
versions); the coarser ``family`` (backend + architecture + ISA level) groups devices whose tuning results
make good warm starts for each other.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.ir.values import FrozenMap, content_hash

# ISA features that change what the C++ backend emits or how fast it runs.
_CPU_FEATURES_OF_INTEREST = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
    "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd", "sve",
)

# Where a target's kernels read and write tensors, by ``Target.kind``: torch calls ROCm's GPUs "cuda" too.
# Anything not listed (the CPU, Triton's interpreter) takes CPU tensors.
TENSOR_DEVICES: dict[str, str] = {"cuda": "cuda", "hip": "cuda"}

# Resource limits of named GPU targets, used to prune configs without a GPU (ahead-of-time compile).
# shared memory is the opt-in per-block maximum in bytes; registers are 32-bit per SM / per block.
_GPU_TARGETS: dict[str, dict[str, Any]] = {
    "sm_80": {"kind": "cuda", "name": "NVIDIA A100", "sms": 108, "shared_memory": 166912, "registers": 65536,
              "max_threads": 1024, "warp_size": 32, "memory": 40 * 2**30},
    "sm_86": {"kind": "cuda", "name": "NVIDIA RTX A6000", "sms": 84, "shared_memory": 101376, "registers": 65536,
              "max_threads": 1024, "warp_size": 32, "memory": 48 * 2**30},
    "sm_89": {"kind": "cuda", "name": "NVIDIA L40S", "sms": 142, "shared_memory": 101376, "registers": 65536,
              "max_threads": 1024, "warp_size": 32, "memory": 48 * 2**30},
    "sm_90": {"kind": "cuda", "name": "NVIDIA H100", "sms": 132, "shared_memory": 232448, "registers": 65536,
              "max_threads": 1024, "warp_size": 32, "memory": 80 * 2**30},
    "gfx90a": {"kind": "hip", "name": "AMD Instinct MI250X", "sms": 110, "shared_memory": 65536, "registers": 131072,
               "max_threads": 1024, "warp_size": 64, "memory": 64 * 2**30},
    "gfx942": {"kind": "hip", "name": "AMD Instinct MI300X", "sms": 304, "shared_memory": 65536, "registers": 131072,
               "max_threads": 1024, "warp_size": 64, "memory": 192 * 2**30},
}


@dataclass(frozen=True)
class Target:
    """A device as far as tuning cares. Frozen, hashable, JSON round-trippable."""

    backend: str  # "cpp" or "triton"
    kind: str  # "cpu", "cuda", "hip"
    device_name: str
    arch: str  # "x86_64", "aarch64", "sm_90", "gfx942"
    features: tuple[str, ...] = ()
    cores: int = 1  # CPU cores, or GPU SMs / CUs
    memory: int = 0  # bytes
    caches: FrozenMap = field(default_factory=FrozenMap)  # l1d, l2, l3 in bytes (CPU)
    limits: FrozenMap = field(default_factory=FrozenMap)  # shared_memory, registers, max_threads, warp_size
    versions: FrozenMap = field(default_factory=FrozenMap)  # compiler, driver, torch, triton

    @property
    def fingerprint(self) -> str:
        """Exact identity: any change of device, cache sizes or toolchain gives a new fingerprint."""
        return content_hash(self.to_json(), 24)

    @property
    def family(self) -> str:
        """Coarse identity for reuse across similar devices: backend, kind, architecture and ISA level."""
        level = _isa_level(self.features) if self.kind == "cpu" else ""
        return ":".join(x for x in (self.backend, self.kind, self.arch, level) if x)

    @property
    def tensor_device(self) -> str:
        """The torch device type a kernel for this target takes its tensors on (``TENSOR_DEVICES``)."""
        return TENSOR_DEVICES.get(self.kind, "cpu")

    @property
    def isa_level(self) -> str:
        return _isa_level(self.features)

    def with_backend(self, backend: str) -> "Target":
        return Target(**{**self.__dict__, "backend": backend})

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "kind": self.kind, "device_name": self.device_name, "arch": self.arch,
            "features": list(self.features), "cores": self.cores, "memory": self.memory,
            "caches": self.caches.to_json(), "limits": self.limits.to_json(), "versions": self.versions.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> "Target":
        if not isinstance(data, dict):
            raise ValueError("a target must be a JSON object")
        return cls(
            backend=str(data["backend"]), kind=str(data["kind"]), device_name=str(data["device_name"]),
            arch=str(data["arch"]), features=tuple(data.get("features", ())), cores=int(data.get("cores", 1)),
            memory=int(data.get("memory", 0)), caches=FrozenMap(data.get("caches", {})),
            limits=FrozenMap(data.get("limits", {})), versions=FrozenMap(data.get("versions", {})),
        )

    @classmethod
    def current(cls, backend: str = "cpp") -> "Target":
        """This machine for ``backend``: the CPU for ``cpp``; the visible GPU for ``triton`` when there is one.

        With ``backend="triton"`` and no GPU, the target is the CPU running Triton's interpreter.
        """
        if backend == "triton":
            gpu = _current_gpu()
            if gpu is not None:
                return gpu
        return _current_cpu(backend)

    @classmethod
    def gpu(cls, arch: str) -> "Target":
        """A named GPU target (``"sm_90"``, ``"gfx942"``) for ahead-of-time compiles without the device."""
        if arch not in _GPU_TARGETS:
            raise KernelgenError(f"unknown GPU target {arch!r}; known targets: {', '.join(sorted(_GPU_TARGETS))}")
        spec = _GPU_TARGETS[arch]
        limits = {k: spec[k] for k in ("shared_memory", "registers", "max_threads", "warp_size")}
        return cls(backend="triton", kind=spec["kind"], device_name=spec["name"], arch=arch, cores=spec["sms"],
                   memory=spec["memory"], limits=FrozenMap(limits), versions=FrozenMap(library_versions()))

    @staticmethod
    def known_gpus() -> tuple[str, ...]:
        return tuple(sorted(_GPU_TARGETS))


ISA_LADDERS = (("amx", "avx512f", "avx2", "avx", "base"), ("sve", "asimd", "neon", "base"))
"""CPU ISA levels from newest to oldest, per architecture line (``Target.family`` ends in one of them)."""


def similar_families(family: str) -> tuple[str, ...]:
    """``family`` first, then the families whose records are the best stand-in for it: the same backend, kind
    and architecture at the other ISA levels of its ladder, nearest level first (at equal distance the older
    level, whose instructions this CPU also has). An ``amx`` CPU is an ``avx512f`` CPU with tile units that
    kernelgen's float32 kernels do not use: its nearest stand-in is ``avx512f``. GPU families have no ladder."""
    backend_kind_arch, _, level = family.rpartition(":")
    ladder = next((lad for lad in ISA_LADDERS if level in lad), None)
    if ladder is None or not backend_kind_arch:
        return (family,)
    here = ladder.index(level)
    others = sorted((i for i in range(len(ladder)) if i != here), key=lambda i: (abs(i - here), -i))
    return (family, *(f"{backend_kind_arch}:{ladder[i]}" for i in others))


def _isa_level(features: tuple[str, ...]) -> str:
    for level in ("amx_tile", "avx512f", "avx2", "avx", "sve", "asimd", "neon"):
        if level in features:
            return level.replace("_tile", "")
    return "base"


@functools.lru_cache(maxsize=None)
def library_versions() -> dict[str, str]:
    """The installed torch and triton versions ("absent" for one that is not), read from package metadata
    without importing either: part of a target's fingerprint and of an ahead-of-time compile's cache key."""
    from importlib import metadata

    versions = {}
    for dist in ("torch", "triton"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "absent"
    return versions


@functools.lru_cache(maxsize=None)
def host_compiler_version(compiler: str | None = None) -> str:
    """First line of ``$CXX --version`` (default ``g++``), or ``"absent"``."""
    exe = compiler or os.environ.get("CXX", "g++")
    path = shutil.which(exe)
    if path is None:
        return "absent"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "absent"
    return out.splitlines()[0].strip() if out else "absent"


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _cache_size(level: str) -> int:
    """Cache size in bytes from sysfs (per core for L1/L2, shared for L3); 0 when unknown."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    if not os.path.isdir(base):
        return 0
    for entry in sorted(os.listdir(base)):
        if not entry.startswith("index"):
            continue
        lvl = _read(f"{base}/{entry}/level").strip()
        typ = _read(f"{base}/{entry}/type").strip()
        if f"l{lvl}" == level.rstrip("d") and (typ in ("Data", "Unified")):
            text = _read(f"{base}/{entry}/size").strip().upper()
            match = re.fullmatch(r"(\d+)([KMG]?)", text)
            if match:
                return int(match.group(1)) * {"": 1, "K": 1024, "M": 2**20, "G": 2**30}[match.group(2)]
    return 0


@functools.lru_cache(maxsize=None)
def _current_cpu(backend: str) -> Target:
    cpuinfo = _read("/proc/cpuinfo")
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and value.strip():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    meminfo = re.search(r"MemTotal:\s+(\d+) kB", _read("/proc/meminfo"))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    versions = {"compiler": host_compiler_version(), **library_versions()}
    return Target(
        backend=backend,
        kind="cpu",
        device_name=model,
        arch=platform.machine(),
        features=tuple(f for f in _CPU_FEATURES_OF_INTEREST if f in flags),
        cores=cores,
        memory=int(meminfo.group(1)) * 1024 if meminfo else 0,
        caches=FrozenMap({lvl: _cache_size(lvl) for lvl in ("l1d", "l2", "l3")}),
        versions=FrozenMap(versions),
    )


def _current_gpu() -> Target | None:
    """The first visible CUDA or ROCm GPU as a Triton target, or None when there is none."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    is_hip = getattr(torch.version, "hip", None) is not None
    if is_hip:
        arch = getattr(props, "gcnArchName", "gfx").split(":")[0]
        driver = str(torch.version.hip)
    else:
        arch = f"sm_{props.major}{props.minor}"
        driver = str(torch.version.cuda)
    limits = {
        "shared_memory": int(getattr(props, "shared_memory_per_block_optin", 49152)),
        "registers": int(getattr(props, "regs_per_multiprocessor", 65536)),
        "max_threads": int(getattr(props, "max_threads_per_block", 1024)),
        "warp_size": int(getattr(props, "warp_size", 64 if is_hip else 32)),
    }
    return Target(
        backend="triton", kind="hip" if is_hip else "cuda", device_name=props.name, arch=arch,
        cores=int(props.multi_processor_count), memory=int(props.total_memory), limits=FrozenMap(limits),
        versions=FrozenMap({"driver": driver, **library_versions()}),
    )
