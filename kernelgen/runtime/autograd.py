"""Gradients for kernel-computed results: the kernel runs the forward, eager autograd the backward.

Why this design rather than running eager whenever an input requires grad: a forward with
grad-requiring inputs is common where no backward follows (evaluation without ``torch.no_grad``, frozen
parameters left ``requires_grad``), and there the kernel's speed is kept; where a backward does follow,
only the inputs are saved (as in activation checkpointing) and the backward replays the traced function
eagerly under autograd, so its gradients are eager's by construction. The replay is only exact because
graphs that reach a kernel are deterministic (random ops have no lowering and run eagerly), and
higher-order gradients work because the replay is itself differentiable.
"""

from __future__ import annotations

from typing import Any


def _function_class() -> type:
    import torch

    class KernelForward(torch.autograd.Function):
        """``apply(run, replay, *inputs)``: ``run(inputs)`` launches the kernel and returns its outputs;
        ``replay(*inputs)`` computes the same outputs with eager ops, for backward."""

        @staticmethod
        def forward(ctx: Any, run: Any, replay: Any, *inputs: Any) -> Any:
            ctx.replay = replay
            ctx.save_for_backward(*inputs)
            outs = run(inputs)
            ctx.mark_non_differentiable(*[o for o in outs if not (o.is_floating_point() or o.is_complex())])
            return tuple(outs)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            inputs = ctx.saved_tensors
            wanted = ctx.needs_input_grad[2:]
            higher = torch.is_grad_enabled()  # create_graph=True: keep the replay connected to the inputs
            with torch.enable_grad():
                leaves = [x if higher else x.detach().requires_grad_(need) for x, need in zip(inputs, wanted)]
                outs = ctx.replay(*leaves)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            wrt = [x for x, need in zip(leaves, wanted) if need]
            found = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True,
                                             create_graph=higher) if pairs and wrt else [None] * len(wrt))
            return (None, None, *[next(found) if need else None for need in wanted])

    return KernelForward


_CLASS: Any = None


def apply(run: Any, replay: Any, inputs: tuple) -> tuple:
    """The kernel outputs for ``inputs``, carrying a ``grad_fn`` when grad mode is on and an input requires grad."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _function_class()
    return _CLASS.apply(run, replay, *inputs)


__all__ = ["apply"]
