"""A hand-written kernel is checked on the value classes real inputs hold (zeros, large, NaN/Inf) and on the
first call's own data before it runs in the caller's process; a verdict from an imported file is never run
without that local check.

Before: a custom call that passed its one check on random normals but crashed on other data (or that a forged
verdict in an imported file selected) killed the caller (rc 139). Each scenario runs in a child process, so
a regression fails the test instead of ending the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.reliability.conftest import ROOT

# Each doubles its input, and crashes on one kind of value random normals never hold.
CRASHING_CPP = r"""
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
extern "C" void on_large(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { if (std::fabs(x[i]) > 1000.f) std::raise(SIGSEGV); y[i] = 2.f * x[i]; } }
extern "C" void on_zero(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { if (x[i] == 0.f) std::abort(); y[i] = 2.f * x[i]; } }
extern "C" void on_nan(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { if (x[i] != x[i]) std::raise(SIGSEGV); y[i] = 2.f * x[i]; } }
extern "C" void on_data(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { if (x[i] == 12345.f) std::raise(SIGSEGV); y[i] = 2.f * x[i]; } }
"""

MODULE = '''
from kernelgen.registry import register_custom_call

CPP = {cpp!r}

def double(x):
    return x * 2.0

def _launch(inputs, outputs, config, kernel):
    kernel(inputs[0], outputs[0], inputs[0].numel())

register_custom_call("crashy", language="cpp", source=CPP, symbol={symbol!r}, reference=double,
                     examples=[(((4, 8), "float32"),)])(_launch)
'''

CALLER = textwrap.dedent("""
    import sys, torch, kernelgen
    from kernelgen.registry import custom_call
    import {module}
    x = {value}
    fast = kernelgen.compile(lambda x: custom_call("crashy", x), backend="cpp", db=sys.argv[1])
    y = fast(x)
    assert torch.equal(torch.nan_to_num(y, 7.0), torch.nan_to_num(x * 2.0, 7.0)), (y, x)
    print("ALIVE", fast.explain(x)["implementation"])
""")

VALUES = {  # the first call's inputs: each holds the value its kernel crashes on
    "on_large": "torch.full((4, 8), 3e4)",
    "on_zero": "torch.zeros(4, 8)",
    "on_nan": "torch.where(torch.arange(32).reshape(4, 8) % 5 == 0, float('nan'), 1.0)",
    "on_data": "torch.arange(32.0).reshape(4, 8).index_fill(1, torch.tensor([3]), 12345.0)",
}


def _module(tmp_path, symbol: str) -> str:
    name = f"kg_crashy_{symbol}_{tmp_path.name[-8:].replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE.format(cpp=CRASHING_CPP, symbol=symbol))
    return name


def _caller(tmp_path, symbol: str, url: str) -> subprocess.CompletedProcess:
    script = CALLER.format(module=_module(tmp_path, symbol), value=VALUES[symbol])
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "KERNELGEN_CACHE_DIR": str(tmp_path / "kernels"),
           "KERNELGEN_CHECK_TIMEOUT": "30"}
    import os

    return subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env}, cwd=tmp_path)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("symbol", sorted(VALUES))
def test_a_kernel_that_crashes_on_real_values_never_runs_in_the_caller(tmp_path, symbol: str) -> None:
    done = _caller(tmp_path, symbol, f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "ALIVE eager" in done.stdout  # the custom call was refused; eager computed the call


@pytest.mark.timeout(300)
def test_a_forged_imported_verdict_is_checked_locally_before_it_runs(tmp_path) -> None:
    """An export file that declares the crashing kernel the verdict (as an attacker or a stale team file
    would): imported, it is what dispatch picks first, and the local check still refuses it."""
    import torch

    from kernelgen.db import open_db
    from kernelgen.db.jsonl import write_records
    from kernelgen.frontend.capture import trace
    from kernelgen.ir.values import Evidence, Measurement, Status, TimeStats
    from kernelgen.registry import custom_call, use_registry
    from kernelgen.tune.tuner import tune_graph

    module = _module(tmp_path, "on_data")
    sys.path.insert(0, str(tmp_path))
    try:
        with use_registry():
            __import__(module)
            graph = trace(lambda x: custom_call("crashy", x), torch.zeros(4, 8))

            def says_fast(impl, config):
                return Measurement(config, Status.OK, TimeStats(1e-7, 1e-7, 0.0, 5), threads=1)

            forge = f"sqlite:///{tmp_path / 'forge.sqlite'}"
            with open_db(forge) as db:
                tune_graph(graph, backend="cpp", db=db, trials=1, measure=says_fast)
                records = sorted(db.records(), key=lambda r: r.record_id)
        assert any(r.evidence is Evidence.DECLARED for r in records)
        write_records(tmp_path / "forged.jsonl", records)
    finally:
        sys.path.remove(str(tmp_path))
    url = f"sqlite:///{tmp_path / 'victim.sqlite'}"
    with open_db(url) as db:
        db.import_file(tmp_path / "forged.jsonl")
    done = _caller(tmp_path, "on_data", url)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "ALIVE eager" in done.stdout
