"""``CompiledFunction.explain``: what runs for given inputs, and why, without running it.

A mixin: it reads the compiled function's signature cache and shape families.
"""

from __future__ import annotations

from typing import Any

from kernelgen.runtime.signature import NotAConstant


class Explain:
    """Say what a call runs."""

    def explain(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """What runs for these inputs: ``implementation``, ``config``, ``source`` (where the config came
        from: db, bucket, tuned, default or eager), ``reason`` (why, in words), ``implementation_hash`` (the hash
        its tuning records carry) and ``source_path`` (the generated C++/Triton file; None when eager); when a
        shape family's generic kernel serves them, also ``family`` (its key), ``bucket`` (the size bucket
        whose config runs), ``family_kernels`` (the (implementation, config) kernels the family has built: one
        per distinct bucket config) and ``variants`` (this function's compiled shape variants, which those count
        in, against ``max_variants``)."""
        values, layout = self.callee.bind(args, kwargs)
        full = values + self.callee.read_state() if self.callee.state else values
        try:
            key = self._key(values, layout, full)
        except NotAConstant as exc:
            return {"implementation": "eager", "config": None, "source": "eager", "reason": str(exc),
                    "implementation_hash": None, "source_path": None}
        entry = self._cache.get(key) or self._prepare(full, layout, key, len(values))
        what = {"implementation": entry.impl or "eager", "config": None if entry.config is None else dict(entry.config),
                "source": entry.source, "reason": entry.reason, "implementation_hash": entry.hash,
                "source_path": None if entry.path is None else str(entry.path)}
        if entry.family is not None:
            family = next((f for f in self._families.values() if f is not None and f.key == entry.family), None)
            what.update(family=entry.family, bucket=entry.bucket,
                        family_kernels=None if family is None else len(family.kernels), variants=self.variants)
        return what


__all__ = ["Explain"]
