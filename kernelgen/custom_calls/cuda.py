"""CUDA custom calls: ``.cu`` source compiled by nvcc (a shared library on a CUDA GPU, an object for
``$KERNELGEN_CUDA_ARCH``, default sm_80, where only nvcc is), or a prebuilt library and C symbol."""

from __future__ import annotations

import glob

from kernelgen.custom_calls.gpu import GpuCompilerLanguage


class CudaLanguage(GpuCompilerLanguage):
    name = "cuda"
    platform = "cuda"
    default_platforms = ("cuda",)
    known_platforms = ("cuda",)
    tools = ("nvcc",)
    tool_env = "KERNELGEN_NVCC"
    tool_dirs = tuple(sorted(glob.glob("/usr/local/cuda*/bin"), reverse=True)) + ("/opt/cuda/bin",)
    arch_env = "KERNELGEN_CUDA_ARCH"
    default_arch = "sm_80"
    install_hint = "nvcc not found: install the CUDA toolkit (apt-get install nvidia-cuda-toolkit) or set KERNELGEN_NVCC"

    def arch_flags(self, arch: str) -> list[str]:
        return [f"-arch={arch}"]

    def shared_flags(self) -> list[str]:
        return ["-O3", "-arch=native", "-shared", "-Xcompiler=-fPIC"]


LANGUAGE = CudaLanguage()
