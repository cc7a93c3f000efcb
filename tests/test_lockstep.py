"""Lockstep L-BFGS (pgad/models/lockstep.py): many independent fits at once give what descent.fit's 'lbfgs' gives
each alone — the same algorithm, step for step — and judge each by the same criterion."""
import numpy as np
import pytest

from pgad import loader
from pgad.errors import PgadError
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

    def __init__(self, problem, rows, of=value):
        self.problem, self.rows, self.of = problem, rows, of

    def __call__(self, columns, rows, w):
        f, g = self.of(self.problem, w, self.rows)
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


def objective_of(found, rows, of=value, calls=None):
    """objective(W, at) of lockstep.fit over the problems found (each group's sums by `of`); calls, if given, gets
    the rows of every evaluation."""
    def objective(w, at):
        if calls is not None:
            calls.append(int(rows[at].sum()))
        sums = [of(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
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


def wells(seed=3):
    """G problems that are not convex: Σ (w_i² − a_i)²/4 + b·w, double wells whose curvature 3w² − a is negative
    between them, so that L-BFGS meets what a convex problem never shows it: pairs of negative curvature left out,
    directions that do not descend, steps the line search halves, curvatures made positive."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(0.5, 4, P), rng.normal(scale=0.7, size=P)) for _ in range(G)]


def well(problem, w, rows):
    a, b = problem
    return rows * (np.sum((w * w - a) ** 2) / 4 + b @ w), rows * ((w * w - a) * w + b)


NAMES = [f'w{i}' for i in range(P)]


@pytest.mark.parametrize('tolerance, iterations', [(0.0, 8), (1e-5, 200)])
@pytest.mark.parametrize('penalty', [descent.Penalty(), descent.Penalty(0.0, 0.2),
                                     descent.Penalty(0.0, 0.2, np.array([1.0, 0.0, 1.0, 1.0]))],
                         ids=['none', 'l2', 'l2 masked'])
def test_groups_that_are_not_convex_are_descent_fits(tolerance, iterations, penalty):
    """From 2.5, beyond the wells (the differences' steps scale with |w|): each group's path is descent.fit's
    'lbfgs' step for step, with an l2 penalty of every weight or of some (a mask), stopped by the cap or by
    tolerance alike; the progress report's loss is the mean of the iteration's objectives, and the clock counts the
    rows of every evaluation."""
    found = wells()
    rows = np.arange(2, G + 2) * 3
    calls, reports = [], []
    clock = descent.Clock(lambda: None, reports.append, iterations, every_iterations=1)
    fits = lockstep.fit(objective_of(found, rows, well, calls), np.full((P, G), 2.5), rows, NAMES, iterations,
                        tolerance, penalty, clock)
    for k, fit in enumerate(fits):
        alone = descent.fit(Kernel(found[k], rows[k], well), loader.Table([], int(rows[k]), 0), np.full(P, 2.5), NAMES,
                            'lbfgs', iterations=iterations, tolerance=tolerance, penalty=penalty,
                            clock=descent.Clock(lambda: None, lambda m: None, iterations, warning=lambda m, h: None))
        assert (fit.iterations, fit.stopped, fit.converged) == (alone.iterations, alone.stopped, alone.converged), k
        np.testing.assert_allclose(fit.history, alone.history, rtol=1e-10)
        np.testing.assert_allclose(fit.weights, alone.weights, rtol=1e-8, atol=1e-10)
        assert fit.gradient_norm == pytest.approx(alone.gradient_norm, rel=1e-4, abs=1e-14)
        assert isinstance(fit.seconds, float) and 0 <= fit.seconds < 60
    assert {f.stopped for f in fits} == ({'cap'} if tolerance == 0 else {'tolerance'})
    assert reports[0].startswith(f'iteration 1 of {iterations}, loss {np.mean([f.history[0] for f in fits]):.6g}, ')
    assert clock.rows == sum(calls)


def test_a_group_not_finite_is_descent_check_finites_error():
    """The first group whose objective, gradient or weights are not finite at the start is the error
    descent.check_finite gives for it alone (naming the gradient's weight), or why's for that group; for L-BFGS and
    Newton alike."""
    found = wells()
    rows = np.full(G, 4)

    def broken(loss_of=None, gradient_of=None):
        def objective(w, at):
            f, g = objective_of(found, rows, well)(w, at)
            for j, k in enumerate(at):
                if k == loss_of:
                    f[j] = np.nan
                if k == gradient_of:
                    g[1, j] = np.inf
            return f, g
        return objective
    for fitting in (lockstep.fit, lockstep.newton):
        def error(objective, start=np.ones((P, G)), why=None):
            with pytest.raises(PgadError) as caught:
                fitting(objective, start, rows, NAMES, 10, 0.0, descent.Penalty(), descent.Clock(
                    lambda: None, lambda m: None, 10), why=why)
            return caught.value.message
        assert error(broken(gradient_of=2)) == 'the gradient by "w1" is infinite at the starting weights'
        assert error(broken(loss_of=4, gradient_of=2)) == 'the gradient by "w1" is infinite at the starting weights'
        assert error(broken(loss_of=2, gradient_of=4)) == 'the loss is NaN at the starting weights'
        assert error(broken(loss_of=3), why=lambda k: lambda w, at: PgadError('22012', f'group {k}')) == 'group 3'
        assert error(broken(loss_of=3), why=lambda k: lambda w, at: None) == \
            'the loss is NaN at the starting weights'
        start = np.ones((P, G))
        start[2, 5] = np.inf

        def finite(w, at):
            return np.ones(len(at)), np.ones((P, len(at)))
        assert error(finite, start) == 'weight "w2" is infinite at the starting weights'


def test_newton_stops_where_it_says():
    """Newton's iterations: exactly the cap where it stops there (history and count), none with a cap of 0, and the
    optimum named where the decrement is below the objective's precision."""
    found = problems(2)
    rows = np.full(G, 5)
    for cap in (0, 1, 2):
        fits = lockstep.newton(objective_of(found, rows), np.full((P, G), 3.0), rows, NAMES, cap, 0.0,
                               descent.Penalty(), descent.Clock(lambda: None, lambda m: None, cap))
        assert [(f.iterations, len(f.history), f.stopped) for f in fits] == [(cap, cap, 'cap')] * G
    fits = lockstep.newton(objective_of(found, rows), np.zeros((P, G)), rows, NAMES, 100, 0.0, descent.Penalty(),
                           descent.Clock(lambda: None, lambda m: None, 100))
    assert [f.stopped for f in fits] == ['optimum'] * G
    assert all(isinstance(f.seconds, float) and f.gradient_norm is not None for f in fits)


@pytest.mark.parametrize('fitting', [lockstep.fit, lockstep.newton])
def test_a_model_that_reads_no_weight_is_fitted_at_once(fitting):
    """No weight (a sequence model whose lambda reads none): every group's objective once, no iteration, judged as
    descent.fit judges such a fit: converged at the optimum."""
    rows = np.full(G, 3)

    def objective(w, at):
        return np.arange(len(at), dtype=np.float64), np.zeros((0, len(at)))
    fits = fitting(objective, np.zeros((0, G)), rows, [], 20, 0.0, descent.Penalty(),
                   descent.Clock(lambda: None, lambda m: None, 20))
    assert [(f.iterations, f.converged) for f in fits] == [(0, True)] * G
    assert [f.loss for f in fits] == pytest.approx([k / 3 for k in range(G)])


ONE = [  # (f, ∂f/∂w, start) of one weight: what each way of stopping needs
    (lambda w: (w - 1) ** 2, lambda w: 2 * (w - 1), 1.5),                              # the optimum, exactly
    (lambda w: (w - 1) ** 2, lambda w: 2 * (w - 1), 3.0),
    (lambda w: np.sqrt(1 + w * w) - 1, lambda w: w / np.sqrt(1 + w * w), 10.0),        # steps halved
    (lambda w: np.sqrt(1 + w * w) - 1, lambda w: w / np.sqrt(1 + w * w), -7.0),
    (lambda w: w * w, lambda w: -2 * w, 3.0),                                          # a wrong gradient: no step
    (lambda w: np.cosh(w) + 0.3 * w, lambda w: np.sinh(w) + 0.3, 4.0),
]


def one_objective(w, at):
    return (np.array([ONE[k][0](w[0, j]) for j, k in enumerate(at)]),
            np.array([[ONE[k][1](w[0, j]) for j, k in enumerate(at)]]))


class OneKernel(Kernel):
    def __call__(self, columns, rows, w):
        f, g, _ = self.problem
        return np.array([f(w[0]), g(w[0])])


@pytest.mark.parametrize('tolerance', [0.0, 0.5])
def test_every_way_of_stopping_is_descent_fits(tolerance):
    """Groups that reach a zero gradient exactly ('optimum'), halve their steps, find no step that lowers the
    objective ('search', none taken), or stop by a tolerance after their second iteration, side by side: each is
    descent.fit's 'lbfgs' step for step, the others going on without it."""
    start = np.array([[s for *_, s in ONE]])
    fits = lockstep.fit(one_objective, start, np.ones(len(ONE)), ['a'], 40, tolerance, descent.Penalty(),
                        descent.Clock(lambda: None, lambda m: None, 40))
    for k, fit in enumerate(fits):
        alone = descent.fit(OneKernel(ONE[k], 1), loader.Table([], 1, 0), start[:, k], ['a'], 'lbfgs', iterations=40,
                            tolerance=tolerance, clock=descent.Clock(lambda: None, lambda m: None, 40,
                                                                     warning=lambda m, h: None))
        assert (fit.iterations, fit.stopped, fit.converged) == (alone.iterations, alone.stopped, alone.converged), k
        np.testing.assert_allclose(fit.history, alone.history, rtol=1e-12)
        np.testing.assert_allclose(fit.weights, alone.weights, rtol=1e-12)
    stops = [f.stopped for f in fits]
    assert stops[4] == 'search' and fits[4].iterations == 0
    alone = lockstep.fit(lambda w, at: one_objective(w, [4] * len(at)), start[:, 4:5], np.ones(1), ['a'], 40,
                         tolerance, descent.Penalty(), descent.Clock(lambda: None, lambda m: None, 40))
    assert [(f.stopped, f.iterations) for f in alone] == [('search', 0)]  # no group moved in the iteration
    assert stops[:2] == ['optimum'] * 2
    if tolerance:
        assert stops[3] == 'tolerance' and fits[3].iterations == 2


def test_newton_names_a_failed_search_and_judges_a_capped_fit():
    """Newton on the wrong gradient finds no step ('search', none taken, the others going on); a fit the cap
    stopped far from its optimum is not converged."""
    start = np.array([[s for *_, s in ONE]])
    fits = lockstep.newton(one_objective, start, np.ones(len(ONE)), ['a'], 40, 1e-9, descent.Penalty(),
                           descent.Clock(lambda: None, lambda m: None, 40))
    assert (fits[4].stopped, fits[4].iterations) == ('search', 0)
    assert fits[0].weights == pytest.approx([1.0], abs=1e-9) and fits[0].converged
    found = problems(2)
    rows = np.full(G, 5)
    capped = lockstep.newton(objective_of(found, rows), np.full((P, G), 30.0), rows, NAMES, 1, 0.0,
                             descent.Penalty(), descent.Clock(lambda: None, lambda m: None, 1))
    assert [f.converged for f in capped] == [False] * G
    assert all(f.gradient_norm > descent.threshold(5) for f in capped)


@pytest.mark.parametrize('fitting', [lockstep.newton, lockstep.fit])
def test_a_fixed_weight_costs_no_call(fitting):
    """A weight whose bounds are one value (the weights 'auto' fixes to make each candidate) is held: the fit is the
    fit of the other weights alone, to rounding, and spends no call of the objective on it (newton's Hessian P − 1
    calls, not P; L-BFGS's curvatures at the start likewise)."""
    found = problems(3)
    rows = np.full(G, 10.0)
    calls = []

    def objective(w, at):
        calls.append(len(at))
        sums = [value(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
        return np.array([f for f, _ in sums]), np.stack([g for _, g in sums], axis=1)

    def reduced(w, at):  # the same problems with the last weight 0, in P − 1 weights
        f, g = objective(np.vstack([w, np.zeros((1, w.shape[1]))]), at)
        return f, g[:-1]
    clock = descent.Clock(lambda: None, lambda message: None, 100)
    bounds = descent.Bounds(np.r_[np.full(P - 1, -np.inf), 0.0], np.r_[np.full(P - 1, np.inf), 0.0])
    start = np.vstack([np.ones((P - 1, G)), np.zeros((1, G))])
    fits = fitting(objective, start, rows, [f'w{i}' for i in range(P)], 100, 0.0, descent.Penalty(), clock,
                   bounds=bounds)
    fixed_calls, calls[:] = len(calls), []
    alone = fitting(reduced, start[:-1], rows, [f'w{i}' for i in range(P - 1)], 100, 0.0, descent.Penalty(), clock)
    assert fixed_calls == len(calls)
    for fit, other in zip(fits, alone):
        assert fit.converged and other.converged and fit.weights[-1] == 0.0
        np.testing.assert_allclose(fit.weights[:-1], other.weights, rtol=1e-9, atol=1e-12)


def test_newton_evaluates_no_point_twice():
    """Each group's objective is taken at most once at the same weights: a group that stops at the optimum (or at a
    failed search) is judged by the Hessian it last took there, not one taken again (P more calls a fit)."""
    found = problems(4)
    rows = np.full(G, 7.0)
    seen = set()

    def objective(w, at):
        for j, k in enumerate(at):
            point = (int(k), w[:, j].tobytes())
            assert point not in seen, (k, w[:, j])
            seen.add(point)
        sums = [value(found[k], w[:, j], rows[k]) for j, k in enumerate(at)]
        return np.array([f for f, _ in sums]), np.stack([g for _, g in sums], axis=1)
    clock = descent.Clock(lambda: None, lambda message: None, 100)
    fits = lockstep.newton(objective, np.zeros((P, G)), rows, [f'w{i}' for i in range(P)], 100, 0.0,
                           descent.Penalty(), clock)
    assert all(fit.converged for fit in fits) and {fit.stopped for fit in fits} <= {'optimum', 'search'}


def test_bfgs_update_meets_the_secant_condition():
    """lockstep._update: H + y·yᵀ/(yᵀs) − (Hs)(Hs)ᵀ/(sᵀHs) maps each step s onto its change of gradient y and stays
    symmetric, whatever the step's length; a pair of curvature yᵀs ≤ 0 or about 0 (1e-10 of |y|·|s|), or a Hessian
    with sᵀHs ≤ 0, leaves H as it was."""
    rng = np.random.default_rng(5)
    a = rng.normal(size=(G, P, P))
    h = a @ a.transpose(0, 2, 1) + np.eye(P)
    s, y = rng.normal(size=(P, G)), rng.normal(size=(P, G))
    y[:, 1:] = np.einsum('gij,jg->ig', h[1:] + 0.5 * np.eye(P), s[:, 1:])  # positive curvature but group 0's
    y[:, 0] = -s[:, 0]
    h[1] = -h[1]  # sᵀHs < 0: an indefinite Hessian is not updated either
    s[:, 3] *= 1e-4  # a short step (sᵀHs and yᵀs below 1) is a step like any other
    y[:, 3] = np.einsum('ij,j->i', h[3] + 0.5 * np.eye(P), s[:, 3])
    y[:, 2] = 1e3 * (y[:, 2] - (y[:, 2] @ s[:, 2]) * s[:, 2] / (s[:, 2] @ s[:, 2]))
    y[:, 2] += 1e-13 * np.linalg.norm(y[:, 2]) * s[:, 2] / np.linalg.norm(s[:, 2])  # yᵀs = 1e-13·|y||s|: none to use
    before = h.copy()
    lockstep._update(h, np.arange(G), s, y)
    np.testing.assert_array_equal(h[:3], before[:3])
    np.testing.assert_allclose(np.einsum('gij,jg->ig', h[3:], s[:, 3:]), y[:, 3:], rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(h, h.transpose(0, 2, 1), rtol=0, atol=1e-12)


def test_newton_takes_a_hessian_by_differences_every_few_iterations(monkeypatch):
    """Between Hessians by differences (P calls each) newton steps on BFGS's updates of them: the same optimum,
    judged converged, for fewer rows evaluated than a Hessian by differences at every iteration (REFRESH = 1)."""
    found, rows = problems(3), np.full(G, 5.0)
    clock = descent.Clock(lambda: None, lambda message: None, 100)
    spent = {}
    for refresh in (1, lockstep.REFRESH):
        monkeypatch.setattr(lockstep, 'REFRESH', refresh)
        calls = []
        fits = lockstep.newton(objective_of(found, rows, calls=calls), np.zeros((P, G)), rows, NAMES, 100, 0.0,
                               descent.Penalty(), clock)
        assert all(fit.converged for fit in fits)
        spent[refresh] = (sum(calls), np.stack([fit.weights for fit in fits]))
    assert spent[lockstep.REFRESH][0] < spent[1][0]
    np.testing.assert_allclose(spent[lockstep.REFRESH][1], spent[1][1], rtol=1e-5, atol=1e-8)


def quartics(seed=6):
    """G problems 1 + Σ c_i·(w_i − a_i)⁴: a curvature that falls to 0 at the optimum, where BFGS's secant curvature
    overstates the Hessian (by about half again), so that a decrement on it looks small before Newton's would."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(0.5, 2, P), rng.normal(size=P)) for _ in range(G)]


def quartic(problem, w, rows):
    c, a = problem
    return rows * (1 + np.sum(c * (w - a) ** 4)), rows * 4 * c * (w - a) ** 3


def test_newton_stops_where_a_hessian_by_differences_says():
    """A group newton stops at the optimum stops where the decrement on a Hessian by differences at its weights is
    below the objective's precision — Newton's own stop — not where BFGS's updated Hessian makes it look so."""
    found, rows = quartics(), np.full(G, 3.0)
    clock = descent.Clock(lambda: None, lambda message: None, 200)
    fits = lockstep.newton(objective_of(found, rows, of=quartic), np.zeros((P, G)), rows, NAMES, 200, 0.0,
                           descent.Penalty(), clock)
    for k, fit in enumerate(fits):
        assert fit.stopped == 'optimum', (k, fit.stopped)
        w = fit.weights
        f, g = (v / rows[k] for v in quartic(found[k], w, rows[k]))
        h = np.empty((P, P))
        for i in range(P):
            moved = w.copy()
            moved[i] += lockstep.STEP * max(abs(w[i]), 1.0)
            h[i] = (quartic(found[k], moved, rows[k])[1] / rows[k] - g) / (moved[i] - w[i])
        d = lockstep._directions(g[:, None], ((h + h.T) / 2)[None], w[:, None], None)[:, 0]
        assert not -(d @ g) > 4 * np.finfo(np.float64).eps * abs(f), (k, -(d @ g), f)


def test_a_failed_search_on_an_updated_hessian_is_tried_again(monkeypatch):
    """A line search that fails on BFGS's updated Hessian (here: made to fail on the first search after the first
    iteration, and again along any direction that failed before) is no stop: the group takes a Hessian by
    differences, whose direction is another, and goes on to the optimum."""
    found, rows = problems(2), np.full(G, 5.0)
    searched, failed = [], set()
    real = lockstep._line_search

    def failing_once(*args, **kwargs):
        searched.append(1)
        new_u, new_f, new_g, ok = real(*args, **kwargs)
        d = args[2]
        again = np.array([d[:, j].tobytes() in failed for j in range(d.shape[1])], dtype=bool)
        if len(searched) == 2:
            failed.update(d[:, j].tobytes() for j in range(d.shape[1]))
            again[:] = True
        return new_u, new_f, new_g, ok & ~again
    monkeypatch.setattr(lockstep, '_line_search', failing_once)
    clock = descent.Clock(lambda: None, lambda message: None, 100)
    fits = lockstep.newton(objective_of(found, rows), np.zeros((P, G)), rows, NAMES, 100, 0.0, descent.Penalty(),
                           clock)
    assert len(searched) > 2
    assert all(fit.stopped == 'optimum' and fit.converged for fit in fits), [fit.stopped for fit in fits]
