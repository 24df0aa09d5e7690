"""The shape-family path of ``CompiledFunction``: once a call's batch dim is dynamic, one family per layout serves
every batch size with a generic kernel (``kernelgen.runtime.families``), within the cap on compiled shape
variants (``max_variants=``, ``KERNELGEN_MAX_VARIANTS``).

A mixin: it reads ``callee``, ``front_end``, ``dynamic``, ``tune``, ``max_variants`` and ``_general`` of the
compiled function, keeps the families in ``_families`` and ``_sizes``, counts ``variants``, and calls its
``_lookup``, ``_open_db`` and ``_tune_bucket`` (``RecordChoice``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.runtime import dynamic as dyn
from kernelgen.runtime.entry import HUGE_ADVICE, HUGE_MIN_BYTES, REASONS, Entry
from kernelgen.runtime.families import Family
from kernelgen.runtime.signature import describe_values

log = logging.getLogger("kernelgen.runtime")
VARIANTS_ENV = "KERNELGEN_MAX_VARIANTS"


def max_variants(value: int | None) -> int:
    """``max_variants=`` checked, else ``$KERNELGEN_MAX_VARIANTS``, else 8."""
    if value is None:
        raw = os.environ.get(VARIANTS_ENV, "8")
        if not raw.strip().isdigit():
            raise KernelgenError(f"{VARIANTS_ENV}={raw!r} is not a count; set it to a whole number such as 8")
        value = int(raw)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KernelgenError(f"max_variants={value!r} must be a whole number >= 1 (default 8)")
    return value


class FamilyPath:
    """Serve a call from a shape family's generic kernel."""

    # -- shape families ---------------------------------------------------------------------------------
    def _over_limit(self) -> "Entry":
        self._log_once(f"new shapes past its limit of {self.max_variants} compiled shape variants (raise "
                       f"max_variants= or {VARIANTS_ENV}); sizes a shape family serves still run its kernel")
        return Entry(eager=True)

    def _family_entry(self, full: tuple, layout: Any, n_values: int, backend: Any,
                      force: bool = False) -> "Entry | None":
        """The entry of a call served by a shape family's generic kernel (creating the family when this
        call makes its dims dynamic, or at once with ``force``), or None: compile for the exact shapes."""
        dims = dyn.dynamic_dims(full[:n_values], None if self.dynamic in (None, True) else self.dynamic)
        if not dims:
            return None
        # Several dims of one size may be one batch (q, k, v) or meet by chance (x [n, k] and a weight
        # [n, k]): try them together, then the first alone.
        for choice in ((dims, dims[:1]) if len(dims) > 1 else (dims,)):
            entry = self._family_member(full, layout, n_values, choice, backend, force)
            if entry is not None:
                return entry
        return None

    def _family_member(self, full: tuple, layout: Any, n_values: int, dims: tuple, backend: Any,
                       force: bool = False) -> "Entry | None":
        n = full[dims[0]].shape[0]
        fkey = (layout, backend.name, dyn.family_key(full, dims), self.callee.modes() if self._general else None)
        if fkey not in self._families:
            seen = self._sizes.setdefault(fkey, set())
            seen.add(n)
            if self.dynamic is None and len(seen) < 2 and not force:  # as torch.compile: from the second size
                return None
            if self.variants >= self.max_variants:
                return None
            self._families[fkey] = self._new_family(full, layout, n_values, dims, backend)
            if self._families[fkey] is not None:
                self.variants += 1
        family = self._families[fkey]
        if family is None:
            return None
        # A family's first kernel is the variant its creation counted; each further (implementation, config)
        # it builds (a bucket's tuned config) is one more, under the same cap. Past the cap a size runs a
        # kernel the family has, untuned for its bucket.
        before = len(family.kernels)
        may_build = self.variants < self.max_variants
        served = family.at(n, may_build=may_build)
        if served is None:
            return None
        self.variants += max(0, len(family.kernels) - max(1, before))
        if served.capped and "cap:" + family.key not in self._logged:
            self._logged.add("cap:" + family.key)
            log.warning("%s: at its limit of %d compiled shape variants (raise max_variants= or %s); new size "
                        "buckets of shape family %s run a kernel it already has, not their own tuned or recorded "
                        "config", self.__name__,
                        self.max_variants, VARIANTS_ENV, family.key)
        import torch  # deferred: importing kernelgen stays free of torch until something is compiled

        inputs = [full[i] for i in family.cap.picks]
        picks = None if family.cap.picks == tuple(range(len(full))) else family.cap.picks
        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), torch.device("cpu"))
        entry = Entry(served.launch, served.outputs, plan=family.cap.plan, picks=picks, device=device,
                      grad=any(a.requires_grad for a in inputs if isinstance(a, torch.Tensor)), replay=family.cap.replay,
                       impl=served.impl.name, config=served.config, source=served.source, path=served.path,
                       digest=served.impl.source_hash(), reason=REASONS[served.source])
        entry.family, entry.bucket = family.key, served.bucket
        entry.huge = [bool(HUGE_ADVICE) and shape.numel() * dtype.itemsize >= HUGE_MIN_BYTES
                      for shape, dtype in served.outputs]
        return entry

    def _new_family(self, full: tuple, layout: Any, n_values: int, dims: tuple, backend: Any) -> Any:
        got = dyn.family_graph(lambda vals: self.front_end.capture(self.callee, vals[:n_values], layout, vals[n_values:]),
                               full, dims)
        family = None if got is None else Family.create(got[0], got[1], backend, self._lookup,
                                                        tuner=self._tune_bucket if self.tune else None)
        if family is not None:
            family.known = self._known_keys(family)
        if family is None:
            log.info("%s: no shape-generic kernel for its inputs (%s); each batch size compiles", self.__name__,
                     describe_values(full[:n_values]))
        return family

    def _known_keys(self, family: Any) -> frozenset | None:
        """Workload keys of the family's graph with an ok record on this target (one query per family)."""
        try:
            graph = family.static_graph(family.sentinel)
            groups = self._open_db().nearest_groups(
                workload_key="", workload_family=graph.family_key, target_fingerprint=family.target.fingerprint,
                target_family=family.target.family,
                implementation=None if family.rivals or len(family.impls) > 1 else family.impl.name)
        except (KernelgenError, ModuleNotFoundError, AttributeError):
            return None
        return frozenset(groups.neighbours)


__all__ = ["FamilyPath", "VARIANTS_ENV", "max_variants"]
