"""Small real-model blocks (GPT-2, Llama, BERT, a CNN) as plain nn.Modules, for the model tests and
``benchmarks/bench_models.py``.

Nothing is downloaded: every module is randomly initialised under a fixed seed. ``make(name, size)``
returns ``(module, example inputs)``; ``size`` is ``"test"`` (tiny, for the Triton interpreter and CI) or
``"bench"`` (a realistic CPU size: eager forward takes milliseconds to tens of milliseconds on two cores).
The blocks deliberately use different spellings of the same patterns (attention written out with a causal
or additive mask vs ``scaled_dot_product_attention``; LayerNorm vs a hand-written RMSNorm) so a compiler
sees what real model code contains.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SEED = 0
SIZES = ("test", "bench")


# --- GPT-2: pre-LN, written-out causal attention (as HF's eager GPT-2), tanh-GELU MLP -------------------

class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)
        # GPT-2 keeps the causal mask as a boolean buffer and fills the masked scores with the dtype's min.
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        mask = self.bias[:s, :s]
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
        out = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(out.transpose(1, 2).reshape(b, s, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


# --- Llama: RMSNorm, rotary embedding, SDPA causal attention, SwiGLU MLP, no biases ---------------------

class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Llama normalises in float32 and casts back, whatever the activation dtype.
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, seq: int, intermediate: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.heads = heads
        d = hidden // heads
        self.input_layernorm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (p(x).view(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = self.cos[:s], self.sin[:s]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


# --- BERT: post-LN encoder layer, padding mask turned into an additive mask, erf-GELU -------------------

class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = (p(x).view(b, s, self.heads, d).permute(0, 2, 1, 3) for p in (self.query, self.key, self.value))
        # attention_mask: (batch, seq) with 1 for real tokens and 0 for padding, as BERT tokenisers give it.
        additive = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + additive
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = self.attn_norm(self.attn_out(ctx) + x)
        return self.out_norm(self.output(F.gelu(self.intermediate(x))) + x)


# --- CNN: convolutions stay ATen; bias / BatchNorm(eval) / ReLU epilogues, pooling, a linear head -------

class SmallCNN(nn.Module):
    def __init__(self, width: int, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)  # bias + ReLU epilogue
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)  # eval: a per-channel affine epilogue
        self.conv3 = nn.Conv2d(2 * width, 4 * width, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * width)
        self.head = nn.Linear(4 * width, classes)
        for bn in (self.bn2, self.bn3):  # non-trivial running statistics, so eval-mode BN is not identity
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.bn3(self.conv3(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


# --- the table ------------------------------------------------------------------------------------------

def _hidden(batch: int, seq: int, hidden: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.randn(batch, seq, hidden, generator=g),)


def _bert_inputs(batch: int, seq: int, hidden: int) -> Callable[[torch.Generator], tuple]:
    def make(g: torch.Generator) -> tuple:
        # Every sequence but the first is padded to a different length (the first keeps all its tokens).
        lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=g)
        lengths[0] = seq
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
        return torch.randn(batch, seq, hidden, generator=g), mask
    return make


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model at one size: ``build()`` makes the module, ``inputs(g)`` its example inputs."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]


# name -> size -> spec. Bench sizes keep eager's forward at roughly 5-50 ms on two cores.
MODELS: dict[str, dict[str, ModelSpec]] = {
    "gpt2": {
        "test": ModelSpec("gpt2", lambda: GPT2Block(32, 2, 8), _hidden(2, 8, 32)),
        "bench": ModelSpec("gpt2", lambda: GPT2Block(384, 6, 128), _hidden(4, 128, 384)),
    },
    "llama": {
        "test": ModelSpec("llama", lambda: LlamaBlock(32, 2, 8, 64), _hidden(2, 8, 32)),
        "bench": ModelSpec("llama", lambda: LlamaBlock(384, 6, 128, 1024), _hidden(4, 128, 384)),
    },
    "bert": {
        "test": ModelSpec("bert", lambda: BertLayer(32, 2, 64), _bert_inputs(2, 8, 32)),
        "bench": ModelSpec("bert", lambda: BertLayer(384, 6, 1536), _bert_inputs(4, 128, 384)),
    },
    "cnn": {
        "test": ModelSpec("cnn", lambda: SmallCNN(4), lambda g: (torch.randn(2, 3, 8, 8, generator=g),)),
        "bench": ModelSpec("cnn", lambda: SmallCNN(32), lambda g: (torch.randn(8, 3, 32, 32, generator=g),)),
    },
}


def names() -> list[str]:
    return list(MODELS)


def make(name: str, size: str = "test", seed: int = SEED) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``(module in eval mode, example inputs)`` for model ``name`` at ``size``, the same for the same seed.

    The module is in eval mode (no dropout; BatchNorm uses its running statistics) but its parameters
    require grad, so a forward+backward training step works on it as is.
    """
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    if size not in MODELS[name]:
        raise KeyError(f"unknown size {size!r} for model {name!r}; choose one of {', '.join(SIZES)}")
    spec = MODELS[name][size]
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        torch.manual_seed(seed)
        module = spec.build().eval()
    return module, spec.inputs(torch.Generator().manual_seed(seed))


def training_loss(out: Any) -> torch.Tensor:
    """The scalar a forward+backward step differentiates: the float32 sum of the output."""
    return out.float().sum()


# --- ``kernelgen tune --model examples.models:gpt2_block`` factories (bench size) ---------------------------

def gpt2_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return make("gpt2", "bench")


def llama_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return make("llama", "bench")


def bert_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return make("bert", "bench")


def cnn_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return make("cnn", "bench")
