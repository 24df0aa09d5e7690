"""Checking: build one candidate (implementation, config), run it against the eager reference and time it, in
an isolated worker process so a crashing or hanging kernel costs a verdict, never the caller.

- ``compare``: the one checker: input generator, per-dtype tolerance table, comparison.
- ``measure``: ``Bench``, the body of every check and timing (in a worker or in this process).
- ``worker``: the worker subprocess, its JSON-lines protocol and the parent's ``IsolatedMeasurer``.
- ``verdicts``: the cached first check of a config, which dispatch, the registry's check and shape families
  ask before anything runs a kernel in the caller's process (``build_checked``).
- ``baselines``: eager and torch.compile timed beside a tuning's finalists; ``load``: how much other
  processes got in the way of a timing.

Used by the runtime, the tuner and the registry alike, so it imports none of them: an implementation says
how a worker rebuilds it and what its custom calls' references are.
"""
