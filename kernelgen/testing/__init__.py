"""Testing helpers shipped with kernelgen (like ``torch.testing``): differential checks against eager PyTorch.

Nothing in the library imports this package; the test suite and ``benchmarks/bench_opinfo.py`` do.
"""
