"""kernelgen kernels (C++ backend) vs ATen's own kernels for the ops of issue 24, side by side in one run.

Per workload it prints the median times of kernelgen's kernel (``kernelgen.compile``, end to end: it allocates
its outputs, as ATen does) and of the ATen op it replaces, from interleaved rounds (one run of each per round,
so load changes hit both alike), their ratio, and whether the results agree. Workloads: max pooling forward
(values and indices) and backward at a ResNet stem size, the same with eval-mode batch norm + ReLU in front
(one kernelgen kernel, three ATen ops), average pooling forward and backward; the embedding backward's
accumulation (as ATen's own op, scatter_add and index_put) at a GPT-2-small size; the attention backward at two
training sizes; a stable sort of sampler logits and a bucketize.

    python benchmarks/bench_ops.py [--reps 15] [--only max_pool]

It prints; it never asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernelgen.api import compile as kg_compile  # noqa: E402
from kernelgen.backends.timing import Stopwatch, interleaved  # noqa: E402

aten = torch.ops.aten


def pooling() -> list[tuple[str, Callable, Callable, tuple]]:
    """(name, kernelgen function, ATen function, inputs): a ResNet stem's 3x3/2 max pool at [32, 64, 112, 112]
    is [32, 64, 56, 56] out; issue 24 asks for [32, 64, 56, 56] in, 3x3 stride 2 (28x28 out)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 64, 56, 56, generator=g)
    out, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    grad = torch.randn(out.shape, generator=g)
    scale, shift = torch.randn(64, 1, 1, generator=g), torch.randn(64, 1, 1, generator=g)

    def max_pool(t):
        return F.max_pool2d(t, 3, 2, 1, return_indices=True)

    def max_pool_backward(g_, t, i):
        return aten.max_pool2d_with_indices_backward.default(g_, t, [3, 3], [2, 2], [1, 1], [1, 1], False, i)

    def bn_relu_pool(t, a, b):
        return F.max_pool2d(torch.relu(t * a + b), 3, 2, 1)

    def avg_pool(t):
        return F.avg_pool2d(t, 3, 2, 1)

    def avg_pool_backward(g_, t):
        return aten.avg_pool2d_backward.default(g_, t, [3, 3], [2, 2], [1, 1], False, True, None)

    return [
        ("max_pool2d fwd+indices [32,64,56,56] 3x3/2", max_pool, max_pool, (x,)),
        ("max_pool2d bwd [32,64,56,56] 3x3/2", max_pool_backward, max_pool_backward, (grad, x, idx)),
        ("bn+relu+max_pool2d [32,64,56,56]", bn_relu_pool, bn_relu_pool, (x, scale, shift)),
        ("avg_pool2d fwd [32,64,56,56] 3x3/2", avg_pool, avg_pool, (x,)),
        ("avg_pool2d bwd [32,64,56,56] 3x3/2", avg_pool_backward, avg_pool_backward, (grad, x)),
    ]


def scatters() -> list[tuple[str, Callable, Callable, tuple]]:
    """An embedding backward's size: 8 x 512 tokens of 768 features into a 32000-row table, as the embedding
    backward ATen runs (``embedding_dense_backward``), as ``scatter_add`` and as ``index_put(accumulate=True)``."""
    g = torch.Generator().manual_seed(0)
    tokens, width, rows = 8 * 512, 768, 32000
    grad = torch.randn(tokens, width, generator=g)
    idx = torch.randint(0, rows, (tokens,), generator=g)
    table = torch.zeros(rows, width)
    wide = idx[:, None].expand(tokens, width)

    def embedding_backward(g_, i):
        return aten.embedding_dense_backward.default(g_, i, rows, -1, False)

    def scatter_add(t, i, g_):
        return t.scatter_add(0, i, g_)

    def index_put(t, i, g_):
        return t.index_put((i,), g_, accumulate=True)

    return [
        ("embedding_dense_backward [4096,768]->[32000]", embedding_backward, embedding_backward, (grad, idx)),
        ("scatter_add [4096,768]->[32000,768]", scatter_add, scatter_add, (table, wide, grad)),
        ("index_put acc [4096,768]->[32000,768]", index_put, index_put, (table, idx, grad)),
    ]


def attention_backward() -> list[tuple[str, Callable, Callable, tuple]]:
    """ATen's CPU flash attention backward at two training sizes (causal, as in decoder training): GPT-2 small's
    [batch 4, 12 heads, 256 tokens, 64] and a longer [2, 16, 1024, 64]; inputs from ATen's own forward."""
    rows = []
    for b, h, t, d in ((4, 12, 256, 64), (2, 16, 1024, 64)):
        g = torch.Generator().manual_seed(0)
        q, k, v, grad = (torch.randn(b, h, t, d, generator=g) for _ in range(4))
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[:2]

        def backward(grad_, q_, k_, v_, out_, lse_):
            return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(grad_, q_, k_, v_, out_, lse_,
                                                                                     0.0, True)

        rows.append((f"attention bwd causal [{b},{h},{t},{d}]", backward, backward, (grad, q, k, v, out, lse)))
    return rows


def sorts() -> list[tuple[str, Callable, Callable, tuple]]:
    """A top-p sampler's stable descending sort of [32, 32000] logits (values and positions), and bucketize of
    a million values into 1024 boundaries."""
    g = torch.Generator().manual_seed(0)
    logits, values = torch.randn(32, 32000, generator=g), torch.randn(1 << 20, generator=g)
    edges = torch.linspace(-3, 3, 1024)

    def sort_desc(x):
        return torch.sort(x, dim=-1, descending=True, stable=True)

    def bucketize(x, b):
        return torch.bucketize(x, b)

    return [("sort stable desc [32,32000]", sort_desc, sort_desc, (logits,)),
            ("bucketize [1M] in 1024", bucketize, bucketize, (values, edges))]


def workloads() -> list[tuple[str, Callable, Callable, tuple]]:
    return pooling() + scatters() + attention_backward() + sorts()


def _agree(got: Any, want: Any) -> str:
    gots = got if isinstance(got, (tuple, list)) else (got,)
    wants = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(gots, wants):
        if not torch.allclose(g.double(), w.double(), rtol=1e-4, atol=1e-4, equal_nan=True):
            return f"WRONG (max err {(g.double() - w.double()).abs().max().item():.3g})"
    return "equal"


def row(name: str, fn: Callable, reference: Callable, inputs: tuple, reps: int) -> dict[str, Any]:
    compiled = kg_compile(fn, backend="cpp")
    got, want = compiled(*inputs), reference(*inputs)
    impl = compiled.explain(*inputs)["implementation"]
    samples = interleaved({"kg": lambda: compiled(*inputs), "aten": lambda: reference(*inputs)}, reps, Stopwatch())
    kg, eager = (statistics.median(samples[k]) for k in ("kg", "aten"))
    return {"workload": name, "impl": impl, "kg": kg, "aten": eager, "check": _agree(got, want)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    args = parser.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    print(f"CPU {model}; torch threads {torch.get_num_threads()}; load average before {os.getloadavg()[0]:.2f}")
    rows = [row(name, fn, ref, inputs, args.reps) for name, fn, ref, inputs in workloads()
            if not args.only or any(s in name for s in args.only.split(","))]
    print(f"load average after {os.getloadavg()[0]:.2f}")
    print(f"{'workload':44} {'impl':>10} {'kg ms':>8} {'ATen ms':>8} {'ATen/kg':>8}  check")
    for r in rows:
        print(f"{r['workload']:44} {r['impl']:>10} {r['kg'] * 1e3:8.2f} {r['aten'] * 1e3:8.2f} "
              f"{r['aten'] / r['kg']:8.2f}  {r['check']}")
    print("medians of interleaved rounds; ATen/kg > 1 means the kernelgen kernel is faster")


if __name__ == "__main__":
    main()
