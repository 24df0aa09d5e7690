"""What one call signature runs (``Entry``): a launcher with its outputs' layouts and where its choice came
from, or eager; and the huge-page advice fresh outputs of a few MiB get.

``CompiledFunction`` keeps one ``Entry`` per signature in its cache; its hot path reads ``single``, ``flat``,
``outputs`` and ``launch`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

REASONS = {"db": "the best record in the tuning database", "tuned": "tuned on first call (tune='auto')",
            "bucket": "the best record of this size's bucket (or a neighbouring bucket) in the tuning database",
            "similar": "the best record of a similar device in the tuning database (kernelgen.ir.target.similar_families)",
            "default": "the implementation's default config (no usable tuning record)"}


class Entry:
    """What one call signature runs: a launcher, its outputs and the result's layout, or eager.

    ``single`` / ``flat`` (the result is one kernel output, or a tuple of them) with no input picking
    and no autograd run on the hot path; every other entry has ``slow`` set and goes through ``_run``.
    """

    __slots__ = ("launch", "outputs", "single", "flat", "slow", "eager", "check", "grad", "plan", "picks",
                 "device", "cpu", "replay", "run", "impl", "config", "source", "huge", "path", "hash", "reason",
                 "family", "bucket", "graph")

    def __init__(self, launch: Callable[..., None] | None = None, outputs: tuple = (), *, eager: bool = False,
                 check: bool = False, plan: Any = None, picks: tuple | None = None, device: Any = None,
                 grad: bool = False, replay: Any = None, impl: str = "", config: Any = None,
                 source: str = "eager", path: Any = None, digest: str | None = None, reason: str = "") -> None:
        self.launch = launch
        self.outputs = outputs  # ((shape, torch dtype), ...) of each kernel output
        self.eager = eager
        self.check = check  # eager because meta shapes failed: an eager failure means bad inputs
        self.plan = plan
        self.picks = picks  # graph inputs as indices into the call values + module state; None: all, in order
        self.device = device  # outputs are allocated here: the inputs' device
        self.cpu = device is not None and device.type == "cpu"  # the hot path's cheap out= device check
        self.grad = grad  # some input requires grad: autograd when grad mode is on
        self.replay = replay
        self.flat = plan is not None and (plan.is_single or plan.is_flat_tuple)
        self.single = self.flat and plan.is_single
        self.slow = eager or grad or picks is not None or not self.flat
        self.impl = impl
        self.config = config
        self.source = source  # "db", "tuned", "default" or "eager"
        self.path = path  # the generated source file in the kernel cache (explain shows it)
        self.hash = digest  # the implementation hash its tuning records carry
        self.reason = reason  # why it runs eagerly, or why this config was chosen
        self.huge = [False] * len(outputs)  # outputs big enough to ask for transparent huge pages
        self.family: str | None = None  # the shape family whose generic kernel runs, for explain()
        self.bucket: int | None = None
        self.graph: Any = None  # the workload graph its records are keyed by (a model's tuner lists them)
        self.run = self._fresh

    def _fresh(self, inputs: tuple) -> tuple:
        """Launch into freshly allocated outputs on the inputs' device."""
        outs = tuple([_empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.outputs])
        if HUGE_ADVICE:
            for o, huge in zip(outs, self.huge):
                if huge:
                    advise_huge(o)
        self.launch(*inputs, *outs)
        return outs


_empty: Any = None  # torch.empty, bound by ``bind_torch`` when a function is compiled


def bind_torch() -> tuple[Any, Any, Any]:
    """``(torch.empty, torch.Tensor, torch.is_grad_enabled)``, importing torch on the first compile: importing
    kernelgen does not import torch, and the hot paths look these up as module globals."""
    global _empty
    import torch  # deferred: importing kernelgen stays free of torch until something is compiled

    _empty = torch.empty
    return torch.empty, torch.Tensor, torch.is_grad_enabled


HUGE_PAGE = 1 << 21
HUGE_MIN_BYTES = 8 << 20


def huge_page_advice() -> Any:
    """``madvise(MADV_HUGEPAGE)`` when transparent huge pages are opt-in (``[madvise]``), else None.

    Why: a fresh 128 MiB output costs ~32k page faults on first touch, about twice the kernel itself;
    with 2 MiB pages it costs 64. Only the pages of the fresh output are advised (advice, not a mapping
    change), so torch's other memory is untouched.
    """
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as handle:
            if "[madvise]" not in handle.read():
                return None
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


HUGE_ADVICE = huge_page_advice()


def advise_huge(tensor: Any) -> None:
    """Ask for transparent huge pages under the whole 2 MiB pages of ``tensor``'s memory (``HUGE_ADVICE`` set)."""
    start = tensor.data_ptr()
    lo = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    hi = (start + tensor.nbytes) & ~(HUGE_PAGE - 1)
    if hi > lo:
        HUGE_ADVICE(lo, hi - lo, 14)  # MADV_HUGEPAGE; failure only means small pages


__all__ = ["Entry", "HUGE_ADVICE", "HUGE_MIN_BYTES", "HUGE_PAGE", "REASONS", "advise_huge", "bind_torch",
           "huge_page_advice"]
