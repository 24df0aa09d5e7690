"""cat and constant pad inside a Triton pointwise kernel (interpreter without a GPU) against eager and the IR
reference: the cases of the C++ test (tests/templates/moves_cases.py)."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.templates import match, pointwise_triton  # noqa: E402
from tests.templates import moves_cases  # noqa: E402

pytestmark = needs_triton


@pytest.mark.parametrize("index", range(len(moves_cases.cases())),
                         ids=[f"{fn.__name__}-{args[0].dtype}".replace("torch.", "") for fn, args in moves_cases.cases()])
def test_moves_match_eager(index):
    torch.manual_seed(index)
    fn, inputs = moves_cases.cases()[index]
    inputs = tuple(x.to(DEVICE) for x in inputs)
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "pointwise" and problem.moves
    target = get_backend("triton").target()
    # several programs and a masked tail (below the search space's smallest block, so the module renderer)
    source = pointwise_triton.render(problem, {"BLOCK_SIZE": 16, "num_warps": 4}, target)
    kernel = get_backend("triton").compile(source)
    outs = [torch.full(s.shape, 123, device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    moves_cases.assert_matches_eager_and_reference(fn, inputs, graph, outs)
