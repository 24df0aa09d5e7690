"""Real Hugging Face ``transformers`` models built from configs with random weights (nothing is downloaded):
GPT-2, Llama, BERT and a ResNet-18, as ``kernelgen tune --model`` factories and for ``benchmarks/bench_models.py``;
and four held-out families the four above do not exercise (``HELD_OUT``): T5 (an encoder-decoder whose attention
adds a relative position bias), Mistral (grouped-query attention, 2 query heads per key/value head, with a sliding
window of half the sequence: a mask, so SDPA reads ``repeat_kv`` copies), Qwen2 (grouped-query attention with no
mask: SDPA's ``enable_gqa``; biases on Q, K and V) and ViT (a patch-embedding convolution, then an encoder).

Each factory returns ``(model, inputs)`` with ``inputs`` a dict of keyword tensors. ``bench`` sizes are the
issue's (2 layers, hidden 256, 4 x 128 tokens; ResNet-18 at 4 x 128² images); ``test`` sizes keep CI fast;
``gpu`` sizes are a GPU's (4 layers, hidden 768, 12 heads, vocab 8192, 8 x 512 tokens; ResNet-18 at 8 x 224²),
built on CUDA with PyTorch's default attention (``sdpa``): the ``*_gpu`` factories in bfloat16 (inference), the
``*_gpu_fp32`` ones in float32 (training).
The held-out families build PyTorch's default attention (``sdpa``) at every size, what a new user gets
(``build(..., attention="eager")`` builds the written-out one instead). T5's inputs hold ``decoder_input_ids``
beside ``input_ids`` (the decoder reads the same length), and it is built without a KV cache, so its output holds
tensors only. Mistral and Qwen2 have at least 4 query heads (2 key/value heads) at every size. ViT's ``bench``
images are 128² in 16² patches (65 tokens with the class token), ``gpu`` 224² (197).
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
HELD_OUT = ("t5", "mistral", "qwen2", "vit")  # families the four above do not cover (bench_models.py's optional set)
SIZES = {
    "test": {"layers": 2, "hidden": 64, "heads": 2, "seq": 16, "batch": 2, "vocab": 256, "image": 32},
    "bench": {"layers": 2, "hidden": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 1000, "image": 128},
    "gpu": {"layers": 4, "hidden": 768, "heads": 12, "seq": 512, "batch": 8, "vocab": 8192, "image": 224},
}
# The attention each size builds: the written-out one every model family has on CPUs; on a GPU, the default
# (``sdpa``: cuDNN / flash / memory-efficient kernels) a new user gets.
ATTENTION = {"test": "eager", "bench": "eager", "gpu": "sdpa"}
# The held-out families: the default at every size (the tester measured them so).
HELD_OUT_ATTENTION = "sdpa"
# ViT's patch side per size: images of ``image``² in patches of this side (test: 32² in 8² → 16 patches + class)
PATCH = {"test": 8, "bench": 16, "gpu": 16}


def build(name: str, size: str = "bench", device: str = "cpu", dtype: Any = None,
          attention: str | None = None) -> tuple[Any, dict[str, Any]]:
    """``(model, inputs)`` of model ``name`` (one of ``NAMES`` or ``HELD_OUT``) at ``size`` (``test``, ``bench`` or
    ``gpu``), on ``device`` in ``dtype`` (None: float32), with ``attention`` (``"eager"`` or ``"sdpa"``; None: the
    size's ``ATTENTION`` for ``NAMES``, ``HELD_OUT_ATTENTION`` for the held-out families)."""
    import torch

    model, inputs = _build(name, size, attention)
    model = model.to(device=device, dtype=dtype)
    return model, {k: v.to(device=device, dtype=dtype if v.is_floating_point() else None) for k, v in inputs.items()}


def _build(name: str, size: str, attention: str | None = None) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers

    if name not in NAMES + HELD_OUT or size not in SIZES:
        raise ValueError(f"unknown model {name!r} or size {size!r}; models: {', '.join(NAMES + HELD_OUT)}; "
                         f"sizes: {', '.join(SIZES)}")
    s = SIZES[size]
    torch.manual_seed(SEED)
    if attention is None:
        attention = HELD_OUT_ATTENTION if name in HELD_OUT else ATTENTION[size]
    common = {"attn_implementation": attention}
    if name in HELD_OUT:
        return _held_out(name, size, common)
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


def _held_out(name: str, size: str, common: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers

    s = SIZES[size]
    if name == "vit":
        config = transformers.ViTConfig(hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                        num_attention_heads=s["heads"], intermediate_size=4 * s["hidden"],
                                        image_size=s["image"], patch_size=PATCH[size], hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0, **common)
        model = transformers.ViTModel(config, add_pooling_layer=False)
        return model, {"pixel_values": torch.randn(s["batch"], 3, s["image"], s["image"])}
    ids = torch.randint(1, s["vocab"], (s["batch"], s["seq"]))
    if name == "t5":
        config = transformers.T5Config(vocab_size=s["vocab"], d_model=s["hidden"], d_kv=s["hidden"] // s["heads"],
                                       d_ff=4 * s["hidden"], num_layers=s["layers"], num_decoder_layers=s["layers"],
                                       num_heads=s["heads"], dropout_rate=0.0, use_cache=False, pad_token_id=0,
                                       eos_token_id=1, decoder_start_token_id=0, **common)
        model = transformers.T5Model(config)
        return model, {"input_ids": ids, "decoder_input_ids": torch.randint(1, s["vocab"], (s["batch"], s["seq"]))}
    # half as many key/value heads as query heads (at least 2 of them: a real group of copies, not a broadcast)
    heads = max(s["heads"], 4)
    decoder = {"num_hidden_layers": s["layers"], "hidden_size": s["hidden"], "num_attention_heads": heads,
               "num_key_value_heads": heads // 2, "intermediate_size": s["hidden"] * 8 // 3,
               "vocab_size": s["vocab"], "max_position_embeddings": s["seq"], "use_cache": False, "bos_token_id": 0,
               "eos_token_id": 0, "pad_token_id": 0, **common}
    if name == "mistral":  # a window of half the sequence
        return transformers.MistralModel(transformers.MistralConfig(sliding_window=s["seq"] // 2, **decoder)), \
            {"input_ids": ids}
    return transformers.Qwen2Model(transformers.Qwen2Config(use_sliding_window=False, **decoder)), {"input_ids": ids}


def gpt2() -> tuple[Any, dict[str, Any]]:
    return build("gpt2")


def llama() -> tuple[Any, dict[str, Any]]:
    return build("llama")


def bert() -> tuple[Any, dict[str, Any]]:
    return build("bert")


def resnet() -> tuple[Any, dict[str, Any]]:
    return build("resnet")


def t5() -> tuple[Any, dict[str, Any]]:
    return build("t5")


def mistral() -> tuple[Any, dict[str, Any]]:
    return build("mistral")


def qwen2() -> tuple[Any, dict[str, Any]]:
    return build("qwen2")


def vit() -> tuple[Any, dict[str, Any]]:
    return build("vit")


def gpt2_test() -> tuple[Any, dict[str, Any]]:
    return build("gpt2", "test")


def llama_test() -> tuple[Any, dict[str, Any]]:
    return build("llama", "test")


def bert_test() -> tuple[Any, dict[str, Any]]:
    return build("bert", "test")


def resnet_test() -> tuple[Any, dict[str, Any]]:
    return build("resnet", "test")


def t5_test() -> tuple[Any, dict[str, Any]]:
    return build("t5", "test")


def mistral_test() -> tuple[Any, dict[str, Any]]:
    return build("mistral", "test")


def qwen2_test() -> tuple[Any, dict[str, Any]]:
    return build("qwen2", "test")


def vit_test() -> tuple[Any, dict[str, Any]]:
    return build("vit", "test")


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


def t5_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("t5", True)


def mistral_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("mistral", True)


def qwen2_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("qwen2", True)


def vit_gpu() -> tuple[Any, dict[str, Any]]:
    return _gpu("vit", True)


def t5_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("t5", False)


def mistral_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("mistral", False)


def qwen2_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("qwen2", False)


def vit_gpu_fp32() -> tuple[Any, dict[str, Any]]:
    return _gpu("vit", False)
