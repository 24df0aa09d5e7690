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


# --- through torch.compile(backend="kernelgen") -----------------------------------------------------------

def _backend():
    """The kernelgen Dynamo backend module, registered; skips where this branch has none yet."""
    try:
        from kernelgen.frontend import dynamo_backend
    except ImportError as exc:
        pytest.skip(f"kernelgen's torch.compile backend is not in this checkout ({exc})")
    dynamo_backend.register()
    return dynamo_backend


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Every test compiles a new copy of a model class: start from empty Dynamo caches (and recompile limits).
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compare(name: str, mode: str, kernel_backend: str, device: str = "cpu") -> None:
    backend = _backend()
    module, inputs = make(name, "test")
    module, inputs = module.to(device), tuple(x.to(device) for x in inputs)
    ours = copy.deepcopy(module)
    compiled = torch.compile(ours, backend="kernelgen", options={"backend": kernel_backend})
    with backend.collect() as graphs:
        got, _ = _step(compiled, inputs, mode)
    got_grads = {n: p.grad for n, p in ours.named_parameters()} if mode == "fwd+bwd" else {}
    want, want_grads = _step(module, inputs, mode)
    torch.testing.assert_close(got, want, **TOL)
    assert got_grads.keys() == want_grads.keys()
    for n, g in got_grads.items():
        torch.testing.assert_close(g, want_grads[n], **TOL, msg=lambda m, n=n: f"grad of {n}: {m}")
    # Kernelgen kernels really ran, in the forward and (when there is one) the backward graph: a model that
    # fell back to ATen entirely cannot pass.
    kinds = {"fwd": {"inference"}, "fwd+bwd": {"forward", "backward"}}[mode]
    ran = {g.name for g in graphs if g.fused_ops > 0 and g.runs.get("kernel", 0) > 0}
    assert kinds <= ran, [g.as_dict() for g in graphs]


# Each model compiles its kernels (g++ or the interpreter, and a checked first run each) on a cold cache:
# 5-25 s per case on two busy cores. The fast set keeps one transformer (BERT: GEMM, row reductions,
# pointwise, backward) on C++ and the CNN on both backends; the rest is marked slow (CI runs it too).
_FAST = {"cpp": {"bert", "cnn"}, "triton": {"cnn"}}


def _cases(backend):
    return [pytest.param(n, m, marks=[] if n in _FAST[backend] else [pytest.mark.slow])
            for n in names() for m in ("fwd", "fwd+bwd")]


@pytest.mark.parametrize(("name", "mode"), _cases("cpp"))
def test_model_matches_eager_on_the_cpp_backend(name, mode):
    _compare(name, mode, "cpp")


@pytest.mark.parametrize(("name", "mode"), _cases("triton"))
def test_model_matches_eager_on_the_triton_backend(name, mode):
    from kernelgen.backends.triton import interpreter_active

    if not (interpreter_active() or torch.cuda.is_available()):
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set")
    _compare(name, mode, "triton", "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu")


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "gpt2" else [pytest.mark.slow]) for n in names()])
def test_model_under_dynamic_shapes_matches_eager_at_each_batch_size(name):
    """``torch.compile(dynamic=True)``: one compile of the model serves three batch sizes (symbolic dim 0 in
    Dynamo's graphs); values and gradients are eager's at each, and kernelgen regions run at each."""
    backend = _backend()
    module, inputs = make(name, "test")
    ours = copy.deepcopy(module)
    compiled = torch.compile(ours, backend="kernelgen", dynamic=True)
    with backend.collect() as graphs:
        for scale in (1, 2, 3):
            batch = tuple(torch.cat([x] * scale) for x in inputs)
            got, _ = _step(compiled, batch, "fwd+bwd")
            got_grads = {n: p.grad for n, p in ours.named_parameters()}
            want, want_grads = _step(module, batch, "fwd+bwd")
            torch.testing.assert_close(got, want, **TOL)
            for n, g in got_grads.items():
                torch.testing.assert_close(g, want_grads[n], **TOL, msg=lambda m, n=n: f"grad of {n}: {m}")
            ours.zero_grad()
            module.zero_grad()
    assert {g.name for g in graphs} == {"forward", "backward"}  # compiled once, not once per size
    assert all(g.regions and g.runs.get("kernel", 0) >= 3 * g.regions for g in graphs), [g.as_dict() for g in graphs]
