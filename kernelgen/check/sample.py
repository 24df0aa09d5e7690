"""A call's own input values, handed to a check worker as raw bytes: what "checked on the first call's data"
means for a hand-written kernel (``Implementation.check_value_classes``).

Each input's storage span (what its strides reach) is written as raw bytes to a private temporary file and
read back by the worker with ``torch.frombuffer``: data only, never pickled. Only where safe: CPU tensors, at
most ``KERNELGEN_CHECK_DATA_MAX_BYTES`` in all (default 64 MiB); otherwise the value classes alone stand.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

from kernelgen.input_limits import bound
from kernelgen.ir.values import TensorSpec

MAX_BYTES_ENV = "KERNELGEN_CHECK_DATA_MAX_BYTES"
DEFAULT_MAX_BYTES = 64 << 20


def _span(spec: TensorSpec) -> int:
    strides = spec.effective_strides()
    return 1 + sum((n - 1) * s for n, s in zip(spec.shape, strides)) if spec.numel else 0


def write_sample(tensors: Sequence[Any], signature: Sequence[TensorSpec], folder: str) -> list[dict[str, Any]] | None:
    """Files in ``folder`` holding ``tensors`` (matching ``signature``), described for the worker; None when
    they cannot be sent safely (not CPU, not matching, over the size limit)."""
    import torch

    if len(tensors) != len(signature):
        return None
    spans = [_span(spec) for spec in signature]
    if sum(n * spec.itemsize for n, spec in zip(spans, signature)) > bound(MAX_BYTES_ENV, DEFAULT_MAX_BYTES):
        return None
    items = []
    for i, (t, spec, span) in enumerate(zip(tensors, signature, spans)):
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or TensorSpec.of(t) != spec:
            return None
        flat = torch.as_strided(t.detach(), (span,), (1,), t.storage_offset()).contiguous()
        path = os.path.join(folder, f"input{i}.bin")
        with open(path, "wb") as handle:
            handle.write(flat.view(torch.uint8).numpy().tobytes() if span else b"")
        items.append({"path": path, "dtype": spec.dtype, "span": span})
    return items


def read_sample(items: Sequence[dict[str, Any]], signature: Sequence[TensorSpec]) -> list[tuple[Any, Any]]:
    """The ``(storage, view)`` pairs ``write_sample`` described; ValueError when a file does not fit its spec."""
    import torch

    pairs = []
    for item, spec in zip(items, signature, strict=True):
        data = bytearray(open(item["path"], "rb").read())
        dtype = getattr(torch, spec.dtype)
        if item.get("dtype") != spec.dtype or len(data) != item["span"] * spec.itemsize:
            raise ValueError(f"sample file {item['path']} does not hold {spec.dtype}[{item['span']}]")
        base = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        pairs.append((base, base.as_strided(spec.shape, spec.effective_strides())))
    return pairs


def sample_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="kernelgen-check-data-")


__all__ = ["MAX_BYTES_ENV", "read_sample", "sample_folder", "write_sample"]
