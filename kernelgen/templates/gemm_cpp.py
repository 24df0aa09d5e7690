"""C++/OpenMP renderer of the GEMM template: cache-blocked, packed, SIMD register micro-tiles, fused epilogue.

Loop order is BLIS's (jc → pc → ic → jr → ir) with MC/NC/KC cache blocks and an MR×NR micro-tile (ymm
with AVX2, zmm with AVX-512); the epilogue (any pointwise DAG on the accumulator, see ``GemmProblem``)
runs on each row of a micro-tile as the last K block lands, so the product never makes a round trip
through memory before it. Batch dims that are contiguous with M (for example a weight broadcast over a
batch of activations) fold into M. Shape-generic kernels take the batch size (dim 0) at run time: it is a
factor of M or of the batch loop, never of N or K, which the tiling needs static.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates import _gemm_cpp_kernels as kernels
from kernelgen.templates.gemm import GemmProblem
from kernelgen.templates.indexing import dynamic_meta, dynamic_source

MR_CHOICES = (1, 2, 3, 4, 6, 8, 12)
NR_CHOICES = (8, 16, 24, 32, 48)
MC_CHOICES = (24, 48, 72, 96, 120, 144, 192, 240, 288, 384)
NC_CHOICES = (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
KC_CHOICES = (64, 128, 192, 256, 320, 384, 512)
SCHED_CHOICES = ("static", "dynamic")  # how threads share one GEMM: fixed grid or tasks on demand
# Preferred defaults, best first; the first one the target's constraints accept is the space's default.
_DEFAULTS = (
    {"MR": 12, "NR": 32, "MC": 144, "NC": 4096, "KC": 256, "SCHED": "static"},  # AVX-512, 48 KiB L1d
    # AVX-512, 32 KiB L1d: a longer K block (fewer partial-sum round trips) beats the taller 12-row tile;
    # side by side on a 2-core Xeon it ran 0.80x eager at 2048^3 (12x32/KC128: 0.74x) and 0.88x at
    # 4096x1024x256 (0.69x), 0.80x vs 0.82x at 256x512x512. Dynamic tasks won the tall shape.
    {"MR": 8, "NR": 32, "MC": 96, "NC": 6144, "KC": 192, "SCHED": "dynamic"},
    {"MR": 12, "NR": 32, "MC": 144, "NC": 4096, "KC": 128, "SCHED": "static"},  # AVX-512, 32 KiB L1d
    {"MR": 6, "NR": 16, "MC": 144, "NC": 4096, "KC": 256, "SCHED": "static"},  # AVX2
    {"MR": 4, "NR": 16, "MC": 96, "NC": 2048, "KC": 256, "SCHED": "static"},
    {"MR": 4, "NR": 8, "MC": 96, "NC": 2048, "KC": 256, "SCHED": "static"},
    {"MR": 4, "NR": 8, "MC": 48, "NC": 1024, "KC": 128, "SCHED": "static"},
    {"MR": 2, "NR": 8, "MC": 24, "NC": 256, "KC": 64, "SCHED": "static"},
)
_FALLBACK_CACHES = {"l1d": 32 * 1024, "l2": 256 * 1024, "l3": 8 * 1024 * 1024}


def acc_type(problem: GemmProblem) -> str:
    """The accumulator's C type: float for float16/bfloat16/float32 operands, double for float64."""
    return "double" if problem.a.dtype == "float64" else "float"


def vector_isa(target: Target) -> tuple[int, int]:
    """(bytes per vector, vector registers) of the micro-tile on ``target``: zmm x 32 with AVX-512, ymm x 16
    with AVX; elsewhere 32-byte vectors are split in two 16-byte registers (8 usable)."""
    if "avx512f" in target.features:
        return 64, 32
    return (32, 16) if "avx" in target.features else (32, 8)


def space(problem: GemmProblem, target: Target) -> SearchSpace:
    """Tile sizes with the register file and L1/L2/L3 capacities of ``target`` as constraints."""
    acc = 8 if acc_type(problem) == "double" else 4
    vector_bytes, registers = vector_isa(target)
    lanes = vector_bytes // acc
    caches = {name: int(target.caches.get(name) or fallback) for name, fallback in _FALLBACK_CACHES.items()}
    l1, l2, l3 = caches["l1d"], caches["l2"], caches["l3"]
    constraints = [
        Constraint(f"NR is a multiple of the vector length ({lanes})", lambda c: c["NR"] % lanes == 0),
        Constraint(f"MR*NR/{lanes} accumulators + NR/{lanes} B vectors + 1 broadcast fit in "
                   f"{registers} vector registers",
                   lambda c: c["MR"] * c["NR"] // lanes + c["NR"] // lanes + 1 <= registers),
        Constraint("MC is a multiple of MR", lambda c: c["MC"] % c["MR"] == 0),
        Constraint("NC is a multiple of NR", lambda c: c["NC"] % c["NR"] == 0),
        Constraint(f"A and B micro-panels (MR+NR)*KC*{acc} B fit in L1d ({l1} B)",
                   lambda c: (c["MR"] + c["NR"]) * c["KC"] * acc <= l1),
        Constraint(f"the packed A block MC*KC*{acc} B fits in half of L2 ({l2} B)",
                   lambda c: c["MC"] * c["KC"] * acc <= l2 // 2),
        Constraint(f"the packed B panel KC*NC*{acc} B fits in half of L3 ({l3} B)",
                   lambda c: c["KC"] * c["NC"] * acc <= l3 // 2),
    ]
    params = [Param("MR", MR_CHOICES), Param("NR", NR_CHOICES), Param("MC", MC_CHOICES),
              Param("NC", NC_CHOICES), Param("KC", KC_CHOICES), Param("SCHED", SCHED_CHOICES)]
    probe = SearchSpace(params, constraints)
    default = next((d for d in _DEFAULTS if probe.is_valid(Config(d))), None)
    return SearchSpace(params, constraints, default)


@dataclass(frozen=True)
class Layout:
    """The iteration space after folding: ``batch`` loops outside one ``m x n x k`` GEMM.

    Strides are in elements. ``*_batch`` hold one stride per remaining batch dim (outermost first);
    ``loads_sm`` are the epilogue loads' strides over m (their n strides are those of ``GemmProblem.loads``).
    """

    batch: tuple[int, ...]
    m: int
    a_batch: tuple[int, ...]
    b_batch: tuple[int, ...]
    c_batch: tuple[int, ...]
    loads_batch: tuple[tuple[int, ...], ...]
    a_sm: int
    loads_sm: tuple[int, ...]


def fold(problem: GemmProblem) -> Layout:
    """Merge batch dims into their inner neighbour (ultimately into M) wherever every tensor allows it.

    A dim merges into the next one when, for A, B (whose stride over m is 0), the output and every
    epilogue load, ``stride[d] == stride[d+1] * size[d+1]``; size-1 batch dims vanish.
    """
    n = problem.n
    sizes = list(problem.batch) + [problem.m]
    c_strides, acc = [], n
    for size in reversed(sizes):
        c_strides.append(acc)
        acc *= max(size, 1)
    c_strides.reverse()
    # one row of strides per tensor, over (*batch, m)
    rows = [list(problem.a.strides[:-1]), list(problem.b.strides[:-2]) + [0], c_strides]
    rows += [list(ld.strides[:-1]) for ld in problem.loads]
    dims = [(size, [r[d] for r in rows]) for d, size in enumerate(sizes)]
    dims = [d for i, d in enumerate(dims) if d[0] != 1 or i == len(dims) - 1]
    merged = [dims[-1]]
    for size, strides in reversed(dims[:-1]):
        inner_size, inner = merged[0]
        if all(s == t * inner_size for s, t in zip(strides, inner)):
            merged[0] = (size * inner_size, inner)
        else:
            merged.insert(0, (size, strides))
    batch, (m, m_strides) = merged[:-1], merged[-1]
    per_tensor = [tuple(st[t] for _, st in batch) for t in range(len(rows))]
    return Layout(batch=tuple(s for s, _ in batch), m=m, a_batch=per_tensor[0], b_batch=per_tensor[1],
                  c_batch=per_tensor[2], loads_batch=tuple(per_tensor[3:]), a_sm=m_strides[0],
                  loads_sm=tuple(m_strides[3:]))


def _batch_offsets(layout: Layout, nloads: int) -> str:
    lines = ["static inline Offs batch_offsets(int64_t bi) {", "  Offs o{};", "  int64_t r = bi, i = 0;",
             "  (void)r; (void)i;"]
    for d in range(len(layout.batch) - 1, -1, -1):
        # the outermost index needs no size (it may be the run-time batch size)
        lines.append("  i = r;" if d == 0 else f"  i = r % {layout.batch[d]}; r /= {layout.batch[d]};")
        terms = [f"o.a += i * {layout.a_batch[d]};", f"o.b += i * {layout.b_batch[d]};",
                 f"o.c += i * {layout.c_batch[d]};"]
        terms += [f"o.l[{j}] += i * {layout.loads_batch[j][d]};" for j in range(nloads)]
        lines.append("  " + " ".join(terms))
    lines += ["  return o;", "}"]
    return "\n".join(lines)


def _finish_row(problem: GemmProblem, layout: Layout) -> str:
    """The epilogue over one row segment of accumulators: ``dst[j] = epilogue(row[j], loads at (m, n0+j))``."""
    graph = problem.graph
    lines = ["__attribute__((always_inline)) static inline void finish_row(const Ctx& cx, const acc_t* __restrict row, int64_t m, int64_t n0,",
             "    int64_t cnt, out_t* __restrict dst) {",
             "  (void)cx; (void)m; (void)n0;"]
    env = {problem.matmul: "row[j]"}
    for i, ld in enumerate(problem.loads):
        ctype = cpp_expr.storage_type(ld.dtype)
        lines.append(f"  const {ctype}* __restrict l{i} = (const {ctype}*)cx.ptrs[{ld.arg}] + cx.off.l[{i}] + "
                     f"m * {layout.loads_sm[i]} + n0 * {ld.strides[-1]};")
        env[ld.node] = cpp_expr.load(ld.dtype, f"l{i}[j * {ld.strides[-1]}]")
    out = graph.outputs[0]
    body = cpp_expr.emit(graph, cpp_expr.dag_nodes(graph, [out], env), env)
    body.append(cpp_expr.store(problem.out_dtype, "dst[j]", env[out]))
    lines.append("#pragma omp simd")
    lines.append("  for (int64_t j = 0; j < cnt; ++j) {")
    lines += ["    " + line for line in body]
    lines += ["  }", "}"]
    return "\n".join(lines)


def render(problem: GemmProblem, config: Config, target: Target) -> Source:
    """C++ source of the GEMM for ``config``; raises ``ValueError`` when the config breaks the space."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"GEMM config {dict(config)} is invalid: {'; '.join(problems)}")
    layout = fold(problem)
    graph = problem.graph
    nbatch = 1
    for size in layout.batch:
        nbatch *= size
    acc = acc_type(problem)
    nloads = len(problem.loads)
    out_ctype = cpp_expr.storage_type(problem.out_dtype)
    out_is_acc = out_ctype == acc and problem.out_dtype in ("float32", "float64")
    # Shape-generic: the run-time batch size n0 folds into M (batch dims contiguous with it) or is the
    # outermost loop of NBATCH; either is then a value of the entry (and of Ctx), not a constant.
    dyn = dynamic_source(graph, (*problem.batch, problem.m))
    runtime = {}
    if dyn is not None:
        name, size = ("NBATCH", nbatch) if layout.batch else ("M", layout.m)
        runtime[name] = f"n0 * {size // graph.dynamic}"
    consts = {
        "DYNAMIC": int(config["SCHED"] == "dynamic"), "M": layout.m, "N": problem.n, "K": problem.k, "NBATCH": nbatch,
        "MR": config["MR"], "NR": config["NR"], "MC": config["MC"], "NC": config["NC"], "KC": config["KC"],
        "A_SM": layout.a_sm, "A_SK": problem.a.strides[-1], "B_SK": problem.b.strides[-2],
        "B_SN": problem.b.strides[-1], "A_ARG": problem.a.arg, "B_ARG": problem.b.arg,
        "OUT_ARG": len(graph.signature),
    }
    for name in runtime:
        del consts[name]
    header = [
        f"typedef {cpp_expr.storage_type(problem.a.dtype)} a_t;",
        f"typedef {cpp_expr.storage_type(problem.b.dtype)} b_t;",
        f"typedef {out_ctype} out_t;",
        f"typedef {acc} acc_t;",
        *(f"static constexpr int64_t {name} = {value};" for name, value in consts.items()),
        f"static constexpr bool OUT_IS_ACC = {'true' if out_is_acc else 'false'};",
        f"static inline acc_t load_a(a_t x) {{ return (acc_t){cpp_expr.load(problem.a.dtype, 'x')}; }}",
        f"static inline acc_t load_b(b_t x) {{ return (acc_t){cpp_expr.load(problem.b.dtype, 'x')}; }}",
        f"struct Offs {{ int64_t a, b, c; int64_t l[{max(nloads, 1)}]; }};",
        _batch_offsets(layout, nloads),
        "struct Ctx { const a_t* A; const b_t* B; out_t* C; acc_t* W; Offs off; int64_t bi; void* const* ptrs; "
        "int64_t m; };",
        *(["#define M (cx.m)"] if "M" in runtime else []),  # the kernels below read M through their Ctx
        _finish_row(problem, layout),
    ]
    micro = kernels.MICROKERNEL.replace("@VECTOR_BYTES@", str(vector_isa(target)[0]))
    entry = "kg_gemm"
    head = "\n".join([*(["#undef M"] if "M" in runtime else []), entry_declaration(entry, dyn is not None),
                      *(f"  const int64_t {name} = {value};" for name, value in runtime.items())])
    text = "\n".join([cpp_expr.PRELUDE, kernels.PRELUDE, *header, kernels.PACKING, micro,
                      kernels.DRIVER.replace("@ENTRY_HEAD@", head).replace("@ENTRY@", entry)])
    signature = [spec.to_json() for spec in (*graph.signature, *graph.output_specs)]
    return Source("cpp", text, entry, (), FrozenMap(signature=json.dumps(signature), **dynamic_meta(graph, dyn)))


__all__ = ["Layout", "acc_type", "fold", "render", "space"]
