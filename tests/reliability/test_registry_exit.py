"""A registry module that calls ``sys.exit`` cannot end kernelgen: loading it is a one-line error.

Before: a registry module calling ``sys.exit(0)`` made every kernelgen command exit 0 with no output (CI would
call a tune that never ran a success).
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import cli_process, one_line_error

MANIFEST = """
[[workload]]
name = "double"
function = "examples.ops:bias_gelu"
inputs = [{shape = [8, 16], dtype = "float32"}, {shape = [16], dtype = "float32"}]
trials = 1
"""


@pytest.mark.parametrize("code", ["0", "3", "None"])
def test_a_registry_module_that_exits_is_an_error_not_an_exit(tmp_path, code: str) -> None:
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "leaver.py").write_text(f"import sys\nsys.exit({code})\n")
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST)
    env = {"KERNELGEN_REGISTRY_PATH": str(folder), "KERNELGEN_CACHE_DIR": str(tmp_path / "kernels")}
    for args in (["registry", "list"], ["tune", str(manifest), "--db", f"sqlite:///{tmp_path / 't.sqlite'}"]):
        done = cli_process(*args, env=env, timeout=300)
        one_line_error(done.returncode, done.stderr, "leaver.py", "sys.exit")
