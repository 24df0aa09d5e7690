"""The template implementations of a graph on a backend, in the order dispatch tries them untuned.

For a matmul-like graph that is ATen's matmul with a kernelgen epilogue (``aten_gemm``, what eager runs) and
the generated GEMM, in the order ``vendor_gemm_first`` says; for a convolution ATen's (or oneDNN's) call with a
kernelgen epilogue (``aten_conv``: no generated convolution); for other graphs the one matching template.
``rebuild`` is how a measurement worker gets one of them back from its graph.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import NoTemplateError
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.templates import match
from kernelgen.templates.implementation import TemplateImplementation
from kernelgen.templates.vendor_conv import VendorConvImplementation
from kernelgen.templates.vendor_gemm import VendorGemmImplementation

# Families with no generated kernel: the implementation that calls the vendor's op with a kernelgen epilogue.
VENDOR_ONLY = {"conv": VendorConvImplementation}


def template_implementations(graph: Graph, backend: str) -> list[Implementation]:
    """The templates' implementations of ``graph`` on ``backend``, the untuned choice first."""
    matched = match(graph)
    if matched is None or backend not in matched[0].backends:
        return []
    if matched[0].name in VENDOR_ONLY:
        return [VENDOR_ONLY[matched[0].name](matched[1], backend)]
    generated = TemplateImplementation(matched[0], matched[1], backend)
    if matched[0].name != "gemm":
        return [generated]
    vendor = VendorGemmImplementation(matched[1], backend)
    return [vendor, generated] if vendor_gemm_first(matched[1], backend) else [generated, vendor]


def vendor_gemm_first(problem: Any, backend: str) -> bool:
    """Untuned, does ATen's matmul run before the generated GEMM? Tuning measures both and declares the
    faster; this only orders them when nothing was measured. The generated C++ GEMM computes float32/float64
    with the same FMA units as MKL/oneDNN and beat them from 32 rows up on this project's CPU
    (``benchmarks/bench_mlp_vendor.py``: MLP block 1.97x eager generated-first vs 1.29x vendor-first), while it
    widens float16/bfloat16 to float32, where oneDNN's native bf16 dot instructions were 2-3x faster
    (0.76x vs 1.26x eager). On GPUs cuBLAS is the known floor; the Triton GEMM has to be tuned to beat it."""
    return backend != "cpp" or problem.a.dtype not in ("float32", "float64")


def rebuild(graph: Graph, backend: str, name: str) -> Implementation:
    """The template implementation called ``name`` of ``graph`` on ``backend``: a measurement worker's factory."""
    for impl in template_implementations(graph, backend):
        if impl.name == name:
            return impl
    raise NoTemplateError(f"no template implementation named {name!r} covers this graph on backend {backend!r}")


__all__ = ["VENDOR_ONLY", "rebuild", "template_implementations", "vendor_gemm_first"]
