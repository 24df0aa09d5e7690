"""Target fingerprints: stable, JSON round-trippable, sensitive to toolchain changes, coarse families."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kernelgen.errors import KernelgenError
from kernelgen.ir.target import Target
from kernelgen.ir.values import FrozenMap


def test_current_cpu_target_describes_this_machine() -> None:
    target = Target.current("cpp")
    assert target.kind == "cpu" and target.backend == "cpp"
    assert target.cores >= 1
    assert target.versions["compiler"] != ""
    assert "torch" in target.versions


def test_fingerprint_is_stable_across_processes() -> None:
    code = "from kernelgen.ir.target import Target; print(Target.current('cpp').fingerprint)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == Target.current("cpp").fingerprint


def test_json_round_trip() -> None:
    target = Target.current("cpp")
    again = Target.from_json(json.loads(json.dumps(target.to_json())))
    assert again == target and again.fingerprint == target.fingerprint


def test_toolchain_change_changes_fingerprint_not_family() -> None:
    target = Target.current("cpp")
    upgraded = Target(**{**target.__dict__, "versions": target.versions.replace(compiler="g++ 99")})
    assert upgraded.fingerprint != target.fingerprint
    assert upgraded.family == target.family


def test_family_separates_isa_levels_and_backends() -> None:
    base = Target(backend="cpp", kind="cpu", device_name="x", arch="x86_64", features=("avx2",))
    wide = Target(backend="cpp", kind="cpu", device_name="y", arch="x86_64", features=("avx2", "avx512f"))
    assert base.family != wide.family
    assert base.family != base.with_backend("triton").family


def test_named_gpu_targets_carry_resource_limits() -> None:
    h100 = Target.gpu("sm_90")
    mi300 = Target.gpu("gfx942")
    assert h100.kind == "cuda" and mi300.kind == "hip"
    assert h100.limits["shared_memory"] > mi300.limits["shared_memory"]
    assert mi300.limits["warp_size"] == 64
    assert h100.family != Target.gpu("sm_80").family


def test_unknown_gpu_target_lists_known_ones() -> None:
    with pytest.raises(KernelgenError, match="sm_90"):
        Target.gpu("sm_1000")


def test_frozen_map_values_are_hashable() -> None:
    assert hash(FrozenMap(a=1)) == hash(FrozenMap(a=1))
