"""Registries load from folders (KERNELGEN_REGISTRY_PATH) and the kernelgen.registry entry-point group;
a broken team folder is a one-line RegistryError naming the file."""

from __future__ import annotations

import os
import textwrap
from importlib import metadata

import pytest
import torch

from kernelgen.custom_calls.candidates import candidates
from kernelgen.errors import RegistryError
from kernelgen.registry import Registry, custom_call, load_folder, use_registry

TEAM_INIT = '''
"""A team's call: doubles its input, with a C++ kernel in a sibling file and a helper imported relatively."""
from kernelgen.registry import register_custom_call
from .helpers import reference

@register_custom_call("team_double", language="cpp", source="double.cpp", symbol="team_double",
                      reference=reference, replaces=reference, examples=[(((3, 4), "float32"),)])
def launch(inputs, outputs, config, kernel):
    kernel(inputs[0], outputs[0], inputs[0].numel())
'''
TEAM_CPP = '''
#include <cstdint>
extern "C" void team_double(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = 2.0f * x[i]; }
'''


def make_team_folder(root, name="team_double", init=TEAM_INIT):
    call = root / name
    call.mkdir(parents=True)
    (call / "__init__.py").write_text(textwrap.dedent(init))
    (call / "helpers.py").write_text("def reference(x):\n    return x * 2.0\n")
    (call / "double.cpp").write_text(TEAM_CPP)
    return root


def test_load_folder_registers_a_call_package(registry, tmp_path):
    loaded = load_folder(make_team_folder(tmp_path / "team"))
    assert [p.name for p in loaded] == ["__init__.py"]
    (entry,) = registry.entries()
    assert entry.implementation_name == "custom:team_double/cpp" and entry.source_path.name == "double.cpp"
    x = torch.randn(3, 4)
    torch.testing.assert_close(custom_call("team_double", x), x * 2)


def test_env_path_folders_load_lazily_on_first_candidates(tmp_path, monkeypatch):
    team_a = make_team_folder(tmp_path / "a")
    team_b = tmp_path / "b"
    team_b.mkdir()
    (team_b / "single.py").write_text(textwrap.dedent('''
        from kernelgen.registry import register_custom_call
        @register_custom_call("team_neg", language="cpp", source="extern \\"C\\" void f() {}\\n", symbol="f",
                              reference=lambda x: -x)
        def launch(inputs, outputs, config):
            outputs[0].copy_(-inputs[0])
    '''))
    monkeypatch.setenv("KERNELGEN_REGISTRY_PATH", os.pathsep.join([str(team_a), str(team_b)]))
    monkeypatch.setattr("kernelgen.custom_calls.loading.project_registry", lambda: None)
    reg = Registry()
    with use_registry(reg, load_defaults=True):
        assert reg.entries() == []  # nothing is imported before it is needed
        from kernelgen.frontend.capture import trace

        graph = trace(lambda x: x * 2.0, torch.randn(3, 4))
        assert [c.name for c in candidates(graph, "cpp")] == ["custom:team_double/cpp"]
        assert sorted(e.name for e in reg.entries()) == ["team_double", "team_neg"]


def test_broken_team_folder_is_one_line_naming_the_file(tmp_path, monkeypatch):
    bad = make_team_folder(tmp_path / "bad", init="from kernelgen.registry import register_custom_call\nundefined_name\n")
    monkeypatch.setenv("KERNELGEN_REGISTRY_PATH", str(bad))
    monkeypatch.setattr("kernelgen.custom_calls.loading.project_registry", lambda: None)
    with use_registry(Registry(), load_defaults=True) as reg:
        for _ in range(2):  # the error is kept, not retried (which would re-register the good files)
            with pytest.raises(RegistryError) as info:
                reg.load_defaults()
            message = str(info.value)
            assert "\n" not in message and str(bad / "team_double" / "__init__.py") in message
            assert "NameError" in message and "line 2" in message


def test_invalid_registration_in_a_folder_names_the_file(registry, tmp_path):
    init = TEAM_INIT.replace('symbol="team_double",', 'symbol="team_double", params={"block": []},')
    folder = make_team_folder(tmp_path / "team", init=init)
    with pytest.raises(RegistryError, match=r"team_double/__init__.py.*param 'block' has no choices"):
        load_folder(folder)


def test_missing_folder_names_the_variable(registry, tmp_path):
    with pytest.raises(RegistryError, match="KERNELGEN_REGISTRY_PATH"):
        load_folder(tmp_path / "nope")


def test_entry_point_group(tmp_path, monkeypatch):
    make_team_folder(tmp_path / "pkgroot", name="teamkernels")  # an installed package declaring the entry point
    monkeypatch.syspath_prepend(str(tmp_path / "pkgroot"))
    ep = metadata.EntryPoint(name="team", value="teamkernels", group="kernelgen.registry")
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [ep] if group == "kernelgen.registry" else [])
    monkeypatch.setattr("kernelgen.custom_calls.loading.project_registry", lambda: None)
    monkeypatch.delenv("KERNELGEN_REGISTRY_PATH", raising=False)
    with use_registry(Registry(), load_defaults=True) as reg:
        reg.load_defaults()
        assert [e.name for e in reg.entries()] == ["team_double"]
    broken = metadata.EntryPoint(name="broken", value="no_such_module_kg", group="kernelgen.registry")
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [broken])
    with use_registry(Registry(), load_defaults=True) as reg:
        with pytest.raises(RegistryError, match="entry point broken = no_such_module_kg"):
            reg.load_defaults()
