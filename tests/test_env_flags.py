"""On/off environment switches (``kernelgen.env_flags``): the usual spellings turn a feature off or on, anything
else is a one-line error naming the variable, its value and the spellings.

Before: every value of ``KERNELGEN_MALLOC`` or ``KERNELGEN_ADAPT_THREADS`` but exactly ``0`` (``off``, ``false``,
`` 0``) silently left the feature on, and ``KERNELGEN_ISOLATE_CHECKS``/``KERNELGEN_TRITON_AOT`` took a typo as on.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from kernelgen.env_flags import env_flag
from kernelgen.errors import KernelgenError

OFF = ["0", "off", "OFF", "false", "False", "no", " 0", "off\n"]
ON = ["1", "on", "true", "TRUE", "yes", " yes "]
BAD = ["nope", "disable", "2", "0.0", "o ff"]


@pytest.mark.parametrize("raw", OFF + ON + ["", "  "])
def test_the_usual_spellings_are_read(monkeypatch, raw):
    monkeypatch.setenv("KERNELGEN_SOME_SWITCH", raw)
    assert env_flag("KERNELGEN_SOME_SWITCH", True) is (raw not in OFF)
    assert env_flag("KERNELGEN_SOME_SWITCH", False) is (raw in ON)  # unset or empty: the default


@pytest.mark.parametrize("raw", BAD)
def test_anything_else_is_one_line_naming_the_variable_and_the_spellings(monkeypatch, raw):
    monkeypatch.setenv("KERNELGEN_SOME_SWITCH", raw)
    with pytest.raises(KernelgenError) as caught:
        env_flag("KERNELGEN_SOME_SWITCH", True)
    message = str(caught.value)
    assert "\n" not in message and f"KERNELGEN_SOME_SWITCH={raw!r}" in message
    assert "0, off, false or no" in message and "1, on, true or yes" in message


def _malloc(monkeypatch):
    from kernelgen.runtime import memory

    monkeypatch.setattr(memory, "_APPLIED", [])  # once per process: start afresh
    monkeypatch.setattr(memory, "_glibc", lambda: pytest.fail("malloc was changed although the switch is off"))
    return memory.ENV, memory.keep_freed_memory


def _threads(monkeypatch):
    from kernelgen.runtime import threads

    started = threading.Event()
    monkeypatch.setattr(threads, "_STARTED", started)
    monkeypatch.setattr(threads.threading, "Thread", lambda **_: pytest.fail("the load follower started although off"))

    def start():
        threads.start()
        return started.is_set()
    return threads.ENV, start


def _isolate(monkeypatch):
    from kernelgen.check import verdicts

    return verdicts.ISOLATE_ENV, verdicts._isolated


def _triton_aot(monkeypatch):
    from kernelgen.backends.triton_aot import resource_constraints

    gpu = SimpleNamespace(kind="cuda", arch="sm_90")
    return "KERNELGEN_TRITON_AOT", lambda: bool(resource_constraints(lambda config: None, gpu))


def _step_verdicts(monkeypatch):
    from kernelgen.ir.values import Evidence
    from kernelgen.runtime import step_verdicts

    eager = SimpleNamespace(implementation=step_verdicts.STEP_EAGER, evidence=Evidence.DECLARED)
    db = SimpleNamespace(best=lambda *args, **kwargs: eager)  # a database whose verdict says "run it eagerly"
    step = step_verdicts.StepKey("k" * 64, "f" * 64, ())
    return "KERNELGEN_STEP_VERDICTS", lambda: step_verdicts.runs_eagerly(step, SimpleNamespace(fingerprint="t"),
                                                                         db) is eager


SWITCHES = {"KERNELGEN_MALLOC": _malloc, "KERNELGEN_ADAPT_THREADS": _threads,
            "KERNELGEN_ISOLATE_CHECKS": _isolate, "KERNELGEN_TRITON_AOT": _triton_aot,
            "KERNELGEN_STEP_VERDICTS": _step_verdicts}


@pytest.mark.parametrize("raw", ["off", "false", "no", " 0", "OFF"])
@pytest.mark.parametrize("switch", SWITCHES)
def test_every_switch_turns_off_with_any_spelling_of_off(monkeypatch, switch, raw):
    env, is_on = SWITCHES[switch](monkeypatch)
    assert env == switch
    monkeypatch.setenv(env, raw)
    assert is_on() is False


@pytest.mark.parametrize("switch", SWITCHES)
def test_every_switch_refuses_a_value_it_does_not_understand(monkeypatch, switch):
    env, is_on = SWITCHES[switch](monkeypatch)
    monkeypatch.setenv(env, "disable")
    with pytest.raises(KernelgenError, match=f"{env}='disable' is not understood"):
        is_on()


def test_tune_model_says_which_switch_is_malformed_in_its_own_words(tmp_path, capsys, monkeypatch):
    import json

    from kernelgen.cli import main
    from kernelgen.runtime import threads

    monkeypatch.setattr(threads, "_STARTED", threading.Event())  # read by the first compile of a process
    monkeypatch.setenv("KERNELGEN_ADAPT_THREADS", "nope")
    assert main(["tune", "--model", "tests.tune.model_fakes:make", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}",
                 "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["models"][0]["error"]
    assert error.startswith("model make: KERNELGEN_ADAPT_THREADS='nope' is not understood"), error
