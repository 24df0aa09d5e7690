"""Written-out attention, ``softmax(Q Kᵀ · c [+ mask]) V`` as HF's eager GPT-2 and BERT write it, rewritten in an
ATen graph into ATen's CPU flash attention op, which the attention template covers as one region.

In the ATen graph the pattern is ``bmm → view → div|mul by a number → [where(bool, ·, number) | add(·, mask)]
→ softmax (``_softmax`` or its decomposition amax/sub/exp/sum/div over the last dim) → expand/view → bmm``.
It is rewritten only when nothing else reads the scores or the probabilities: a training forward keeps the
probabilities for the backward, so there the pattern stays as it is (materialising them is the point of it).
The GPT-2 style ``where(mask, s, finfo.min)`` becomes the additive mask ``where(mask, 0, finfo.min)``: a kept
score is unchanged and a hidden one is ``s + min``, which rounds to ``min`` as eager's fill does.

Grouped-query attention written as Hugging Face's ``repeat_kv`` (each key/value head copied ``g`` times:
``unsqueeze(x, 2) → expand [B, Hkv, g, T, D] → clone → view [B, Hkv·g, T, D]``) before the CPU flash op reads the
un-copied ``x`` instead (``read_kv_groups``): the op takes K and V with fewer heads itself (query head ``h`` reads
``h // g``, what SDPA's ``enable_gqa`` does), and so does the attention template, so the two copies of every layer's
keys and values are not made. Only where nothing else reads the copies: a training forward saves them for the
backward, so there they stay.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

log = logging.getLogger("kernelgen")

_THROUGH = ("view", "_unsafe_view", "reshape", "expand", "alias")  # layout-only links between the pattern's ops


def _packet(node: Any) -> str:
    return getattr(getattr(node.target, "overloadpacket", None), "__name__", "")


def _is(node: Any, *packets: str) -> bool:
    return getattr(node, "op", None) == "call_function" and _packet(node) in packets


def _only_user(node: Any, user: Any) -> bool:
    return set(node.users) == {user}


def _through_views(node: Any, chain: list) -> Any:
    """The producer of ``node`` past single-user layout ops, each appended to ``chain``."""
    while _is(node, *_THROUGH) and len(node.users) == 1:
        chain.append(node)
        node = node.args[0]
    return node


def _softmax_input(p: Any, chain: list) -> Any | None:
    """x where ``p`` is softmax(x, -1) (whole or decomposed), its nodes appended to ``chain``; else None."""
    val = p.meta.get("val")
    if val is None:
        return None
    last = (-1, val.dim() - 1)
    if _is(p, "_softmax") and p.args[1] in last and not p.args[2] and _only_user(p.args[0], p):
        chain.append(p)
        return p.args[0]
    if not (_is(p, "div") and len(p.args) == 2 and _is(p.args[0], "exp") and _is(p.args[1], "sum")):
        return None
    exp, total = p.args
    if not (_is(total, "sum") and total.args[0] is exp and list(total.args[1]) in ([-1], [val.dim() - 1])
            and (total.args[2] if len(total.args) > 2 else total.kwargs.get("keepdim", False))):
        return None
    sub = exp.args[0]
    if not (_is(sub, "sub") and _is(sub.args[1], "amax") and sub.args[1].args[0] is sub.args[0]):
        return None
    amax, x = sub.args[1], sub.args[0]
    if list(amax.args[1]) not in ([-1], [val.dim() - 1]) or not (amax.args[2] if len(amax.args) > 2 else False):
        return None
    if not (set(exp.users) == {total, p} and _only_user(total, p) and _only_user(sub, exp) and _only_user(amax, sub)
            and set(x.users) == {amax, sub}):
        return None
    chain.extend([p, total, exp, sub, amax])
    return x


def _scaled_bmm(x: Any, chain: list, readers: int = 1) -> tuple | None:
    """(bmm, scale) where ``x`` (read ``readers`` times by the pattern) is ``bmm``'s result viewed and multiplied
    or divided by a number, else None."""
    links: list = []
    scale = 1.0
    if _is(x, "div", "mul") and len(x.args) == 2 and isinstance(x.args[1], (int, float)) \
            and not isinstance(x.args[1], bool) and len(x.users) == readers:
        scale = 1.0 / float(x.args[1]) if _packet(x) == "div" else float(x.args[1])
        links.append(x)
        x = x.args[0]
    bmm = _through_views(x, links)
    if not (_is(bmm, "bmm") and len(bmm.users) == 1):
        return None
    chain.extend(links)
    return bmm, scale


def _scores(x: Any, chain: list, depth: int = 0) -> tuple | None:
    """(bmm, scale, mask) where ``x`` is ``bmm`` viewed, scaled and masked; ``mask`` is ("add", nodes) (one additive
    mask or several added in turn: T5's decoder adds its position bias, then the causal mask), ("where", cond, fill)
    or None."""
    if _is(x, "where") and len(x.args) == 3 and hasattr(x.args[0], "meta") and hasattr(x.args[1], "meta"):
        cond, s, fill = x.args
        if str(getattr(cond.meta.get("val"), "dtype", "")) != "torch.bool" or len(s.users) != 1:
            return None
        if not (isinstance(fill, (int, float)) or (_is(fill, "scalar_tensor") and fill.meta["val"].dim() == 0)):
            return None
        found = _scaled_bmm(s, chain)
        return None if found is None else (*found, ("where", cond, fill))
    if _is(x, "add") and len(x.args) == 2 and all(hasattr(a, "meta") for a in x.args) and not x.kwargs:
        for s, other in (x.args, x.args[::-1]):
            found = _scaled_bmm(s, chain) if len(s.users) == 1 else None
            if found is not None:
                return (*found, ("add", [other]))
        for s, other in (x.args, x.args[::-1]):  # (scores + m1) + m2: scores + (m1 + m2)
            inner = _scores(s, links := [], depth + 1) if depth < 3 and len(s.users) == 1 and _is(s, "add") else None
            if inner is not None and inner[2] is not None and inner[2][0] == "add":
                chain.extend([*links, s])
                return (*inner[:2], ("add", [*inner[2][1], other]))
        return None
    found = _scaled_bmm(x, chain, readers=len(x.users))  # the softmax checked that only it reads x
    return None if found is None else (*found, None)


def _match(bmm2: Any) -> tuple | None:
    chain: list = []
    p = _through_views(bmm2.args[0], chain)
    if len(p.users) != 1:
        return None
    x = _softmax_input(p, chain)
    if x is None or x.meta.get("val") is None or x.meta["val"].dim() != 4:
        return None
    found = _scores(x, chain)
    if found is None:
        return None
    chain.append(x)
    bmm1, scale, mask = found
    shape = tuple(x.meta["val"].shape)
    q3, kt3, v3 = bmm1.args[0], bmm1.args[1], bmm2.args[1]
    dtypes = {str(n.meta["val"].dtype) for n in (q3, kt3, v3, x)}
    if len(dtypes) != 1 or dtypes.pop() not in ("torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"):
        return None
    if q3.meta["val"].shape[0] != shape[0] * shape[1] or tuple(bmm1.meta["val"].shape[1:]) != shape[2:]:
        return None
    if mask is not None and mask[0] == "add":
        import torch

        for node in mask[1]:
            m = node.meta.get("val")
            if not isinstance(m, torch.Tensor) or m.dtype != x.meta["val"].dtype or m.dim() > 4 or \
                    torch.broadcast_shapes(tuple(m.shape), shape) != shape:
                return None
    return bmm1, scale, mask, shape


def _four_d(n3: Any, shape: tuple) -> Any | None:
    """The [B, H, X, Y] tensor that bmm operand ``n3`` ([B*H, X, Y]) was copied from by matmul's decomposition
    (``view(clone(expand(t)))`` with a no-op expand): reading ``t`` in place saves the copy. None if there is none."""
    node = n3
    if _is(node, "view", "_unsafe_view", "reshape"):
        node = node.args[0]
        if _is(node, "clone") and node.kwargs.get("memory_format") in (None, _contiguous()):
            node = node.args[0]
        if _is(node, "expand") and tuple(node.args[1]) == shape:
            node = node.args[0]
        val = node.meta.get("val")
        if val is not None and tuple(val.shape) == shape:
            return node
    return None


def _contiguous() -> Any:
    import torch

    return torch.contiguous_format


def fuse_written_attention(gm: Any) -> int:
    """Rewrite every written-out attention in ``gm`` (an ATen fx graph with ``meta['val']``) whose scores and
    probabilities nothing else reads into ``_scaled_dot_product_flash_attention_for_cpu``; returns how many."""
    count, tried = 0, False
    for bmm2 in list(gm.graph.nodes):
        found = _match(bmm2) if _is(bmm2, "bmm") else None
        if found is None:
            continue
        tried = True
        try:
            out, out3 = _flash_nodes(gm.graph, bmm2, *found)
        except Exception as exc:  # an odd graph (e.g. values of several fake modes) keeps its pattern
            log.debug("written-out attention at %s left as it is: %s", bmm2.name, exc)
            continue
        for user in list(bmm2.users):  # matmul's decomposition views the bmm back to [B, H, Tq, Dv]: take out
            if _is(user, "view", "_unsafe_view", "reshape") and tuple(user.meta["val"].shape) == tuple(out.meta["val"].shape):
                user.replace_all_uses_with(out)
        bmm2.replace_all_uses_with(out3)  # the pattern's nodes are dead now: removed below
        count += 1
    if tried:
        gm.graph.eliminate_dead_code()  # the replaced pattern, and the nodes of a rewrite that failed half-way
        gm.recompile()
    return count


def _flash_nodes(graph: Any, bmm2: Any, bmm1: Any, scale: float, mask: tuple | None, shape: tuple) -> tuple:
    """New nodes before ``bmm2`` computing the matched attention with the flash op: (out [B, H, Tq, Dv], out
    viewed as ``bmm2``'s [B*H, Tq, Dv])."""
    import torch
    from torch._guards import detect_fake_mode

    aten = torch.ops.aten
    b, h, tq, tk = shape
    q3, kt3, v3 = bmm1.args[0], bmm1.args[1], bmm2.args[1]
    fake_mode = detect_fake_mode([n.meta.get("val") for n in (bmm1, bmm2, q3, kt3, v3)])
    if fake_mode is None:
        raise ValueError("no fake mode")

    def add(target: Any, *args: Any, **kwargs: Any) -> Any:
        node = graph.call_function(target, args, kwargs)
        vals = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with fake_mode:  # the new node's meta value, made in the graph's fake mode
            node.meta["val"] = target(*vals[0], **vals[1])
        return node

    def four_d(n3: Any) -> Any:
        full = (b, h, *n3.meta["val"].shape[1:])
        return _four_d(n3, full) or add(aten.view.default, n3, list(full))

    with graph.inserting_before(bmm2):
        q, v = four_d(q3), four_d(v3)
        k = add(aten.permute.default, four_d(kt3), [0, 1, 3, 2])
        attn_mask = None
        if mask is not None and mask[0] == "add":
            attn_mask = mask[1][0]
            for other in mask[1][1:]:  # several additive masks: their sum (rounded once more than eager's)
                attn_mask = add(aten.add.Tensor, attn_mask, other)
        elif mask is not None:
            dtype = q.meta["val"].dtype
            zero = add(aten.scalar_tensor.default, 0.0, dtype=dtype)
            fill = mask[2] if hasattr(mask[2], "meta") else add(aten.scalar_tensor.default, float(mask[2]), dtype=dtype)
            if fill.meta["val"].dtype != dtype:  # eager's where took the scores' dtype
                fill = add(aten._to_copy.default, fill, dtype=dtype)
            attn_mask = add(aten.where.self, mask[1], zero, fill)
        if attn_mask is not None and attn_mask.meta["val"].dim() not in (2, 4):  # the op takes rank 2 or 4
            m_shape = list(attn_mask.meta["val"].shape)
            attn_mask = add(aten.view.default, attn_mask, [1] * (4 - len(m_shape)) + m_shape)
        flash = add(aten._scaled_dot_product_flash_attention_for_cpu.default, q, k, v, 0.0, False,
                    attn_mask=attn_mask, scale=scale)
        out = add(operator.getitem, flash, 0)
        return out, add(aten.reshape.default, out, list(bmm2.meta["val"].shape))


_FLASH_CPU = "_scaled_dot_product_flash_attention_for_cpu"


def _repeated(node: Any) -> tuple[Any, int] | None:
    """``(x, g)`` where 4-D ``node`` is ``x`` ([B, Hkv, T, D]) with each head repeated ``g`` times (``repeat_kv``:
    unsqueeze at dim 2, expand, a contiguous clone unless the result is a view already, view) and nothing else
    reads the nodes between; else None."""
    val = node.meta.get("val")
    if not _is(node, "view", "_unsafe_view", "reshape") or val is None or val.dim() != 4 or len(node.users) != 1:
        return None
    chain = node.args[0]
    if _is(chain, "clone") and len(chain.users) == 1:
        chain = chain.args[0]
    if not (_is(chain, "expand") and len(chain.users) == 1 and _is(chain.args[0], "unsqueeze")
            and chain.args[0].args[1] in (2, -3) and len(chain.args[0].users) == 1):
        return None
    x = chain.args[0].args[0]
    xv, ev = x.meta.get("val"), chain.meta.get("val")
    if xv is None or ev is None or xv.dim() != 4 or ev.dim() != 5:
        return None
    b, hkv, g, t, d = ev.shape
    if (b, hkv, t, d) != tuple(xv.shape) or tuple(val.shape) != (b, hkv * g, t, d) or g < 2:
        return None
    return x, int(g)


def read_kv_groups(gm: Any) -> int:
    """Point every CPU flash attention whose K and V are ``repeat_kv`` copies (``_repeated``, one group size) at the
    un-copied tensors; returns how many. The copies' nodes are removed when nothing reads them any more."""
    count = 0
    for node in list(gm.graph.nodes):
        if not _is(node, _FLASH_CPU) or len(node.args) < 3:
            continue
        k, v = _repeated(node.args[1]), _repeated(node.args[2])
        if k is None or v is None or k[1] != v[1]:
            continue
        q = node.args[0].meta.get("val")
        if q is None or q.dim() != 4 or q.shape[1] != k[0].meta["val"].shape[1] * k[1]:
            continue
        node.args = (node.args[0], k[0], v[0], *node.args[3:])
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count


__all__ = ["fuse_written_attention", "read_kv_groups"]
