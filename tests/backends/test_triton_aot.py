"""Ahead-of-time Triton compiles for named GPUs without a GPU: every template on a CUDA and an AMD target,
with resource reports that grow with tiles and stages and reject what does not fit."""

from __future__ import annotations

import json
from dataclasses import dataclass
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the compiles then run in a subprocess
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends import triton_aot  # noqa: E402
from kernelgen.backends.triton_aot import ResourceReport, aot_compile, aot_results, resource_constraints  # noqa: E402
from kernelgen.errors import ToolchainUnavailableError  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.ir.values import Config, FrozenMap, Source, TensorSpec  # noqa: E402
from kernelgen.templates import gemm_triton, match  # noqa: E402

H = torch.float16
CASES = {
    "pointwise": (lambda x, b: F.gelu(x + b), (torch.empty(64, 1000, dtype=H), torch.empty(1000, dtype=H))),
    "reduction": (lambda x: torch.softmax(x, -1), (torch.empty(64, 1000, dtype=H),)),
    # small problems keep the default tiles (capped by the problem) and the compiles quick
    "gemm": (lambda a, w, b: torch.relu(a @ w + b),
             (torch.empty(64, 256, dtype=H), torch.empty(256, 64, dtype=H), torch.empty(64, dtype=H))),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  (torch.empty(1, 2, 64, 64, dtype=H),) * 3),
}


def gemm_config(bm, bn, bk, stages, warps=4):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps, "num_stages": stages})


@pytest.fixture(scope="module")
def problems():
    found = {}
    for name, (fn, inputs) in CASES.items():
        template, problem = match(kernelgen.trace(fn, *inputs))
        assert template.name == name
        found[name] = (template, problem)
    return found


@pytest.fixture(scope="module", params=["sm_90", "gfx942"])
def compiled(request, problems):
    """One compiler process per target: every template's default config plus GEMM tile/stage variants."""
    target = Target.gpu(request.param)
    os.environ["KERNELGEN_TRITON_AOT"] = "0"  # defaults from the analytic constraints; reports checked below
    try:
        defaults = {name: t.space(p, target).default() for name, (t, p) in problems.items()}
    finally:
        del os.environ["KERNELGEN_TRITON_AOT"]
    gemm = problems["gemm"][1]
    variants = {"small_1": gemm_config(32, 32, 32, 1), "small_3": gemm_config(32, 32, 32, 3),
                "big_3": gemm_config(64, 64, 32, 3)}
    if target.kind == "hip":  # over MI300X's 64 KiB of LDS (H100 has 227 KiB: this would only be slow to build)
        variants["over"] = gemm_config(128, 128, 64, 4)
    sources = {name: t.render(p, defaults[name], target) for name, (t, p) in problems.items()}
    sources.update({name: gemm_triton.render(gemm, c, target) for name, c in variants.items()})
    reports = dict(zip(sources, aot_results(list(sources.values()), target)))
    return target, reports, sources, variants


def test_every_template_default_compiles_and_fits(compiled):
    target, reports, _, _ = compiled
    for name in CASES:
        report = reports[name]
        assert isinstance(report, ResourceReport), report
        assert report.kind == target.kind and report.arch == target.arch
        assert 0 < report.registers <= (255 if target.kind == "cuda" else 512)
        assert report.violations(target) == [], (name, report)
        assert report.threads == report.num_warps * target.limits["warp_size"]
    # tiled matmuls stage their operands in shared memory; a pointwise kernel needs none
    assert reports["gemm"].shared_memory > 0 and reports["attention"].shared_memory > 0
    assert reports["pointwise"].shared_memory == 0


def test_shared_memory_grows_with_stages_and_tiles(compiled):
    target, reports, _, variants = compiled
    smem = {name: reports[name].shared_memory for name in variants}
    assert smem["small_1"] < smem["small_3"] < smem["big_3"]
    # at least the stages in flight (num_stages - 1 buffers of both tiles) live in shared memory
    assert smem["big_3"] >= (64 + 64) * 32 * 2 * 2


def test_config_over_the_shared_memory_limit_is_invalid(compiled, problems):
    target, reports, _, variants = compiled
    if "over" not in variants:
        pytest.skip("the GEMM variants fit H100's 227 KiB; MI300X's 64 KiB is the binding limit")
    report = reports["over"]
    assert report.shared_memory > target.limits["shared_memory"]
    assert any("shared memory" in v for v in report.violations(target))
    # the template's AOT constraint says the same (from the cached reports: no recompile)
    gemm = problems["gemm"][1]
    fits = resource_constraints(lambda c: gemm_triton.render(gemm, c, target), target)[0]
    assert not fits(variants["over"]) and fits(variants["small_3"])


def test_reports_are_cached_on_disk_and_round_trip(compiled):
    target, reports, sources, _ = compiled
    key = triton_aot._cache_key(sources["pointwise"], target)
    assert triton_aot._read_cached(key) == reports["pointwise"]
    assert ResourceReport.from_json(json.loads(json.dumps(reports["gemm"].to_json()))) == reports["gemm"]
    path = triton_aot._cache_path(key)
    path.write_text("{not json")
    assert triton_aot._read_cached(key) is None  # malformed cache: compile again, never crash


def test_kernel_triton_rejects_is_a_compile_error_message_naming_the_file():
    text = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef bad(x, out):\n"
            "    offs = tl.arange(0, 10)\n    tl.store(out + offs, tl.load(x + offs))\n")
    spec = TensorSpec((10,), "float32").to_json()
    source = Source("triton", text, "bad", meta=FrozenMap({"signature": json.dumps([spec, spec]), "grid": "[1]",
                                                            "num_warps": 1, "num_stages": 1}))
    result = aot_results([source], Target.gpu("sm_80"))[0]
    assert isinstance(result, str) and "bad_" in result and "power of 2" in result


def test_cpu_target_is_refused_with_a_hint():
    source = Source("triton", "", "k")
    with pytest.raises(ToolchainUnavailableError, match="Target.gpu"):
        aot_compile(source, Target.current("triton").with_backend("triton") if not torch.cuda.is_available()
                    else Target.current("cpp"))


def test_template_spaces_pick_a_default_that_passes_the_aot_check(compiled, problems):
    target, reports, _, _ = compiled
    for name, (template, problem) in problems.items():
        space = template.space(problem, target)  # AOT constraint on: the default is compiled (cached here)
        assert any("ahead-of-time" in c.description for c in space.constraints)
        assert space.is_valid(space.default())
        source = template.render(problem, space.default(), target)
        assert aot_compile(source, target) == reports[name]


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_float64_gemm_and_libm_formulas_compile_for_gpus(arch, monkeypatch):
    """Found on an H100 with Triton 3.6: a float64 GEMM's tl.dot needs out_dtype (it asserted), and sin/cos
    kernels carry a stack frame that is not a spill (every config was refused). Both compile and fit here."""
    monkeypatch.setenv("KERNELGEN_TRITON_AOT", "0")  # the defaults, without compiling each candidate first
    target = Target.gpu(arch)
    sources = []
    for fn, inputs in ((lambda a, w: a @ w - 1.0, (torch.empty(5, 70, dtype=torch.float64),
                                                   torch.empty(70, 3, dtype=torch.float64))),
                       (lambda x: torch.sin(x) * torch.cos(x) / (x + 1), (torch.empty(1000),)),
                       (lambda x, y: torch.fmod(x, y) + torch.sqrt(x), (torch.empty(1000), torch.empty(1000)))):
        template, problem = match(kernelgen.trace(fn, *inputs))
        sources.append(template.render(problem, template.space(problem, target).default(), target))
    try:
        reports = aot_results(sources, target)
    except ToolchainUnavailableError as exc:
        pytest.skip(str(exc))
    assert all(isinstance(r, ResourceReport) for r in reports), reports
    assert not [r.violations(target) for r in reports if r.violations(target)]


@dataclass
class _Capture:
    graph: object


class _GpuBackend:
    """The Triton backend as it is on an H100/H200: a CUDA target (no GPU needed to decide families)."""

    name = "triton"

    def target(self):
        return Target.gpu("sm_90")


FAMILY_CASES = {  # (function, values at one batch size, the family's untuned implementation)
    "pointwise": (lambda x, b: F.gelu(x + b), (torch.empty(8, 24), torch.empty(24)), "pointwise"),
    "reduction": (lambda x, w, b: F.layer_norm(x, (40,), w, b), (torch.empty(8, 40), torch.empty(40),
                                                                 torch.empty(40)), "reduction"),
    "vendor-gemm": (lambda x, w, b: F.relu(F.linear(x, w, b)),
                    (torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(8, 16, dtype=torch.bfloat16),
                     torch.empty(8, dtype=torch.bfloat16)), "aten_gemm"),
}


@pytest.mark.parametrize("case", sorted(FAMILY_CASES))
def test_shape_families_form_for_a_gpu_target(case):
    """On the H200 ``explain()`` had no bucket for CUDA tensors: the batch size ``n0`` a shape-generic kernel takes
    after its tensors was missing from the ahead-of-time signature, so every config failed that check, no template
    was shape-generic on a GPU target and no family formed (the interpreter's target skips the check)."""
    from kernelgen.runtime.dynamic import family_graph
    from kernelgen.runtime.families import Family

    fn, values, first = FAMILY_CASES[case]
    got = family_graph(lambda vals: _Capture(kernelgen.trace(fn, *vals)), values, (0,))
    assert got is not None
    family = Family.create(got[0], got[1], _GpuBackend(), lambda *_: None)
    assert family is not None, "no implementation is shape-generic on sm_90"
    assert family.impl.name == first
