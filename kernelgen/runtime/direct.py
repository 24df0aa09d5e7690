"""The direct path of ``CompiledFunction``: a signature's graph, traced by the front end, that one template or
custom call covers runs that implementation's kernel, with the recorded config (or the default), built only
once it passed its check in a worker process.

A mixin: it reads ``callee``, ``front_end`` and ``__name__`` of the compiled function, and calls its
``_choose`` (``RecordChoice``), ``_eager`` and ``_partitioned`` (``GraphPath``).
"""

from __future__ import annotations

import logging
from typing import Any

from kernelgen.check.verdicts import build_checked, candidates_after
from kernelgen.errors import ShapePropagationError, TraceError
from kernelgen.runtime.bounds import check, guarded, index_checks
from kernelgen.runtime.entry import HUGE_ADVICE, HUGE_MIN_BYTES, REASONS, Entry
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime.implementations import candidates_for
from kernelgen.runtime.outputs import CONST

log = logging.getLogger("kernelgen.runtime")

# The implementations of graphs with nothing to compute: no kernel is built, so they are no shape variant
NO_KERNEL = frozenset({"identity", "empty"})


class DirectPath:
    """Build the kernel of one signature's traced graph."""

    def _build_kernel(self, full: tuple, layout: Any, n_values: int, backend: Any) -> "Entry":
        try:
            cap = self.front_end.capture(self.callee, full[:n_values], layout, full[n_values:])
        except ShapePropagationError as exc:
            log.debug("%s: %s", self.__name__, exc)
            return self._eager(str(exc), check=True)
        except TraceError as exc:  # UnsupportedOpError included
            return self._partitioned(str(exc))
        graph = cap.graph
        if not graph.outputs:
            if not any(kind != CONST for kind, _ in cap.plan.leaves):
                return self._eager("it returns no tensor")
            return self._no_launch(cap, full, "identity", "it computes nothing: its results are its inputs, or "
                                   "eager's copies of them, made without a kernel")
        if all(s.numel == 0 for s in graph.output_specs):
            return self._no_launch(cap, full, "empty", "every output is empty (numel 0): eager's empty results, "
                                   "no launch")
        if any(s.numel == 0 for s in (*graph.output_specs, *graph.signature)):
            return self._eager("an input or output is empty (numel 0) and another is not; eager handles it")
        impls = candidates_for(graph, backend.name, aten_first=self.aten_first)
        if not impls:
            return self._partitioned(f"no template or custom call covers ops {sorted(graph.ops())} on backend "
                                     f"{backend.name!r}")
        target = backend.target()
        log.debug("%s: traced %d nodes (ops %s), workload %s; candidates %s", self.__name__, len(graph.nodes),
                  sorted(graph.ops() - {"input"}), graph.workload_key[:12], [i.name for i in impls])
        impl, config, source = self._choose(graph, impls, backend.name, target)
        if impl.name == ATEN:  # its own ATen ops measured fastest (or it is too small to win): no kernel to build
            entry = self._aten(impl, source)
            entry.graph = graph
            return entry
        kernels = [i for i in impls if i.name != ATEN]
        # Whatever the database says, a config runs here only once it passed a check in a worker process.
        # A hand-written kernel is checked on this call's own values too (where they can be sent safely).
        picked = build_checked(candidates_after((impl, config), kernels, target), target,
                               data=[full[i] for i in cap.picks])
        if picked is None:
            return self._eager(f"no implementation of it passed its check here ({', '.join(i.name for i in impls)})")
        impl, config, launcher, source = picked.impl, picked.config, picked.launcher, \
            "default" if picked.fallback else source
        path = getattr(launcher, "source_file", None)
        reason = REASONS[source] + (" (the first choice failed its check)" if picked.fallback else "")
        log.info("%s: %s %s on %s, config %s: %s; source %s", self.__name__, impl.name, impl.source_hash(),
                 backend.name, dict(config), reason, path)
        import torch  # deferred: importing kernelgen stays free of torch until something is compiled

        outputs = tuple((torch.Size(s.shape), getattr(torch, s.dtype)) for s in graph.output_specs)
        picks = None if cap.picks == tuple(range(len(full))) else cap.picks
        inputs = [full[i] for i in cap.picks]
        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), torch.device("cpu"))
        entry = Entry(guarded(getattr(launcher, "launch", launcher), index_checks(graph)), outputs, plan=cap.plan,
                      picks=picks, device=device, grad=any(a.requires_grad for a in inputs), replay=cap.replay,
                      impl=impl.name, config=config, source=source, path=path, digest=impl.source_hash(),
                      reason=reason)
        entry.huge = [bool(HUGE_ADVICE) and s.numel * s.itemsize >= HUGE_MIN_BYTES for s in graph.output_specs]
        entry.graph = graph
        return entry

    def _no_launch(self, cap: Any, full: tuple, impl: str, reason: str) -> "Entry":
        """The entry of a graph with nothing to compute: its outputs are allocated (empty ones, or none) and
        the result is built from them and the inputs; eager's index errors are still raised."""
        import torch  # deferred: importing kernelgen stays free of torch until something is compiled

        graph = cap.graph
        outputs = tuple((torch.Size(s.shape), getattr(torch, s.dtype)) for s in graph.output_specs)
        inputs = [full[i] for i in cap.picks]
        device = next((a.device for a in inputs if isinstance(a, torch.Tensor)), torch.device("cpu"))
        log.info("%s: %s", self.__name__, reason)
        checks = index_checks(graph)
        entry = Entry(guarded(_nothing, checks), outputs, plan=cap.plan,
                      picks=None if cap.picks == tuple(range(len(full))) else cap.picks, device=device,
                      grad=any(a.requires_grad for a in inputs), replay=cap.replay, impl=impl, source="default",
                      reason=reason)
        if outputs:
            # Empty results are made by the traced function itself on the empty inputs (no element is touched):
            # eager's dtypes and layouts by construction, where the lowering's result dtypes might differ (the
            # lowering of an op eager would run on no element of an integer tensor is not checked by any kernel)
            def run(values: tuple) -> tuple:
                check(values, checks)
                return tuple(cap.replay(*values))

            entry.run, entry.slow = run, True
        return entry

    def _aten(self, impl: Any, source: str) -> "Entry":
        reason = ("its ATen ops measured fastest (tuning record)" if source != "default" else
                  "too small to win: cheaper as ATen's calls than as one kernel call (kernelgen.runtime.aten)")
        log.info("%s: runs its ATen ops: %s", self.__name__, reason)
        return Entry(eager=True, impl=impl.name, source=source, digest=impl.source_hash(), reason=reason)


def _nothing(*tensors: Any) -> None:
    """The launch of a graph with nothing to compute."""


__all__ = ["NO_KERNEL", "DirectPath"]
