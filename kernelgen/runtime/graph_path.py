"""The graph path of ``CompiledFunction``: a signature no single template covers runs through ``torch.compile``
with the kernelgen backend (Dynamo, AOTAutograd, the partitioner; regions of kernelgen kernels, the rest ATen),
which the front end builds (``FrontEnd.compile_graph``); when that fails where eager does not, eager.

A mixin: it reads ``callee``, ``fn``, ``front_end``, ``partition``, ``dynamic`` and the tuning options of the
compiled function, and keeps the compiled callable in ``_graph_fn``.
"""

from __future__ import annotations

import logging
from typing import Any

from kernelgen.runtime.entry import Entry
from kernelgen.runtime.outputs import fill_out

log = logging.getLogger("kernelgen.runtime")


class GraphPath:
    """Run a signature's calls through the kernelgen ``torch.compile`` backend."""

    def _run_graph(self, entry: "Entry", values: tuple, layout: Any, out: Any) -> Any:
        """A call of a signature no single template covers, through the kernelgen torch.compile backend. If
        that fails where eager does not (Dynamo or the backend cannot take the function), the signature runs
        eagerly from then on, with the reason logged; an error eager raises too is the caller's.

        The signature's first successful call runs eagerly: decompositions accept inputs eager rejects
        (``gelu`` of an int64 tensor decomposes into ops that take integers), and eager's error is the
        contract. Until a call succeeds, each call runs eagerly and raises what eager raises."""
        if entry.check:
            result = self.callee.call(values, layout)
            entry.check = False
            return result if out is None else fill_out(result, out, self.__name__)
        try:
            result = self.callee.call(values, layout, fn=self._graph_callable())
        except Exception as exc:  # noqa: BLE001 - decided below by running eager
            result = self.callee.call(values, layout)  # raises when the inputs are wrong for eager too
            entry.source, entry.impl = "eager", ""
            entry.reason = f"{entry.reason}; torch.compile with the kernelgen backend failed " \
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            self._log_once(entry.reason)
        return result if out is None else fill_out(result, out, self.__name__)

    def _graph_callable(self) -> Any:
        """``torch.compile(fn, backend=kernelgen)`` with this function's options, made once."""
        if self._graph_fn is None:
            options = {"backend": self.backend_name, "tune": "auto" if self.tune else False, "db": self.db_arg,
                       "team_db": self.team_db, "trials": self.trials, "seconds": self.seconds}
            self._graph_fn = self.front_end.compile_graph(
                self.fn, {k: v for k, v in options.items() if v is not None},
                self.dynamic if isinstance(self.dynamic, bool) else None)
        return self._graph_fn

    def _partitioned(self, reason: str) -> "Entry":
        """The entry of a signature no single kernelgen template covers: partitioned into regions through
        the torch.compile backend (``partition=True``), else eager."""
        if not self.partition:
            return self._eager(reason)
        log.info("%s: %s; torch.compile with the kernelgen backend partitions it into regions", self.__name__, reason)
        entry = Entry(eager=True, check=True, source="graph", impl="graph",
                       reason=f"{reason}: it runs as regions of kernelgen kernels and ATen ops (torch.compile with "
                              "the kernelgen backend)")
        return entry


__all__ = ["GraphPath"]
