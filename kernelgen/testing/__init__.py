"""Testing helpers shipped with kernelgen (like ``torch.testing``): differential checks against eager PyTorch.

Nothing in the library imports this package; the test suite and ``benchmarks/bench_opinfo.py`` do.
"""

from kernelgen.backends.triton import interpreter_active


def device_for(backend: str) -> str:
    """The torch device a backend's kernels take tensors on here: "cuda" for Triton on a GPU, else "cpu" (the
    C++ backend, and Triton under ``TRITON_INTERPRET=1``, run on CPU tensors)."""
    if backend != "triton":
        return "cpu"
    import torch  # deferred: importing kernelgen.testing stays free of torch until a device is asked for

    return "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"


__all__ = ["device_for"]
