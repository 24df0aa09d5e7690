"""The preamble of every test that runs Triton kernels: the interpreter on CPU tensors without a GPU.

Import it before anything that imports triton (``TRITON_INTERPRET`` is read when triton loads):

    from tests.triton_env import DEVICE, needs_triton, torch
    pytestmark = needs_triton

A machine without torch or triton skips the importing module with the reason.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's first import
pytest.importorskip("triton")

from kernelgen.backends.triton import interpreter_active  # noqa: E402

needs_triton = pytest.mark.skipif(not (interpreter_active() or torch.cuda.is_available()),
                                  reason="triton was imported before TRITON_INTERPRET=1 was set")
DEVICE = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"

__all__ = ["DEVICE", "interpreter_active", "needs_triton", "torch"]
