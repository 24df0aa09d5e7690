"""Sort, argsort, bucketize and searchsorted on more of their OpInfo samples than the sweep's one per dtype (whose
middle sample of sort is an unstable one, which runs eagerly by design): the stable samples and the 1-d searches
must run kernelgen kernels and equal eager, values and positions exact."""

from __future__ import annotations

import pytest

from kernelgen.backends import get_backend

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest: pip install -e '.[dev]'")
pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

from kernelgen.testing import opinfo  # noqa: E402
import torch  # noqa: E402

DTYPES = (torch.float16, torch.float32, torch.int64, torch.bool)


@pytest.mark.parametrize("name", ["sort", "argsort", "bucketize", "searchsorted"])
def test_sort_and_search_samples_run_kernels_and_match_eager(name):
    infos = [i for i in opinfo.op_infos([name]) if opinfo.lowered_name(i) == name]
    outcomes = [o for info in infos for o in opinfo.run_op(info, "cpp", dtypes=DTYPES, max_samples=8,
                                                             max_variant_samples=2)]
    fails = [f"{o.case.dtype} sample {o.case.index} {o.case.variant}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not fails, "\n".join(fails)
    assert any(o.status == "pass" for o in outcomes), opinfo.table(outcomes)  # (the unstable samples run eagerly)
