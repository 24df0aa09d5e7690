"""Optuna samplers that only ever propose valid, not-yet-evaluated configs of a ``Domain``.

Each sampler proposes a whole config at once through ``sample_relative``. Samplers think in rows of choice
indices (``Domain``); the study holds the real values (``distributions``: categorical over the real
choices, integers as integers), so optuna-dashboard plots block sizes, not their positions in a list;
``ParamValues`` translates between the two. Built-in Optuna samplers (TPE, CMA-ES, QMC) are wrapped by
``ProjectedSampler``: their proposal is kept when valid and new, else moved to the nearest valid unseen
config, so a constraint violation never costs a measurement. ``RandomSampler``, ``ExhaustiveSampler`` and ``BayesSampler`` pick
straight from the valid set.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from scipy.special import ndtr
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from kernelgen.tune.domain import Domain, Index

# User attributes kernelgen writes on its trials (visible in optuna-dashboard).
ATTR_STATUS = "kg_status"  # measurement status ("ok", "compile_error", ...) of an evaluated trial
ATTR_SKIPPED = "kg_skipped"  # trial closed without a measurement (duplicate proposal); not an evaluation


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def distribution_of(choices: Sequence[Any], ordinal: bool) -> BaseDistribution:
    """The Optuna distribution over a parameter's real choices: ascending integers evenly spaced as an
    ``IntDistribution`` with that step, ascending positive integers of a constant ratio (powers of two) as a
    log-scale ``IntDistribution``, anything else as a ``CategoricalDistribution`` of the values themselves."""
    values = list(choices)
    if ordinal and all(_is_int(c) for c in values) and values == sorted(set(values)) and len(values) > 1:
        steps = {b - a for a, b in zip(values, values[1:])}
        if len(steps) == 1:
            return IntDistribution(values[0], values[-1], step=steps.pop())
        if values[0] >= 1 and all(b % a == 0 for a, b in zip(values, values[1:])) and \
                len({b // a for a, b in zip(values, values[1:])}) == 1:
            return IntDistribution(values[0], values[-1], log=True)
    return CategoricalDistribution(tuple(values))


class ParamValues:
    """Real parameter values (what the study stores) <-> choice indices (what kernelgen's samplers use).

    A value that is not one of the choices (an Optuna sampler's proposal inside an integer range) maps to
    the nearest choice: on a log scale for log distributions, else linearly. Build with ``of(domain)``.
    """

    _cache: "weakref.WeakKeyDictionary[Domain, ParamValues]" = weakref.WeakKeyDictionary()

    def __init__(self, domain: Domain) -> None:
        self.names = domain.names
        self.choices = [tuple(p.choices) for p in domain.tunables]
        self.dists = {name: distribution_of(c, ordinal)
                      for name, c, ordinal in zip(domain.names, self.choices, domain.ordinal)}
        self._index = [{(type(v), v): i for i, v in enumerate(c)} for c in self.choices]

    @classmethod
    def of(cls, domain: Domain) -> "ParamValues":
        found = cls._cache.get(domain)
        if found is None:
            found = cls._cache[domain] = cls(domain)
        return found

    def params(self, row: Index) -> dict[str, Any]:
        return {name: c[int(i)] for name, c, i in zip(self.names, self.choices, row)}

    def value(self, k: int, i: int) -> Any:
        return self.choices[k][int(i)]

    def index(self, k: int, value: Any) -> int | None:
        hit = self._index[k].get((type(value), value))
        if hit is not None:
            return hit
        dist = self.dists[self.names[k]]
        if not isinstance(dist, IntDistribution) or isinstance(value, bool) or \
                not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        if dist.log:
            if value <= 0:
                return 0
            gaps = [abs(math.log(value) - math.log(c)) for c in self.choices[k]]
        else:
            gaps = [abs(value - c) for c in self.choices[k]]
        return int(np.argmin(gaps))

    def row(self, params: dict[str, Any]) -> Index | None:
        """The index row of a trial's params; None when one is missing or not a value of this space."""
        row = []
        for k, name in enumerate(self.names):
            if name not in params:
                return None
            i = self.index(k, params[name])
            if i is None:
                return None
            row.append(i)
        return tuple(row)


def distributions(domain: Domain) -> dict[str, BaseDistribution]:
    """The study's distributions: over each tunable parameter's real values (``distribution_of``)."""
    return dict(ParamValues.of(domain).dists)


@dataclass
class History:
    """What a study has evaluated (index rows, times; NaN = failed) and what is taken (evaluated or pending)."""

    rows: list[Index] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    seen: set[Index] = field(default_factory=set)
    waiting: set[Index] = field(default_factory=set)  # enqueued (warm starts), not yet taken by a worker

    @classmethod
    def of(cls, study: Study, domain: Domain, exclude: int | None = None) -> "History":
        hist = cls()
        values = ParamValues.of(domain)
        for t in study.get_trials(deepcopy=False):
            if t.number == exclude or t.user_attrs.get(ATTR_SKIPPED):
                continue
            params = t.params if t.params else t.system_attrs.get("fixed_params", {})
            row = values.row(params)
            if row is None:
                continue
            if t.state in (TrialState.RUNNING, TrialState.WAITING):
                hist.seen.add(row)
                if t.state is TrialState.WAITING:
                    hist.waiting.add(row)
            elif ATTR_STATUS in t.user_attrs and t.state in (TrialState.COMPLETE, TrialState.FAIL):
                ok = t.user_attrs[ATTR_STATUS] == "ok" and t.state is TrialState.COMPLETE
                hist.rows.append(row)
                hist.values.append(float(t.value) if ok else float("nan"))
                hist.seen.add(row)
        return hist


class DomainSampler(BaseSampler):
    """Base of kernelgen samplers: ``propose`` returns a valid unseen index row, or None when none is left.

    Subclasses implement ``propose``; enqueued trials (fixed params: warm starts) are left alone.
    Deterministic for a seed and a study history; not thread-safe (one per Searcher).
    """

    def __init__(self, domain: Domain, seed: int | None = None) -> None:
        self.domain = domain
        self.values = ParamValues.of(domain)
        self._dists = distributions(domain)
        self._seed = seed
        self._rng = np.random.default_rng(seed)

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._dists)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if "fixed_params" in trial.system_attrs or not self._dists:
            return {}
        hist = History.of(study, self.domain, exclude=trial.number)
        row = self.propose(study, trial, hist)
        if row is None:
            return {}
        return self.values.params(row)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        # Reached only when propose found nothing (space exhausted); the Searcher discards such trials.
        k = self.domain.names.index(param_name)
        return self.values.value(k, int(self._rng.integers(0, self.domain.sizes[k])))

    def random_unseen(self, hist: History) -> Index | None:
        cands = self.domain.unseen(hist.seen, self._rng)
        if len(cands) == 0:
            return None
        return tuple(int(v) for v in cands[self._rng.integers(len(cands))])

    def propose(self, study: Study, trial: FrozenTrial, hist: History) -> Index | None:
        raise NotImplementedError


class RandomSampler(DomainSampler):
    """Uniform random search over the valid configs, without replacement."""

    def propose(self, study: Study, trial: FrozenTrial, hist: History) -> Index | None:
        return self.random_unseen(hist)


class ExhaustiveSampler(DomainSampler):
    """Every valid config in lexicographic order of choices (for small spaces or a complete landscape)."""

    def propose(self, study: Study, trial: FrozenTrial, hist: History) -> Index | None:
        cands = self.domain.unseen(hist.seen, self._rng)
        if len(cands) == 0:
            return None
        if not self.domain.enumerated:  # unknown order of a sampled space: lowest index vector first
            cands = cands[np.lexsort(cands.T[::-1])]
        return tuple(int(v) for v in cands[0])


class ProjectedSampler(DomainSampler):
    """An Optuna sampler whose proposal is used when valid and unseen, else replaced by the nearest such.

    A few fresh proposals are tried before projecting, since a stochastic sampler often moves off an
    invalid point on its own; projection keeps the proposal's neighbourhood instead of jumping at random.
    """

    def __init__(self, domain: Domain, inner: BaseSampler, seed: int | None = None, tries: int = 3) -> None:
        super().__init__(domain, seed)
        self.inner = inner
        self.tries = tries

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self.inner.reseed_rng()

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def propose(self, study: Study, trial: FrozenTrial, hist: History) -> Index | None:
        row: Index | None = None
        for _ in range(self.tries):
            space = self.inner.infer_relative_search_space(study, trial)
            params = dict(self.inner.sample_relative(study, trial, space)) if space else {}
            for name, dist in self._dists.items():
                if name not in params:
                    params[name] = self.inner.sample_independent(study, trial, name, dist)
            proposed = self.values.row(params)
            if proposed is None:  # not a value of this space (cannot happen with its own distributions)
                continue
            row = proposed
            if row not in hist.seen and self.domain.is_valid(row):
                return row
        if row is None:
            return self.random_unseen(hist)
        return self.domain.nearest_unseen(row, hist.seen, self._rng)


def failure_fill(values: np.ndarray) -> np.ndarray:
    """Log-times with failures (NaN) replaced by the worst observed log-time: failed regions look bad."""
    logs = np.log(np.where(np.isnan(values), 1.0, values))
    ok = ~np.isnan(values)
    worst = logs[ok].max() if ok.any() else 0.0
    return np.where(ok, logs, worst)


class BayesSampler(DomainSampler):
    """Bayesian optimisation over the valid set: a GP on log times, expected improvement over unseen configs.

    ``n_init`` configs of a maximin start first (each the valid unseen config farthest from the configs
    already taken); then each proposal maximises expected improvement over the valid
    unseen configs (all of them, or ``max_candidates`` random ones plus every unseen neighbour of the five
    best when there are more or the space is too large to enumerate). Parameters are ranks scaled to
    [0, 1] (a log scale for powers of two) plus the alignment of integer values (``Domain.model_features``).
    Failed configs count as the worst time seen, so the model steers away from regions that fail to compile
    or launch.
    """

    def __init__(self, domain: Domain, seed: int | None = None, n_init: int = 10,
                 max_candidates: int = 2048) -> None:
        super().__init__(domain, seed)
        self.n_init = n_init
        self.max_candidates = max_candidates
        self._gp = None
        self._fitted_at = 0

    def propose(self, study: Study, trial: FrozenTrial, hist: History) -> Index | None:
        values = np.asarray(hist.values, dtype=np.float64)
        n_ok = int(np.count_nonzero(~np.isnan(values)))
        if len(values) < self.n_init or n_ok < 2:
            return self.farthest_unseen(hist)
        cands = self.domain.unseen(hist.seen, self._rng)
        if len(cands) > self.max_candidates or not self.domain.enumerated:
            # The model's cost grows with the candidates: score a random share of the space plus every
            # unseen neighbour of the best configs, where the improvement usually is.
            if len(cands) > self.max_candidates:
                cands = cands[self._rng.choice(len(cands), self.max_candidates, replace=False)]
            order = np.argsort(np.where(np.isnan(values), np.inf, values))[:5]
            extra = [nb for i in order for nb in self.domain.neighbours(hist.rows[i], hist.seen)]
            if extra:
                cands = np.unique(np.vstack([cands, np.array(extra, dtype=np.int64)]), axis=0)
        if len(cands) == 0:
            return None
        X = self.domain.model_features(np.array(hist.rows))
        # Log times, not ranks: ranks spread the bulk of mediocre configs as widely as the few fast ones,
        # and on deceptive landscapes (a region good on average, the optimum elsewhere) that steers EI into
        # the good-on-average region. Log time keeps how much faster the fast ones are (bench_search.py).
        y = failure_fill(values)
        mean, std = self._predict(X, y, self.domain.model_features(cands))
        best = float(y.min())
        z = (best - mean) / std
        ei = (best - mean) * ndtr(z) + std * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
        top = np.flatnonzero(ei >= ei.max() * (1 - 1e-9))
        return tuple(int(v) for v in cands[self._rng.choice(top)])

    def farthest_unseen(self, hist: History) -> Index | None:
        """The valid unseen config farthest (scaled rank distance) from its nearest taken config.

        A maximin start puts the first measurements on the edges of the space, so the model interpolates
        towards the extremes instead of extrapolating to them, and tuning optima often sit there (the
        largest tile that fits, one row per block, a flag off). Over random starts it improved best-after-50
        on the recorded landscapes and on cuts held out from the choice (bench_search.py). Pending configs
        count as taken, so parallel workers spread out too.
        """
        if not hist.seen:
            return self.random_unseen(hist)
        cands = self.domain.unseen(hist.seen, self._rng)
        if len(cands) == 0:
            return None
        if len(cands) > self.max_candidates:
            cands = cands[self._rng.choice(len(cands), self.max_candidates, replace=False)]
        taken = self.domain.features(np.array(list(hist.seen), dtype=np.float64))
        points = self.domain.features(cands.astype(np.float64))
        gap = ((points[:, None, :] - taken[None, :, :]) ** 2).sum(axis=2).min(axis=1)
        top = np.flatnonzero(gap >= gap.max() - 1e-12)
        return tuple(int(v) for v in cands[self._rng.choice(top)])

    def _predict(self, X: np.ndarray, y: np.ndarray, Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from kernelgen.tune.gp import GaussianProcess  # deferred: SciPy, which only the Bayes sampler needs

        if self._gp is None:
            self._gp = GaussianProcess(X.shape[1])
        n = len(y)
        # Re-optimising hyperparameters every step buys little once there is data; refit on a schedule.
        optimise = n < 40 or n - self._fitted_at >= max(1, n // 10)
        if optimise:
            self._fitted_at = n
        self._gp.fit(X, y, optimise=optimise)
        return self._gp.predict(Xc)
