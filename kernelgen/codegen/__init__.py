"""Expression code generation shared by the renderers: ``cpp_expr`` for C++ (``triton_expr`` for Triton)."""
