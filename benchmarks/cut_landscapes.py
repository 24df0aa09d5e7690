"""Write sub-landscapes of recorded landscapes (one parameter restricted), to check a sampler off its tuning set.

A sampler chosen on six landscapes may be fitted to where their optima sit. Restricting one parameter keeps
each landscape's texture but moves its optimum, giving more spaces to compare samplers on. Example:

    python benchmarks/cut_landscapes.py /tmp/cuts convolution:use_shmem=1 convolution:tile_size_y<=2 \\
        dedispersion:tile_stride_y=0
    python benchmarks/bench_search.py --dir /tmp/cuts --seeds 30 --jobs 2 --kt ''
"""

from __future__ import annotations

import argparse
import gzip
import json
import operator
import re
import sys
from pathlib import Path

from bench_search import DEFAULT_DIR  # the same landscapes folder (and KERNELGEN_LANDSCAPES) as the replay
_CUT = re.compile(r"^(?P<kernel>[\w-]+):(?P<param>\w+)(?P<op><=|>=|=)(?P<value>-?\d+)$")
_OPS = {"=": operator.eq, "<=": operator.le, ">=": operator.ge}
_OP_NAMES = {"=": "eq", "<=": "le", ">=": "ge"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder to write KERNEL_CUT/GPU.json.gz into")
    ap.add_argument("cuts", nargs="+", help="KERNEL:PARAM=V, KERNEL:PARAM<=V or KERNEL:PARAM>=V")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="recorded landscapes (KERNEL/GPU.json.gz)")
    args = ap.parse_args(argv)
    for cut in args.cuts:
        m = _CUT.match(cut)
        if m is None:
            ap.error(f"bad cut {cut!r}: write KERNEL:PARAM=V (or <=, >=), e.g. convolution:use_shmem=1")
        kernel, param, op, value = m["kernel"], m["param"], m["op"], int(m["value"])
        sources = sorted((args.dir / kernel).glob("*.json.gz"))
        if not sources:
            ap.error(f"no landscapes in {args.dir / kernel}")
        dest = args.out / f"{kernel}_{param}_{_OP_NAMES[op]}{value}"
        dest.mkdir(parents=True, exist_ok=True)
        for src in sources:
            data = json.loads(gzip.decompress(src.read_bytes()))
            if param not in data["tune_params"]:
                ap.error(f"{src} has no parameter {param!r}; it has {', '.join(data['tune_params'])}")
            kept = {k: e for k, e in data["cache"].items() if _OPS[op](e[param], value)}
            if not any(isinstance(e["time"], (int, float)) for e in kept.values()):
                ap.error(f"cut {cut!r} leaves no measured configuration in {src}")
            data["cache"] = kept
            (dest / src.name).write_bytes(gzip.compress(json.dumps(data).encode()))
            print(f"{dest / src.name}: {len(kept)} of the configurations kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
