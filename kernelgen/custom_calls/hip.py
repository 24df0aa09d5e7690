"""HIP custom calls: ``.hip`` source compiled by hipcc for AMD GPUs (a shared library on a ROCm GPU, an
object for ``$KERNELGEN_HIP_ARCH``, default gfx90a, where only hipcc is), or a prebuilt library.

``HIP_PLATFORM=amd`` is forced: Debian's hipcc otherwise picks the NVIDIA path whenever nvcc is found.
"""

from __future__ import annotations

from kernelgen.custom_calls.gpu import GpuCompilerLanguage


class HipLanguage(GpuCompilerLanguage):
    name = "hip"
    platform = "hip"
    default_platforms = ("hip",)
    known_platforms = ("hip",)
    tools = ("hipcc",)
    tool_env = "KERNELGEN_HIPCC"
    tool_dirs = ("/opt/rocm/bin", "/opt/rocm/hip/bin")
    arch_env = "KERNELGEN_HIP_ARCH"
    default_arch = "gfx90a"
    install_hint = "hipcc not found: apt-get install hipcc (Debian/Ubuntu) or install ROCm, or set KERNELGEN_HIPCC"
    compile_env = {"HIP_PLATFORM": "amd"}

    def arch_flags(self, arch: str) -> list[str]:
        return ["-O3", f"--offload-arch={arch}"]

    def shared_flags(self) -> list[str]:
        return ["-O3", "-shared", "-fPIC"]


LANGUAGE = HipLanguage()
