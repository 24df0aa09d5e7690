"""The C++ sort and search templates (sort/argsort along any dim; bucketize/searchsorted) against eager PyTorch and
the IR reference: values and positions to the bit, NaN, infinities, signed zeros and ties included."""

from __future__ import annotations

import pytest

from kernelgen.backends import get_backend
from tests.templates import sort_cases
from tests.templates.kernels import run_kernel

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")


def _check(fn, inputs, template):
    graph, outs = run_kernel(fn, inputs, "cpp", template)
    sort_cases.assert_exactly_eager_and_reference(fn, inputs, graph, outs)


@pytest.mark.parametrize("index", range(len(sort_cases.cases())), ids=sort_cases.ids())
def test_sort_matches_eager(index):
    _check(*sort_cases.cases()[index], "sort")


@pytest.mark.parametrize("index", range(len(sort_cases.search_cases())), ids=sort_cases.search_ids())
def test_search_matches_eager(index):
    _check(*sort_cases.search_cases()[index], "search")
