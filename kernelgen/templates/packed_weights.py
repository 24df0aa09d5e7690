"""A constant weight prepared once for a vendor kernel (oneDNN's reordered convolution weight, MKL's packed GEMM
operand) and prepared again whenever the tensor changes: the cache ``aten_conv`` and ``aten_gemm`` share."""

from __future__ import annotations

from typing import Any


class PackedWeight:
    """A weight packed on the first call and again whenever the weight tensor changes.

    Cached per launcher, keyed on the tensor the weight is a view of (``_base``, or the tensor itself), the view's
    place in it (data pointer, shape, strides) and the ``_version`` counter it shares with that base: any in-place
    update through the tensor or a view of it (an optimizer step, ``load_state_dict``, ``with no_grad():
    w.mul_(2)``) bumps the version and the next call repacks; another tensor repacks too. The base, not the view:
    a Linear's weight reaches its GEMM as ``t(weight)``, a new view object every call over the same memory. The
    entry holds the base itself, so its memory cannot be freed and reused by another tensor that would then look
    like it. What it cannot see: a write through ``param.data`` (``.data`` is a tensor with a version counter of
    its own, so ``param.data.copy_(new)`` leaves ``param._version`` as it was), nor a write from outside PyTorch
    into the storage; set ``KERNELGEN_PACK_WEIGHTS=0`` for code that updates weights that way."""

    def __init__(self, pack: Any) -> None:
        self._pack = pack  # (weight, x) -> the packed weight
        self._entry: tuple[Any, tuple, Any] | None = None  # (base, (version, place), packed weight)

    @staticmethod
    def _key(weight: Any) -> tuple:
        return weight._version, weight.data_ptr(), weight.shape, weight.stride()

    def __call__(self, weight: Any, x: Any) -> Any:
        base = weight if weight._base is None else weight._base
        key = self._key(weight)  # read before packing: a write during the pack repacks next call
        entry = self._entry
        if entry is not None and entry[0] is base and entry[1] == key:
            return entry[2]
        packed = self._pack(weight, x)
        self._entry = (base, key, packed)  # one assignment: a concurrent caller sees an old or new entry
        return packed


__all__ = ["PackedWeight"]
