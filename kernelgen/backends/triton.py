"""The Triton backend: compile rendered ``@triton.jit`` source and launch it on a GPU, or on torch CPU
tensors under ``TRITON_INTERPRET=1`` where there is no GPU (correctness only: interpreter timings are
meaningless)."""

from __future__ import annotations

from kernelgen.backends.base import Backend, Kernel
from kernelgen.errors import ToolchainUnavailableError
from kernelgen.target import Target
from kernelgen.values import Source


class TritonBackend(Backend):
    name = "triton"
    language = "triton"

    def is_available(self) -> bool:
        try:
            import triton  # noqa: F401
        except ImportError:
            return False
        return True

    def unavailable_reason(self) -> str:
        return "" if self.is_available() else "triton is not installed: pip install triton"

    def has_gpu(self) -> bool:
        try:
            import torch
        except ImportError:
            return False
        return torch.cuda.is_available()

    def target(self) -> Target:
        return Target.current("triton")

    def compile(self, source: Source) -> Kernel:
        raise ToolchainUnavailableError("the Triton backend's compile is not built yet")
