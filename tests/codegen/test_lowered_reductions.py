"""Reductions the lowering maps onto the templates' last-dim reductions (issue 16, item 2.4): a full reduction of
a vector or of [1, n], tuples of dims whose other members have size 1, keepdim; the rest runs eagerly.
Each case equals eager (dtype, shape, NaN); the ones a template covers must run a kernel.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's first import

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.testing import device_for  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _backends():
    for name in ("cpp", "triton"):
        try:
            ok = get_backend(name).is_available()
        except Exception:  # noqa: BLE001  (an optional toolchain missing entirely)
            ok = False
        yield pytest.param(name, marks=pytest.mark.skipif(not ok, reason=f"backend {name} is not available here"))


def _vector(n: int = 37) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(0))
    x[3] = float("nan")
    return x


KERNEL_CASES = {
    "sum": lambda a: a.sum(), "amax": lambda a: a.amax(), "amin": lambda a: torch.amin(a, dim=[]),
    "var": lambda a: a.var(), "std_keepdim": lambda a: a.std(0, keepdim=True),
    "sum_keepdim_all": lambda a: torch.sum(a.unsqueeze(0), (0, 1), keepdim=True),
    "var_correction": lambda a: torch.var(a, correction=0),
}
EAGER_CASES = {  # correct, but no template takes the reshape of the result yet
    "sum_1xn": lambda a: a.unsqueeze(0).sum(), "size1_middle": lambda a: a.reshape(37, 1).sum(1),
    "amax_two_dims": lambda a: a.reshape(37, 1, 1).amax(dim=(1, 2)),
    "middle_dim": lambda a: a.reshape(1, 37, 1).sum(1), "two_wide_dims": lambda a: a[:36].reshape(6, 6).sum(),
}


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("name", sorted(KERNEL_CASES) + sorted(EAGER_CASES))
def test_reduction_matches_eager(name, backend):
    fn = KERNEL_CASES.get(name) or EAGER_CASES[name]
    x = _vector().to(device_for(backend))
    compiled = kernelgen.compile(fn, backend=backend)
    got, want = compiled(x), fn(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-5)
    if name in KERNEL_CASES:
        assert compiled.explain(x)["implementation"] == "reduction"
