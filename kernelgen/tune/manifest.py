"""The TOML workload manifest of ``kernelgen tune``: load, validate completely, trace every problem size.

Everything that can be wrong with a manifest is found by ``load_manifest`` before any database is opened:
TOML syntax (with the line), unknown keys, functions that cannot be imported, specs that do not fit the
function (tracing fails), ops no template supports, impossible budgets. Format::

    [defaults]                                # optional, applies to every workload
    trials = 30

    [[workload]]
    name = "bias_relu"
    function = "mypkg.ops:bias_relu"          # imported with the current directory and PYTHONPATH on sys.path
    inputs = [{shape = [512, 1024], dtype = "float32"}, {shape = [1024], dtype = "float32"}]
    # or several problem sizes:  shapes = [[{...}, {...}], [{...}, {...}]]
    # or a size range: name sizes, use the names in shapes; a range tunes one size per power-of-two bucket
    # (at most 12, spread over the range), the dispatch table a shape family picks from at run time (a range
    # that is dim 0 of inputs, a batch size, tunes the family's generic kernels, the ones dispatch runs):
    #   sizes = {rows = {min = 1, max = 65536}, hidden = 1024}
    #   inputs = [{shape = ["rows", "hidden"], dtype = "float32"}, {shape = ["hidden"], dtype = "float32"}]
    # optional: backend = "cpp", trials = 50, seconds = 120, sampler = "tpe", patience = 20, template = "pointwise"
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib

from kernelgen.backends import backend_names, get_backend
from kernelgen.errors import KernelgenError, ManifestError, NoTemplateError
from kernelgen.frontend.capture import trace
from kernelgen.ir.graph import Graph
from kernelgen.ir.values import TensorSpec
from kernelgen.runtime.dynamic import representatives
from kernelgen.runtime.implementations import candidates_for, implementations_for
from kernelgen.tune.bucket import range_family, range_implementations
from kernelgen.tune.guards import contained
from kernelgen.tune.preflight import check_budget, usable_implementations

OPTION_KEYS = ("backend", "trials", "seconds", "sampler", "patience", "template")
WORKLOAD_KEYS = ("name", "function", "inputs", "shapes", "sizes", *OPTION_KEYS)
TOP_KEYS = ("workload", "defaults", "model")  # [[model]] tables: kernelgen.tune.model_manifest


@dataclass(frozen=True)
class Workload:
    """One manifest entry, validated: the function, one traced graph per problem size, its options."""

    name: str
    function: str  # "module:function" as written
    fn: Callable[..., Any]
    signatures: tuple[tuple[TensorSpec, ...], ...]
    graphs: tuple[Graph, ...]
    backend: str = "cpp"
    trials: int | None = None
    seconds: float | None = None
    sampler: str | None = None
    patience: int | None = None
    template: str | None = None
    # A size range that is the batch (dim 0) of its inputs: the shape-generic graph whose kernels dispatch runs
    # at every size of a bucket, so each representative size tunes those (``kernelgen.tune.bucket``).
    family: Graph | None = None


def load_manifest(path: str | os.PathLike) -> list[Workload]:
    """Parse and validate the manifest at ``path``; raises ``ManifestError`` (or the ``KernelgenError`` of
    the failing step, e.g. ``UnsupportedOpError``) with a one-line message naming the workload and the fix.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")  # TOML is UTF-8 by definition, whatever the locale says
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path} is not UTF-8 text (byte {exc.start}): save the manifest as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: TOML syntax error: {exc}") from None
    _unknown_keys(data, TOP_KEYS, f"{path}")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ManifestError(f"{path}: [defaults] must be a table of {', '.join(OPTION_KEYS)}")
    _unknown_keys(defaults, OPTION_KEYS, f"{path}: [defaults]")
    entries = data.get("workload", [] if data.get("model") else None)
    if not isinstance(entries, list) or not (entries or data.get("model")) \
            or not all(isinstance(e, dict) for e in entries):
        raise ManifestError(f"{path}: no workloads; add at least one [[workload]] table with name, function and "
                            "inputs, or a [[model]] table with a factory")
    importable_from_cwd()
    workloads: list[Workload] = []
    for i, entry in enumerate(entries):
        where = f"{path}: workload {entry.get('name', f'#{i + 1}')!r}"
        workload = _workload({**defaults, **entry}, where)
        if any(w.name == workload.name for w in workloads):
            raise ManifestError(f"{where}: the name is used twice; give every workload its own name")
        workloads.append(workload)
    return workloads


def workload_from_table(entry: dict[str, Any], where: str) -> Workload:
    """One ``[[workload]]`` table (as a dict), validated and traced as ``load_manifest`` does (the
    ``kernelgen explain module:fn --input ...`` form builds one from its options)."""
    importable_from_cwd()
    return _workload(entry, where)


def _unknown_keys(table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ManifestError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(allowed)}")


def importable_from_cwd() -> None:
    """Put the current directory on ``sys.path``, as ``python`` does, so ``module:function`` names resolve."""
    # Console scripts put their own bin/ first on sys.path, not the current directory.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _workload(entry: dict[str, Any], where: str) -> Workload:
    _unknown_keys(entry, WORKLOAD_KEYS, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ManifestError(f"{where}: needs name = \"...\" (a non-empty string)")
    fn = import_function(entry.get("function"), where)
    signatures = _signatures(entry, where)
    backend = _backend(entry.get("backend", "cpp"), where)
    options = {k: entry.get(k) for k in ("trials", "seconds", "patience")}
    try:
        check_budget(options["trials"], options["seconds"], options["patience"])
    except KernelgenError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    sampler = entry.get("sampler")
    if sampler is not None:
        from kernelgen.tune.search import SAMPLERS  # deferred: Optuna (~1 s); explain loads manifests too

        if sampler not in SAMPLERS:
            raise ManifestError(f"{where}: unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    template = entry.get("template")
    if template is not None and not isinstance(template, str):
        raise ManifestError(f"{where}: template must be a name such as \"pointwise\"")
    graphs = []
    for specs in signatures:
        try:
            graph = trace(fn, *specs)
        except KernelgenError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        _check_implementable(graph, backend, template, where)
        graphs.append(graph)
    return Workload(name=name, function=entry["function"], fn=fn, signatures=tuple(signatures), graphs=tuple(graphs),
                    backend=backend, trials=options["trials"],
                    seconds=None if options["seconds"] is None else float(options["seconds"]),
                    sampler=sampler, patience=options["patience"], template=template,
                    family=_range_family(fn, entry, signatures))


def _range_family(fn: Callable[..., Any], entry: dict[str, Any],
                  signatures: list[tuple[TensorSpec, ...]]) -> Graph | None:
    """The shape-generic graph of a workload whose size range is dim 0 of its ``inputs`` and no other dim
    (a batch size, as a shape family's); None otherwise (each representative size is tuned as a static graph)."""
    table, inputs = entry.get("sizes"), entry.get("inputs")
    ranged = [name for name, value in table.items() if isinstance(value, dict)] if isinstance(table, dict) else []
    if len(ranged) != 1 or not isinstance(inputs, list):
        return None
    shapes = [spec.get("shape") or [] for spec in inputs]
    dims = tuple(i for i, shape in enumerate(shapes) if shape[:1] == ranged)
    if any(ranged[0] in shape[1:] for shape in shapes):
        return None
    return range_family(fn, signatures[-1], dims)


def import_function(spec: Any, where: str) -> Callable[..., Any]:
    """The callable ``spec`` ("module:function") names; ``ManifestError`` naming ``where`` when it cannot be had."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ManifestError(f"{where}: function must be \"module:function\" (an import path), got {spec!r}")
    module_name, attr = spec.split(":")
    with contained(f"{where}: importing {module_name!r}", "kernelgen imports the module to find the function: remove "
                   "the exit, or put it under if __name__ == \"__main__\":", ManifestError):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ManifestError(f"{where}: cannot import module {module_name!r} ({exc}); run from the directory that "
                                "holds it or add its folder to PYTHONPATH") from None
        except Exception as exc:  # the module itself raised while importing
            raise ManifestError(f"{where}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise ManifestError(f"{where}: module {module_name!r} has no function {attr!r}")
    return fn


def _signatures(entry: dict[str, Any], where: str) -> list[tuple[TensorSpec, ...]]:
    if ("inputs" in entry) == ("shapes" in entry):
        raise ManifestError(f"{where}: give exactly one of inputs = [...] (one problem size) or "
                            "shapes = [[...], ...] (several)")
    sizes = [entry["inputs"]] if "inputs" in entry else entry["shapes"]
    if not isinstance(sizes, list) or not sizes:
        raise ManifestError(f"{where}: shapes must be a non-empty list of input lists")
    bindings = _size_bindings(entry.get("sizes"), where) or [{}]
    sizes = [_bind(inputs, binding, where) for inputs in sizes for binding in bindings]
    out = []
    for k, inputs in enumerate(sizes):
        if not isinstance(inputs, list) or not inputs:
            raise ManifestError(f"{where}: inputs must be a non-empty list of {{shape = [...], dtype = \"...\"}}")
        specs = []
        for j, spec in enumerate(inputs):
            label = f"input {j}" + (f" of shape set {k}" if "shapes" in entry else "")
            if isinstance(spec, dict):
                extra = sorted(set(spec) - {"shape", "dtype", "strides"})
                if extra:
                    raise ManifestError(f"{where}: {label} has unknown key {extra[0]!r}; allowed: shape, dtype, strides")
            try:
                specs.append(TensorSpec.from_json(spec))
            except ValueError as exc:
                raise ManifestError(f"{where}: {label}: {exc}") from None
        out.append(tuple(specs))
    return out


def _size_bindings(table: Any, where: str) -> list[dict[str, int]]:
    """``sizes = {name = 64, rows = {min = 1, max = 65536}}`` as one {name: size} per problem size to tune:
    a range gives its bucket representatives (``kernelgen.runtime.dynamic.representatives``)."""
    if table is None:
        return []
    if not isinstance(table, dict) or not table:
        raise ManifestError(f"{where}: sizes must be a table such as sizes = {{rows = {{min = 1, max = 4096}}}}")
    fixed: dict[str, int] = {}
    ranged: list[tuple[str, list[int]]] = []
    for name, value in table.items():
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            fixed[name] = value
            continue
        if not isinstance(value, dict):
            raise ManifestError(f"{where}: size {name!r} = {value!r} must be a whole number or {{min = 1, max = 4096}}")
        extra = sorted(set(value) - {"min", "max"})
        if extra or set(value) != {"min", "max"}:
            raise ManifestError(f"{where}: size range {name!r} takes exactly min and max "
                                f"({'unknown key ' + repr(extra[0]) if extra else 'missing one'}), "
                                f"e.g. {name} = {{min = 1, max = 4096}}")
        lo, hi = value["min"], value["max"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or lo < 1 or hi < lo:
            raise ManifestError(f"{where}: size range {name!r} = {{min = {lo!r}, max = {hi!r}}} needs whole numbers "
                                "with 1 <= min <= max")
        ranged.append((name, representatives(lo, hi)))
    if len(ranged) > 1:
        raise ManifestError(f"{where}: sizes {ranged[0][0]!r} and {ranged[1][0]!r} are both ranges; a kernel has one "
                            "run-time size: make one of them a fixed number")
    if not ranged:
        return [fixed]
    name, values = ranged[0]
    return [{**fixed, name: v} for v in values]


def _bind(inputs: Any, binding: dict[str, int], where: str) -> Any:
    """``inputs`` with every size name in a shape replaced by its value in ``binding``."""
    if not isinstance(inputs, list):
        return inputs  # _signatures reports the malformed list
    out = []
    for spec in inputs:
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if isinstance(shape, list):
            for dim in shape:
                if isinstance(dim, str) and dim not in binding:
                    raise ManifestError(f"{where}: shape {shape} names size {dim!r}, which sizes does not define; "
                                        f"add sizes = {{{dim} = {{min = 1, max = 4096}}}} or a number")
            spec = {**spec, "shape": [binding[d] if isinstance(d, str) else d for d in shape]}
        out.append(spec)
    return out


def _backend(name: Any, where: str) -> str:
    if name not in backend_names():
        raise ManifestError(f"{where}: unknown backend {name!r}; choose one of {', '.join(backend_names())}")
    return name


def _check_implementable(graph: Graph, backend: str, template: str | None, where: str) -> None:
    impls, unusable = usable_implementations(implementations_for(graph, backend), get_backend(backend).target())
    names = [impl.name for impl in impls]
    if not names:
        raise NoTemplateError(f"{where}: no template or custom call supports this graph on backend {backend!r} "
                              f"(ops: {', '.join(sorted(graph.ops() - {'input'}))})"
                              + (f"; {'; '.join(unusable)}" if unusable else ""))
    if template is not None and template not in names:
        raise ManifestError(f"{where}: template {template!r} does not implement this graph; available: "
                            f"{', '.join(names)}")


def workload_implementations(workload: Workload, graph: Graph) -> list[Any]:
    """The implementations to tune for one of the workload's graphs (just the template override, if set); at
    the representative sizes of a batch-size range, the generic kernels a shape family runs there."""
    if workload.family is not None:
        impls = range_implementations(workload.family, graph, implementations_for(graph, workload.backend),
                                      workload.backend)
    else:  # the graph's own ATen ops compete beside the kernels (kernelgen.runtime.aten)
        impls = candidates_for(graph, workload.backend)
    return [i for i in impls if workload.template is None or i.name == workload.template]


__all__ = ["Workload", "import_function", "importable_from_cwd", "load_manifest", "workload_from_table",
           "workload_implementations"]
