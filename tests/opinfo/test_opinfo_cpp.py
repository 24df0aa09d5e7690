"""Issue 15, item 2: every op kernelgen lowers, on PyTorch's OpInfo samples, equals eager on the C++ backend.

Parametrised over the lowering's handler table (not a hand list): each lowered op runs the OpInfo entries
that call it over every dtype they support (of kernelgen's ten), one sample each as given, non-contiguous,
with NaN/±Inf, with integer extremes and requiring grad (see ``kernelgen.testing.opinfo``). Outcomes
``pass`` and ``fallback`` (eager ran) are fine; a ``fail`` is a wrong answer or an exception eager did not
raise. ``benchmarks/bench_opinfo.py`` prints the full table.
"""

from __future__ import annotations

import pytest

from kernelgen.backends import get_backend
from kernelgen.lowering.lower import handled_ops

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest: pip install -e '.[dev]'")
pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

from kernelgen.testing import opinfo  # noqa: E402  (after the skip: it imports torch.testing._internal lazily)

MAX_SAMPLES = 1  # per op and dtype; kernels are the cost (one g++ run per new graph and signature)
VARIANT_SAMPLES = 1


def _describe(o: opinfo.Outcome) -> str:
    c = o.case
    return (f"{c.op} {str(c.dtype).removeprefix('torch.')} sample {c.index} {c.variant}"
            f"{' (' + ','.join(sorted(c.kinds)) + ')' if c.kinds else ''}: {o.detail}")


@pytest.mark.parametrize("name", sorted(handled_ops()))
def test_lowered_op_matches_eager_on_opinfo_samples(name):
    infos = opinfo.op_infos([name])
    infos = [i for i in infos if opinfo.lowered_name(i) == name]
    if not infos:
        pytest.skip(f"no OpInfo calls {name!r}")
    outcomes = [o for info in infos for o in opinfo.run_op(info, "cpp", max_samples=MAX_SAMPLES,
                                                             max_variant_samples=VARIANT_SAMPLES)]
    assert outcomes
    fails = [o for o in outcomes if o.status == "fail"]
    assert not fails, "kernelgen differs from eager:\n" + "\n".join(map(_describe, fails))
