"""Bounded weights (issue 46, item 1): pgad.train's bounds => '{"alpha": [0, 1]}'. Every optimizer keeps the weights
within their bounds by projected steps, and a fit whose weights sit at a bound with the gradient pointing out of it
is converged (the KKT conditions). Oracles: scipy's lsq_linear (bounded least squares, exact) and L-BFGS-B on the
same sum of squares computed here in numpy, for simple exponential smoothing per group."""
import json
import re

import numpy as np
import pytest
from scipy.optimize import lsq_linear, minimize

from conftest import error_of, heard
from pgad import loader
from pgad.models import descent, lockstep

SES = '{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.y - s.level)"}}'


# --- the optimizers, on a bounded least squares problem (no server) --------------------------------------------
def problem(seed=0, scaled=True):
    """Columns of very different scales (or, not scaled, of one: for gradient descent's fixed rate), and weights
    whose unbounded optimum lies outside the bounds for two of three: a at its upper bound, b at its lower, c
    inside."""
    rng = np.random.default_rng(seed)
    scales = np.array([1.0, 100.0, 0.01]) if scaled else np.ones(3)
    x = rng.normal(size=(300, 3)) * scales
    y = x @ (np.array([2.0, -1.0, 0.5]) / scales) + rng.normal(size=300) * 0.1
    lower, upper = np.array([0.0, 0.0, -np.inf]), np.array([1.0, np.inf, 300.0])
    return x, y, lower, upper


class Kernel:
    """descent.fit's kernel of Σ (x·w − y)², with its Hessian's upper half for newton."""
    whole = True

    def __init__(self, x, y, hessian=False):
        self.x, self.y, self.hessian = x, y, hessian

    def __call__(self, columns, rows, w):
        r = self.x @ w - self.y
        sums = [[r @ r], 2 * self.x.T @ r]
        if self.hessian:
            sums.append((2 * self.x.T @ self.x)[np.triu_indices(len(w))])
        return np.concatenate(sums)


@pytest.mark.parametrize('optimizer', ['lbfgs', 'newton', 'gd', 'adam'])
def test_every_optimizer_reaches_the_bounded_optimum(optimizer):
    x, y, lower, upper = problem(scaled=optimizer in ('lbfgs', 'newton'))
    want = lsq_linear(x, y, bounds=(lower, upper), method='bvls', tol=1e-15).x
    fit = descent.fit(Kernel(x, y, optimizer == 'newton'), loader.Table([], len(y), 0), [0.5, 0.0, 0.0],
                      ['a', 'b', 'c'], optimizer, 0.05, 3000 if optimizer in ('gd', 'adam') else 200,
                      bounds=descent.Bounds(lower, upper))
    assert np.all(fit.weights >= lower) and np.all(fit.weights <= upper)
    assert fit.weights[0] == 1.0 and fit.weights[1] == 0.0  # held exactly at the bound
    assert fit.weights[2] == pytest.approx(want[2], rel=1e-6 if optimizer in ('lbfgs', 'newton', 'gd') else 1e-3)
    assert fit.converged or optimizer == 'adam', fit


def test_an_interior_optimum_is_the_unbounded_one():
    """Bounds the optimum does not touch change nothing: the same weights as without them, to the rounding."""
    x, y, _, _ = problem()
    loose = descent.Bounds(np.array([-10.0, -1.0, 0.0]), np.array([10.0, 1.0, 100.0]))
    free = descent.fit(Kernel(x, y), loader.Table([], len(y), 0), [0.5, 0.0, 0.0], ['a', 'b', 'c'], 'lbfgs',
                       iterations=200)
    held = descent.fit(Kernel(x, y), loader.Table([], len(y), 0), [0.5, 0.0, 0.0], ['a', 'b', 'c'], 'lbfgs',
                       iterations=200, bounds=loose)
    assert held.converged and free.converged
    np.testing.assert_allclose(held.weights, free.weights, rtol=1e-7)


def test_a_gradient_into_the_interval_does_not_hold_a_weight():
    """A weight that starts at its bound with the gradient pointing inside leaves it: only a bound the descent
    would cross holds a weight."""
    x, y, _, _ = problem()
    bounds = descent.Bounds(np.array([1.5, -np.inf, -np.inf]), np.array([np.inf, np.inf, np.inf]))
    fit = descent.fit(Kernel(x, y), loader.Table([], len(y), 0), [1.5, 0.0, 0.0], ['a', 'b', 'c'], 'lbfgs',
                      iterations=200, bounds=bounds)
    want = lsq_linear(x, y, method='bvls', tol=1e-15).x
    assert fit.converged
    assert fit.weights[0] == pytest.approx(want[0], rel=1e-7) and fit.weights[0] > 1.5


@pytest.mark.parametrize('method', [lockstep.fit, lockstep.newton])
def test_lockstep_holds_each_group_at_its_own_bound(method):
    """Groups fitted together: one whose optimum is inside, one whose a crosses its upper bound; each exactly as
    lsq_linear's."""
    x, y, lower, upper = problem()
    ys = np.stack([x @ np.array([0.5, -0.01, 50.0]) + 1e-3 * np.sin(np.arange(len(y))), y], axis=1)

    def objective(w, at):
        r = x @ w - ys[:, at]
        return np.sum(r * r, axis=0), 2 * x.T @ r
    clock = descent.Clock(lambda: None, lambda message: None, 200)
    fits = method(objective, np.tile([[0.5], [0.0], [0.0]], (1, 2)), np.full(2, len(y)), ['a', 'b', 'c'], 200, 0.0,
                  descent.Penalty(mask=np.ones(3)), clock, bounds=descent.Bounds(lower, upper))
    for k, fit in enumerate(fits):
        want = lsq_linear(x, ys[:, k], bounds=(lower, upper), method='bvls', tol=1e-15).x
        assert fit.converged, (k, fit)
        np.testing.assert_allclose(fit.weights, want, rtol=1e-6, atol=1e-9)
        assert np.all(fit.weights >= lower) and np.all(fit.weights <= upper)
    assert fits[1].weights[0] == 1.0 and fits[0].weights[0] < 1.0


# --- pgad.train (on a real server) ------------------------------------------------------------------------------
def ses_sse(params, ys):
    alpha, level = params
    total = 0.0
    for v in ys:
        total += (v - level) ** 2
        level += alpha * (v - level)
    return total


def ses_series():
    """Three series: white noise about a constant (α near 0), a random walk (α inside), and a twice-integrated
    walk whose least squares α is above 1 unbounded."""
    rng = np.random.default_rng(7)
    n = 150
    return [20 + rng.normal(0, 1, n), 20 + np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 0.5, n),
            20 + np.cumsum(np.cumsum(rng.normal(0, 0.3, n)))]


def load(db, table, groups):
    db.execute(f'DROP TABLE IF EXISTS {table}')
    db.execute(f'CREATE TABLE {table} (g int, day date, y float8)')
    with db.cursor().copy(f'COPY {table} (g, day, y) FROM STDIN') as copy:
        for g, ys in enumerate(groups):
            for k, v in enumerate(ys):
                copy.write_row((g, str(np.datetime64('2024-01-01') + k), float(v)))


@pytest.mark.parametrize('optimizer', ['newton', 'lbfgs'])
def test_bounded_smoothing_is_l_bfgs_b_s_optimum(db, optimizer):
    groups = ses_series()
    load(db, 'bounded_ses', groups)
    rows = db.execute("SELECT group_key->>'g', weights, converged, options FROM pgad.train('bses', 'λ(d, w, s) "
                      "s.level', 'squared', 'SELECT * FROM bounded_ses', '{\"alpha\": 0.5, \"l0\": 20}', "
                      "order_by => 'day', group_by => 'g', state => %s, optimizer => %s, "
                      "bounds => '{\"alpha\": [0, 1]}') ORDER BY 1", [SES, optimizer]).fetchall()
    assert len(rows) == 3
    for (g, weights, converged, options), ys in zip(rows, groups):
        want = minimize(ses_sse, [0.5, 20.0], args=(ys,), method='L-BFGS-B', bounds=[(0, 1), (None, None)],
                        options=dict(ftol=1e-15, gtol=1e-12, maxiter=10000)).x
        got = [weights['alpha'], weights['l0']]
        assert converged, (g, weights)
        assert 0 <= got[0] <= 1
        assert ses_sse(got, ys) <= ses_sse(want, ys) * (1 + 1e-9), (g, got, want)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert options['bounds'] == {'alpha': [0, 1]}
        assert options['at_bounds'] == (['alpha'] if got[0] in (0.0, 1.0) else [])
    assert rows[2][1]['alpha'] == 1.0  # the twice-integrated walk: held at 1
    unbounded = minimize(ses_sse, [0.5, 20.0], args=(groups[2],), method='BFGS').x
    assert unbounded[0] > 1  # where the bound binds


def test_a_bounded_ordinary_model_is_lsq_linear_s(db):
    x, y, lower, upper = problem(3)
    db.execute('DROP TABLE IF EXISTS bounded_ls')
    db.execute('CREATE TABLE bounded_ls (x1 float8, x2 float8, x3 float8, y float8)')
    with db.cursor().copy('COPY bounded_ls FROM STDIN') as copy:
        for row, label in zip(x, y):
            copy.write_row((*map(float, row), float(label)))
    want = lsq_linear(x, y, bounds=(lower, upper), method='bvls', tol=1e-15).x
    for optimizer in ('lbfgs', 'newton'):
        weights, converged, options = db.execute(
            "SELECT weights, converged, options FROM pgad.train('bls', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3', "
            "'squared', 'bounded_ls', '{\"a\": 0.5, \"b\": 0, \"c\": 0}', optimizer => %s, "
            "bounds => '{\"a\": [0, 1], \"b\": [0, null], \"c\": [null, 300]}')", [optimizer]).fetchone()
        assert converged, (optimizer, weights)
        assert weights['a'] == 1.0 and weights['b'] == 0.0
        assert weights['c'] == pytest.approx(want[2], rel=1e-6)
        assert sorted(options['at_bounds']) == ['a', 'b']


@pytest.mark.parametrize('bounds, sqlstate, message', [
    ('{"zeta": [0, 1]}', '22023', 'weight "zeta" of bounds is not a weight of the model'),
    ('[0, 1]', '22023', 'bounds must be a JSON object of weight names'),
    ('{"alpha": [0]}', '22023', 'the bounds of weight "alpha" must be an array of two numbers or nulls'),
    ('{"alpha": ["0", 1]}', '22023', 'the bounds of weight "alpha" must be an array of two numbers or nulls'),
    ('{"alpha": [true, 1]}', '22023', 'the bounds of weight "alpha" must be an array of two numbers or nulls'),
    ('{"alpha": [1, 0]}', '22023', 'the lower bound of weight "alpha" is not below its upper bound'),
    ('{"alpha": [0.5, 0.5]}', '22023', 'the lower bound of weight "alpha" is not below its upper bound'),
    ('{"alpha": [0.6, 1]}', '22023', 'the starting value 0.5 of weight "alpha" lies outside its bounds'),
])
def test_bad_bounds_are_errors_that_change_nothing(db, bounds, sqlstate, message):
    load(db, 'bad_bounds', ses_series()[:1])
    found = error_of(db, "SELECT * FROM pgad.train('badb', 'λ(d, w, s) s.level', 'squared', 'bad_bounds', "
                         "'{\"alpha\": 0.5, \"l0\": 20}', order_by => 'day', state => %s, bounds => %s)",
                     [SES, bounds])
    assert (found.sqlstate, found.message_primary) == (sqlstate, message)
    assert db.execute("SELECT count(*) FROM pgad.model_versions WHERE name = 'badb'").fetchone()[0] == 0


def test_bounds_refused_where_they_cannot_hold(db):
    db.execute('CREATE TABLE IF NOT EXISTS refused_bounds AS SELECT x::float8 AS x, 2*x + 1 AS y, '
               "(x % 3)::int AS c FROM generate_series(1, 30) AS x")
    found = error_of(db, "SELECT * FROM pgad.train('rb', 'λ(d, w) w.a*d.x + w.b', 'squared', 'refused_bounds', "
                         "'{\"a\": 0, \"b\": 0}', standardize => true, bounds => '{\"a\": [0, 1]}')")
    assert (found.sqlstate, found.message_primary) == ('0A000', 'pgad.train takes no bounds with standardize => true')
    found = error_of(db, "SELECT * FROM pgad.train('rb', 'λ(d, w) w.a*d.x + w.b', 'absolute', 'refused_bounds', "
                         "'{\"a\": 0, \"b\": 0}', optimizer => 'interior_point', bounds => '{\"a\": [0, 1]}')")
    assert (found.sqlstate, found.message_primary) == ('0A000', 'optimizer "interior_point" takes no bounds')
    found = error_of(db, "SELECT * FROM pgad.train('rb', 'λ(d, w) w.a*d.x + w.b', 'softmax', "
                         "'SELECT x, c AS y FROM refused_bounds', '{\"a\": [0, 0, 0], \"b\": [0, 0, 0]}', "
                         "bounds => '{\"a\": [0, 1]}')")
    assert (found.sqlstate, found.message_primary) == ('0A000', "pgad.train takes no bounds for loss 'softmax'")


def test_the_absolute_loss_with_bounds_takes_the_smoothed_path_not_the_programme(db):
    """Left out, the optimizer of a piecewise-linear loss is the linear programme, which takes no bounds: with
    bounds, L-BFGS on the loss itself, its weights within the bounds."""
    db.execute('CREATE TABLE IF NOT EXISTS abs_bounds AS SELECT x::float8 AS x, 2*x + 1 AS y '
               'FROM generate_series(1, 30) AS x')
    weights, options = db.execute("SELECT weights, options FROM pgad.train('ab', 'λ(d, w) w.a*d.x + w.b', 'absolute', "
                                  "'abs_bounds', '{\"a\": 0, \"b\": 0}', bounds => '{\"a\": [0, 1.5]}')").fetchone()
    assert options['optimizer'] != 'interior_point'
    assert weights['a'] == 1.5
    assert json.loads(json.dumps(options['bounds'])) == {'a': [0, 1.5]}


def messages(db, sql, params=None):
    """(severity, message, detail, hint) of each notice and warning sql sends, and its rows."""
    with heard(db, whole=True) as said:
        rows = db.execute(sql, params).fetchall()
    return said, rows


BOUND_HINT = ('Bound it: bounds => \'{"alpha": [0, 1]}\' (a smoothing parameter outside [0, 1] weighs old rows more '
              'than new ones, and the fit may have no minimum).')


def fitted_messages(db, sql, params=None):
    """messages(), in a session that publishes group values silently (not this test's subject)."""
    db.execute("SET pgad.publish_data_values = 'on'")
    try:
        return messages(db, sql, params)
    finally:
        db.execute('RESET pgad.publish_data_values')


def test_many_groups_get_one_warning_that_names_the_cause(db):
    """Nine groups, six of whose unbounded α leaves [0, 1] (the white noise's below 0, the twice-integrated walk's
    above 1): one WARNING for the call, counting them, naming three groups and the cause, whose hint is the bound."""
    load(db, 'many_ses', ses_series() * 3)
    said, rows = fitted_messages(db, "SELECT group_key->>'g', weights FROM pgad.train('mses', 'λ(d, w, s) s.level', "
                                     "'squared', 'SELECT * FROM many_ses', '{\"alpha\": 0.5, \"l0\": 20}', "
                                     "order_by => 'day', group_by => 'g', state => %s) ORDER BY 1", [SES])
    assert len(rows) == 9
    assert [s[0] for s in said] == ['WARNING']
    _, message, detail, hint = said[0]
    assert re.fullmatch(r'model "mses": (\d of 9 groups did not converge, 6 have|6 of 9 groups have) a smoothing '
                        r'parameter outside \[0, 1\]', message), message
    assert hint == BOUND_HINT
    outside = [g for g, w in rows if not 0 <= w['alpha'] <= 1]
    assert len(outside) == 6
    assert f'Group {{"g": {outside[0]}}}: smoothing parameter "alpha" = ' in detail
    assert 'And 3 more.' in detail and "options->'at_bounds' are in pgad.model_versions." in detail
    assert 'separated labels' not in detail + hint


def test_bounded_groups_at_their_bounds_get_one_notice(db):
    load(db, 'held_ses', ses_series() * 3)
    said, rows = fitted_messages(db, "SELECT group_key->>'g', weights, converged, options FROM pgad.train('hses', "
                                     "'λ(d, w, s) s.level', 'squared', 'SELECT * FROM held_ses', '{\"alpha\": 0.5, "
                                     "\"l0\": 20}', order_by => 'day', group_by => 'g', state => %s, "
                                     "bounds => '{\"alpha\": [0, 1]}') ORDER BY 1", [SES])
    assert all(r[2] for r in rows)
    held = [g for g, w, _, options in rows if options['at_bounds'] == ['alpha']]
    assert held == [g for g, w, _, _ in rows if w['alpha'] in (0, 1)] and len(held) == 6
    assert len(said) == 1 and said[0][0] == 'NOTICE'
    assert said[0][1].startswith(f'model "hses": 6 of 9 groups have a weight at a bound: Group {{"g": {held[0]}}}: '
                                 f'"alpha" = ')


def test_one_model_s_smoothing_parameter_outside_is_a_warning_naming_it(db):
    load(db, 'one_ses', ses_series()[2:])
    said, rows = fitted_messages(db, "SELECT weights FROM pgad.train('oses', 'λ(d, w, s) s.level', 'squared', "
                                     "'SELECT day, y FROM one_ses', '{\"alpha\": 0.5, \"l0\": 20}', "
                                     "order_by => 'day', state => %s)", [SES])
    alpha = rows[0][0]['alpha']
    assert alpha > 1
    assert said == [('WARNING', f'model "oses": smoothing parameter "alpha" = {alpha:g} is outside [0, 1]', None,
                     BOUND_HINT)]


def test_a_squared_loss_s_hint_names_no_separated_labels(db):
    db.execute('CREATE TABLE IF NOT EXISTS hint_rows AS SELECT x::float8 AS x, (x % 3)::int AS g, '
               '2*x + 1 + sin(x) AS y FROM generate_series(1, 60) AS x')
    said, _ = fitted_messages(db, "SELECT * FROM pgad.train('hint1', 'λ(d, w) w.a*d.x + w.b', 'squared', "
                                  "'hint_rows', '{\"a\": 0, \"b\": 0}', optimizer => 'lbfgs', iterations => 1)")
    assert said[0][3] == ("Train with iterations => 1000, or with optimizer => 'newton' (at most 300 weights) or "
                          "standardize => true.")
    said, _ = fitted_messages(db, "SELECT * FROM pgad.train('hint2', 'λ(d, w) exp(w.a*d.x) + w.b', 'squared', "
                                  "'hint_rows', '{\"a\": 0, \"b\": 0}', optimizer => 'newton', iterations => 1)")
    assert said[0][3] == ("Train with iterations => 1000; a model that needs many may have no minimum within the "
                          "weights' range (a weight that runs off: give it bounds => '{\"w\": [lower, upper]}').")
    said, rows = fitted_messages(db, "SELECT * FROM pgad.train('hint3', 'λ(d, w) w.a*d.x + w.b', 'squared', "
                                     "'hint_rows', '{\"a\": 0, \"b\": 0}', optimizer => 'gd', "
                                     "learning_rate => 1e-6, iterations => 2, group_by => 'g')")
    assert len(rows) == 3 and [s[:2] for s in said] == [('WARNING', 'model "hint3": 3 of 3 groups did not converge')]
    assert said[0][2].startswith('Group {"g": 0}: optimizer "gd" did not converge in its 2 iterations')
