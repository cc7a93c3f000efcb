"""Lockstep L-BFGS (pgad/models/lockstep.py): many independent fits at once give what descent.fit's 'lbfgs' gives
each alone — the same algorithm, step for step — and judge each by the same criterion."""
import numpy as np
import pytest

from pgad import loader
from pgad.models import descent, lockstep

P, G = 4, 6


def problems(seed=0):
    """G convex problems of P weights: a quadratic plus a softplus term each, of other curvatures and scales."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(G):
        a = rng.normal(size=(P, P)) * 10.0 ** (k - 2)
        out.append((a @ a.T + np.eye(P) * 10.0 ** (k - 3), rng.normal(size=P), rng.normal(size=P)))
    return out


def value(problem, w, rows):
    h, b, c = problem
    z = c @ w
    return rows * (0.5 * w @ h @ w - b @ w + np.logaddexp(0, z)), rows * (h @ w - b + c / (1 + np.exp(-z)))


class Kernel:
    whole = True

    def __init__(self, problem, rows):
        self.problem, self.rows = problem, rows

    def __call__(self, columns, rows, w):
        f, g = value(self.problem, w, self.rows)
        return np.concatenate([[f], g])


def test_each_fit_is_descent_fits():
    found = problems()
    rows = np.arange(1, G + 1) * 10
    calls = []

    def objective(w, at):
        calls.append(len(at))
        sums = [value(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
        return np.array([f for f, _ in sums]), np.stack([g for _, g in sums], axis=1)
    clock = descent.Clock(lambda: None, lambda message: None, 500)
    fits = lockstep.fit(objective, np.ones((P, G)), rows, [f'w{i}' for i in range(P)], 500, 0.0, descent.Penalty(),
                        clock)
    for k, fit in enumerate(fits):
        alone = descent.fit(Kernel(found[k], rows[k]), loader.Table([], int(rows[k]), 0), np.ones(P),
                            [f'w{i}' for i in range(P)], 'lbfgs', iterations=500)
        # the same path, step for step, until the rounding of the objective decides where the search stops
        np.testing.assert_allclose(fit.history[:10], alone.history[:10], rtol=1e-12)
        assert abs(fit.iterations - alone.iterations) <= 3 and fit.stopped == alone.stopped
        assert fit.converged and alone.converged
        np.testing.assert_allclose(fit.weights, alone.weights, rtol=1e-7, atol=1e-9)
        assert fit.loss == pytest.approx(alone.loss, rel=1e-12)
    assert min(calls) < G  # the groups that stopped drop out of the evaluations


def test_l2_and_a_cap_are_descent_fits():
    found = problems(1)
    rows = np.full(G, 7)

    def objective(w, at):
        sums = [value(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
        return np.array([f for f, _ in sums]), np.stack([g for _, g in sums], axis=1)
    penalty = descent.Penalty(0.0, 0.3, np.ones(P))
    fits = lockstep.fit(objective, np.zeros((P, G)), rows, [f'w{i}' for i in range(P)], 3, 0.0, penalty,
                        descent.Clock(lambda: None, lambda message: None, 3))
    for k, fit in enumerate(fits):
        alone = descent.fit(Kernel(found[k], rows[k]), loader.Table([], int(rows[k]), 0), np.zeros(P),
                            [f'w{i}' for i in range(P)], 'lbfgs', iterations=3, penalty=penalty,
                            clock=descent.Clock(lambda: None, lambda message: None, 3, warning=lambda m, h: None))
        assert (fit.iterations, fit.stopped, fit.converged) == (alone.iterations, alone.stopped, alone.converged)
        np.testing.assert_allclose(fit.weights, alone.weights, rtol=1e-9, atol=1e-12)


def objective_of(found, rows):
    def objective(w, at):
        sums = [value(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
        return np.array([f for f, _ in sums]), np.stack([g for _, g in sums], axis=1)
    return objective


def test_newton_reaches_each_optimum_in_few_iterations():
    """Damped Newton with the Hessian from differences of the gradient: each group at the optimum L-BFGS finds,
    judged converged, in the handful of iterations Newton takes on a smooth convex objective."""
    found = problems(2)
    rows = np.full(G, 5)
    clock = descent.Clock(lambda: None, lambda message: None, 100)
    fits = lockstep.newton(objective_of(found, rows), np.zeros((P, G)), rows, [f'w{i}' for i in range(P)], 100,
                           0.0, descent.Penalty(), clock)
    for k, fit in enumerate(fits):
        alone = descent.fit(Kernel(found[k], rows[k]), loader.Table([], int(rows[k]), 0), np.zeros(P),
                            [f'w{i}' for i in range(P)], 'lbfgs', iterations=500)
        assert fit.converged and fit.iterations <= 15
        np.testing.assert_allclose(fit.weights, alone.weights, rtol=1e-6, atol=1e-8)
        assert fit.loss <= alone.loss + 1e-12 * abs(alone.loss)


def test_newton_directions_at_once_are_descents_one_by_one():
    """The batched direction is descent._newton_direction's for every Hessian: positive definite, singular (the
    damping μ), indefinite and not finite."""
    rng = np.random.default_rng(0)
    g = rng.normal(size=(6, 50))
    h = np.empty((50, 6, 6))
    for k in range(50):
        a = rng.normal(size=(6, 6 - k % 3)) * 10.0 ** rng.uniform(-3, 3, 6 - k % 3)
        h[k] = a @ a.T * 10.0 ** rng.uniform(-2, 2)
        if k % 7 == 0:
            h[k] -= np.eye(6) * np.abs(h[k]).max()
    h[5, 0, 0] = np.nan
    expected = np.stack([descent._newton_direction(g[:, k], h[k]) for k in range(50)], axis=1)
    np.testing.assert_allclose(lockstep._newton_directions(g, h), expected, rtol=1e-12, atol=0)
