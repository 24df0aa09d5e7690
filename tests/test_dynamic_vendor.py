"""ATen's GEMM (``aten_gemm``) in shape families: one built implementation (ATen's matmul + a generic
epilogue kernel) serves every batch size, untuned where it ranks first and wherever a record picks it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.runtime.dynamic import bucket
from kernelgen.runtime.implementations import implementations_for
from tests.test_dynamic import _record, compiles  # noqa: F401 - compiles is a fixture

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

SIZES = (2, 3, 17, 64, 1000, 0, 1, 5, 129)  # 0 runs eagerly and 1 is specialised, as in Dynamo


def linear_relu(x, w, b):  # the bias goes into addmm, relu is the epilogue
    return F.relu(F.linear(x, w, b))


def linear_residual(x, w, r):  # the epilogue reads a second batch-sized input
    return F.linear(x, w) * 0.5 + r


def bmm_scale(x, y):  # the batch is the matmul's batch
    return torch.bmm(x, y) * 0.5


def _cases(dtype):
    w, b = torch.randn(12, 20, dtype=dtype), torch.randn(12, dtype=dtype)
    return {
        "linear_relu": (linear_relu, lambda n: (torch.randn(n, 20, dtype=dtype), w, b)),
        "linear_residual": (linear_residual, lambda n: (torch.randn(n, 20, dtype=dtype), w,
                                                        torch.randn(n, 12, dtype=dtype))),
        "bmm_scale": (bmm_scale, lambda n: (torch.randn(n, 4, 8, dtype=dtype), torch.randn(n, 8, 6, dtype=dtype))),
    }


@pytest.mark.parametrize("case", ["linear_relu", "linear_residual", "bmm_scale"])
def test_vendor_gemm_family_serves_every_batch_size_bfloat16(case, compiles):
    """On the C++ backend ATen's GEMM ranks first for bfloat16: the family runs it, compiled once."""
    fn, make = _cases(torch.bfloat16)[case]
    f = compile(fn, backend="cpp", dynamic=True)
    families = set()
    for n in SIZES:
        args = make(n)
        torch.testing.assert_close(f(*args), fn(*args))
        if n >= 2:
            what = f.explain(*args)
            assert (what["implementation"], what["bucket"]) == ("aten_gemm", bucket(n)), n
            families.add(what["family"])
    assert len(families) == 1
    assert len(compiles) <= 2  # the family's kernel, and size 1's own
    builds = len(compiles)
    for n in (6, 100, 257):  # new sizes, new buckets: no compile
        args = make(n)
        torch.testing.assert_close(f(*args), fn(*args))
    assert len(compiles) == builds
    epilogue = f.explain(*make(7))["source_path"]
    assert epilogue is not None and "n0" in Path(epilogue).read_text()  # the epilogue takes the batch size
    assert f.variants <= 2  # the family, and size 1's own kernel


def test_vendor_gemm_family_float32_where_a_bucket_record_picks_it(tmp_path, compiles):
    """float32 on C++ ranks the generated GEMM first; a bucket whose record says aten_gemm runs ATen's GEMM,
    and one family holds both (one build each, none per size)."""
    db_module = pytest.importorskip("kernelgen.db")
    fn, make = _cases(torch.float32)["linear_relu"]
    url = f"sqlite:///{tmp_path / 'tuning.sqlite'}"
    db = db_module.open_db(url)
    graph = kernelgen.trace(fn, *make(64))
    vendor = next(i for i in implementations_for(graph, "cpp") if i.name == "aten_gemm")
    db.commit(_record(graph, vendor, dict(vendor.default_config(get_backend("cpp").target()))))
    db.close()
    f = compile(fn, backend="cpp", db=url, dynamic=True)
    ran = {}
    # 700 first: bucket 1024 has no record near it, the generated GEMM's default is built; 33..64: bucket
    # 64's record; later sizes with no record run a kernel already built (a default is no reason to compile)
    for n in (700, 40, 64, 33, 50, 1000, 3, 1):
        args = make(n)
        torch.testing.assert_close(f(*args), fn(*args), atol=1e-4, rtol=1e-4)
        if n >= 2:
            what = f.explain(*args)
            ran[n] = (what["implementation"], what["source"], what["family"])
    assert {ran[n][:2] for n in (40, 33, 50)} == {("aten_gemm", "bucket")}
    assert ran[64][:2] == ("aten_gemm", "db")
    assert {ran[n][:2] for n in (700, 1000)} == {("gemm", "default")}
    assert len({r[2] for r in ran.values()}) == 1
    assert f.explain(*make(40))["family_kernels"] == 2  # one per implementation, none per size
    builds = len(compiles)
    for n in (45, 900, 20):
        args = make(n)
        torch.testing.assert_close(f(*args), fn(*args), atol=1e-4, rtol=1e-4)
    assert len(compiles) == builds
