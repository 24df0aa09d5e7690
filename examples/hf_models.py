"""Real Hugging Face ``transformers`` models built from configs with random weights (nothing is downloaded):
GPT-2, Llama, BERT and a ResNet-18, as ``kernelgen tune --model`` factories and for ``benchmarks/bench_models.py``.

Each factory returns ``(model, inputs)`` with ``inputs`` a dict of keyword tensors. ``bench`` sizes are the
issue's (2 layers, hidden 256, 4 x 128 tokens; ResNet-18 at 4 x 128² images); ``test`` sizes keep CI fast;
``gpu`` sizes are a GPU's (4 layers, hidden 768, 12 heads, vocab 8192, 8 x 512 tokens; ResNet-18 at 8 x 224²),
built on CUDA with PyTorch's default attention (``sdpa``): the ``*_gpu`` factories in bfloat16 (inference), the
``*_gpu_fp32`` ones in float32 (training).
Dropout is off so that two runs of a training step compute the same values (eager, Inductor and kernelgen
are compared on them).

    kernelgen tune --model examples.hf_models:gpt2 --mode train --seconds 300
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: never reach the hub

SEED = 0
NAMES = ("gpt2", "llama", "bert", "resnet")
SIZES = {
    "test": {"layers": 2, "hidden": 64, "heads": 2, "seq": 16, "batch": 2, "vocab": 256, "image": 32},
    "bench": {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 1000, "image": 128},
    "gpu": {"layers": 4, "hidden": 768, "heads": 12, "seq": 512, "batch": 8, "vocab": 8192, "image": 224},
}
# The attention each size builds: the written-out one every model family has on CPUs; on a GPU, the default
# (``sdpa``: cuDNN / flash / memory-efficient kernels) a new user gets.
ATTENTION = {"test": "eager", "bench": "eager", "gpu": "sdpa"}


def build(name: str, size: str = "bench", device: str = "cpu", dtype: Any = None) -> tuple[Any, dict[str, Any]]:
    """``(model, inputs)`` of model ``name`` (one of ``NAMES``) at ``size`` (``test``, ``bench`` or ``gpu``), on
    ``device`` in ``dtype`` (None: float32)."""
    import torch

    model, inputs = _build(name, size)
    model = model.to(device=device, dtype=dtype)
    return model, {k: v.to(device=device, dtype=dtype if v.is_floating_point() else None) for k, v in inputs.items()}


def _build(name: str, size: str) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers

    if name not in NAMES or size not in SIZES:
        raise ValueError(f"unknown model {name!r} or size {size!r}; models: {', '.join(NAMES)}; "
                         f"sizes: {', '.join(SIZES)}")
    s = SIZES[size]
    torch.manual_seed(SEED)
    common = {"attn_implementation": ATTENTION[size]}
    if name == "resnet":
        wide = [64, 128, 256, 512] if size == "bench" else [8, 16]
        config = transformers.ResNetConfig(embedding_size=wide[0], hidden_sizes=wide, depths=[2] * len(wide),
                                           layer_type="basic", num_labels=10)
        model = transformers.ResNetForImageClassification(config)
        return model, {"pixel_values": torch.randn(s["batch"], 3, s["image"], s["image"])}
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=s["layers"], n_embd=s["hidden"], n_head=s["heads"],
                                         n_positions=s["seq"], vocab_size=s["vocab"], resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **common)
        model = transformers.GPT2Model(config)
    elif name == "llama":
        config = transformers.LlamaConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                          num_attention_heads=s["heads"], num_key_value_heads=s["heads"],
                                          intermediate_size=s["hidden"] * 8 // 3, vocab_size=s["vocab"],
                                          max_position_embeddings=s["seq"], bos_token_id=0, eos_token_id=0,
                                          pad_token_id=0, **common)
        model = transformers.LlamaModel(config)
    else:
        config = transformers.BertConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"],
                                         num_attention_heads=s["heads"], intermediate_size=4 * s["hidden"],
                                         vocab_size=s["vocab"], max_position_embeddings=s["seq"],
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
                                         **common)
        model = transformers.BertModel(config, add_pooling_layer=False)
    return model, {"input_ids": torch.randint(1, s["vocab"], (s["batch"], s["seq"]))}


def gpt2() -> tuple[Any, dict[str, Any]]:
    return build("gpt2")


def llama() -> tuple[Any, dict[str, Any]]:
    return build("llama")


def bert() -> tuple[Any, dict[str, Any]]:
    return build("bert")


def resnet() -> tuple[Any, dict[str, Any]]:
    return build("resnet")


def gpt2_test() -> tuple[Any, dict[str, Any]]:
    return build("gpt2", "test")


def llama_test() -> tuple[Any, dict[str, Any]]:
    return build("llama", "test")


def bert_test() -> tuple[Any, dict[str, Any]]:
    return build("bert", "test")


def resnet_test() -> tuple[Any, dict[str, Any]]:
    return build("resnet", "test")


def _gpu(name: str, bf16: bool) -> tuple[Any, dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{name} at GPU sizes needs a CUDA device; use examples.hf_models:{name} on a CPU")
    return build(name, "gpu", "cuda", torch.bfloat16 if bf16 else None)


def gpt2_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("gpt2", True)


def llama_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("llama", True)


def bert_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("bert", True)


def resnet_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("resnet", True)


def gpt2_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("gpt2", False)


def llama_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("llama", False)


def bert_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("bert", False)


def resnet_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("resnet", False)
