"""ETS of multiplicative error (issue 46, item 2): 'ets(M,…)' fitted by its likelihood, the concentrated
−2 log L = n·ln(Σ ε²/n) + 2·Σ ln|ŷ| of the relative errors ε = (y − ŷ)/ŷ, on a real server. Oracles: the ETS
equations in numpy (test_families.ets_sse's, the predictions kept), statsmodels' ETSModel(error='mul') at its
maximum likelihood, scipy's L-BFGS-B on the numpy likelihood; the intervals' relative errors by their scale."""
import numpy as np
import pytest
from scipy.optimize import minimize

from conftest import error_of
from test_bounds import load
from test_families import train

NAMES = {'N': [], 'A': ['beta', 'b0'], 'Ad': ['beta', 'b0', 'phi']}


def predictions(y, w, trend, season, m):
    """ŷ of ETS(·, trend, season, m) along y at the weights w: the recurrence test_families.ets_sse runs."""
    level, b = y[0] + w['l0'], w.get('b0', 0.0)
    phi = w.get('phi', 1.0) if trend == 'Ad' else 1.0
    seasons = [(1.0 if season == 'M' else 0.0) + w[f'i{k}'] for k in range(1, m + 1)] if season != 'N' else []
    out = []
    for v in y:
        part = level + (phi * b if trend != 'N' else 0.0)
        s1 = seasons[0] if seasons else 0.0
        yhat = part + s1 if season == 'A' else part * s1 if season == 'M' else part
        out.append(yhat)
        e = v - yhat
        per = s1 if season == 'M' else 1.0
        level, b = part + w['alpha'] * e / per, (phi * b + w['beta'] * e / per) if trend != 'N' else 0.0
        if seasons:
            seasons = seasons[1:] + [s1 + w['gamma'] * e / (part if season == 'M' else 1.0)]
    return np.array(out)


def deviance(y, w, trend, season, m):
    """n·ln(S/n) + 2·Σ ln|ŷ|: the concentrated −2 log L of a multiplicative error less n·(ln 2π + 1)."""
    yhat = predictions(y, w, trend, season, m)
    with np.errstate(all='ignore'):
        s = np.sum(((y - yhat) / yhat) ** 2)
        return len(y) * np.log(s / len(y)) + 2 * np.sum(np.log(np.abs(yhat)))


def draw(n, seed, trend, season, m, sigma=0.05):
    """A series of ETS(M, trend, season, m): each label ŷ·(1 + σ·z)."""
    rng = np.random.default_rng(seed)
    level, b, phi = 50.0, 0.5, 0.9
    pattern = np.sin(2 * np.pi * np.arange(m) / m) if season != 'N' else []
    seasons = list(1 + 0.2 * pattern if season == 'M' else 5 * pattern)
    y = np.empty(n)
    for t in range(n):
        part = level + {'N': 0.0, 'A': b, 'Ad': phi * b}[trend]
        s1 = seasons[0] if seasons else 0.0
        yhat = part + s1 if season == 'A' else part * s1 if season == 'M' else part
        e = yhat * sigma * rng.normal()
        y[t] = yhat + e
        per = s1 if season == 'M' else 1.0
        level = part + 0.3 * e / per
        b = {'N': 0.0, 'A': b, 'Ad': phi * b}[trend] + 0.05 * e / per
        if seasons:
            seasons = seasons[1:] + [s1 + 0.1 * e / (part if season == 'M' else 1.0)]
    return y


@pytest.mark.parametrize('trend, season, m', [('N', 'N', 1), ('A', 'N', 1), ('Ad', 'N', 1), ('N', 'A', 4),
                                              ('A', 'M', 4)])
def test_a_multiplicative_error_is_fitted_by_its_likelihood(db, trend, season, m):
    """The stored final_loss is the numpy likelihood's at the stored weights (over the rows: the recurrence is the
    additive error's), and no better one is found: statsmodels' ETSModel(error='mul') at its maximum (its bounds
    narrower), or scipy's L-BFGS-B from pgad's weights for a multiplicative season (which ETSModel smooths in another
    form). σ² is the relative errors'."""
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel
    family = f'ets(M,{trend},{season}' + (f',{m})' if season != 'N' else ')')
    groups = [draw(120, seed, trend, season, m) for seed in (1, 2)]
    load(db, 'mul_ets', groups)
    rows = train(db, 'mul_ets', 'mul_ets', family)
    for (g, model, weights, converged, final_loss, n, options), y in zip(rows, groups):
        assert options['family'] == family and converged, (g, weights)
        ours = deviance(y, weights, trend, season, m)
        assert final_loss * n == pytest.approx(ours, rel=1e-9, abs=1e-9)
        yhat = predictions(y, weights, trend, season, m)
        assert options['sigma2'] == pytest.approx(np.mean(((y - yhat) / yhat) ** 2), rel=1e-9)
        if season == 'M':
            names = ['alpha', 'l0', *NAMES[trend], 'gamma', *[f'i{k}' for k in range(1, m + 1)]]
            bounds = {'alpha': (0, 1), 'beta': (0, 1), 'gamma': (0, 1), 'phi': (0.8, 0.98)}
            found = minimize(lambda v: deviance(y, dict(zip(names, v)), trend, season, m),
                             [weights[k] for k in names], method='L-BFGS-B',
                             bounds=[bounds.get(k, (None, None)) for k in names],
                             options=dict(ftol=1e-15, gtol=1e-12, maxiter=10000))
            assert ours <= found.fun + 1e-7 * abs(found.fun) + 1e-9, (g, weights, found.x)
            continue
        with np.errstate(all='ignore'):
            theirs = ETSModel(y, error='mul', trend=None if trend == 'N' else 'add', damped_trend=trend == 'Ad',
                              seasonal=None if season == 'N' else 'add',
                              seasonal_periods=m if season != 'N' else None).fit(disp=False, maxiter=10000)
        assert ours <= -2 * theirs.llf - n * (np.log(2 * np.pi) + 1) + 1e-6 * n, (family, g, ours, theirs.llf)


def test_a_multiplicative_error_s_intervals_are_relative(db):
    """Simulated with relative errors ŷ·(1 + σ·z): a group ten times another has intervals ten times as wide
    (the same seed, the same draws), and the first step's half-width is about z·σ·ŷ."""
    y = draw(100, 3, 'A', 'N', 1)
    load(db, 'mul_one', [y])
    load(db, 'mul_ten', [10 * y])
    rows = train(db, 'mul_one', 'mul_one', 'ets(M,A,N)')
    ten_rows = train(db, 'mul_ten', 'mul_ten', 'ets(M,A,N)')
    assert ten_rows[0][2]['alpha'] == pytest.approx(rows[0][2]['alpha'], rel=1e-5)
    one, ten = (np.array(db.execute(f"SELECT value, lower, upper FROM pgad.forecast('{name}', 5, "
                                    "simulations => 20000) ORDER BY step").fetchall())
                for name in ('mul_one', 'mul_ten'))
    np.testing.assert_allclose(ten, 10 * one, rtol=1e-4)
    sigma = np.sqrt(rows[0][6]['sigma2'])
    np.testing.assert_allclose((one[0, 2] - one[0, 1]) / 2, 1.959964 * sigma * one[0, 0], rtol=0.05)
    flagged = db.execute("SELECT lower, predicted, upper FROM pgad.anomalies('mul_one', 'SELECT * FROM mul_one', "
                         "0.95) ORDER BY at LIMIT 3 OFFSET 10").fetchall()
    for lower, predicted, upper in flagged:
        assert (upper - lower) / 2 == pytest.approx(1.959964 * sigma * abs(predicted), rel=1e-6)


def test_auto_weighs_a_multiplicative_error_by_its_likelihood(db):
    """'auto''s candidates include each multiplicative error (labels above 0), its AICc from its likelihood: on a
    series whose noise grows with its level the choice is one, and every candidate's AICc is stored."""
    rng = np.random.default_rng(4)
    level = 20 * np.exp(np.cumsum(np.full(200, 0.01)))
    y = level * (1 + 0.08 * rng.normal(size=200))
    load(db, 'mul_auto', [y, y - y.min() - 1])  # the second has a label below 0: additive errors only
    rows = train(db, 'mul_auto', 'mul_auto', 'auto')
    first, second = rows[0][6], rows[1][6]
    assert first['family'].startswith('ets(M,'), first['candidates']
    assert min(v for v in first['candidates'].values() if v is not None) == first['candidates'][first['family']]
    assert {k for k, v in second['candidates'].items() if v is not None} == \
        {'ets(A,N,N)', 'ets(A,A,N)', 'ets(A,Ad,N)', 'ets(A,N,A,7)', 'ets(A,A,A,7)', 'ets(A,Ad,A,7)'}


def test_a_multiplicative_error_needs_labels_above_0(db):
    load(db, 'mul_neg', [np.linspace(-1, 5, 30)])
    e = error_of(db, "SELECT * FROM pgad.train('mul_neg', 'ets(M,N,N)', 'squared', 'SELECT * FROM mul_neg', NULL, "
                     "order_by => 'day', group_by => 'g')")
    assert e.sqlstate == '22023' and e.message_primary == ('model "mul_neg", group {"g": 0}: family "ets(M,N,N)" has '
                                                           'a multiplicative error, and the label is -1 at its least')
    assert e.message_hint == 'Use an additive error: ets(A,N,N).'


def test_a_multiplicative_error_takes_newton_or_l_bfgs(db):
    load(db, 'mul_gd', [np.linspace(1, 5, 30)])
    e = error_of(db, "SELECT * FROM pgad.train('mul_gd', 'ets(M,N,N)', 'squared', 'SELECT * FROM mul_gd', NULL, "
                     "order_by => 'day', optimizer => 'gd')")
    assert (e.sqlstate, e.message_primary) == ('0A000', 'optimizer "gd" cannot fit a multiplicative error')
    assert e.message_hint == "Use 'newton' or 'lbfgs'."


@pytest.mark.parametrize('family, count', [('auto(A)', 9), ('auto(7, a)', 9), ('auto(Z)', 15), ('auto(1,A)', 3)])
def test_auto_of_an_additive_error_alone(db, family, count):
    """'auto(7,A)' ('auto(A)', the season from the dates): the nine candidates of an additive error, a multiplicative
    season among them, each one run of the recurrence a step; 'auto(1,A)' the three without a season."""
    y = draw(120, 5, 'A', 'M', 7)
    load(db, 'mul_add', [y])
    (_, _, _, _, _, _, options), = train(db, 'mul_add', 'mul_add', family)
    assert options['family'] in options['candidates'] and len(options['candidates']) == count
    assert count == 15 or all(c.startswith('ets(A,') for c in options['candidates'])
    assert count != 9 or 'ets(A,A,M,7)' in options['candidates']


def test_a_candidate_not_finite_at_its_start_is_left_out(db):
    """A group whose label is 1e-300 in its first season: a multiplicative season's likelihood is not finite at its
    starting weights there (the season from the first season's rows, divided by the level). The candidates that fail
    so are left out for that group — null AICc — and the call chooses among the others, each group its least finite
    AICc, rather than failing whole (22012); the other group keeps every candidate."""
    y = draw(120, 8, 'A', 'M', 7)
    assert y.min() > 0  # every candidate fits it
    odd = y.copy()
    odd[2] = 1e-300
    load(db, 'mul_odd', [y, odd])
    rows = train(db, 'mul_odd', 'mul_odd', 'auto')
    assert len(rows) == 2
    for _, _, _, _, _, _, options in rows:
        finite = {k: v for k, v in options['candidates'].items() if v is not None}
        assert options['family'] in finite and finite[options['family']] == min(finite.values())
    odd_ones = rows[1][6]['candidates']
    assert {k for k, v in odd_ones.items() if v is None} == {'ets(M,N,M,7)', 'ets(M,A,M,7)', 'ets(M,Ad,M,7)'}
    assert len(rows[0][6]['candidates']) == 15 and all(v is not None for v in rows[0][6]['candidates'].values())


def test_a_group_no_candidate_fits_is_the_error(db):
    """A group whose squared errors overflow for every candidate (a label of 1e300): the call's error is that
    group's at the first candidate's start, the group named in its detail, and nothing is stored."""
    y = draw(60, 8, 'N', 'N', 1)
    odd = y.copy()
    odd[5] = 1e300
    load(db, 'mul_none', [y, odd])
    e = error_of(db, "SELECT * FROM pgad.train('mul_none', 'auto(A)', 'squared', 'SELECT * FROM mul_none', NULL, "
                     "order_by => 'day', group_by => 'g')")
    assert e.sqlstate == '22003' and e.message_primary == 'value out of range: overflow'
    assert e.message_detail.startswith('Model "mul_none", group {"g": 1}: The lambda computes'), e.message_detail
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'mul_none'").fetchone()[0] == 0
