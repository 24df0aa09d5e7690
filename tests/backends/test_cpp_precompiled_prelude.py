"""The C++ backend's precompiled prelude (``kernelgen.backends.cpp.precompiled_prelude``): generated kernels compile
against GCC's precompiled form of their standard headers, to the same machine code; other sources are left as they
are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import kernelgen
from kernelgen.backends import cpp
from kernelgen.codegen.cpp_prelude import PRELUDE

pytestmark = pytest.mark.skipif(shutil.which(cpp.compiler()) is None, reason="needs a C++ compiler (g++)")


def test_every_generated_kernel_starts_with_the_precompiled_includes():
    # (the backend cannot import the renderer; this keeps the two from drifting apart)
    assert PRELUDE.lstrip().startswith(cpp.PRECOMPILED_INCLUDES)


def _compiles(monkeypatch) -> list[list[str]]:
    seen: list[list[str]] = []
    real = subprocess.run

    def run(cmd, *args, **kwargs):
        if isinstance(cmd, list) and "-c" in cmd:
            seen.append(cmd)
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(cpp.subprocess, "run", run)
    return seen


def test_a_generated_kernel_compiles_against_the_precompiled_header_to_the_same_code(tmp_path, monkeypatch):
    if not cpp._is_gcc(cpp.host_compiler_version(cpp.compiler())):
        pytest.skip("precompiled headers are GCC's here; this compiler parses the headers")
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    cpp.precompiled_prelude.cache_clear()
    # end to end: a compiled function's kernels (built in the measurement worker too) find the header in the cache
    f = kernelgen.compile(lambda x, y: torch.tanh(x) * y + 1, backend="cpp")
    x, y = torch.randn(37, 5), torch.randn(37, 5)
    torch.testing.assert_close(f(x, y), torch.tanh(x) * y + 1)
    assert list((tmp_path / "cache").rglob("kg_prelude.h.gch"))

    seen = _compiles(monkeypatch)
    text = PRELUDE + 'extern "C" float kg_probe(float x) { return std::tanh(x) * expf(x); }\n'
    cpp.build_shared_library(text)
    [cmd] = seen
    header = cmd[cmd.index("-include") + 1]
    assert (tmp_path / "cache") in Path(header).parents and Path(header + ".gch").exists()
    # the same object code with and without the precompiled header
    source = cmd[cmd.index("-c") + 1]
    flags = [a for a in cmd[1:cmd.index("-c")] if a not in ("-include", header)]
    objects = []
    for extra in ([], ["-Winvalid-pch", "-Werror", "-include", header]):  # (an unusable .gch fails the compile)
        obj = tmp_path / f"k{len(objects)}.o"
        subprocess.run([cmd[0], *flags, *extra, "-c", source, "-o", str(obj)], check=True)
        objects.append(subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True).stdout
                       .split("\n", 3)[3])  # (past the lines naming the file)
    assert objects[0] == objects[1] and "kg_probe" in objects[0]


def test_a_source_with_its_own_includes_parses_them(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    seen = _compiles(monkeypatch)
    text = '#define KG_HALF 0.5\n#include <cmath>\nextern "C" double half_sin(double x) { return KG_HALF * std::sin(x); }\n'
    cpp.build_shared_library(text)
    assert seen and all("-include" not in cmd for cmd in seen)
