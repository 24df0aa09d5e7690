"""Model factories for the model-tuning tests (``kernelgen tune --model model_fakes:make``), and ones that fail."""

from __future__ import annotations

import ctypes
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A pre-norm MLP block with a residual: a LayerNorm, two Linears and a GELU, a few distinct regions."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Deep(nn.Module):
    """Distinct regions enough for two tuning processes to share: blocks of different widths."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Block(32), Block(48)
        self.proj = nn.Linear(32, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.b(self.proj(self.a(x))), dim=-1)


def make():
    torch.manual_seed(0)
    return Block(), torch.randn(8, 32)


def make_deep():
    torch.manual_seed(0)
    return Deep(), (torch.randn(8, 32),)


def raises():
    raise RuntimeError("the checkpoint is missing")


def not_a_pair():
    return Block()


def wrong_inputs():
    return Block(), torch.randn(8, 5)  # the block takes 32 features


class Uncapturable(nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling():
            raise RuntimeError("this model cannot be traced")
        return x * 2


def uncapturable():
    return Uncapturable(), torch.randn(4, 4)


# --- factories and models that do not return: each must end kernelgen in one line naming it -------------------

class Boom(BaseException):
    """Not an ``Exception``: what a framework's own control flow may raise."""


def exits():
    sys.exit(0)


def exits_3():
    sys.exit(3)


def booms():
    raise Boom("the factory gave up")


def interrupted():
    raise KeyboardInterrupt


class Exits(nn.Module):
    def forward(self, x):
        sys.exit(0)


def exiting_forward():
    return Exits(), torch.randn(4, 4)


def hangs():
    while True:
        time.sleep(0.2)


def hangs_in_c():
    """Deadlocks in C (glibc: relocking a default pthread mutex): no Python signal handler or exception ever runs."""
    libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


class Hangs(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(0.2)


def hanging_forward():
    return Hangs(), torch.randn(4, 4)
