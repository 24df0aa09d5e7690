"""A small Gaussian-process regressor (Matérn 5/2, one length scale per parameter) in numpy.

Hyperparameters maximise the log marginal likelihood (L-BFGS-B with analytic gradients, warm-started from
the previous fit); the model is tiny (hundreds of points), so a fit takes milliseconds.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize
from scipy.special import ndtr

_SQRT5 = np.sqrt(5.0)
# Bounds of log(length scale) per dimension, log(signal variance) and log(noise variance). Inputs live in
# [0, 1] and targets are standardised, so these cover "irrelevant" to "changes every step" and keep the
# noise from swallowing the signal.
_LOG_LS = (np.log(0.1), np.log(20.0))
_LOG_SF2 = (np.log(0.05), np.log(20.0))
_LOG_NOISE = (np.log(1e-6), np.log(0.2))
_PRIOR_LS, _PRIOR_SD = np.log(0.5), 1.0


def _matern(sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel value and the factor of d k / d log(ls_i) = factor * scaled squared difference i."""
    r = np.sqrt(np.maximum(sq, 0.0))
    e = np.exp(-_SQRT5 * r)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * sq) * e, (5.0 / 3.0) * (1.0 + _SQRT5 * r) * e


class GaussianProcess:
    """Fit with ``fit(X, y)``, then ``predict(Xs) -> (mean, std)`` and ``expected_improvement``."""

    def __init__(self, dims: int) -> None:
        self.theta = np.concatenate([np.full(dims, np.log(0.5)), [0.0, np.log(1e-3)]])

    def _unpack(self, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        d = len(theta) - 2
        return np.exp(theta[:d]), float(np.exp(theta[d])), float(np.exp(theta[d + 1]))

    def _neg_lml(self, theta: np.ndarray, diffs: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        ls, sf2, noise = self._unpack(theta)
        scaled = diffs / ls**2  # (n, n, d): squared differences over squared length scales
        sq = scaled.sum(axis=2)
        m, dfac = _matern(sq)
        n = len(y)
        K = sf2 * m + (noise + 1e-8) * np.eye(n)
        try:
            c = cho_factor(K, lower=True)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        alpha = cho_solve(c, y)
        lml = -0.5 * y @ alpha - np.log(np.diag(c[0])).sum() - 0.5 * n * np.log(2 * np.pi)
        # A log-normal prior on length scales (around half the range) keeps rough data from collapsing
        # them to "every step is unrelated", which turns expected improvement into random search.
        dev = theta[:-2] - _PRIOR_LS
        lml -= 0.5 * np.sum(dev**2) / _PRIOR_SD**2
        W = np.outer(alpha, alpha) - cho_solve(c, np.eye(n))
        grad = np.empty_like(theta)
        grad[:-2] = 0.5 * np.einsum("ij,ijk->k", W * (sf2 * dfac), scaled) - dev / _PRIOR_SD**2
        grad[-2] = 0.5 * np.sum(W * (sf2 * m))
        grad[-1] = 0.5 * noise * np.trace(W)
        return -lml, -grad

    def fit(self, X: np.ndarray, y: np.ndarray, optimise: bool = True) -> None:
        self.mu, self.sd = float(y.mean()), float(y.std()) or 1.0
        self.X = X
        ys = (y - self.mu) / self.sd
        if optimise:
            diffs = (X[:, None, :] - X[None, :, :]) ** 2
            bounds = [_LOG_LS] * X.shape[1] + [_LOG_SF2, _LOG_NOISE]
            start = np.clip(self.theta, [b[0] for b in bounds], [b[1] for b in bounds])
            res = minimize(self._neg_lml, start, args=(diffs, ys), jac=True, method="L-BFGS-B",
                           bounds=bounds, options={"maxiter": 60})
            if np.all(np.isfinite(res.x)) and res.fun < 1e9:
                self.theta = res.x
        ls, sf2, noise = self._unpack(self.theta)
        self._ls, self._sf2 = ls, sf2
        K = sf2 * _matern(self._sq(X, X))[0] + (noise + 1e-8) * np.eye(len(X))
        self._chol = cho_factor(K, lower=True)
        self._alpha = cho_solve(self._chol, ys)

    def _sq(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        a, b = A / self._ls, B / self._ls
        return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0)

    def predict(self, Xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ks = self._sf2 * _matern(self._sq(Xs, self.X))[0]
        mean = ks @ self._alpha
        v = solve_triangular(self._chol[0], ks.T, lower=True, check_finite=False)
        var = np.maximum(self._sf2 - np.einsum("ij,ij->j", v, v), 1e-12)
        return mean * self.sd + self.mu, np.sqrt(var) * self.sd

    def expected_improvement(self, Xs: np.ndarray, best: float) -> np.ndarray:
        """Expected amount by which each point undercuts ``best`` (minimisation)."""
        mean, std = self.predict(Xs)
        z = (best - mean) / std
        return (best - mean) * ndtr(z) + std * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
