"""Domain encoding as the Bayesian sampler's model sees it: rank features plus value alignment."""

from __future__ import annotations

import numpy as np

from kernelgen.ir.space import Param, SearchSpace
from kernelgen.tune.domain import Domain


def test_alignment_column_ranks_powers_of_two_above_their_rank_neighbours() -> None:
    space = SearchSpace([Param("block", (16, 32, 48, 64, 96, 128)), Param("unroll", (1, 3, 5)),
                         Param("mode", ("a", "b"))])
    domain = Domain(space)
    rows = np.array([[i, 0, 0] for i in range(6)])
    feats = domain.model_features(rows)
    # Rank columns for the three parameters, then one alignment column for "block" only: odd unrolls all
    # share alignment 0 and strings have none.
    assert feats.shape == (6, 4)
    np.testing.assert_allclose(feats[:, :3], domain.features(rows.astype(float)))
    align = feats[:, 3]
    assert align.min() == 0.0 and align.max() == 1.0
    by_value = dict(zip((16, 32, 48, 64, 96, 128), align))
    assert by_value[128] > by_value[96] == by_value[32] > by_value[48] == by_value[16]
    assert by_value[64] > by_value[48]


def test_model_features_without_integer_parameters_are_the_rank_features() -> None:
    domain = Domain(SearchSpace([Param("x", (0.5, 1.0, 2.0)), Param("flag", (False, True))]))
    rows = np.array([[0, 1], [2, 0]])
    np.testing.assert_array_equal(domain.model_features(rows), domain.features(rows.astype(float)))
