"""Every model of examples/models.py, forward and forward+backward, through ``torch.compile(backend="kernelgen")``
against eager at the test size; kernelgen regions must really run, so a pure fallback cannot pass."""

from __future__ import annotations

import copy

import pytest
import torch

from examples.models import MODELS, make, names, training_loss

# float32 at the test size: kernels reorder sums of at most a few hundred terms.
TOL = {"rtol": 1e-4, "atol": 1e-4}


def _step(module: torch.nn.Module, inputs: tuple, mode: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    if mode == "fwd":
        with torch.no_grad():
            return module(*inputs), {}
    out = module(*inputs)
    training_loss(out).backward()
    return out.detach(), {n: p.grad for n, p in module.named_parameters()}


@pytest.mark.parametrize("name", names())
def test_make_is_seeded_and_a_training_step_reaches_every_parameter(name):
    (m1, in1), (m2, in2) = make(name, "test"), make(name, "test")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    make(name, "test")
    assert torch.equal(torch.get_rng_state(), state), "make() must leave the global RNG alone"
    for a, b in zip(in1, in2):
        assert torch.equal(a, b)
    for (n, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), n
    assert not m1.training
    out, grads = _step(m1, in1, "fwd+bwd")
    assert out.isfinite().all()
    assert all(g is not None and g.isfinite().all() and g.abs().sum() > 0 for g in grads.values()), \
        [n for n, g in grads.items() if g is None or not g.abs().sum() > 0]


def test_make_names_the_choices_for_an_unknown_model_or_size():
    with pytest.raises(KeyError, match="gpt2"):
        make("gpt-3")
    with pytest.raises(KeyError, match="bench"):
        make("gpt2", "huge")
    assert all(set(sizes) == {"test", "bench"} for sizes in MODELS.values())
