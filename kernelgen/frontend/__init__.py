"""kernelgen's front end: what ``kernelgen.compile`` accepts, how a call becomes a traced ``Graph``, and the
``torch.compile`` backend that partitions whole models into kernelgen regions.

- ``callables``: normalise a function, ``nn.Module``, bound method, ``functools.partial`` or callable
  object into a ``Callee`` (name, signature, module state read at call time); reject anything else.
- ``capture``: trace a callee with torch.fx into a ``Graph`` plus the layout of its result, with shape
  propagation on meta / fake tensors only (user code never runs on real data while tracing); ``trace``.
- ``front_end``: the ``FrontEnd`` the runtime calls back through (``kernelgen.runtime.seams``).
- ``dynamo_backend``: ``torch.compile(model, backend="kernelgen")`` (Dynamo, AOTAutograd, ``decompositions``)
  and its coverage statistics; ``partition``: group an ATen graph into template-covered regions (with
  ``fx_nodes``, ``cleanup``, ``sink_views`` and ``attention_pattern`` preparing the graph);
  ``region_op``: the ``kernelgen::region`` custom op that runs a region through the runtime;
  ``patterns``: a custom call's ``replaces=`` pattern in a region's ATen form.

It calls the runtime by building a ``CompiledFunction`` per region; it never imports the tuner.
"""
