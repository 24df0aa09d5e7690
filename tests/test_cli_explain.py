"""`kernelgen explain` (manifest and module:function forms), `-v/-q` and KERNELGEN_LOG."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelgen.backends import get_backend
from kernelgen.cli import main
from kernelgen.cli.explain import parse_input

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

OPS = '''
import torch
import torch.nn.functional as F
def bias_gelu(x, b):
    return F.gelu(x + b)
'''


@pytest.fixture()
def ops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = "kg_explain_ops"
    (tmp_path / f"{module}.py").write_text(OPS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return module


def test_inputs_are_read_as_dtype_shape_or_as_a_manifest_table():
    assert parse_input("float32[2048, 1024]") == {"shape": [2048, 1024], "dtype": "float32"}
    assert parse_input('{shape = [8], dtype = "float16"}') == {"shape": [8], "dtype": "float16"}
    with pytest.raises(Exception, match="dtype\\[shape\\]"):
        parse_input("2048x1024")


def test_function_form_json_points_at_the_compiled_source(ops, capsys):
    code = main(["explain", f"{ops}:bias_gelu", "--input", "float32[8, 16]", "--input", "float32[16]", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    (row,) = json.loads(out)
    assert row["implementation"] == "pointwise" and row["source"] == "default"
    assert [(s["shape"], s["dtype"]) for s in row["inputs"]] == [([8, 16], "float32"), ([16], "float32")]
    text = Path(row["source_path"]).read_text()
    assert 'extern "C"' in text and row["implementation_hash"]


def test_manifest_form_prints_config_origin_and_the_source_text(ops, tmp_path, capsys):
    manifest = tmp_path / "w.toml"
    manifest.write_text(textwrap.dedent(f'''
        [[workload]]
        name = "bg"
        function = "{ops}:bias_gelu"
        shapes = [[{{shape = [4, 8], dtype = "float32"}}, {{shape = [8], dtype = "float32"}}],
                  [{{shape = [2, 8], dtype = "float32"}}, {{shape = [8], dtype = "float32"}}]]
        [[workload]]
        name = "other"
        function = "{ops}:bias_gelu"
        inputs = [{{shape = [3, 8], dtype = "float32"}}, {{shape = [8], dtype = "float32"}}]
    '''))
    assert main(["explain", str(manifest), "--workload", "bg"]) == 0
    out = capsys.readouterr().out
    assert out.count("bg  float32") == 2 and "other  float32" not in out  # one block per problem size of bg only
    assert "origin         default: the implementation" in out
    paths = [line.split(maxsplit=1)[1] for line in out.splitlines() if line.startswith("  source ")]
    assert len(paths) == 2
    for path in paths:  # not a terminal: the source is printed as plain text
        assert Path(path).read_text().strip().splitlines()[-1] in out


def test_unknown_workload_and_missing_inputs_are_one_line_errors(ops, tmp_path, capsys):
    manifest = tmp_path / "w.toml"
    manifest.write_text(f'[[workload]]\nname = "bg"\nfunction = "{ops}:bias_gelu"\n'
                        'inputs = [{shape = [4, 8], dtype = "float32"}, {shape = [8], dtype = "float32"}]\n')
    for args, needle in (([str(manifest), "--workload", "nope"], "has no workload named 'nope'"),
                         ([f"{ops}:bias_gelu"], "--input")):
        assert main(["explain", *args]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err and needle in err


@pytest.fixture()
def restore_logging():
    logger = logging.getLogger("kernelgen")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_verbose_and_the_variable_log_dispatch_decisions_and_quiet_silences_them(ops, monkeypatch, capsys,
                                                                                 restore_logging):
    args = ["explain", f"{ops}:bias_gelu", "--input", "float32[4, 8]", "--input", "float32[8]", "--no-source"]
    assert main(["-v", *args]) == 0
    assert "kernelgen.runtime: bias_gelu: pointwise" in capsys.readouterr().err
    assert main(args) == 0
    assert "kernelgen.runtime" not in capsys.readouterr().err  # INFO is off by default
    monkeypatch.setenv("KERNELGEN_LOG", "info")
    assert main(args) == 0
    assert "kernelgen.runtime: bias_gelu" in capsys.readouterr().err
    assert main(["-q", *args]) == 0  # -q wins over the variable
    assert capsys.readouterr().err == ""


def test_the_variable_turns_logging_on_for_library_users(tmp_path):
    code = "import logging, kernelgen; logging.getLogger('kernelgen.some.module').debug('seen at debug')"
    env = {**os.environ, "KERNELGEN_LOG": "debug"}
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "kernelgen.some.module: seen at debug" in shown.stderr
    env["KERNELGEN_LOG"] = "warning"
    hidden = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "seen at debug" not in hidden.stderr
