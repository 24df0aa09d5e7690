"""C++ for kernelgen's elementwise IR ops, as the C++ templates call it: typed loads and stores, literals and a
DAG emitter, thin wrappers over ``kernelgen.codegen.cpp_renderer.CppRenderer`` (the op table).

Every C++ renderer (pointwise, row reduction, GEMM and attention epilogues) builds its loop bodies from
these pieces, so the IR's numerics live in one place. Typical use inside a loop body whose index is ``i``::

    env = {ld.node: load(ld.dtype, f"in{ld.arg}[i]") for ld in loads}   # leaves: loads, accumulators...
    lines = emit(graph, dag_nodes(graph, graph.outputs, env), env)        # one `const T vN = ...;` per node
    lines.append(store(out_dtype, "out0[i]", env[graph.outputs[0]]))      # env now names every emitted node

Leaves in ``env`` must already be in ``compute_type`` of their node's dtype (``load`` converts for you).
The emitted code is plain scalar C++: inside a simple counted loop gcc -O3 (IEEE flags: backends/cpp.py)
vectorises it and calls libmvec for expf/logf/erff/tanhf/sinf/expm1f... (declared in ``PRELUDE``).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping, Sequence

from kernelgen.codegen.cpp_prelude import PRELUDE
from kernelgen.codegen.cpp_renderer import COMPUTE, STORAGE, CppRenderer, is_float, literal
from kernelgen.ir.graph import Graph



def storage_type(dtype: str) -> str:
    """The C type of one element of a tensor of ``dtype`` in memory (``uint16_t`` for float16/bfloat16)."""
    return STORAGE[dtype]


def argument_pointers(inputs: Sequence, outputs: Sequence) -> list[str]:
    """The typed ``in<a>`` / ``out<k>`` pointers a kernel body reads its arguments through (from ``ptrs``,
    inputs first), one declaration line each; ``inputs`` and ``outputs`` are ``TensorSpec``s."""
    lines = []
    for a, spec in enumerate(inputs):
        t = storage_type(spec.dtype)
        lines.append(f"  const {t}* __restrict in{a} = (const {t}*)ptrs[{a}];")
    for k, spec in enumerate(outputs):
        t = storage_type(spec.dtype)
        lines.append(f"  {t}* __restrict out{k} = ({t}*)ptrs[{len(inputs) + k}];")
    return lines


def compute_type(dtype: str) -> str:
    """The C type values of ``dtype`` are computed in: ``float`` for float16/bfloat16/float32."""
    return COMPUTE[dtype]


def load(dtype: str, ref: str) -> str:
    """Expression reading stored element ``ref`` (an lvalue such as ``in0[i]``) as ``compute_type(dtype)``."""
    if dtype == "float16":
        return f"kg_h2f({ref})"
    if dtype == "bfloat16":
        return f"kg_bf2f({ref})"
    if dtype == "bool":
        return f"({ref} != 0)"
    return ref


def convert(dtype: str, value: str) -> str:
    """Expression turning ``value`` (in ``compute_type(dtype)``) into ``storage_type(dtype)``."""
    if dtype == "float16":
        return f"kg_f2h({value})"
    if dtype == "bfloat16":
        return f"kg_f2bf({value})"
    if dtype == "bool":
        return f"(uint8_t)({value})"
    return value


def store(dtype: str, ref: str, value: str) -> str:
    """Statement writing ``value`` (in ``compute_type(dtype)``) to stored element ``ref``."""
    return f"{ref} = {convert(dtype, value)};"


def op_expr(graph: Graph, node_id: int, args: Sequence[str]) -> str:
    """The C++ expression of elementwise node ``node_id`` given its inputs' expressions ``args``.

    ``args`` are in the compute types of the input nodes; the result is in the node's compute type.
    Raises ``ValueError`` for an op that is not elementwise and ``UnsupportedOpError`` for one the C++
    renderer cannot match eager for at that dtype.
    """
    return CppRenderer.expr(graph, node_id, args)


def dag_nodes(graph: Graph, roots: Iterable[int], available: Iterable[int]) -> list[int]:
    """Node ids needed to compute ``roots`` that are not in ``available``, in topological order."""
    have = set(available)
    needed: set[int] = set()
    stack = [r for r in roots if r not in have]
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        needed.add(i)
        stack.extend(j for j in graph.nodes[i].inputs if j not in have and j not in needed)
    return sorted(needed)


def emit(graph: Graph, node_ids: Iterable[int], env: MutableMapping[int, str], prefix: str = "v") -> list[str]:
    """Statements computing ``node_ids`` (topological order) from the values already in ``env``.

    Each node becomes ``const <compute type> <prefix><id> = <expr>;`` and ``env[id]`` is set to that
    name; constants are inlined as literals (no statement). Raises ``ValueError`` when a node is not
    elementwise and not in ``env``, naming it.
    """
    lines = []
    for i in node_ids:
        if i in env:
            continue
        node = graph.nodes[i]
        missing = [j for j in node.inputs if j not in env]
        if missing:
            raise ValueError(f"node %{i} ({node.op}) reads %{missing[0]} which is neither in env nor emitted before it")
        expr = op_expr(graph, i, [env[j] for j in node.inputs])
        if node.op == "const":
            env[i] = expr
            continue
        name = f"{prefix}{i}"
        lines.append(f"const {compute_type(node.spec.dtype)} {name} = {expr};")
        env[i] = name
    return lines


OPS = CppRenderer.ops()
"""Every IR op the C++ renderer has a rule for (the rule may still refuse some dtypes)."""

__all__ = ["OPS", "PRELUDE", "argument_pointers", "compute_type", "convert", "dag_nodes", "emit", "is_float", "literal", "load", "op_expr",
           "storage_type", "store"]
