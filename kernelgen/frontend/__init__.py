"""kernelgen's front end: what ``kernelgen.compile`` accepts and how a call becomes a traced ``Graph``.

- ``callables``: normalise a function, ``nn.Module``, bound method, ``functools.partial`` or callable
  object into a ``Callee`` (name, signature, module state read at call time); reject anything else.
- ``capture``: trace a callee with torch.fx into a ``Graph`` plus the layout of its result, with shape
  propagation on meta / fake tensors only (user code never runs on real data while tracing).
- ``signature``: the cache key of a call (tensor layouts, constants), cheap enough for every call.
- ``outputs``: rebuild eager's result structure (tensor, tuple, list, dict, nesting, identity).
- ``autograd``: run a kernel's forward inside ``torch.autograd.Function`` with an eager backward.
- ``dynamo_backend``: ``torch.compile(model, backend="kernelgen")`` (Dynamo, AOTAutograd, decompositions)
  and its coverage statistics; ``partition``: group an ATen graph into template-covered regions;
  ``region_op``: the ``kernelgen::region`` custom op that runs a region.
"""
