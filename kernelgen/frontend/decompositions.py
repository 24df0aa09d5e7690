"""The decomposition table the kernelgen Dynamo backend (and a pattern traced the backend's way) uses."""

from __future__ import annotations

from typing import Any

from kernelgen.frontend import patches
from kernelgen.frontend.fx_nodes import op_name


# Training batch norm (what AOTAutograd makes of ``nn.BatchNorm*`` in train mode: the functional forward that also
# returns the updated running statistics, and its backward), kept whole so that eager's fused CPU kernels run it.
# Measured on ResNet-18 (``examples/hf_models.py``, batch 4 at 128², train, 2-core AMD EPYC, one process, medians of
# 10 interleaved rounds, with ``kernelgen.runtime.memory``'s settings): decomposed into the per-channel reductions
# and pointwise ops kernelgen fuses (with the ReLU, the residual add, the max pool's backward), the step ran at
# 0.962-0.963x eager; whole, 0.975-0.979x, since eager's one-pass ``native_batch_norm(_backward)`` beats the
# decomposed graph's two regions (AOTAutograd alone, no regions: 0.95-0.99x). In eval mode batch norm is a
# per-channel scale and shift (its backward too) that fuses into its neighbours' regions: still decomposed. The
# table maps each op to the position and name of its ``training`` flag; the decomposition returns ``NotImplemented``
# (make_fx's "keep this op") when the flag is set. (``_native_batch_norm_legit`` itself is not here: it is the
# form that mutates its running statistics, which AOTAutograd's functional graph may not hold.)
_TRAINING_FLAG = {
    "aten::_native_batch_norm_legit_functional": (5, "training"), "aten::_batch_norm_with_update_functional": None,
    "aten::native_batch_norm_backward": (7, "train"), "aten::batch_norm_backward": (7, "update"),
}


def decompositions() -> dict:
    """Inductor's decomposition table (core ATen plus Inductor's own rewrites). Why not the plain core-ATen
    table (``torch._decomp.core_aten_decompositions()``): in torch 2.13 a GPT-2 block's causal-attention
    backward decomposed with it gives wrong gradients (errors of ~4 against eager; Inductor's table and no
    table are exact), and Inductor's table is the one torch keeps correct for whole models. It keeps
    ``_softmax``, ``gelu`` and the GEMMs whole (one lowering rule each) and decomposes the ``*_backward``
    ops into the pointwise ops and reductions the partitioner groups; pooling, layer norm's forward and training
    batch norm stay whole
    (``_keep_whole``, ``_TRAINING_FLAG``). A convolution of non-overlapping patches (a vision transformer's patch
    embedding) and its backward become GEMMs over patches (``kernelgen.frontend.patches``); other convolutions stay
    ATen's."""
    import torch
    from torch._inductor.decomposition import select_decomp_table

    table = {}
    for op, fn in select_decomp_table().items():
        name = op_name(op)
        if _keep_whole(name):
            continue
        table[op] = _unless_training(fn, _TRAINING_FLAG[name]) if name in _TRAINING_FLAG else fn
    aten = torch.ops.aten
    table[aten.convolution.default] = _first_of(patches.convolution, table.get(aten.convolution.default))
    table[aten.convolution_backward.default] = _first_of(patches.convolution_backward,
                                                         table.get(aten.convolution_backward.default))
    return table


def _first_of(decompose: Any, otherwise: Any) -> Any:
    """``decompose``, and where it keeps the op (``NotImplemented``) the table's own decomposition, if any."""

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        out = decompose(*args, **kwargs)
        if out is NotImplemented and otherwise is not None:
            return otherwise(*args, **kwargs)
        return out

    return decomposition


def kept_whole(target: Any) -> str | None:
    """Why the backend left ATen op ``target`` whole for ATen to run, or None when it did not choose to."""
    name = op_name(target)
    if name in _TRAINING_FLAG:
        return "training batch norm: eager's fused kernel runs it (kernelgen.frontend.decompositions)"
    return None


def _keep_whole(name: str) -> bool:
    """Ops kept whole rather than decomposed:

    - pooling, which the window template runs as one reduce-window op (``kernelgen.lowering.windows``). Inductor's
      rules for it emit Inductor-only prims (``_low_memory_max_pool_with_offsets``) plus index arithmetic that then
      runs op by op (a small CNN's forward: 56 ATen launches instead of 11, 0.51x eager) and need
      ``torch._inductor.lowering`` imported, which a process where Inductor never ran lacks;
    - layer norm's forward, which its own lowering rule writes out with eager's overflow behaviour (rows of
      +-FLT_MAX are NaN, ``kernelgen.lowering.reduction.overflow_is_nan``). Decomposed, it is a ``var_mean`` that
      cannot tell a layer norm from a plain variance (whose eager result stays finite there), and it gave 0.0 where
      eager gives NaN. Its backward is still decomposed."""
    return name.startswith("aten::") and "pool" in name or name == "aten::native_layer_norm"


def _unless_training(decompose: Any, flag: tuple[int, str] | None) -> Any:
    """``decompose`` for calls whose training flag (``(position, name)`` of the argument; None: always training)
    is false, else ``NotImplemented``: the op stays whole in the graph."""

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if flag is None:
            training = True
        else:
            training = args[flag[0]] if len(args) > flag[0] else kwargs.get(flag[1], True)
        return NotImplemented if training else decompose(*args, **kwargs)

    return decomposition


__all__ = ["decompositions", "kept_whole"]
