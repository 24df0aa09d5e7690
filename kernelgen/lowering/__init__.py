"""Lowering: PyTorch (torch functions, Tensor methods, ATen overloads) to the IR's primitive ops, one rule per op.

``rules`` holds the one rule table (op name -> handler) and the helpers rule modules share; ``lower`` lowers
one fx node through it (and imports every rule module, so the table is complete); the rule modules are
``elementwise``, ``composite`` (softmax, layer_norm, views, GEMMs, attention), ``reduction``, ``pointwise``
(composite activations), ``moves`` (cat, pad, gather), ``scans`` and ``aten`` (ATen overloads whose
conventions differ from the torch function's). Adding an op is one ``@handles("name")`` rule in the module of
its kind. The front end calls ``kernelgen.lowering.lower.lower`` for every node it traces.
"""
