"""Which ATen ops of a whole model's graphs kernelgen's regions cover, and why each other one is left to ATen: the
partition the torch.compile backend would install, read without building or running a kernel (seconds per model).

Each model of ``examples/hf_models.py`` (the four named ones and the held-out families, ``HELD_OUT``) at a size, in
inference and a training step, through Dynamo, AOTAutograd and the backend's clean-ups and partitioner
(``kernelgen.frontend.dynamo_backend.plan``); the graphs then run as plain ATen ops. Per model and mode: the ATen
ops (views not counted), how many are inside regions, the regions by template, and the ops left by reason.

    python benchmarks/model_coverage.py [--models gpt2,t5,...] [--size bench|test] [--attention sdpa|eager] [--json]

``--attention`` builds every model with that attention (default: each family's, ``examples/hf_models.py``). It
prints; it never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.frontend.decompositions import decompositions  # noqa: E402
from kernelgen.tune.model import prepare, step  # noqa: E402


def coverage_backend(graphs: list) -> Any:
    """A Dynamo backend that partitions each graph as kernelgen's does, records it in ``graphs`` and runs it as
    ATen ops."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(name: str) -> Any:
        def compile_one(gm: Any, inputs: list) -> Any:
            record, _ = dynamo_backend.plan(gm, name)
            graphs.append(record)
            return make_boxed_func(gm.forward)

        return compile_one

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"), decompositions=decompositions())


def one(name: str, mode: str, size: str, attention: str | None) -> dict[str, Any]:
    from examples.hf_models import build

    torch._dynamo.reset()
    model, inputs = build(name, size, attention=attention)
    prepare(model, mode)
    graphs: list = []
    step(torch.compile(model, backend=coverage_backend(graphs)), (), inputs, mode)()
    left: Counter = Counter()
    ops: Counter = Counter()
    for g in graphs:
        for op, reason in g.left.items():
            left[re.sub(r" at `[^`]*`", "", reason).split("; supported:")[0][:160]] += 1
            ops[op.rsplit(" (", 1)[-1].rstrip(")")] += 1
    return {"model": name, "mode": mode, "attention": getattr(model.config, "_attn_implementation", None),
            "aten_ops": sum(g.aten_ops for g in graphs), "fused_ops": sum(g.fused_ops for g in graphs),
            "regions": sum(g.regions for g in graphs),
            "templates": dict(sum((g.templates for g in graphs), Counter())), "left": dict(left),
            "left_ops": dict(ops)}


def main() -> None:
    from examples.hf_models import HELD_OUT, NAMES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(NAMES + HELD_OUT), help="comma-separated, from "
                        f"{', '.join(NAMES + HELD_OUT)}")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--size", default="bench", choices=("test", "bench"))
    parser.add_argument("--attention", default=None, choices=("sdpa", "eager"))
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            row = one(name, mode, args.size, args.attention)
            rows.append(row)
            print(f"{name:<8} {mode:<5} {row['attention'] or '':<5}  {row['fused_ops']:>4}/{row['aten_ops']:<4} ATen "
                  f"ops in {row['regions']} regions ({', '.join(f'{t} {n}' for t, n in row['templates'].items())}); "
                  f"left {row['aten_ops'] - row['fused_ops']}")
            for reason, n in sorted(row["left"].items(), key=lambda kv: -kv[1]):
                print(f"    {n:>3}  {reason}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
