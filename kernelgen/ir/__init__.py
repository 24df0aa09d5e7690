"""The values that cross every seam, and the IR: nothing here imports a layer above it.

- ``values``: ``TensorSpec``, ``Config``, ``Source``, ``Measurement``, ``TuningRecord`` and friends: frozen,
  hashable, JSON round-trippable.
- ``graph``: the ``Graph`` IR of primitive ``Node``s, its structural hash, and ``GraphBuilder`` (what the
  lowering appends nodes with).
- ``space``: a template's ``SearchSpace`` of named parameters and constraints.
- ``target``: the ``Target`` a kernel is tuned for, with its fingerprint and family.
- ``reference``: eager evaluation of a ``Graph`` with torch ops, the executable semantics every kernel is
  checked against.
- ``implementation``: the ``Implementation`` seam (one way to compute a graph on a backend, tunable over a
  ``SearchSpace``) that templates and custom calls implement and the checker, runtime and tuner consume.
"""
