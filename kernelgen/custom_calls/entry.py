"""One registered custom call (``CustomCall``) and the eager validation ``register_custom_call`` runs.

Everything that can be wrong with a registration is found here, before anything is compiled: unknown
language or platform, bad params or constraints, a reference or launcher with the wrong signature, a
missing source file. A missing toolchain is not an error: ``availability()`` reports it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgen.custom_calls import get_language, language_names
from kernelgen.errors import RegistryError
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.values import Config, SUPPORTED_DTYPES, TensorSpec, content_hash

_SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".cu", ".hip", ".cl", ".py")
_RESERVED = ("specs", "target")  # constraint arguments that are not params


@dataclass(frozen=True)
class _ConstraintSpec:
    description: str
    fn: Callable[..., Any]
    args: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class CustomCall:
    """A validated registration. Immutable; identity is ``key`` (name, language, variant)."""

    name: str
    language: str
    variant: str
    platforms: tuple[str, ...]
    params: tuple[Param, ...]
    constraints: tuple[_ConstraintSpec, ...]
    default: Config | None
    reference: Callable[..., Any]
    arity: int
    launcher: Callable[..., None]
    wants_kernel: bool
    source_text: str | None
    source_path: Path | None
    source_object: Any  # a @triton.jit function passed directly
    library: Path | None
    symbol: str | None
    replaces: Callable[..., Any] | None
    dtypes: tuple[str, ...] | None
    examples: tuple[tuple[TensorSpec, ...], ...]
    tolerance: float | None
    options: tuple[str, ...]
    defines: tuple[str, ...]
    origin: str  # the file that registered it
    module: str | None  # the registering module's name (an isolated tuning worker imports it)
    _hash: list[str] = field(default_factory=list, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.language, self.variant)

    @property
    def implementation_name(self) -> str:
        """``custom:rms_norm/cpp`` (``custom:rms_norm/cpp.slow`` for a variant): the name in tuning records."""
        return f"custom:{self.name}/{self.language}" + (f".{self.variant}" if self.variant else "")

    def text(self) -> str:
        """The kernel source text ('' for a prebuilt library or an in-memory Triton function)."""
        if self.source_text is not None:
            return self.source_text
        if self.source_path is not None:
            return self.source_path.read_text()
        if self.source_object is not None:
            return getattr(self.source_object, "src", "") or _source_of(getattr(self.source_object, "fn", None))
        return ""

    def source_hash(self) -> str:
        """Hash of the kernel source (or library bytes), launcher code, params and options."""
        if not self._hash:
            if self.library is not None:
                body = self.library.read_bytes().hex() if self.library.exists() else f"missing:{self.library}"
            else:
                body = self.text()
            self._hash.append(content_hash({
                "language": self.language, "source": body, "symbol": self.symbol, "options": list(self.options),
                "defines": list(self.defines), "launcher": _source_of(self.launcher),
                "bound": _bound_values(self.launcher),
                "params": {p.name: list(p.choices) for p in self.params},
            }))
        return self._hash[0]

    def space(self, specs: Sequence[TensorSpec], target: Any) -> SearchSpace:
        """The params as a ``SearchSpace`` whose constraints see the problem's input specs and the target."""
        constraints = []
        for c in self.constraints:
            def check(config: Config, c: _ConstraintSpec = c) -> bool:
                extra = {"specs": tuple(specs), "target": target, "config": config}
                return bool(c.fn(**{a: (extra[a] if a in extra else config[a]) for a in c.args}))
            constraints.append(Constraint(c.description, check))
        default = self.default
        space = SearchSpace(self.params, constraints)
        if default is not None and space.is_valid(default):
            return SearchSpace(self.params, constraints, default)
        return space

    def accepts(self, specs: Sequence[TensorSpec]) -> bool:
        """Inputs this call can take at all: arity, dtypes, and contiguous layouts (kernels index densely)."""
        if len(specs) != self.arity or any(not s.is_contiguous for s in specs):
            return False
        return self.dtypes is None or all(s.dtype in self.dtypes for s in specs)


def _source_of(fn: Any) -> str:
    if fn is None:
        return ""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def _bound_values(fn: Any) -> list[str]:
    """Scalars a launcher closes over or defaults to: two launchers from one factory differ by these."""
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _is_filled(c)]
    values = cells + list(getattr(fn, "__defaults__", None) or ())
    return [repr(v) for v in values if v is None or isinstance(v, (str, int, float, bool, tuple))]


def _is_filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _origin_dir(launcher: Callable[..., Any]) -> Path:
    code = getattr(launcher, "__code__", None)
    return Path(code.co_filename).resolve().parent if code is not None else Path.cwd()


def _validate_params(where: str, params: Mapping[str, Any] | None) -> tuple[Param, ...]:
    if params is None:
        return ()
    if not isinstance(params, Mapping):
        raise RegistryError(f"{where}: params must be a dict of name -> list of choices, got {type(params).__name__}")
    out = []
    for pname, choices in params.items():
        if not isinstance(pname, str) or not pname.isidentifier() or pname in _RESERVED:
            raise RegistryError(f"{where}: param name {pname!r} must be an identifier other than {_RESERVED}")
        if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence):
            raise RegistryError(f"{where}: param {pname!r} needs a list of choices, got {choices!r}")
        if not choices:
            raise RegistryError(f"{where}: param {pname!r} has no choices; give at least one value")
        for value in choices:
            if not (value is None or isinstance(value, (str, int, float, bool))):
                raise RegistryError(f"{where}: param {pname!r} choice {value!r} is not a JSON scalar "
                                    "(str, int, float, bool or None)")
        try:
            out.append(Param(pname, tuple(choices)))
        except ValueError as exc:
            raise RegistryError(f"{where}: {exc}") from None
    return tuple(out)


def _validate_constraints(where: str, constraints: Any, names: set[str]) -> tuple[_ConstraintSpec, ...]:
    if constraints is None:
        return ()
    if callable(constraints) or isinstance(constraints, Constraint):
        constraints = [constraints]
    out = []
    for item in constraints:
        if isinstance(item, Constraint):  # already takes the whole config
            out.append(_ConstraintSpec(item.description, lambda config, item=item: item(Config(config)), ("config",)))
            continue
        if not callable(item):
            raise RegistryError(f"{where}: constraint {item!r} is not callable; pass functions of param names, "
                                "e.g. lambda block, rows: block * rows <= 4096")
        try:
            sig = inspect.signature(item)
        except (TypeError, ValueError):
            raise RegistryError(f"{where}: cannot read the signature of constraint {item!r}") from None
        args = []
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise RegistryError(f"{where}: constraint {_describe(item)} must name its params, not use *args/**kwargs")
            if p.name not in names and p.name not in _RESERVED:
                raise RegistryError(f"{where}: constraint {_describe(item)} uses unknown param {p.name!r}; "
                                    f"params are {sorted(names)} (plus 'specs' and 'target')")
            args.append(p.name)
        out.append(_ConstraintSpec(_describe(item), item, tuple(args)))
    return tuple(out)


def _describe(fn: Any) -> str:
    text = _source_of(fn).strip()
    if "lambda" in text:
        text = text[text.index("lambda"):].rstrip(",) \n")
    return " ".join(text.split())[:200] or repr(fn)


def _positional_arity(fn: Callable[..., Any]) -> int | None:
    """Required positional parameters of ``fn``; None when it takes ``*args``."""
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        return None
    return sum(1 for p in sig.parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def _takes(fn: Callable[..., Any], n: int) -> bool:
    try:
        inspect.signature(fn).bind(*range(n))
        return True
    except TypeError:
        return False


def _to_specs(where: str, example: Any) -> tuple[TensorSpec, ...]:
    out = []
    for item in example:
        if isinstance(item, TensorSpec):
            out.append(item)
        elif isinstance(item, Sequence) and len(item) == 2 and isinstance(item[1], str):
            out.append(TensorSpec(tuple(item[0]), item[1]))
        else:
            raise RegistryError(f"{where}: example input {item!r} must be a TensorSpec or (shape, dtype)")
    return tuple(out)


def make_entry(launcher: Callable[..., None], *, module: str | None = None, module_file: str | None = None,
               name: str, language: str, platforms: Sequence[str] | None,
               params: Mapping[str, Any] | None, constraints: Any, reference: Callable[..., Any] | None,
               source: Any, library: str | Path | None, symbol: str | None, replaces: Callable[..., Any] | None,
               variant: str, inputs: Sequence[str] | None, dtypes: Sequence[str] | None, examples: Any,
               default: Mapping[str, Any] | None, tolerance: float | None, options: Sequence[str],
               defines: Sequence[str] | bool) -> CustomCall:
    """Validate one registration and return its entry; raises ``RegistryError`` naming the problem."""
    where = f"custom call {name!r} ({language})"
    if not isinstance(name, str) or not name or any(c in name for c in "/: "):
        raise RegistryError(f"custom call name {name!r} must be a non-empty string without '/', ':' or spaces")
    if language not in language_names():
        raise RegistryError(f"{where}: unknown language {language!r}; known: {', '.join(language_names())}")
    plugin = get_language(language)
    platforms = tuple(platforms) if platforms is not None else plugin.default_platforms
    bad = [p for p in platforms if p not in plugin.known_platforms]
    if not platforms or bad:
        raise RegistryError(f"{where}: platforms {list(platforms)} must be some of {list(plugin.known_platforms)}")
    if not callable(launcher):
        raise RegistryError(f"{where}: register_custom_call decorates a launcher (inputs, outputs, config)")
    wants_kernel = "kernel" in inspect.signature(launcher).parameters
    if not _takes(launcher, 4 if wants_kernel else 3):
        raise RegistryError(f"{where}: launcher {launcher.__qualname__} must take (inputs, outputs, config) "
                            "and optionally kernel")
    params_t = _validate_params(where, params)
    names = {p.name for p in params_t}
    constraints_t = _validate_constraints(where, constraints, names)
    if replaces is not None and not callable(replaces):
        raise RegistryError(f"{where}: replaces= must be a plain torch function, got {type(replaces).__name__}")
    if reference is None:
        reference = replaces
    if reference is None or not callable(reference):
        raise RegistryError(f"{where}: needs reference=, a torch function computing the same result "
                            "(or replaces=, whose function is then the reference)")
    arity = len(inputs) if inputs is not None else None
    for fn in (replaces, reference):
        if arity is None and fn is not None:
            arity = _positional_arity(fn)
    if arity is None or arity < 1:
        raise RegistryError(f"{where}: reference must name its tensor inputs positionally (no *args), "
                            "or pass inputs=('x', 'w')")
    for role, fn in (("reference", reference), ("replaces", replaces)):
        if fn is not None and not _takes(fn, arity):
            raise RegistryError(f"{where}: {role} {getattr(fn, '__qualname__', fn)}{inspect.signature(fn)} "
                                f"does not take the call's {arity} tensor inputs")
    base = Path(module_file).resolve().parent if module_file else _origin_dir(launcher)
    text = path = obj = None
    if source is not None and library is not None:
        raise RegistryError(f"{where}: give source= or library=, not both")
    if isinstance(source, (str, Path)):
        is_path = isinstance(source, Path) or ("\n" not in source and source.endswith(_SOURCE_SUFFIXES))
        if is_path:
            path = (base / source).resolve()
            if not path.is_file():
                raise RegistryError(f"{where}: source file {path} not found")
            if path.suffix != ".py":  # snapshot: the hash and the compiled kernel must agree in this process
                text = path.read_text()
        else:
            text = source
    elif source is not None:
        if language != "triton":
            raise RegistryError(f"{where}: source must be a file path or source text, got {type(source).__name__}")
        obj = source
    lib = (base / library).resolve() if library is not None else None
    if language == "triton" and (source is None or library is not None):
        raise RegistryError(f"{where}: needs source=, a @triton.jit kernel or a .py file plus symbol=")
    if language != "triton" or path is not None:
        if source is None and library is None:
            raise RegistryError(f"{where}: needs source= (file or text) or library= (prebuilt shared library)")
        if not symbol:
            raise RegistryError(f"{where}: needs symbol=, the entry point in the source or library")
    if defines is True:
        defines = tuple(sorted(names))
    unknown = [d for d in (defines or ()) if d not in names]
    if unknown:
        raise RegistryError(f"{where}: defines {unknown} are not params {sorted(names)}")
    if dtypes is not None:
        if any(d not in SUPPORTED_DTYPES for d in dtypes):
            raise RegistryError(f"{where}: dtypes {list(dtypes)} must be some of {list(SUPPORTED_DTYPES)}")
    examples_t = tuple(_to_specs(where, e) for e in (examples or ()))
    for example in examples_t:
        if len(example) != arity:
            raise RegistryError(f"{where}: example {[s.to_json() for s in example]} has {len(example)} inputs, "
                                f"the call takes {arity}")
    default_cfg = Config(dict(default)) if default is not None else None
    if default_cfg is not None and set(default_cfg) != names:
        raise RegistryError(f"{where}: default {dict(default_cfg)} must set exactly the params {sorted(names)}")
    return CustomCall(
        name=name, language=language, variant=variant or "", platforms=platforms, params=params_t,
        constraints=constraints_t, default=default_cfg, reference=reference, arity=arity, launcher=launcher,
        wants_kernel=wants_kernel, source_text=text, source_path=path, source_object=obj, library=lib,
        symbol=symbol, replaces=replaces, dtypes=tuple(dtypes) if dtypes is not None else None,
        examples=examples_t, tolerance=tolerance, options=tuple(options), defines=tuple(defines or ()),
        origin=module_file or getattr(getattr(launcher, "__code__", None), "co_filename", "?"), module=module,
    )
