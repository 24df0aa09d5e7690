"""The project's own registry/ kernels: every language that can run here matches the reference, CUDA and
HIP sources compile where nvcc / hipcc exist, and each is skipped with the reason otherwise."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernelgen.custom_calls import get_language
from kernelgen.custom_calls.implementation import forget_verdicts
from kernelgen.custom_calls.verify import check_entry
from kernelgen.frontend.capture import trace
from kernelgen.registry import Registry, use_registry
from kernelgen.runtime.implementations import implementations_for

HOTSPOTS = ("rms_norm", "bias_gelu")


@pytest.fixture(scope="module")
def project():
    import os

    saved = os.environ.pop("KERNELGEN_REGISTRY_PATH", None)
    forget_verdicts()
    try:
        with use_registry(Registry(), load_defaults=True) as reg:
            reg.load_defaults()
            yield {e.implementation_name: e for e in reg.entries()}
    finally:
        if saved is not None:
            os.environ["KERNELGEN_REGISTRY_PATH"] = saved


def _entry_or_skip(project, name):
    entry = project[name]
    availability = get_language(entry.language).availability(entry)
    return entry, availability


def test_every_hotspot_ships_every_language(project):
    for hotspot in HOTSPOTS:
        for impl in ("cpp", "triton", "cuda", "hip", "sycl", "sycl.dpcpp"):
            assert f"custom:{hotspot}/{impl}" in project


@pytest.mark.parametrize("hotspot", HOTSPOTS)
def test_cpp_kernels_match_the_reference_for_every_config(project, hotspot):
    entry, availability = _entry_or_skip(project, f"custom:{hotspot}/cpp")
    assert availability.runnable, availability.reason
    entry = dataclasses.replace(entry, examples=entry.examples[1:2])  # the odd width: tails and remainders
    results = check_entry(entry, all_configs=True)
    assert len(results) >= 3
    assert {r["status"] for r in results} == {"passed"}, results


@pytest.mark.parametrize("hotspot", HOTSPOTS)
def test_triton_kernels_match_the_reference(project, hotspot):
    entry, availability = _entry_or_skip(project, f"custom:{hotspot}/triton")
    if not availability.runnable:
        pytest.skip(availability.reason)
    results = check_entry(entry)
    assert {r["status"] for r in results} == {"passed"}, results


@pytest.mark.parametrize("hotspot", HOTSPOTS)
def test_sycl_kernels_run_through_dpctl(project, hotspot):
    entry, availability = _entry_or_skip(project, f"custom:{hotspot}/sycl")
    if not availability.runnable:
        pytest.skip(availability.reason)
    results = check_entry(entry)
    assert {r["status"] for r in results} == {"passed"}, results


@pytest.mark.parametrize("language", ["cuda", "hip", "sycl.dpcpp"])
def test_gpu_and_sycl_sources_compile(project, language):
    """CUDA via nvcc, HIP via hipcc, SYCL C++ via a SYCL compiler; the hotspots compile side by side."""
    from concurrent.futures import ThreadPoolExecutor

    items = [_entry_or_skip(project, f"custom:{h}/{language}") for h in HOTSPOTS]
    if items[0][1].state == "unavailable":
        pytest.skip(items[0][1].reason)
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        outcomes = list(pool.map(lambda item: check_entry(item[0]), items))
    for results in outcomes:
        assert {r["status"] for r in results} <= {"compiled", "passed"}, results


def test_broken_cuda_source_fails_its_compile_check(project, tmp_path):
    cuda = get_language("cuda")
    if cuda.compiler() is None:
        pytest.skip(cuda.install_hint)
    from kernelgen.custom_calls.entry import make_entry

    good = project["custom:rms_norm/cuda"]
    broken = make_entry(good.launcher, name="broken", language="cuda", platforms=None, params=None, constraints=None,
                        reference=good.reference, source="__global__ void k( { }\n", library=None, symbol="k",
                        replaces=None, variant="", inputs=None, dtypes=None, examples=None, default=None,
                        tolerance=None, options=(), defines=())
    (result,) = check_entry(broken)
    assert result["status"] == "failed" and "nvcc failed" in result["message"]


def test_hand_written_kernels_compete_with_the_generated_template(project):
    from kernelgen.registry import default_registry

    x, w = torch.randn(8, 64), torch.randn(64)
    rms = default_registry().reference_for("rms_norm")
    names = [impl.name for impl in implementations_for(trace(rms, x, w), "cpp")]
    assert "custom:rms_norm/cpp" in names
    assert all(not n.startswith("custom:") or n.endswith(("/cpp", "/sycl")) for n in names)
