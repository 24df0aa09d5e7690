"""Small C++ kernels and torch references shared by the registry tests (imported as a helper module)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

BIAS_GELU_CPP = r"""
#include <cmath>
#include <cstdint>
extern "C" void bias_gelu(const float* x, const float* b, float* y, int64_t rows, int64_t cols, int64_t repeat) {
    // `repeat` > 1 recomputes the row that many times: a deliberately slow variant of the same kernel.
    // Single-threaded on purpose: an OpenMP barrier on a loaded 2-core machine adds noise of its own.
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < repeat; ++k)
            #pragma omp simd
            for (int64_t c = 0; c < cols; ++c) {
                const float v = x[r * cols + c] + b[c];
                y[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678f)) + 0.0f * (float)k;
            }
}
extern "C" void bias_only(const float* x, const float* b, float* y, int64_t rows, int64_t cols, int64_t repeat) {
    // Wrong on purpose: forgets the GELU.
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i] + b[i % cols];
}
"""


def bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + b)


def launch(repeat: int = 1):
    def launcher(inputs, outputs, config, kernel):
        x, b = inputs
        kernel(x, b, outputs[0], x.numel() // x.shape[-1], x.shape[-1], repeat)

    return launcher


# One kernel per way a hand-written kernel can go wrong; each doubles its input when it works.
FAULTY_CPP = r"""
#include <cstdint>
#include <cstdlib>
extern "C" void twice(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i]; }
extern "C" void thrice(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = 3.0f * x[i]; }
extern "C" void segv(const float* x, float* y, int64_t n) { volatile float* p = nullptr; *p = x[0]; }
extern "C" void aborts(const float* x, float* y, int64_t n) { std::abort(); }
extern "C" void exits(const float* x, float* y, int64_t n) { std::exit(0); }
extern "C" void loops(const float* x, float* y, int64_t n) { volatile int spin = 1; while (spin) {} }
"""
FAULTS = {"segv": "runtime_error", "aborts": "runtime_error", "exits": "runtime_error", "loops": "timeout",
          "thrice": "wrong_result"}

FAULTY_MODULE = '''
from cc_helpers import FAULTY_CPP, double
from kernelgen.registry import register_custom_call

def _launch(inputs, outputs, config, kernel):
    kernel(inputs[0], outputs[0], inputs[0].numel())

for _name, _symbol, _variant in {calls!r}:
    register_custom_call(_name, language="cpp", source=FAULTY_CPP, symbol=_symbol, reference=double,
                         variant=_variant, examples=[(((4, 8), "float32"),)])(_launch)
'''


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


def import_faulty_module(tmp_path, monkeypatch, calls):
    """Register custom calls ``(name, symbol of FAULTY_CPP, variant)`` from a fresh importable module, as a
    team would: an isolated worker rebuilds a call by importing the module that registered it."""
    import importlib
    import uuid

    name = f"kg_faulty_{uuid.uuid4().hex[:12]}"  # unique: a pooled worker keeps the modules it imported
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{name}.py").write_text(FAULTY_MODULE.format(calls=[tuple(c) for c in calls]))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)
