"""Fit the float32 erf/tanh rationals of ``kernelgen.codegen.cpp_expr.PRELUDE`` and print them as C++.

f(a) ~= a * P(a^2) / Q(a^2) on 0 <= a <= clamp, minimising the max relative error (which also bounds the
absolute error, |f| <= 1), with P(0)/Q(0) pinned to f'(0) so f(x) ~= f'(0) x stays exact near 0 and Q(0) = 1.
Method: Sanathanan-Koerner linearisation with Lawson reweighting (iterated weighted least squares) in
float64 on a Chebyshev basis, keeping the best iterate. Run: ``python tools/fit_rationals.py``.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as Pm
from scipy.special import erf

# name: (function, f'(0), clamp, deg P, deg Q). The clamp is where f rounds to 1 in float32.
SPECS = {"erf": (erf, 2 / np.sqrt(np.pi), 3.92, 5, 5), "tanh": (np.tanh, 1.0, 9.0, 4, 4)}


def fit(f, slope0: float, clamp: float, m: int, n: int, iters: int = 800):
    """Monomial coefficients (low -> high) of P and Q in t = a^2, and the max relative error in float64."""
    u_cheb = (1 - np.cos(np.linspace(0, np.pi, 6000))) / 2
    a = np.unique(np.concatenate([clamp * u_cheb, clamp * np.sqrt(u_cheb), np.linspace(0, clamp, 6000)]))
    g = np.where(a == 0, slope0, f(a) / np.where(a == 0, 1, a))  # f(a) / a as a function of t
    t = a * a
    u = 2 * t / t[-1] - 1
    vp, vq = C.chebvander(u, m), C.chebvander(u, n)
    q_prev, weights, best = np.ones_like(u), np.full_like(u, 1 / len(u)), None
    for _ in range(iters):
        row = np.sqrt(weights) / (g * q_prev)  # relative error of P/Q - g, linearised with the last Q
        lhs = np.hstack([vp, -g[:, None] * vq[:, 1:]]) * row[:, None]
        rhs = g * vq[:, 0] * row
        pin = 1e4 * np.abs(lhs).max()  # P(0) = g(0) Q(0) as a heavily weighted equation (t = 0 is u = -1)
        lhs = np.vstack([lhs, pin * np.concatenate([vp[0], -g[0] * vq[0, 1:]])])
        rhs = np.append(rhs, pin * g[0] * vq[0, 0])
        sol = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        p, q = sol[: m + 1], np.concatenate([[1.0], sol[m + 1:]])
        pv, qv = vp @ p, vq @ q
        if np.any(qv <= 0):
            break
        err = (pv / qv - g) / g
        if best is None or np.abs(err).max() < best[0]:
            best = (np.abs(err).max(), p, q)
        q_prev = qv
        weights = np.maximum(weights * np.abs(err), 1e-300)  # Lawson: weight where the error is large
        weights /= weights.sum()
    err, p, q = best
    scale = np.array([-1.0, 2 / t[-1]])  # u as a polynomial in t

    def monomial(cheb):
        out, power = np.zeros(1), np.array([1.0])
        for c in C.cheb2poly(cheb):
            out, power = Pm.polyadd(out, c * power), Pm.polymul(power, scale)
        return out

    pt, qt = monomial(p), monomial(q)
    return pt / qt[0], qt / qt[0], err


def horner(name: str, coefs) -> str:
    c = [str(np.float32(v)) + "f" for v in coefs]  # shortest text that reads back as the same float32
    expr = c[-1]
    for v in reversed(c[:-1]):
        expr = f"({expr}) * t + {v}" if "+" in expr else f"{expr} * t + {v}"
    return f"{name} = {expr}"


if __name__ == "__main__":
    for name, (f, slope0, clamp, m, n) in SPECS.items():
        p, q, err = fit(f, slope0, clamp, m, n)
        print(f"// {name}: a = min(|x|, {clamp}), degrees {m}/{n} in t = a*a, float64 max rel error {err:.2e}")
        print("  " + horner("p", p) + ";")
        print("  " + horner("q", q) + ";")
