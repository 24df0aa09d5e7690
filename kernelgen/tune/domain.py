"""The valid configs of a ``SearchSpace`` as rows of choice indices, for samplers that pick from them.

Each tunable parameter (one with more than one choice) becomes an integer index into its ordered choices;
single-choice parameters are constant. Spaces whose Cartesian product is small enough are enumerated once
(valid rows only); larger ones are sampled by rejection, so no ask ever walks the whole product.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kernelgen.ir.space import Param, SearchSpace
from kernelgen.ir.values import Config

# Enumerating costs ~5 µs per product element in Python (constraints are Python callables): 200k is ~1 s,
# paid once per Searcher. Beyond it candidates are drawn by rejection sampling instead.
ENUMERATE_LIMIT = 200_000

Index = tuple[int, ...]


class Domain:
    """Encode/decode configs as index tuples and draw valid candidates. Immutable after construction."""

    def __init__(self, space: SearchSpace, enumerate_limit: int = ENUMERATE_LIMIT) -> None:
        self.space = space
        self.tunables = tuple(p for p in space.params if len(p.choices) > 1)
        self.constants = {p.name: p.choices[0] for p in space.params if len(p.choices) == 1}
        self.names = tuple(p.name for p in self.tunables)
        self.sizes = np.array([len(p.choices) for p in self.tunables], dtype=np.int64)
        self._lookup = [{c: i for i, c in enumerate(p.choices)} for p in self.tunables]
        # Ordered (numeric) parameters are searched by rank; bools and strings are unordered categories.
        self.ordinal = tuple(all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in p.choices)
                             for p in self.tunables)
        self._alignment = _alignment_tables(self.tunables)
        self.rows: np.ndarray | None = None  # (n_valid, d) index matrix when enumerated
        self._row_of: dict[Index, int] = {}
        if space.cardinality() <= enumerate_limit:
            rows = [self.encode(config) for config in space]
            self.rows = np.array(rows, dtype=np.int64).reshape(len(rows), len(self.tunables))
            self._row_of = {row: i for i, row in enumerate(rows)}

    @property
    def enumerated(self) -> bool:
        return self.rows is not None

    @property
    def size(self) -> int | None:
        """Number of valid configs when enumerated, else None (unknown)."""
        return None if self.rows is None else len(self.rows)

    def encode(self, config: Config) -> Index:
        return tuple(self._lookup[i][config[name]] for i, name in enumerate(self.names))

    def decode(self, index: Iterable[int]) -> Config:
        values = dict(self.constants)
        for p, i in zip(self.tunables, index):
            values[p.name] = p.choices[int(i)]
        return Config(values)

    def is_valid(self, index: Index) -> bool:
        if len(index) != len(self.names) or any(not 0 <= i < n for i, n in zip(index, self.sizes)):
            return False
        if self.rows is not None:
            return index in self._row_of
        return self.space.is_valid(self.decode(index))

    def features(self, rows: np.ndarray) -> np.ndarray:
        """Rows scaled to [0, 1] per parameter: the rank of a choice, which is a log scale for powers of two."""
        scale = np.maximum(self.sizes - 1, 1)
        return rows / scale

    def model_features(self, rows: np.ndarray) -> np.ndarray:
        """``features`` plus one alignment column per integer parameter whose choices differ in alignment.

        The alignment of a value is the exponent of the largest power of two dividing it, scaled to [0, 1].
        On GPUs a block of 128 threads often beats both 112 and 144 (whole warps, whole cache lines): on the
        rank axis alone such a config is an isolated spike, with this column it is a trend a model can learn.
        """
        rows = np.asarray(rows)
        cols = [self.features(rows.astype(np.float64))]
        for k, table in self._alignment:
            cols.append(table[rows[:, k].astype(np.int64)][:, None])
        return np.hstack(cols)

    def unseen(self, seen: set[Index], rng: np.random.Generator, limit: int = 4096) -> np.ndarray:
        """Valid index rows not in ``seen``: all of them when enumerated, else up to ``limit`` random ones."""
        if self.rows is not None:
            if not seen:
                return self.rows
            mask = np.ones(len(self.rows), dtype=bool)
            for index in seen:
                row = self._row_of.get(index)
                if row is not None:
                    mask[row] = False
            return self.rows[mask]
        found: dict[Index, None] = {}
        batch_size = min(4 * limit, 1024)
        for _ in range(64):  # rejection sampling; stops once a batch finds nothing new (a small valid set)
            before = len(found)
            batch = rng.integers(0, self.sizes, size=(batch_size, len(self.sizes)))
            for row in map(tuple, batch.tolist()):
                if row not in seen and row not in found and self.is_valid(row):
                    found[row] = None
                    if len(found) >= limit:
                        break
            if len(found) >= limit or len(found) == before:
                break
        return np.array(list(found), dtype=np.int64).reshape(len(found), len(self.sizes))

    def neighbours(self, index: Index, seen: set[Index]) -> list[Index]:
        """Valid unseen configs one step away in one parameter (next/previous rank, or any other category)."""
        out = []
        for k, n in enumerate(self.sizes):
            steps = (-1, 1) if self.ordinal[k] else range(-int(n) + 1, int(n))
            for step in steps:
                j = index[k] + step
                if step == 0 or not 0 <= j < n:
                    continue
                cand = index[:k] + (j,) + index[k + 1:]
                if cand not in seen and self.is_valid(cand):
                    out.append(cand)
        return out

    def nearest_unseen(self, index: Index, seen: set[Index], rng: np.random.Generator) -> Index | None:
        """The valid unseen config closest to ``index`` in scaled rank distance (ties broken at random)."""
        cands = self.unseen(seen, rng)
        if len(cands) == 0:
            return None
        target = self.features(np.asarray(index, dtype=np.float64)[None, :])
        dist = np.abs(self.features(cands) - target).sum(axis=1)
        best = np.flatnonzero(dist <= dist.min() + 1e-12)
        return tuple(int(v) for v in cands[rng.choice(best)])


def _alignment_tables(params: tuple[Param, ...]) -> list[tuple[int, np.ndarray]]:
    """(parameter position, alignment of each choice scaled to [0, 1]) for positive-integer parameters."""
    out = []
    for k, p in enumerate(params):
        if not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in p.choices):
            continue
        exponents = np.array([(c & -c).bit_length() - 1 for c in p.choices], dtype=np.float64)
        span = exponents.max() - exponents.min()
        if span > 0:
            out.append((k, (exponents - exponents.min()) / span))
    return out
