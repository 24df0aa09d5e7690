"""The runtime: pick and run the best implementation for each call of a compiled function.

- ``compiled``: ``CompiledFunction``, the signature cache and the calls; its jobs are mixins: ``direct`` (the
  kernel of one traced graph), ``graph_path`` (``torch.compile`` for what no template covers),
  ``family_path`` with ``families`` and ``bucket_member`` (one generic kernel per shape family),
  ``records`` (the tuning database's choice, ``tune="auto"``) and ``explain``.
- ``entry`` (what a signature runs), ``signature`` (call keys), ``outputs`` (eager's result structure and
  ``out=``), ``autograd`` (eager gradients), ``bounds`` (eager's index errors), ``dynamic`` (shape-family
  dims, sentinels and size buckets).
- ``implementations``: every implementation of a graph (templates, then custom calls).
- ``aten`` (a graph's own ATen ops as a candidate, and the untuned rule of which regions run them first),
  ``threads`` (kernel threads follow the machine's load), ``memory`` (malloc settings for compiled models).
- ``seams``: the ``FrontEnd`` and ``Tuner`` the runtime calls up through; ``kernelgen.api`` installs them.

It never imports the front end, the tuner or Optuna.
"""
