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
from kernelgen.runtime.bounds import guarded, index_checks
from kernelgen.runtime.entry import HUGE_ADVICE, HUGE_MIN_BYTES, REASONS, Entry
from kernelgen.runtime.implementations import implementations_for

log = logging.getLogger("kernelgen.runtime")


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
            return self._eager("it returns no tensor computed from its inputs")
        if any(s.numel == 0 for s in graph.output_specs):
            return self._eager("an output is empty (numel 0); eager handles empty tensors")
        impls = implementations_for(graph, backend.name)
        if not impls:
            return self._partitioned(f"no template or custom call covers ops {sorted(graph.ops())} on backend "
                                     f"{backend.name!r}")
        target = backend.target()
        log.debug("%s: traced %d nodes (ops %s), workload %s; candidates %s", self.__name__, len(graph.nodes),
                  sorted(graph.ops() - {"input"}), graph.workload_key[:12], [i.name for i in impls])
        impl, config, source = self._choose(graph, impls, backend.name, target)
        # Whatever the database says, a config runs here only once it passed a check in a worker process.
        # A hand-written kernel is checked on this call's own values too (where they can be sent safely).
        picked = build_checked(candidates_after((impl, config), impls, target), target,
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
        entry = Entry(guarded(getattr(launcher, "launch", launcher), index_checks(graph)), outputs, plan=cap.plan, picks=picks, device=device,
                       grad=any(a.requires_grad for a in inputs), replay=cap.replay, impl=impl.name, config=config,
                       source=source, path=path, digest=impl.source_hash(), reason=reason)
        entry.huge = [bool(HUGE_ADVICE) and s.numel * s.itemsize >= HUGE_MIN_BYTES for s in graph.output_specs]
        return entry


__all__ = ["DirectPath"]
