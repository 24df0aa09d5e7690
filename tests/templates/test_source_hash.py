"""The implementation hash is derived: an edit of any module a renderer imports (transitively within
kernelgen) or of the backend's compile recipe is a new hash, so old tuning records are never reused."""

from __future__ import annotations

import pytest

from kernelgen import code_hash
from kernelgen.backends import cpp
from kernelgen.templates import get_template


@pytest.fixture(autouse=True)
def _fresh_digests():
    code_hash.forget()
    yield
    code_hash.forget()


def _edited(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``module``'s source text read as if someone appended a line to it."""
    real = code_hash._read_source

    def read(name: str) -> str | None:
        text = real(name)
        return text + "\n# edited\n" if name == module and text is not None else text

    monkeypatch.setattr(code_hash, "_read_source", read)
    code_hash.forget()


@pytest.mark.parametrize(("family", "backend", "module"), [
    ("gemm", "cpp", "kernelgen.templates._gemm_cpp_kernels"),  # the micro-kernel C++ the hand list left out
    ("gemm", "cpp", "kernelgen.codegen.cpp_expr"),
    ("attention", "cpp", "kernelgen.codegen.cpp_expr"),  # attention listed nothing by hand
    ("attention", "triton", "kernelgen.codegen.triton_expr"),
    ("pointwise", "cpp", "kernelgen.backends.cpp"),  # the backend adds launch wrappers to what it compiles
])
def test_editing_an_imported_module_changes_the_hash(monkeypatch, family, backend, module):
    template = get_template(family)
    before = template.source_hash(backend)
    _edited(monkeypatch, module)
    assert template.source_hash(backend) != before


def test_editing_an_unrelated_module_keeps_the_hash(monkeypatch):
    template = get_template("pointwise")
    before = template.source_hash("cpp")
    _edited(monkeypatch, "kernelgen.templates._gemm_cpp_kernels")
    assert template.source_hash("cpp") == before


def test_a_change_of_compile_flags_changes_the_hash(monkeypatch):
    template = get_template("gemm")
    before = template.source_hash("cpp")
    flags = cpp.compile_flags()
    monkeypatch.setattr(cpp, "compile_flags", lambda: (*flags, "-fno-tree-vectorize"))
    assert template.source_hash("cpp") != before


def test_a_change_of_compiler_changes_the_hash(monkeypatch):
    template = get_template("reduction")
    before = template.source_hash("cpp")
    monkeypatch.setattr(cpp, "host_compiler_version", lambda exe=None: "g++ (Imaginary) 99.0")
    assert template.source_hash("cpp") != before


def test_the_recipe_names_compiler_flags_and_cache_format():
    recipe = cpp.CppBackend().recipe()
    assert recipe["flags"] == list(cpp.compile_flags())
    assert recipe["version"] == cpp.host_compiler_version(cpp.compiler())
    assert recipe["cache_format"] == cpp._CACHE_VERSION


def test_editing_a_template_text_file_changes_the_hash(tmp_path, monkeypatch):
    template = get_template("pointwise")
    text = tmp_path / "pointwise.cpp.in"
    text.write_text("// tile loop v1\n")
    monkeypatch.setattr(type(template), "text_files", (str(text),))
    before = template.source_hash("cpp")
    text.write_text("// tile loop v2\n")
    code_hash.forget()
    assert template.source_hash("cpp") != before
