"""Ahead-of-time compile of rendered Triton kernels for a named GPU (``Target.gpu("sm_90")``, ``"gfx942"``)
without the GPU, reporting shared memory, registers and spills so templates can prune configs that
cannot fit.

CUDA figures come from Triton's metadata (dynamic shared memory) and ``cuobjdump --dump-resource-usage``
on the produced cubin (registers), spills from ``ptxas -v`` on the produced PTX (spill stores: a stack frame
alone is not a spill, e.g. libdevice's sin/cos keep a 32-byte array for the Payne-Hanek reduction of huge
arguments, which every config of such a kernel has and which costs nothing on ordinary inputs); HIP
figures from the AMDGPU code-object metadata in the produced assembly (``.vgpr_count``,
``.vgpr_spill_count``, ``.group_segment_fixed_size``).
Compiles run in a subprocess when this process runs Triton's interpreter (interpreter mode patches
``triton.language``, so it cannot compile), and reports are cached in memory and on disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelgen.backends.triton import compile_options, interpreter_requested, launch_meta, load_entry, write_module
from kernelgen.env_flags import env_flag
from kernelgen.errors import CompileError, ToolchainUnavailableError, UnsupportedOpError
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target, library_versions
from kernelgen.ir.values import Config, Source, content_hash
from kernelgen.paths import atomic_write_text, cache_dir

_VERSION = "5"  # bump when the report's recipe changes (5: scalar arguments; 4 cached their failures)
_DEFAULT_LIMITS = {"warp_size": 32, "max_threads": 1024, "shared_memory": 49152, "registers": 65536}
JOB_TIMEOUT = 60  # seconds per kernel in the compiler subprocess; a compile that hangs counts as failing
_TIMED_OUT = "ahead-of-time compile timed out:"
_MAX_REGS = {"cuda": 255, "hip": 512}  # per thread: CUDA registers, AMD VGPRs (arch + accumulation)
POINTER_TYPE = {  # Triton signature strings of tensor arguments, by kernelgen dtype
    "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64", "int8": "*i8",
    "uint8": "*u8", "int16": "*i16", "int32": "*i32", "int64": "*i64", "bool": "*i1",
}


def gpu_limits(target: Target) -> dict[str, int]:
    """The target's limits with defaults for the ones it does not state (warp 64 on AMD)."""
    limits = dict(_DEFAULT_LIMITS)
    if target.kind == "hip":
        limits["warp_size"] = 64
    limits.update({k: int(v) for k, v in target.limits.items() if isinstance(v, (int, float))})
    return limits


@dataclass(frozen=True)
class ResourceReport:
    """What one kernel needs per block on ``arch``. ``spills`` is bytes of local memory (CUDA) or the
    number of spilled registers (HIP); 0 means none."""

    arch: str
    kind: str
    entry: str
    shared_memory: int
    registers: int
    spills: int
    num_warps: int
    num_stages: int
    threads: int
    details: dict[str, int] = field(default_factory=dict)

    def violations(self, target: Target) -> list[str]:
        """Why this kernel cannot run well on ``target``; empty when it fits."""
        limits = gpu_limits(target)
        problems = []
        if self.shared_memory > limits["shared_memory"]:
            problems.append(f"shared memory {self.shared_memory} B > {limits['shared_memory']} B on {self.arch}")
        if self.registers > _MAX_REGS.get(self.kind, 255):
            problems.append(f"{self.registers} registers per thread > {_MAX_REGS.get(self.kind, 255)}")
        if self.kind == "cuda" and self.registers * self.threads > limits["registers"]:
            problems.append(f"{self.registers} registers x {self.threads} threads > {limits['registers']} per block")
        if self.spills:
            problems.append(f"register spills ({self.spills} {'bytes' if self.kind == 'cuda' else 'registers'})")
        if self.threads > limits["max_threads"]:
            problems.append(f"{self.threads} threads > {limits['max_threads']} per block")
        return problems

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "ResourceReport":
        if not isinstance(data, dict):
            raise ValueError("a resource report must be a JSON object")
        ints = ("shared_memory", "registers", "spills", "num_warps", "num_stages", "threads")
        if any(not isinstance(data.get(k), int) for k in ints) or not isinstance(data.get("details", {}), dict):
            raise ValueError("malformed resource report")
        return cls(str(data["arch"]), str(data["kind"]), str(data["entry"]), *(int(data[k]) for k in ints),
                   details={str(k): int(v) for k, v in data.get("details", {}).items()})


def gpu_target_spec(target: Target) -> dict[str, Any]:
    if target.kind not in ("cuda", "hip"):
        raise ToolchainUnavailableError(f"ahead-of-time Triton compiles need a GPU target (cuda or hip), got "
                                        f"{target.kind!r}; use Target.gpu('sm_90') or Target.gpu('gfx942')")
    arch: Any = int(target.arch.removeprefix("sm_")) if target.kind == "cuda" else target.arch
    return {"backend": target.kind, "arch": arch, "warp_size": gpu_limits(target)["warp_size"]}


# Scalar arguments a kernel takes after its tensors, by the ``Source.meta`` key that adds them, with the Triton
# type its JIT gives them at run time: a shape-generic kernel's batch size ``n0`` (``kernelgen.backends.triton``;
# a Python int below 2**31 is i32 to the JIT). Left out of the signature, every config of every shape-generic
# kernel failed to compile ahead of time, so no template was shape-generic on a GPU and no shape family formed.
SCALAR_ARGS: dict[str, str] = {"dynamic": "i32"}


def _job(source: Source) -> dict[str, Any]:
    specs, _, constexprs, num_warps, num_stages = launch_meta(source)
    scalars = [kind for key, kind in SCALAR_ARGS.items() if source.meta.get(key) not in (None, "")]
    return {"path": str(write_module(source)), "entry": source.entry, "constexprs": constexprs,
            "dtypes": [s.dtype for s in specs or ()], "scalars": scalars, "num_warps": num_warps,
            "num_stages": num_stages}


_memo: dict[str, ResourceReport | str] = {}
_memo_lock = threading.Lock()


def _cache_key(source: Source, target: Target) -> str:
    return content_hash([_VERSION, source.hash, gpu_target_spec(target), library_versions().get("triton")], 32)


def aot_compile(source: Source, target: Target) -> ResourceReport:
    """Compile ``source`` for GPU ``target`` without a GPU; raises ``CompileError`` when Triton rejects it."""
    return aot_compile_many([source], target)[0]


def aot_compile_many(sources: Sequence[Source], target: Target) -> list[ResourceReport]:
    """``aot_compile`` for several sources, sharing one compiler process (cached per source and target)."""
    results = aot_results(sources, target)
    for source, result in zip(sources, results):
        if isinstance(result, str):
            raise CompileError(result)
    return results  # type: ignore[return-value]


def aot_results(sources: Sequence[Source], target: Target) -> list[ResourceReport | str]:
    """Reports, or the compile error message (with the source path) for sources that do not compile."""
    spec = gpu_target_spec(target)
    keys = [_cache_key(s, target) for s in sources]
    results: dict[str, ResourceReport | str] = {}
    todo: dict[str, Source] = {}
    for key, source in zip(keys, sources):
        with _memo_lock:
            hit = _memo.get(key)
        if hit is None:
            hit = _read_cached(key)
        if hit is None:
            todo[key] = source
        else:
            results[key] = hit
    if todo:
        jobs = [_job(s) for s in todo.values()]
        for key, raw in zip(todo, _run_jobs(jobs, spec)):
            if isinstance(raw, dict) and "toolchain" in raw:
                raise ToolchainUnavailableError(str(raw["toolchain"]))
            result: ResourceReport | str = ResourceReport.from_json(raw) if isinstance(raw, dict) else str(raw)
            results[key] = result
            if not (isinstance(result, str) and result.startswith(_TIMED_OUT)):  # a loaded machine may finish next time
                _write_cached(key, result)
    with _memo_lock:
        _memo.update(results)
    return [results[k] for k in keys]


def _cache_path(key: str) -> Path:
    return cache_dir() / "triton_aot" / key[:2] / f"{key}.json"


def _read_cached(key: str) -> ResourceReport | str | None:
    try:
        data = json.loads(_cache_path(key).read_text())
        return data["error"] if isinstance(data.get("error"), str) else ResourceReport.from_json(data["report"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent or malformed: compile again


def _write_cached(key: str, result: ResourceReport | str) -> None:
    body = {"error": result} if isinstance(result, str) else {"report": result.to_json()}
    atomic_write_text(_cache_path(key), json.dumps(body))


def _run_jobs(jobs: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any] | str]:
    if _compiles_here():
        return [_safe_compile(job, spec) for job in jobs]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated to silence its warning
    request = json.dumps({"target": spec, "jobs": jobs})
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelgen.backends.triton_aot"], input=request,
                              capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT * (1 + len(jobs)))
    except subprocess.TimeoutExpired:
        if len(jobs) == 1:
            return [f"{_TIMED_OUT} {jobs[0]['path']} for {spec['arch']} took over {2 * JOB_TIMEOUT} s; "
                    "treated as not compiling"]
        return [r for job in jobs for r in _run_jobs([job], spec)]  # find the slow one, keep the rest
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ToolchainUnavailableError(f"the Triton ahead-of-time compiler process failed: {tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compiles_here() -> bool:
    """False when this process runs (or will run) Triton's interpreter, which cannot compile."""
    if interpreter_requested():
        return False
    if "triton" not in sys.modules:
        return True
    import triton.language as tl

    return type(tl.sum).__name__ != "InterpretedFunction"


def compile_job(job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | str:
    """Compile one job in this (non-interpreter) process: a report dict, or an error message."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    path = Path(job["path"])
    fn = load_entry(path, job["entry"])
    if not isinstance(fn, JITFunction):
        fn = JITFunction(getattr(fn, "fn", fn))
    names = fn.arg_names
    signature = {name: POINTER_TYPE[dtype] for name, dtype in zip(names, job["dtypes"])}
    signature.update(zip(names[len(job["dtypes"]):], job.get("scalars", ())))  # the scalars follow the tensors
    signature.update({name: "constexpr" for name in job["constexprs"]})
    # Tensors from torch's allocator are 16-byte aligned, which Triton's JIT detects and specialises on;
    # say so here too, or loads are not vectorised (and not pipelined) as they would be at run time.
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(job["dtypes"]))}
    try:
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=dict(job["constexprs"]),
                                            attrs=attrs),
                                  target=GPUTarget(spec["backend"], spec["arch"], spec["warp_size"]),
                                  options={"num_warps": job["num_warps"], "num_stages": job["num_stages"],
                                           **compile_options(spec["backend"])})
    except Exception as exc:  # triton raises many types for a kernel it cannot compile
        return f"triton could not compile {path} for {spec['backend']} {spec['arch']}: " + \
            " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
    threads = job["num_warps"] * spec["warp_size"]
    base = {"arch": str(spec["arch"]) if spec["backend"] == "hip" else f"sm_{spec['arch']}", "kind": spec["backend"],
            "entry": job["entry"], "num_warps": job["num_warps"], "num_stages": job["num_stages"], "threads": threads}
    shared = int(compiled.metadata.shared)
    if spec["backend"] == "cuda":
        usage = _cuda_usage(compiled.asm["cubin"], path)
        usage.update(_ptxas_spills(compiled.asm["ptx"], path))
        spills = usage.get("spill_stores", usage.get("STACK", 0) + usage.get("LOCAL", 0))
        return {**base, "shared_memory": shared + usage.get("SHARED", 0), "registers": usage.get("REG", 0),
                "spills": spills, "details": usage}
    usage = _amd_usage(compiled.asm["amdgcn"])
    return {**base, "shared_memory": max(shared, usage.get("group_segment_fixed_size", 0)),
            "registers": usage.get("vgpr_count", 0),
            "spills": usage.get("vgpr_spill_count", 0) + usage.get("sgpr_spill_count", 0), "details": usage}


def cuobjdump() -> str:
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    for candidate in (str(bundled), shutil.which("cuobjdump") or "", "/usr/local/cuda/bin/cuobjdump"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise ToolchainUnavailableError("cuobjdump not found: install the CUDA toolkit or a Triton wheel that bundles it")


def _ptxas_spills(ptx: str, path: Path) -> dict[str, int]:
    """``spill_stores`` / ``spill_loads`` bytes from ``ptxas -v`` on the kernel's PTX; empty when the bundled
    ptxas is missing or says nothing (the caller then counts the whole stack frame, the safe side)."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    arch = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
    if not ptxas.exists() or arch is None:
        return {}
    source = path.with_suffix(".ptx")
    source.write_text(ptx)
    proc = subprocess.run([str(ptxas), "-v", f"--gpu-name={arch.group(1)}", str(source), "-o", os.devnull],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT)
    found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr + proc.stdout)
    return {} if found is None else {"spill_stores": int(found.group(1)), "spill_loads": int(found.group(2))}


def _cuda_usage(cubin: bytes, path: Path) -> dict[str, int]:
    binary = path.with_suffix(".cubin")
    binary.write_bytes(cubin)
    proc = subprocess.run([cuobjdump(), "--dump-resource-usage", str(binary)], capture_output=True, text=True)
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", proc.stdout))
    if "REG" not in found:
        raise ToolchainUnavailableError(f"cuobjdump gave no resource usage for {binary}: {proc.stderr.strip()[:200]}")
    return {k: int(v) for k, v in found.items()}


def _amd_usage(asm: str) -> dict[str, int]:
    keys = ("vgpr_count", "sgpr_count", "agpr_count", "vgpr_spill_count", "sgpr_spill_count",
            "group_segment_fixed_size", "private_segment_fixed_size")
    usage = {}
    for key in keys:
        match = re.search(rf"^\s*\.{key}:\s+(\d+)", asm, re.M)
        if match:
            usage[key] = int(match.group(1))
    return usage


def resource_constraints(render: Callable[[Config], Source], target: Target) -> list[Constraint]:
    """For a GPU target, a constraint that compiles a config ahead of time and rejects what does not fit
    (shared memory, registers, spills). Empty for CPU targets or when ``KERNELGEN_TRITON_AOT=0``."""
    if target.kind not in ("cuda", "hip") or not env_flag("KERNELGEN_TRITON_AOT", True):
        return []

    def fits(config: Config) -> bool:
        try:
            result = aot_results([render(config)], target)[0]
        except ToolchainUnavailableError:
            return True  # cannot tell without the compiler: the analytic constraints still hold
        except UnsupportedOpError:
            return True  # the renderer refuses the graph whatever the config: building it says so (-> eager)
        return not isinstance(result, str) and not result.violations(target)

    return [Constraint(f"fits {target.arch} in an ahead-of-time compile (shared memory, registers, no spills)",
                       fits)]


def gpu_space(params: Sequence[Param], constraints: Sequence[Constraint], candidates: Sequence[Mapping[str, Any]],
              render: Callable[[Config], Source], target: Target) -> SearchSpace:
    """A GPU search space: the analytic ``constraints`` plus the ahead-of-time resource check, with the
    first of ``candidates`` (preferred defaults, best first) that passes both as the default."""
    base = SearchSpace(params, constraints)
    aot = resource_constraints(render, target)
    try:
        fallback = [base.default()]
    except ValueError:
        fallback = []
    default = None
    for candidate in [Config(dict(c)) for c in candidates] + fallback:
        if base.is_valid(candidate) and all(check(candidate) for check in aot):
            default = candidate
            break
    return SearchSpace(params, [*constraints, *aot], default=default)


def _safe_compile(job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | str:
    """``compile_job`` with every failure as data: an error string, or ``{"toolchain": why}`` when a tool
    is missing (which must not be cached as "this kernel does not compile")."""
    try:
        return compile_job(job, spec)
    except ToolchainUnavailableError as exc:
        return {"toolchain": str(exc)}
    except Exception as exc:  # report, keep compiling the others
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:600]


def _main() -> None:
    request = json.loads(sys.stdin.read())
    print(json.dumps([_safe_compile(job, request["target"]) for job in request["jobs"]]))


if __name__ == "__main__":
    _main()
