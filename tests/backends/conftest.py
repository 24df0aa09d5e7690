"""Triton runs its interpreter on CPU tensors when there is no GPU; it must be told before its first import."""

from __future__ import annotations

import os


def _no_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


if _no_gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")
