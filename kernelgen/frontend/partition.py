"""Partition an ATen fx graph into regions that one kernelgen template covers; the rest stays ATen.

Greedy, in topological order: each compute node joins the region of one of its producers when the grown
region still lowers to a kernelgen ``Graph`` that a template matches (``kernelgen.templates.match``), and
else starts a region of its own when it matches alone; otherwise it runs ATen with the reason recorded.
A node joins a producer's region (vertical fusion) or a region reading the same inputs (sibling fusion).
XLA's rules hold by construction: a node belongs to at most one region, so nothing (least of all a
reduction or a GEMM) is ever recomputed; a value read outside its region is one more region output.

Views (``view``, ``permute``, ``expand``, ...) are never members: they stay ATen, where they cost nothing,
and a region reads their result as a strided input (a transposed or broadcast load, no copy). Constants that
ATen makes from Python numbers (``scalar_tensor``, ``full``: 9 to 49 per Hugging Face graph) are folded into
every region that reads them, as literals of its kernel (``Region.consts``); one that only regions read
leaves the graph (``kernelgen.frontend.region_op``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from kernelgen.errors import KernelgenError, UnsupportedOpError
from kernelgen.frontend.decompositions import kept_whole
from kernelgen.frontend.fx_nodes import is_constant, is_constant_input, is_view, spec_of
from kernelgen.ir.graph import Graph, GraphBuilder, NodeRef, prune
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.lower import lower, refusal
from kernelgen.templates import match
from kernelgen.templates.indexing import input_view



@dataclass
class Region:
    """A convex set of fx nodes (``nodes``, topological order) that lowers to ``graph``, matched by
    ``template``; it reads ``inputs`` and hands ``outputs`` (members read outside) back to the graph."""

    nodes: list[Any]
    inputs: list[Any] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    graph: Any = None
    template: str = ""
    consts: list[Any] = field(default_factory=list)  # constant nodes outside it, folded into it as literals


@dataclass
class Partition:
    """The regions found and, for every compute node left to ATen, why."""

    regions: list[Region]
    left: dict[Any, str]


@dataclass
class Lowered:
    """``lower_region``'s result: the kernelgen ``graph``, the external fx nodes it reads (``inputs``, in its
    argument order), the members read outside (``outputs``) and the external constants folded in (``consts``)."""

    graph: Any
    inputs: list[Any]
    outputs: list[Any]
    consts: list[Any]


def lower_region(members: list[Any], seen: Any = None, fresh: Any = (), fold: bool = True) -> Lowered:
    """Lower ``members`` (topological order) to a kernelgen ``Graph``. Inputs are the external fx nodes read,
    except constants (``is_constant``) that ``fold`` lowers into the graph as literals; outputs are the
    members read by any node outside ``members``. With ``seen`` (a container of nodes), only users in
    ``seen`` (and the graph's output) count, and the ``fresh`` members are outputs: the optimistic view of a
    region that later nodes may still join. Raises ``KernelgenError`` (``UnsupportedOpError`` among them)
    when some member does not lower."""
    import torch
    import torch.fx
    import torch.utils._pytree

    member_set = set(members)
    builder = GraphBuilder()
    env: dict[Any, Any] = {}
    inputs: list[Any] = []
    consts: list[Any] = []

    def value(arg: Any) -> Any:
        if arg in env:
            return env[arg]
        if fold and is_constant(arg):
            folded = _fold(builder, arg)
            if folded is not None:
                env[arg] = folded
                consts.append(arg)
                return folded
        spec = spec_of(arg.meta.get("val"))
        if spec is None:
            raise UnsupportedOpError(f"{arg.name} is not a tensor of a supported dtype "
                                     f"({_describe(arg.meta.get('val'))})")
        env[arg] = NodeRef(builder.add("input", (), spec, index=len(inputs)))
        inputs.append(arg)
        return env[arg]

    for node in members:
        reason = refusal(node.target) if node.op == "call_function" else None
        if reason is not None:
            raise UnsupportedOpError(reason)
        _refuse_arguments(node)
        args = torch.fx.node.map_arg(node.args, value)
        kwargs = torch.fx.node.map_arg(node.kwargs, value)
        if node.target is operator.getitem:
            env[node] = lower(builder, "call_function", node.target, args, kwargs, None, node.name)
            continue
        meta = spec_of(node.meta.get("val"))
        if meta is None and not isinstance(node.meta.get("val"), (tuple, list)):
            raise UnsupportedOpError(f"{node.name} is not a tensor of a supported dtype "
                                     f"({_describe(node.meta.get('val'))})")
        where = f"{node.name} = {node.target}(...)"
        env[node] = lower(builder, "call_function", node.target, args, kwargs, meta, where)
    # a 0-d constant is a literal on any device (eager reads a CPU scalar from GPU ops); a larger one is not
    placed = (*inputs, *members, *(c for c in consts if c.meta["val"].dim()))
    devices = {str(v.device) for v in (n.meta.get("val") for n in placed) if hasattr(v, "device")}
    if len(devices) > 1:  # a kernel writes on its inputs' device: a device move stays an ATen copy
        raise UnsupportedOpError(f"region would span devices {sorted(devices)}")
    def read_outside(n: Any) -> bool:
        if seen is not None and n in fresh:
            return True
        return any(u not in member_set and (seen is None or u in seen or u.op == "output") for u in n.users)

    outputs = [n for n in members if isinstance(env.get(n), NodeRef) and read_outside(n)]
    builder.mark_constants({k for k, n in enumerate(inputs) if is_constant_input(n)})
    so_far = Graph(tuple(builder.nodes), ())
    ids = []
    for n in outputs:
        i = int(env[n])
        if input_view(so_far, i) is not None:  # a member (never a view) that computes nothing: eager's fresh
            i = builder.add("clone", (i,), TensorSpec(builder.spec(i).shape, builder.spec(i).dtype))  # tensor of
            # its input's values is a copy kernel (contiguous, as every output; the region op restrides it)
        ids.append(i)
    graph = prune(Graph(tuple(builder.nodes), tuple(ids)))
    return Lowered(graph, inputs, outputs, consts)


def _refuse_arguments(node: Any) -> None:
    """Arguments a kernel cannot take as a literal: a tensor constant, a symbolic size."""
    import torch
    import torch.utils._pytree

    leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
    if any(isinstance(a, torch.Tensor) for a in leaves):
        raise UnsupportedOpError(f"{node.name} takes a tensor constant; it stays ATen")
    if any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) for a in leaves):
        # lowering it would read the symbol's value at its hint: a guard that specialises the graph
        raise UnsupportedOpError(f"{node.name} takes a symbolic size as an argument; it stays ATen")


def _fold(builder: Any, node: Any) -> Any:
    """Constant ``node`` lowered into ``builder`` (a literal, broadcast to its shape), or None when it cannot
    be (a symbolic size, a dtype kernelgen lacks): then the region reads it as an input."""
    meta = spec_of(node.meta.get("val"))
    if meta is None:
        return None
    try:
        _refuse_arguments(node)
        return lower(builder, "call_function", node.target, node.args, node.kwargs, meta, node.name)
    except KernelgenError:
        return None


def _describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return type(value).__name__


def try_region(members: list[Any], seen: Any = None, fresh: Any = ()) -> Region | str:
    """The region of ``members`` when a template covers it, else the reason it is not one (``seen`` and
    ``fresh`` as in ``lower_region``)."""
    try:
        lowered = lower_region(members, seen, fresh)
        if lowered.consts and not lowered.inputs:  # a kernel takes its device from an input: keep one
            lowered = lower_region(members, seen, fresh, fold=False)
    except KernelgenError as exc:
        return str(exc)
    except Exception as exc:  # a lowering bug on an odd graph must leave the node to ATen, not fail compile
        return f"lowering failed: {type(exc).__name__}: {exc}"
    if not lowered.outputs:
        return "computes nothing read outside"
    found = match(lowered.graph)
    if found is None:
        return f"no template covers ops {sorted(lowered.graph.ops())}"
    return Region(list(members), lowered.inputs, lowered.outputs, lowered.graph, found[0].name, lowered.consts)


def folded(regions: list[Region]) -> set[Any]:
    """The constants every reader of which is a region (each folds it): nothing outside needs them made."""
    members = {n for r in regions for n in r.nodes}
    return {c for r in regions for c in r.consts if all(u in members for u in c.users)}


def partition(gm: Any) -> Partition:
    """Regions of ``gm``'s graph (Dynamo/AOTAutograd ATen graph or ``make_fx`` output, with ``meta['val']``)."""
    regions: list[Region] = []
    region_of: dict[Any, int] = {}
    left: dict[Any, str] = {}
    seen: set[Any] = set()  # nodes visited: a user not yet visited may still join the region it reads
    for node in gm.graph.nodes:
        seen.add(node)
        if node.op != "call_function" or node.target is operator.getitem:
            continue  # getitems join with their producer
        if is_view(node):
            left[node] = "view (free in ATen; regions read it through strides)"
            continue
        whole = kept_whole(node.target)
        if whole is not None:
            left[node] = whole
            continue
        if not node.all_input_nodes:
            # A constant (scalar_tensor, full) is no region of its own: each region reading it folds it in as
            # a literal (lower_region), and it leaves the graph once only regions read it (``folded``).
            left[node] = "constant with no tensor inputs (made by ATen, read by ATen ops)"
            continue
        extra = [u for u in node.users if u.target is operator.getitem]  # a multi-output op's projections
        fresh = (node, *extra)
        placed = _join(node, extra, regions, region_of, seen)
        if placed is None:
            found = try_region([node, *extra], seen, fresh)
            if isinstance(found, str):
                left[node] = found
                continue
            regions.append(found)
            placed = len(regions) - 1
        for n in (node, *extra):
            region_of[n] = placed
    return Partition(_settle(regions, left), left)


def _settle(regions: list[Region], left: dict[Any, str]) -> list[Region]:
    """Check every region with its real outputs (users that did not join count now); a region no template
    covers any more gives up its last member (with a multi-output op's projections) until one does. The members
    given up form a region of their own where a template covers them together (a suffix of a convex region is
    convex), else each alone, else they run ATen. Giving a member up adds outputs to the regions it reads, so this
    repeats until nothing changes.

    Why together: a region grows by sibling fusion before all its readers are seen, so a region can end with an
    output the others' template cannot write beside its own. Mistral's key rotary embedding ([B, 2, T, D]) joined
    its query's ([B, 4, T, D]: they read the same cos/sin) and, given up one member at a time, became five regions
    of one op each."""
    changed = True
    while changed:
        changed = False
        for index, region in enumerate(regions):
            found = try_region(region.nodes) if region.nodes else None
            tail: int | None = None  # the region of the members given up so far, while they are one
            while isinstance(found, str):
                changed = True
                cut = max(i for i, n in enumerate(region.nodes) if n.target is not operator.getitem)
                group, region.nodes = region.nodes[cut:], region.nodes[:cut]
                joined = try_region(group + regions[tail].nodes) if tail is not None else None
                if isinstance(joined, Region):
                    regions[tail] = joined
                else:
                    alone = try_region(group)  # a region of its own is convex; settled in a later round
                    if isinstance(alone, Region):
                        regions.append(alone)
                        tail = len(regions) - 1
                    else:
                        tail = None  # a member left to ATen between: what comes before may not join what follows
                        left[group[0]] = (f"left its {region.template} region, which it did not fit with all outputs "
                                          f"({found})")
                found = try_region(region.nodes) if region.nodes else None
            if found is not None:
                regions[index] = found
    return [r for r in regions if r.nodes]


def _join(node: Any, extra: list[Any], regions: list[Region], region_of: dict[Any, int],
          seen: set[Any]) -> int | None:
    """The index of a region that ``node`` joins (the region updated), or None. Producers' regions are tried
    first (vertical fusion: the value stays in registers), then regions reading the same inputs (sibling
    fusion: the shared input is loaded once, the region gets one more output), latest first."""
    producers = sorted({region_of[p] for p in node.all_input_nodes if p in region_of}, reverse=True)
    if len(producers) > 1:
        merged = _merge(node, extra, producers, regions, region_of, seen)
        if merged is not None:
            return merged
    siblings = sorted({i for i, r in enumerate(regions) if r.nodes and i not in producers
                       and any(p in r.inputs for p in node.all_input_nodes)}, reverse=True)
    for index in producers + siblings:
        outside = [p for p in node.all_input_nodes if region_of.get(p) != index]
        if outside and _reaches(regions[index].nodes, set(outside), regions, region_of, seen):
            continue  # an input that depends on the region: one call could not both feed and read it
        found = try_region(regions[index].nodes + [node, *extra], seen, (node, *extra))
        if isinstance(found, Region):
            regions[index] = found
            return index
    return None


def _merge(node: Any, extra: list[Any], producers: list[int], regions: list[Region], region_of: dict[Any, int],
           seen: set[Any]) -> int | None:
    """Join ``node`` and every producer region into one (the rotary embedding's ``x * cos + cat(-x2, x1) * sin``
    reads two pointwise regions), when the union is convex and a template covers it: the index of the merged
    region (the others are emptied), or None."""
    members = [n for n in node.graph.nodes if n in seen and region_of.get(n) in producers]  # topological order
    inside = set(members) | {node, *extra}
    outside = {p for n in inside for p in n.all_input_nodes if p not in inside}
    if _reaches(members, outside, regions, region_of, seen):
        return None  # some input of the union depends on one of the regions: one call cannot feed itself
    found = try_region(members + [node, *extra], seen, (node, *extra))
    if isinstance(found, str):
        return None
    keep = producers[-1]  # the earliest: its call sits before every reader of the others' outputs
    regions[keep] = found
    for index in producers[:-1]:
        regions[index].nodes = []
    for n in members:
        region_of[n] = keep
    return keep


def _reaches(start: list[Any], targets: set[Any], regions: list[Region], region_of: dict[Any, int],
             seen: set[Any]) -> bool:
    """Whether a path leads from the nodes ``start`` to one of ``targets`` once every region is one node (a
    region call reads all its inputs before it writes any output, so entering a region reaches all its
    members). Only visited nodes count: the targets are visited, and so is every node before them. Checked
    on the current regions, not on a record kept per node, because regions grow after their readers were
    visited (two regions each reading the other made the rewritten graph cyclic)."""
    stack, done = list(start), set(start)
    while stack:
        n = stack.pop()
        if n in targets:
            return True
        nxt = list(n.users)
        if n in region_of:
            nxt.extend(regions[region_of[n]].nodes)
        for u in nxt:
            if u in seen and u not in done:
                done.add(u)
                stack.append(u)
    return False


__all__ = ["Lowered", "Partition", "Region", "folded", "lower_region", "partition", "try_region"]
