"""Named families (issue 46, item 2): pgad.train's model 'ets(A,Ad,M,12)', 'arima(2,1,1)', 'drift' generated as a
sequence model and trained on a real server. Oracles: each family's equations written here in numpy (the stored
lambda must compute them), statsmodels' ETSModel (pgad's least squares at most its own, whose bounds are narrower)
and AutoReg, and scipy's least squares on the numpy CSS recursion of an ARMA."""
import json

import numpy as np
import pytest
from scipy.optimize import least_squares, minimize

from conftest import error_of, heard
from test_bounds import load


def train(db, name, table, family, **more):
    extra = ''.join(f', {k} => %({k})s' for k in more)
    return db.execute(f"SELECT group_key->>'g' AS g, model, weights, converged, final_loss, rows, options "
                      f"FROM pgad.train(%(name)s, %(family)s, 'squared', 'SELECT * FROM {table}', NULL, "
                      f"order_by => 'day', group_by => 'g'{extra}) ORDER BY 1",
                      dict(name=name, family=family, **more)).fetchall()


def ets_sse(y, w, trend, season, m):
    """The sum of squared one-step errors of ETS(A, trend, season, m) at the weights w (pgad's names), by its
    equations (families.py's docstring): the oracle of the generated lambda. A NaN in y is a missing period: its
    error is 0, the state advancing without an update (a forecast's step), and it adds nothing to the sum."""
    level, b = y[0] + w['l0'], w.get('b0', 0.0)
    phi = w.get('phi', 1.0) if trend == 'Ad' else 1.0
    seasons = [(1.0 if season == 'M' else 0.0) + w[f'i{k}'] for k in range(1, m + 1)] if season != 'N' else []
    sse = 0.0
    for v in y:
        part = level + (phi * b if trend != 'N' else 0.0)
        s1 = seasons[0] if seasons else 0.0
        yhat = part + s1 if season == 'A' else part * s1 if season == 'M' else part
        e = 0.0 if np.isnan(v) else v - yhat
        sse += e * e
        per = s1 if season == 'M' else 1.0
        level, b = part + w['alpha'] * e / per, (phi * b + w['beta'] * e / per) if trend != 'N' else 0.0
        if seasons:
            seasons = seasons[1:] + [s1 + w['gamma'] * e / (part if season == 'M' else 1.0)]
    return sse


def draw_ets(n, seed, trend, season, m, alpha=0.3, beta=0.05, gamma=0.2, phi=0.9, amplitude=0.1, slope=0.4):
    rng = np.random.default_rng(seed)
    level, b = 50.0, slope
    pattern = np.sin(2 * np.pi * np.arange(m) / m) if season != 'N' else []
    seasons = list(1 + amplitude * pattern if season == 'M' else 3 * pattern)
    y = np.empty(n)
    for t in range(n):
        part = level + ({'N': 0, 'A': b, 'Ad': phi * b}[trend])
        s1 = seasons[0] if seasons else 0.0
        yhat = part + s1 if season == 'A' else part * s1 if season == 'M' else part
        e = rng.normal()
        y[t] = yhat + e
        per = s1 if season == 'M' else 1.0
        level = part + alpha * e / per
        b = ({'N': 0, 'A': b, 'Ad': phi * b}[trend]) + beta * e / per
        if seasons:
            seasons = seasons[1:] + [s1 + gamma * e / (part if season == 'M' else 1.0)]
    return y


def best_of_starts(y, trend, season, m):
    """The least sum of squares scipy's L-BFGS-B finds from three starts (the smoothing weights), the initial states
    from families.initial: the oracle of a multiplicative season, where statsmodels' ETSModel smooths another
    model (Holt-Winters' component form, the season divided by the new level)."""
    from pgad.models import families
    init = families.initial((trend, season, m), y)
    names = ['alpha', 'l0'] + (['beta', 'b0'] if trend != 'N' else []) + (['phi'] if trend == 'Ad' else []) + \
        (['gamma'] + [f'i{k}' for k in range(1, m + 1)] if season != 'N' else [])
    bounds = {'alpha': (0, 1), 'beta': (0, 1), 'gamma': (0, 1), 'phi': (0.8, 0.98)}
    best = np.inf
    for start in ({'alpha': 0.3, 'beta': 0.05, 'gamma': 0.1, 'phi': 0.95},
                  {'alpha': 0.1, 'beta': 0.01, 'gamma': 0.3, 'phi': 0.9}, {'alpha': 0.6, 'beta': 0.2, 'gamma': 0.5,
                                                                            'phi': 0.85}):
        x0 = [start.get(n, init.get(n, 0.0)) for n in names]
        found = minimize(lambda v: ets_sse(y, dict(zip(names, v)), trend, season, m), x0, method='L-BFGS-B',
                         bounds=[bounds.get(n, (None, None)) for n in names],
                         options=dict(maxiter=20000, ftol=1e-15, gtol=1e-12))
        best = min(best, found.fun)
    return best


@pytest.mark.parametrize('trend, season, m', [('N', 'N', 1), ('A', 'N', 1), ('Ad', 'N', 1), ('N', 'A', 4),
                                              ('A', 'A', 7), ('Ad', 'M', 4), ('A', 'M', 7)])
def test_ets_is_its_equations_at_least_as_good_as_statsmodels(db, trend, season, m):
    """An additive season's or none's least squares at most statsmodels' ETSModel's (whose bounds on β and γ are
    narrower); a multiplicative season's, which ETSModel smooths in another form, at most scipy's from three
    starts."""
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel
    family = f'ets(A,{trend},{season}' + (f',{m})' if season != 'N' else ')')
    groups = [draw_ets(120, seed, trend, season, m) for seed in (1, 2)]
    load(db, 'fam_ets', groups)
    rows = train(db, 'fam_ets', 'fam_ets', family)
    assert len(rows) == 2
    for (g, model, weights, converged, final_loss, n, options), y in zip(rows, groups):
        assert options['family'] == family
        assert model.startswith('λ(d, w, s) ') and json.dumps(options['state'])  # the recurrence, stored
        sse = final_loss * n
        assert ets_sse(y, weights, trend, season, m) == pytest.approx(sse, rel=1e-9)
        for name, (lower, upper) in options['bounds'].items():
            assert lower <= weights[name] <= upper, (name, weights[name])
        assert converged, (family, g, weights)
        if season == 'M':
            assert sse <= best_of_starts(y, trend, season, m) * (1 + 1e-7), (family, g)
            continue
        with np.errstate(all='ignore'):
            theirs = ETSModel(y, error='add', trend=None if trend == 'N' else 'add', damped_trend=trend == 'Ad',
                              seasonal=None if season == 'N' else {'A': 'add', 'M': 'mul'}[season],
                              seasonal_periods=m if season != 'N' else None).fit(disp=False, maxiter=10000)
        assert sse <= theirs.sse * (1 + 1e-6), (family, g, sse, theirs.sse)


def test_the_stored_recurrence_trains_again_as_a_lambda(db):
    """The generated model and state, copied into a call of their own, give the same fit: a family is a lambda."""
    y = draw_ets(100, 5, 'A', 'N', 1)
    load(db, 'fam_copy', [y])
    (_, model, weights, _, final_loss, _, options), = train(db, 'fam_named', 'fam_copy', 'ets(A,A,N)')
    again = db.execute("SELECT weights, final_loss FROM pgad.train('fam_lambda', %s, 'squared', "
                       "'SELECT * FROM fam_copy', %s, order_by => 'day', group_by => 'g', state => %s, bounds => %s)",
                       [model, '{"alpha": 0.3, "l0": 0, "beta": 0.05, "b0": 0}', json.dumps(options['state']),
                        json.dumps(options['bounds'])]).fetchone()
    assert again[1] == pytest.approx(final_loss, rel=1e-12)
    assert again[0] == pytest.approx(weights, rel=1e-7)  # two paths to one optimum, each stopped within its precision


def css_residuals(params, y, p, q, constant):
    """An ARMA(p, q)'s conditional errors along y from its (p + 1)th row, earlier errors 0: statsmodels' and R's
    CSS, written here."""
    c = params[0] if constant else 0.0
    ar, ma = params[int(constant):int(constant) + p], params[int(constant) + p:]
    e = np.zeros(len(y))
    for t in range(p, len(y)):
        e[t] = y[t] - c - sum(ar[i] * y[t - 1 - i] for i in range(p)) - \
            sum(ma[j] * e[t - 1 - j] for j in range(q) if t - 1 - j >= p)
    return e[p:]


@pytest.mark.parametrize('p, d, q', [(1, 0, 1), (2, 0, 0), (0, 1, 1), (1, 1, 1), (2, 1, 2)])
def test_arima_is_conditional_least_squares(db, p, d, q):
    rng = np.random.default_rng(10 * p + q)
    n, e = 200, rng.normal(size=200)
    x = np.zeros(n)
    for t in range(n):
        x[t] = 1.0 + (0.5 * x[t - 1] if t >= 1 else 0) - (0.2 * x[t - 2] if t >= 2 else 0) + e[t] + \
            (0.4 * e[t - 1] if t >= 1 else 0)
    y = np.cumsum(x) if d else x
    load(db, 'fam_arima', [y])
    (_, _, weights, converged, final_loss, rows, options), = train(db, 'fam_arima', 'fam_arima', f'arima({p},{d},{q})')
    w = np.diff(y, d) if d else y
    constant = d == 0
    fit = least_squares(css_residuals, np.zeros(int(constant) + p + q), args=(w, p, q, constant), xtol=1e-15,
                        ftol=1e-15, gtol=1e-15)
    want = fit.x
    got = np.array(([weights['c']] if constant else []) + [weights[f'ar{i}'] for i in range(1, p + 1)] +
                   [weights[f'ma{j}'] for j in range(1, q + 1)])
    sse = final_loss * rows
    assert sse <= float(fit.fun @ fit.fun) * (1 + 1e-9)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert options['predicted_rows'] == n - d - p
    assert options['sigma2'] == pytest.approx(sse / (n - d - p), rel=1e-9)
    assert converged


def test_an_autoregression_family_is_autoreg(db):
    from statsmodels.tsa.ar_model import AutoReg
    rng = np.random.default_rng(4)
    y = np.zeros(150)
    for t in range(150):
        y[t] = 2 + (0.6 * y[t - 1] if t else 0) + (-0.3 * y[t - 2] if t > 1 else 0) + rng.normal()
    load(db, 'fam_ar', [y])
    (_, _, weights, converged, _, _, options), = train(db, 'fam_ar', 'fam_ar', 'arima(2,0,0)')
    fit = AutoReg(y, 2).fit()
    np.testing.assert_allclose([weights['c'], weights['ar1'], weights['ar2']], fit.params, rtol=1e-7)
    assert options['sigma2'] == pytest.approx(fit.sigma2, rel=1e-8)
    frame = fit.get_prediction(start=150, end=161).summary_frame(alpha=0.05)
    rows = db.execute("SELECT value, lower, upper FROM pgad.forecast('fam_ar', 12) ORDER BY step").fetchall()
    np.testing.assert_allclose(np.array(rows, dtype=float),
                               frame[['mean', 'mean_ci_lower', 'mean_ci_upper']].to_numpy(), rtol=1e-6)


def test_drift_is_its_least_squares(db):
    rng = np.random.default_rng(8)
    y = 10 + np.cumsum(0.5 + rng.normal(size=120))
    load(db, 'fam_drift', [y])
    (_, model, weights, converged, final_loss, rows, _), = train(db, 'fam_drift', 'fam_drift', 'drift')

    def errors(v):
        alpha, l0, c = v
        level, out = y[0] + l0, []
        for value in y:
            out.append(value - level - c)
            level += c + alpha * (value - level - c)
        return np.array(out)
    want = least_squares(errors, [0.3, 0.0, 0.0], bounds=([0, -np.inf, -np.inf], [1, np.inf, np.inf]),
                         xtol=1e-15, ftol=1e-15, gtol=1e-15)
    assert final_loss * rows <= float(want.fun @ want.fun) * (1 + 1e-9)
    np.testing.assert_allclose([weights['alpha'], weights['c']], want.x[[0, 2]], rtol=1e-4)
    assert converged and model == 'λ(d, w, s) s.level + w.c'


@pytest.mark.parametrize('model, extra, sqlstate, message', [
    ('ets(M,N,N)', '', '22023', 'model "fam_bad": family "ets(M,N,N)" has a multiplicative error, and the label is 0 '
                                'at its least'),
    ('ets(A,N,A)', '', '22023', 'family "ets(A,N,A)" needs its season\'s length'),
    ('ets(A,N,A,1)', '', '22023', 'the season of family "ets(A,N,A,1)" has 1 periods, not between 2 and 400'),
    ('ets(A,B,N)', '', '22023', 'model "ets(A,B,N)" is no family pgad knows'),
    ('arima(1,3,0)', '', '22023', 'family "arima(1,3,0)" differences more than pgad fits (d at most 2, D at most 1)'),
    ('arima(1,0,0)(1,0,0)400', '', '22023', 'family "arima(1,0,0)(1,0,0)400" reaches 401 rows back, more than 60'),
    ('ets(A,N,N)', ", state => '{}'", '22023', 'model "ets(A,N,N)" names a family, which makes its own state'),
])
def test_a_family_s_errors_change_nothing(db, model, extra, sqlstate, message):
    load(db, 'fam_bad', [np.arange(30.0)])
    found = error_of(db, f"SELECT * FROM pgad.train('fam_bad', %s, 'squared', 'SELECT * FROM fam_bad', NULL, "
                         f"order_by => 'day'{extra})", [model])
    assert (found.sqlstate, found.message_primary) == (sqlstate, message)
    assert db.execute("SELECT count(*) FROM pgad.model_versions WHERE name = 'fam_bad'").fetchone()[0] == 0


def test_a_family_needs_order_by_and_least_squares(db):
    load(db, 'fam_bad2', [np.arange(30.0)])
    found = error_of(db, "SELECT * FROM pgad.train('fam_bad2', 'drift', 'squared', 'SELECT * FROM fam_bad2', NULL)")
    assert (found.sqlstate, found.message_primary) == ('22023', 'family "drift" needs order_by: the column that '
                                                                'orders the rows')
    found = error_of(db, "SELECT * FROM pgad.train('fam_bad2', 'drift', 'absolute', 'SELECT * FROM fam_bad2', NULL, "
                         "order_by => 'day')")
    assert (found.sqlstate, found.message_primary) == ('0A000', 'family "drift" is fitted by least squares, not loss '
                                                                "'absolute'")


def test_auto_keeps_each_group_s_least_aicc_and_its_fits_are_the_named_families(db):
    """'auto' over daily series: the season's length from the dates (7), fifteen candidates a group, the least AICc
    kept; each kept fit is its family's equations at the stored weights (its squares, or a multiplicative error's
    likelihood), and a candidate's AICc is the one of the named family trained alone."""
    from test_multiplicative_error import deviance
    from pgad.models import families
    groups = [draw_ets(140, 21, 'N', 'N', 1), draw_ets(140, 22, 'A', 'N', 1, beta=0.1),
              draw_ets(140, 23, 'A', 'A', 7, gamma=0.1),
              draw_ets(140, 24, 'A', 'M', 7, alpha=0.2, beta=0.01, gamma=0.05, amplitude=0.4, slope=2.0)]
    load(db, 'fam_auto', groups)
    rows = train(db, 'fam_auto', 'fam_auto', 'auto')
    assert len(rows) == 4
    for (g, model, weights, converged, final_loss, n, options), y in zip(rows, groups):
        candidates = options['candidates']
        assert len(candidates) == 15 and all(',7)' in c for c in candidates if c.split(',')[2] != 'N)')
        chosen = options['family']
        assert candidates[chosen] == min(v for v in candidates.values() if v is not None)
        _, trend, season = chosen[:-1].split(',')[:3]
        season = season.rstrip(')')
        k = next(c.parameters for c in families.auto(7, 'y').candidates if c.name == chosen)
        relative = chosen.startswith('ets(M,')
        sse = n * np.exp(final_loss) if relative else final_loss * n
        assert families.aicc(sse, n, k) == pytest.approx(candidates[chosen], rel=1e-12)
        assert (deviance if relative else ets_sse)(y, weights, trend, season, 7) == pytest.approx(final_loss * n,
                                                                                                   rel=1e-9)
        assert 0 <= weights['alpha'] <= 1 and 0 <= weights['beta'] <= 1 and 0 <= weights['gamma'] <= 1
        assert converged, (g, chosen)
    assert rows[2][6]['family'].endswith(',A,7)') and rows[3][6]['family'].endswith(',M,7)')
    # a candidate's fit is the named family's
    load(db, 'fam_auto_one', groups[1:2])
    (_, _, _, _, loss, n, _), = train(db, 'fam_auto_one', 'fam_auto_one', 'ets(A,A,N)')
    assert families.aicc(loss * n, n, 5) == pytest.approx(rows[1][6]['candidates']['ets(A,A,N)'], rel=1e-6)


def test_an_auto_forecast_is_analytic_where_the_chosen_family_is_linear(db):
    """The recurrence of 'auto' is not linear as written (a multiplicative season's products), but at a group's
    weights whose season is additive or none it is linear along the forecast: analytic intervals, the same for
    any seed; a multiplicative group's are simulated, and move with the seed."""
    groups = [draw_ets(140, 31, 'A', 'A', 7, gamma=0.1, slope=2.0),
              draw_ets(140, 32, 'A', 'M', 7, alpha=0.2, beta=0.01, gamma=0.05, amplitude=0.4, slope=2.0)]
    load(db, 'fam_fc', groups)
    rows = train(db, 'fam_fc', 'fam_fc', 'auto')
    assert rows[0][6]['family'].endswith(',A,7)') and rows[1][6]['family'].endswith(',M,7)')
    first, second = ([r[1:] for r in db.execute("SELECT group_key->>'g', value, lower, upper FROM "
                                                 "pgad.forecast('fam_fc', 5, seed => %s) ORDER BY 1, step",
                                                 [seed]).fetchall()] for seed in (0, 1))
    assert first[:5] == second[:5]
    assert first[5:] != second[5:] and [r[0] for r in first[5:]] == [r[0] for r in second[5:]]


def test_a_label_that_needs_quotes_is_quoted_in_the_generated_lambda(db):
    """A label column named with a double quote and a parenthesis is read as the identifier it is, never spliced as
    text: the generated lambda quotes it (d."y""); x")."""
    y = draw_ets(60, 9, 'N', 'N', 1)
    load(db, 'fam_quoted', [y])
    (model, state, weights), = db.execute(
        "SELECT model, options->'state', weights FROM pgad.train('fam_quoted', 'ets(A,N,N)', 'squared', "
        "'SELECT g, day, y AS \"y\"\"); x\" FROM fam_quoted', NULL, label => 'y\"); x', order_by => 'day')").fetchall()
    assert state['level']['next'] == 's.level + w.alpha*(d."y""); x" - s.level)'
    assert ets_sse(y, weights, 'N', 'N', 1) == pytest.approx(
        db.execute("SELECT final_loss * rows FROM pgad.models WHERE name = 'fam_quoted'").fetchone()[0], rel=1e-9)


def test_auto_s_fixed_weights_are_not_told_as_at_a_bound(db):
    """A group that chose no trend has β = 0 by its candidate, not by the fit: neither its at_bounds nor a NOTICE
    names it."""
    y = draw_ets(100, 41, 'N', 'N', 1)
    load(db, 'fam_quiet', [y])
    with heard(db) as said:
        (_, _, weights, _, _, _, options), = train(db, 'fam_quiet', 'fam_quiet', 'auto')
    assert options['family'].startswith('ets(A,N,') and weights['beta'] == 0.0
    assert 'beta' not in options['at_bounds'] and not any('"beta"' in m for m in said)
