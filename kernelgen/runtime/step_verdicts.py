"""Whole-graph verdicts: a Dynamo graph whose tuned, compiled step lost to eager's runs eagerly.

A model's whole-step check (``kernelgen.tune.model_check``) times the compiled step in each of its variants
(tuned, untuned, every region's ATen ops, the per-region mix) interleaved with eager's own step. Every compiled
variant pays what eager does not: AOTAutograd's wrappers, the ops its decompositions split out of eager's fused
kernels (a layer norm's or a softmax's backward as several ATen ops), a call per region. Where eager's step is as
fast as the best compiled variant or faster (the compiled step has to earn its place: a tie goes to eager), no
choice of kernels inside the graph has reached eager's speed, so the check writes a verdict for the Dynamo graph itself, and ``torch.compile(model, backend="kernelgen")``
then hands Dynamo that graph back unchanged: eager's ops, eager's autograd, eager's speed (the product's promise
"never slower than eager" at the level of the whole graph, where the regions' ATen candidates cannot keep it).

Measured on the 2-core AMD EPYC (Zen 3, AVX2) of docs/performance.md, run 1: the checks' ``aten`` steps were
GPT-2 train 93.41 ms vs eager's 80.41, BERT train 88.87 vs 70.89; the tuned column 0.88-0.98x eager on every
training row.

The verdicts are ordinary tuning records (so export, import, merge and pruning carry them): the workload is the
Dynamo graph (``graph_key``: its ops, their arguments, its inputs' shapes, dtypes, strides and whether they need
gradients, and the grad mode), the implementations are ``STEP_EAGER`` and ``STEP_COMPILED``, the newest declared
one stands (``TuningDB.best``). A later check that finds the compiled step faster writes ``STEP_COMPILED``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kernelgen.env_flags import STEP_VERDICTS, env_flag
from kernelgen.errors import KernelgenError
from kernelgen.ir.values import (CONFIRM_PREFIX, DECLARED_PREFIX, Config, Evidence, FrozenMap, Measurement, Provenance,
                                 Status, TensorSpec, TuningRecord)
from kernelgen.version import __version__

log = logging.getLogger("kernelgen")

STEP_EAGER = "step:eager"  # the Dynamo graph handed back to Dynamo: eager's ops and autograd
STEP_COMPILED = "step:kernelgen"  # the graph through AOTAutograd and kernelgen's regions
# Both run code the kernelgen version decides (which ops the regions cover, what their kernels are): a verdict
# stands for the version that measured it, as a kernel's record stands for its source.
STEP_HASH = f"kernelgen-{__version__}"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_IGNORED = threading.local()


@dataclass(frozen=True)
class StepKey:
    """A Dynamo graph's identity in the tuning database: ``key`` (structure and inputs), ``family`` (structure
    alone) and the inputs' ``signature``."""

    key: str
    family: str
    signature: tuple[TensorSpec, ...]


def graph_key(gm: Any, example_inputs: list, grad_enabled: bool) -> StepKey:
    """The identity of Dynamo graph ``gm`` with ``example_inputs``: the same model and inputs give the same key
    in any process (no object addresses, no node names: they follow the user's variable names)."""
    import torch

    index: dict[Any, int] = {}
    lines = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        lines.append(f"{node.op} {_target(gm, node)} {_arg(node.args, index)} {_arg(node.kwargs, index)}")
    structure = "\n".join(lines)
    inputs, specs = [], []
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            spec = _spec(value)
            if spec is not None:
                specs.append(spec)
            inputs.append(f"{tuple(map(str, value.shape))} {tuple(map(str, value.stride()))} {value.dtype} "
                          f"{value.device.type} grad={value.requires_grad}")
        else:
            inputs.append(f"{type(value).__name__} {value!r}")
    family = _digest(structure)
    key = _digest(f"{structure}\n{';'.join(inputs)}\ngrad_enabled={grad_enabled}")
    return StepKey(key, family, tuple(specs))


def _spec(tensor: Any) -> TensorSpec | None:
    """The tensor's spec for the record's signature; None for a symbolic shape or a dtype records do not hold."""
    if not all(isinstance(s, int) for s in tensor.shape):
        return None
    try:
        return TensorSpec(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), tuple(tensor.stride()))
    except (ValueError, KernelgenError):
        return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _target(gm: Any, node: Any) -> str:
    import torch

    if node.op == "call_function":
        try:
            return torch.fx.node._get_qualified_name(node.target)
        except Exception:  # a callable torch cannot name: its repr without its address
            return _ADDRESS.sub("", repr(node.target))
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        return f"{type(module).__module__}.{type(module).__qualname__}({module.extra_repr()})"
    if node.op == "get_attr":
        value = getattr(gm, node.target, None)
        if isinstance(value, torch.Tensor):
            return f"tensor{tuple(value.shape)}:{value.dtype}"
        return type(value).__name__
    return str(node.target) if node.op == "call_method" else ""


def _arg(value: Any, index: dict[Any, int]) -> str:
    import torch

    if isinstance(value, torch.fx.Node):
        return f"%{index[value]}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_arg(v, index) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_arg(v, index)}" for k, v in value.items()) + "}"
    return _ADDRESS.sub("", repr(value))


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """Compile every graph through kernelgen in this thread, whatever the verdicts say: tuning a model needs its
    regions, and its whole-step check re-measures the compiled step against eager's."""
    before = getattr(_IGNORED, "on", False)
    _IGNORED.on = True
    try:
        yield
    finally:
        _IGNORED.on = before


def runs_eagerly(step: StepKey, target: Any, db: Any) -> Any:
    """The declared verdict that ``step`` runs eagerly on ``target`` (a ``TuningRecord``), or None: none, the
    newest says compiled, verdicts are ignored here (``ignored``, ``KERNELGEN_STEP_VERDICTS=0``), or the database
    cannot serve (said in a warning)."""
    if getattr(_IGNORED, "on", False) or db is None or not env_flag(STEP_VERDICTS, True):
        return None
    try:
        record = db.best(step.key, target.fingerprint,
                         implementations={STEP_EAGER: STEP_HASH, STEP_COMPILED: STEP_HASH})
    except KernelgenError as exc:
        log.warning("kernelgen: the tuning database could not say how graph %s runs best (%s); it compiles",
                    step.key[:12], exc)
        return None
    if record is None or record.implementation != STEP_EAGER or record.evidence is not Evidence.DECLARED:
        return None
    return record


def record_verdict(db: Any, step: StepKey, target: Any, backend: str, eager_wins: bool, eager_time: Any,
                   compiled_time: Any, message: str, name: str | None) -> None:
    """Write the check's verdict for ``step``: the winner declared, the loser confirmed, both measured in the same
    interleaved rounds (``eager_time`` and ``compiled_time`` are ``TimeStats`` of the whole step)."""
    fields = dict(name=name, workload_key=step.key, workload_family=step.family, signature=step.signature,
                  implementation_hash=STEP_HASH, backend=backend, target_fingerprint=target.fingerprint,
                  target_family=target.family, device=target.device_name,
                  toolchain=FrozenMap({"kernelgen": __version__, **target.versions.to_json()}))
    winner = STEP_EAGER if eager_wins else STEP_COMPILED
    for impl, time in ((STEP_EAGER, eager_time), (STEP_COMPILED, compiled_time)):
        declared = impl == winner
        prefix, evidence = (DECLARED_PREFIX, Evidence.DECLARED) if declared else (CONFIRM_PREFIX, Evidence.CONFIRMED)
        measurement = Measurement(config=Config(), status=Status.OK, message=f"{prefix}: {message}", time=time)
        db.commit(TuningRecord(measurement=measurement, provenance=Provenance.here(), evidence=evidence,
                               implementation=impl, **fields))


__all__ = ["STEP_COMPILED", "STEP_EAGER", "STEP_HASH", "StepKey", "graph_key", "ignored", "record_verdict",
           "runs_eagerly"]
