"""A model to tune or benchmark: its factory (``"pkg.module:make"`` returning ``(model, inputs)``), its mode and its
step, and the ``[[model]]`` tables of a manifest that name them (``kernelgen.tune.model`` tunes them).

``inputs`` is a tensor, a tuple/list of positional tensors, or a dict of keyword tensors (a Hugging Face model's
``input_ids``, ...). ``infer`` runs ``model.eval()`` under ``torch.no_grad()``; ``train`` runs ``model.train()``,
the forward, ``training_loss`` and the backward.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib

from kernelgen.backends import backend_names
from kernelgen.errors import KernelgenError, ManifestError
from kernelgen.tune.guards import contained, time_limit
from kernelgen.tune.manifest import import_function, importable_from_cwd

MODES = ("infer", "train")
# The command line's limit on each stage of building and capturing a model (``--capture-timeout``): the factory,
# the first eager step, the capture and profiled steps, the report's timed steps. A stage past it may hang, and the
# run ends naming it (``kernelgen.tune.guards.time_limit``). Generous: a large model's first compile on a loaded
# machine takes minutes, not ten.
CAPTURE_TIMEOUT = 600.0
CAPTURE_FIX = "it may hang: fix it, or if it is only slow raise the limit with --capture-timeout SECONDS"


class ModelError(KernelgenError):
    """A model that cannot be tuned: its factory, its inputs, or its capture."""


@dataclass(frozen=True)
class ModelSpec:
    """One model to tune: ``factory`` (``"pkg.module:make"``), ``mode`` (infer or train), the backend."""

    factory: str
    mode: str = "infer"
    name: str = ""
    backend: str = "cpp"
    seconds: float | None = None
    dynamic: bool | None = None  # torch.compile's: None lets Dynamo decide, True makes sizes symbolic
    capture_timeout: float | None = None  # seconds each stage of building and capturing may take (None: no limit)

    @property
    def label(self) -> str:
        return self.name or self.factory.rpartition(":")[2]


# --- manifests ----------------------------------------------------------------------------------------

MODEL_KEYS = ("name", "factory", "mode", "backend", "seconds", "dynamic")


def load_models(path: str) -> list[ModelSpec]:
    """The ``[[model]]`` tables of manifest ``path`` (``kernelgen tune`` reads ``[[workload]]`` ones through
    ``kernelgen.tune.manifest``)::

        [[model]]
        name = "gpt2"
        factory = "mypkg.models:make_gpt2"   # returns (model, inputs)
        mode = "train"                       # or "infer" (the default)
        seconds = 600                        # the model's whole budget (--seconds overrides it)
        dynamic = false                      # optional, torch.compile's dynamic=
    """
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the manifest: {exc}") from None
    tables = data.get("model", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ManifestError(f"{path}: [[model]] must be tables with a factory")
    return [model_spec(table, f"{path}: model {table.get('name', f'#{i + 1}')!r}") for i, table in enumerate(tables)]


def model_spec(table: dict[str, Any], where: str) -> ModelSpec:
    """One ``[[model]]`` table (or the command line's ``--model``/``--mode``) validated into a ``ModelSpec``."""
    unknown = sorted(set(table) - set(MODEL_KEYS))
    if unknown:
        raise ManifestError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(MODEL_KEYS)}")
    factory = table.get("factory")
    if not isinstance(factory, str) or factory.count(":") != 1 or not all(factory.split(":")):
        raise ManifestError(f"{where}: factory must be \"module:function\" returning (model, inputs), got {factory!r}")
    mode = table.get("mode", "infer")
    if mode not in MODES:
        raise ManifestError(f"{where}: mode {mode!r} is not understood; use {' or '.join(MODES)}")
    backend = table.get("backend", "cpp")
    if backend not in backend_names():
        raise ManifestError(f"{where}: unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
    seconds = table.get("seconds")
    if seconds is not None and (not isinstance(seconds, (int, float)) or seconds <= 0):
        raise ManifestError(f"{where}: seconds must be a positive number, got {seconds!r}")
    dynamic = table.get("dynamic")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise ManifestError(f"{where}: dynamic must be true or false, got {dynamic!r}")
    return ModelSpec(factory, mode, str(table.get("name") or ""), backend,
                     None if seconds is None else float(seconds), dynamic)


# --- the model and its step ---------------------------------------------------------------------------

def load_model(factory: str, limit: float | None = None) -> tuple[Any, tuple, dict]:
    """``(model, args, kwargs)`` from the factory ``"pkg.module:make"``; ``ModelError`` with the reason. Importing
    its module and calling it may take ``limit`` seconds (``time_limit``)."""
    import torch

    importable_from_cwd()
    with time_limit(f"model factory {factory!r} (importing its module and building the model)", limit, CAPTURE_FIX):
        try:
            make = import_function(factory, f"model {factory!r}")
        except ManifestError as exc:
            raise ModelError(str(exc)) from None
        with contained(f"model factory {factory!r}", "a factory must return (model, inputs), not exit: remove the "
                       "exit", ModelError):
            try:
                made = make()
            except Exception as exc:
                raise ModelError(f"model factory {factory!r} raised {type(exc).__name__}: {one_line(exc)}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise ModelError(f"model factory {factory!r} returned {type(made).__name__}; it must return "
                         "(model, inputs): an nn.Module and a tensor, a tuple of tensors or a dict of them")
    model, inputs = made
    if isinstance(inputs, torch.Tensor):
        return model, (inputs,), {}
    if isinstance(inputs, (tuple, list)):
        return model, tuple(inputs), {}
    if isinstance(inputs, dict):
        return model, (), dict(inputs)
    raise ModelError(f"model factory {factory!r} returned inputs of type {type(inputs).__name__}; give a tensor, "
                     "a tuple of tensors or a dict of keyword tensors")


def training_loss(out: Any) -> Any:
    """A scalar loss from whatever the model returns (a tensor, a tuple, a Hugging Face output): the mean square
    of every floating-point tensor in it, in float32, so every output gets a gradient."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = out.to_tuple() if hasattr(out, "to_tuple") else out
    tensors = [t for t in tree_leaves(leaves) if isinstance(t, torch.Tensor) and t.is_floating_point()
               and t.requires_grad]
    if not tensors:
        raise ModelError("the model's output holds no floating-point tensor that requires grad: nothing to train")
    return sum(t.float().square().mean() for t in tensors)


def step(model: Any, args: tuple, kwargs: dict, mode: str) -> Callable[[], Any]:
    """One step of ``model`` in ``mode`` as a no-argument callable (``train`` zeroes the grads first, so every
    step does the same work)."""
    import torch

    if mode not in MODES:
        raise ModelError(f"mode {mode!r} is not understood; use {' or '.join(MODES)}")
    if mode == "infer":
        def infer() -> Any:
            with torch.no_grad():
                return model(*args, **kwargs)
        return infer
    params = [p for p in model.parameters() if p.requires_grad]

    def train() -> Any:
        for p in params:
            p.grad = None
        out = model(*args, **kwargs)
        training_loss(out).backward()
        return out
    return train


def prepare(model: Any, mode: str) -> Any:
    """The model in the mode's state: ``eval()`` to infer, ``train()`` to train."""
    return model.eval() if mode == "infer" else model.train()


def one_line(exc: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (what a one-line error shows of it)."""
    return " ".join(str(exc).split())[:300] or type(exc).__name__




__all__ = ["CAPTURE_FIX", "CAPTURE_TIMEOUT", "MODEL_KEYS", "MODES", "ModelError", "ModelSpec", "load_model",
           "load_models", "model_spec", "one_line", "prepare", "step", "training_loss"]
