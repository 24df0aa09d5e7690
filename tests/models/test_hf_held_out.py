"""The held-out Hugging Face families (``examples/hf_models.py`` ``HELD_OUT``: T5, Mistral, Qwen2, ViT; issue 33
item 4) at test size through ``torch.compile(backend="kernelgen")``, inference and a training step, against eager:
outputs and every parameter's gradient. And their coverage: every ATen op of their graphs runs inside a kernelgen
region, so a change that leaves one of the ops they needed to ATen again fails here, naming it and why.

What each needed (all left to ATen before):
- T5: its cross-attention's position bias of zeros, a constant mask (``_scaled_dot_product_flash_attention_for_cpu``:
  "no template covers ops ['attention', 'cast', 'const', 'input']");
- Mistral: its sliding-window mask's ``aten.index`` by [batch, query] index tensors;
- Mistral and Qwen2: grouped-query attention (``repeat_kv`` copies read in place in inference, fewer K/V heads in
  the templates);
- ViT: its patch embedding's ``aten.convolution`` and ``convolution_backward``.

Skipped where transformers is not installed (``pip install -e '.[models]'``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[models]'")

from examples.hf_models import HELD_OUT  # noqa: E402
from tests.models.eager_contract import compare_with_eager  # noqa: E402

# Reasons an op may still run ATen's: a fill with no tensor input that the graph returns (T5's training forward
# saves its zeros bias for the backward), and views (not counted as ops).
ALLOWED = ("constant with no tensor inputs",)
# The ops each family needed, by ATen name: none may be left, and the templates that now run them must be there.
NEEDED = {"t5": ("_scaled_dot_product_flash_attention_for_cpu",), "mistral": ("aten.index.Tensor",),
          "qwen2": (), "vit": ("aten.convolution",)}
TEMPLATES = {"infer": {"t5": {"attention": 6}, "mistral": {"attention": 2}, "qwen2": {"attention": 2},
                       "vit": {"attention": 2, "gemm": 13}},
             "train": {"t5": {"attention": 2, "attention_grad": 2}, "mistral": {"attention": 2, "attention_grad": 2},
                       "qwen2": {"attention": 2, "attention_grad": 2}, "vit": {"attention_grad": 2, "gemm": 38}}}


# T5's training step (an encoder and a decoder, ~300 regions) takes a minute on two cores: marked slow (CI runs it)
_CASES = [pytest.param(n, m, marks=[pytest.mark.slow] if (n, m) == ("t5", "train") else [])
          for n in HELD_OUT for m in ("infer", "train")]


@pytest.mark.parametrize(("name", "mode"), _CASES)
def test_held_out_family_matches_eager_and_runs_every_op_in_regions(name: str, mode: str) -> None:
    graphs = compare_with_eager(name, mode)
    left = {op: reason for g in graphs for op, reason in g.left.items()}
    assert not any(n in op for op in left for n in NEEDED[name]), left
    assert all(reason.startswith(ALLOWED) for reason in left.values()), left
    templates = sum((g.templates for g in graphs), type(graphs[0].templates)())
    for template, count in TEMPLATES[mode][name].items():
        assert templates[template] >= count, (template, dict(templates))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "mistral"])
def test_held_out_family_with_written_out_attention_matches_eager(name: str) -> None:
    """``attn_implementation="eager"`` (the written-out softmax(q kᵀ + bias) v the four named models use on CPUs):
    T5's position bias and Mistral's repeat_kv, in inference, where the pattern becomes the attention op."""
    graphs = compare_with_eager(name, "infer", attention="eager")
    left = {op: reason for g in graphs for op, reason in g.left.items()}
    assert all(reason.startswith(ALLOWED) for reason in left.values()), left
    attentions = {"t5": 6, "mistral": 2}[name]  # T5: encoder, decoder (bias + causal mask) and cross, 2 layers
    assert sum(g.templates.get("attention", 0) for g in graphs) >= attentions, [g.as_dict() for g in graphs]
