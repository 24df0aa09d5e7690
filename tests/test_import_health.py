"""The package's import graph stays healthy: no import cycles, no module importing another's private names,
and every import deferred into a function says why (``tools/import_health.py`` measures all three)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools.import_health import scan

ROOT = Path(__file__).resolve().parent.parent


def test_kernelgen_has_no_import_cycle() -> None:
    assert scan(ROOT, "kernelgen").cycles == []


def test_no_module_imports_another_modules_private_names() -> None:
    assert scan(ROOT, "kernelgen").private_imports == []


def test_every_deferred_kernelgen_import_says_why() -> None:
    assert scan(ROOT, "kernelgen").uncommented_local_imports == []


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_scan_finds_a_cycle_a_private_import_and_an_unexplained_deferred_import(tmp_path: Path) -> None:
    _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import _hidden\n",
        "b.py": "def f():\n    from pkg import a\n\n\ndef _hidden():\n    pass\n",
        "c.py": "def g():\n    # deferred: a heavy dependency\n    from pkg import b\n",
    })
    health = scan(tmp_path, "pkg")
    assert health.cycles == [["pkg.a", "pkg.b"]]
    assert health.private_imports == [("pkg.a", "from pkg.b import _hidden")]
    assert health.local_imports == [("pkg.b", "from pkg import a"), ("pkg.c", "from pkg import b")]
    assert health.uncommented_local_imports == [("pkg.b", "from pkg import a")]
