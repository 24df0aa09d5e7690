"""The benchmark's CPU workloads as plain PyTorch functions, tuned by ``kernelgen tune examples/workloads.toml``."""

import torch
import torch.nn.functional as F


def bias_gelu(x, b):
    return F.gelu(x + b)


def bias_gelu_tanh(x, b):
    return F.gelu(x + b, approximate="tanh")


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def add_mul_relu(x, y, z):
    return torch.relu((x + y) * z)


def logsumexp(x):
    return torch.logsumexp(x, dim=-1)


def linear_relu(x, w, b):
    return torch.relu(x @ w + b)


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)
