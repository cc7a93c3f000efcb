"""The sequence models of docs/sql.md ("Sequences") trained through SQL and checked at their optimum against
statsmodels (ExponentialSmoothing: simple, Holt, additive Holt-Winters; AutoReg's conditional least squares), an
ARX against least squares on lagged columns, and a recurrent cell's gradient against torch's autograd and central
differences, through pgad's Python API (sequences.gradient) and through SQL, in both modes.

The smoothing models are written in error-correction form with statsmodels' own parameters: level l, trend b and
season s1..s7 (s1 the season of the row), e = y − l − b − s1, next l = l + b + α·e, b = b + α·β·e (statsmodels'
smoothing_trend is β of the component form b = β·(l' − l) + (1 − β)·b), s1..s6 shift and s7 = s1 + γ·e. Holt-Winters'
initial level and seasons are identified only up to a constant (add c to every season and take it from the level:
the same predictions), so its comparisons take the level plus the seasons' mean, and the seasons less their mean.

Where statsmodels' own optimiser stops short of the optimum (it keeps α, β, γ in [0, 1] through a logistic map and
stops on its relative reduction), the test shows pgad's sum of squares is not worse and statsmodels' objective at
pgad's weights is pgad's (the same objective); the series are drawn from the models themselves so that the optimum
is inside statsmodels' bounds.
"""
import json
import warnings

import numpy as np
import pytest

from pgad import sequences
from pgad.limits import DEFAULT
from pgad.models import sequence

SEASON = np.array([3.0, -1.0, 0.0, 2.0, -4.0, 5.0, -5.0])
ERROR = '(d.y - s.level - s.trend - s.s1)'
SES = {'level': {'start': 'w.l0', 'next': 's.level + w.alpha*(d.y - s.level)'}}
HOLT = {'level': {'start': 'w.l0', 'next': 's.level + s.trend + w.alpha*(d.y - s.level - s.trend)'},
        'trend': {'start': 'w.b0', 'next': 's.trend + w.alpha*w.beta*(d.y - s.level - s.trend)'}}
HOLT_WINTERS = {'level': {'start': 'w.l0', 'next': f's.level + s.trend + w.alpha*{ERROR}'},
                'trend': {'start': 'w.b0', 'next': f's.trend + w.alpha*w.beta*{ERROR}'},
                **{f's{k}': {'start': f'w.i{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)},
                's7': {'start': 'w.i7', 'next': f's.s1 + w.gamma*{ERROR}'}}
CELL = {'h1': {'start': '0', 'next': 'tanh((w.u @ [s.h1, s.h2, d.x])[1] + w.b[1])'},
        'h2': {'start': '0', 'next': 'tanh((w.u @ [s.h1, s.h2, d.x])[2] + w.b[2])'}}
CELL_MODEL = 'λ(d, w, s) w.v @ [s.h1, s.h2] + w.c'


def ets(n, seed, alpha, beta=None, gamma=None, scale=1.0):
    """A series drawn from additive exponential smoothing (error-correction form), noise of standard deviation 1."""
    rng = np.random.default_rng(seed)
    level, trend = 50.0, 0.3 if beta is not None else 0.0
    season = list(SEASON if gamma is not None else np.zeros(7))
    y = np.empty(n)
    for t in range(n):
        e = rng.normal()
        y[t] = level + trend + season[0] + e
        level, trend = level + trend + alpha * e, trend + (alpha * beta * e if beta is not None else 0.0)
        season = season[1:] + [season[0] + (gamma * e if gamma is not None else 0.0)]
    return y * scale


def autoregressive(n, seed, phi, c=2.0, x=None, b=0.0):
    rng = np.random.default_rng(seed)
    y = np.zeros(n)
    for t in range(n):
        y[t] = c + sum(p * y[t - 1 - k] for k, p in enumerate(phi) if t - 1 - k >= 0) + \
            (b * x[t] if x is not None else 0.0) + rng.normal()
    return y


def load(db, table, y, x=None):
    db.execute(f'DROP TABLE IF EXISTS {table}')
    db.execute(f'CREATE TABLE {table} (day date, y float8, x float8)')
    with db.cursor().copy(f'COPY {table} (day, y, x) FROM STDIN') as copy:
        for k, v in enumerate(y):
            copy.write_row((str(np.datetime64('2024-01-01') + k), float(v), None if x is None else float(x[k])))


def train(db, table, model, state, weights, **options):
    """(the fitted weights, the sum of squared errors, the row of pgad.models) of a model trained through SQL."""
    extra = ''.join(f', {k} => %({k})s' for k in options)
    row = db.execute(f"SELECT weights, final_loss, rows, converged, iterations FROM pgad.train('{table}', "
                     f"%(model)s, 'squared', 'SELECT day, y, x FROM {table}', %(weights)s, order_by => 'day', "
                     f"state => %(state)s{extra})",
                     dict(model=model, weights=json.dumps(weights), state=json.dumps(state), **options)).fetchone()
    return row[0], row[1] * row[2], row


def best_statsmodels_fit(make):
    """statsmodels' fit of least SSE over its optimisers, each with tolerances as tight as they take (no brute)."""
    fits = []
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for method, kwargs in (('SLSQP', {'options': {'ftol': 1e-15, 'maxiter': 2000}}),
                               ('L-BFGS-B', {'options': {'ftol': 1e-15, 'gtol': 1e-12, 'maxiter': 5000}}),
                               ('least_squares', {'ftol': 1e-15, 'xtol': 1e-15, 'gtol': 1e-15})):
            fits.append(make().fit(optimized=True, use_brute=False, method=method, minimize_kwargs=kwargs))
    return min(fits, key=lambda f: f.sse)


def compare(sse, ours, fit, theirs, at_ours):
    """pgad's SSE and parameters (ours, by name) against statsmodels' best fit (theirs: the same names from its
    params), and statsmodels' SSE at pgad's parameters (at_ours)."""
    assert at_ours == pytest.approx(sse, rel=1e-10)  # the same objective, the same parameters
    if fit.sse > sse * (1 + 1e-9):  # statsmodels stopped short: pgad's optimum is lower
        return False
    assert sse == pytest.approx(fit.sse, rel=1e-8)
    for name, value in ours.items():
        assert value == pytest.approx(theirs[name], rel=1e-6, abs=1e-6), name
    return True


@pytest.mark.parametrize('seed', [1, 2, 3])
@pytest.mark.parametrize('scale', [1.0, 1000.0])
def test_simple_exponential_smoothing(db, seed, scale):
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing
    y = ets(150, seed, 0.35, scale=scale)
    load(db, 'ses', y)
    w, sse, row = train(db, 'ses', 'λ(d, w, s) s.level', SES, {'alpha': 0.5, 'l0': float(y[0])})
    assert row[3]  # converged
    fit = best_statsmodels_fit(lambda: SimpleExpSmoothing(y / scale, initialization_method='estimated'))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        at_ours = SimpleExpSmoothing(y, initialization_method='known', initial_level=w['l0']).fit(
            smoothing_level=w['alpha'], optimized=False).sse
    p = fit.params  # fitted to y / scale: the level scales, alpha does not, the SSE by scale²
    assert compare(sse / scale ** 2, {'alpha': w['alpha'], 'l0': w['l0'] / scale}, fit,
                   {'alpha': p['smoothing_level'], 'l0': p['initial_level']}, at_ours / scale ** 2)


@pytest.mark.parametrize('seed', [1, 2, 3])
@pytest.mark.parametrize('scale', [1.0, 1000.0])
def test_holt(db, seed, scale):
    from statsmodels.tsa.holtwinters import Holt
    y = ets(150, seed, 0.4, 0.3, scale=scale)
    load(db, 'holt', y)
    w, sse, row = train(db, 'holt', 'λ(d, w, s) s.level + s.trend', HOLT,
                        {'alpha': 0.5, 'beta': 0.1, 'l0': float(y[0]), 'b0': 0})
    assert row[3]
    fit = best_statsmodels_fit(lambda: Holt(y / scale, initialization_method='estimated'))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        at_ours = Holt(y, initialization_method='known', initial_level=w['l0'], initial_trend=w['b0']).fit(
            smoothing_level=w['alpha'], smoothing_trend=w['beta'], optimized=False).sse
    p = fit.params
    ours = {'alpha': w['alpha'], 'beta': w['beta'], 'l0': w['l0'] / scale, 'b0': w['b0'] / scale}
    theirs = {'alpha': p['smoothing_level'], 'beta': p['smoothing_trend'], 'l0': p['initial_level'],
              'b0': p['initial_trend']}
    assert compare(sse / scale ** 2, ours, fit, theirs, at_ours / scale ** 2)


@pytest.mark.parametrize('seed', [1, 4])
def test_holt_winters(db, seed):
    from statsmodels.tsa.holtwinters import ExponentialSmoothing
    y = ets(210, seed, 0.4, 0.3, 0.2)
    load(db, 'hw', y)
    start = {'alpha': 0.5, 'beta': 0.1, 'gamma': 0.1, 'l0': float(y[:7].mean()), 'b0': 0,
             **{f'i{k}': 0 for k in range(1, 8)}}
    w, sse, row = train(db, 'hw', 'λ(d, w, s) s.level + s.trend + s.s1', HOLT_WINTERS, start)
    assert row[3]
    seasons = np.array([w[f'i{k}'] for k in range(1, 8)])

    def make(**known):
        return ExponentialSmoothing(y, trend='add', seasonal='add', seasonal_periods=7, **known)
    fit = best_statsmodels_fit(lambda: make(initialization_method='estimated'))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        at_ours = make(initialization_method='known', initial_level=w['l0'], initial_trend=w['b0'],
                       initial_seasonal=seasons).fit(smoothing_level=w['alpha'], smoothing_trend=w['beta'],
                                                     smoothing_seasonal=w['gamma'], optimized=False).sse
    p = fit.params
    theirs_seasons = p['initial_seasons']
    ours = {'alpha': w['alpha'], 'beta': w['beta'], 'gamma': w['gamma'], 'b0': w['b0'],
            'level': w['l0'] + seasons.mean(), **{f'i{k}': v for k, v in enumerate(seasons - seasons.mean(), 1)}}
    theirs = {'alpha': p['smoothing_level'], 'beta': p['smoothing_trend'], 'gamma': p['smoothing_seasonal'],
              'b0': p['initial_trend'], 'level': p['initial_level'] + theirs_seasons.mean(),
              **{f'i{k}': v for k, v in enumerate(theirs_seasons - theirs_seasons.mean(), 1)}}
    assert compare(sse, ours, fit, theirs, at_ours)


def ar_state(p):
    """AR(p)'s state: the last p values of y (y1 the one before the row) and a count of the rows before."""
    state = {'n': {'start': '0', 'next': 's.n + 1'}, 'y1': {'start': '0', 'next': 'd.y'}}
    state.update({f'y{k}': {'start': '0', 'next': f's.y{k - 1}'} for k in range(2, p + 1)})
    return state


def ar_model(p, exogenous=''):
    """The first p rows are not scored (their prediction is the label): conditional least squares."""
    terms = ' + '.join(f'w.a{k}*s.y{k}' for k in range(1, p + 1))
    return f'λ(d, w, s) CASE WHEN s.n < {p} THEN d.y ELSE w.c + {terms}{exogenous} END'


@pytest.mark.parametrize('p, seed, scale', [(1, 1, 1.0), (3, 2, 1.0), (7, 3, 1.0), (3, 4, 1000.0)])
def test_autoregression_matches_autoreg(db, p, seed, scale):
    from statsmodels.tsa.ar_model import AutoReg
    phi = [0.5, -0.2, 0.1, 0.05, -0.05, 0.1, 0.2][:p]
    y = autoregressive(300, seed, phi) * scale
    load(db, 'ar', y)
    w, sse, row = train(db, 'ar', ar_model(p), ar_state(p), {'c': 0, **{f'a{k}': 0 for k in range(1, p + 1)}})
    assert row[3]
    fit = AutoReg(y, p, trend='c').fit()
    assert sse == pytest.approx(float(np.sum(fit.resid ** 2)), rel=1e-8)
    theirs = dict(zip(['c', *(f'a{k}' for k in range(1, p + 1))], fit.params))
    for name, value in theirs.items():
        assert w[name] == pytest.approx(value, rel=1e-6, abs=1e-6 * scale if name == 'c' else 1e-6), name


@pytest.mark.parametrize('seed', [1, 2])
def test_arx_matches_least_squares_on_lagged_columns(db, seed):
    rng = np.random.default_rng(seed + 10)
    x = rng.normal(0, 3, 250)
    y = autoregressive(250, seed, [0.6, -0.3], x=x, b=1.5)
    load(db, 'arx', y, x)
    w, sse, row = train(db, 'arx', ar_model(2, ' + w.b*d.x'), ar_state(2), {'c': 0, 'a1': 0, 'a2': 0, 'b': 0})
    assert row[3]
    design = np.column_stack([np.ones(248), y[1:-1], y[:-2], x[2:]])
    coef, residual, *_ = np.linalg.lstsq(design, y[2:], rcond=None)
    assert sse == pytest.approx(float(residual[0]), rel=1e-8)
    for name, value in zip(['c', 'a1', 'a2', 'b'], coef):
        assert w[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


# --- a recurrent cell's gradient against torch ---

def cell_series(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return x, np.sin(np.cumsum(x) / 10) + 0.1 * rng.normal(size=n)


def cell_weights(seed):
    rng = np.random.default_rng(seed)
    return {'u': rng.normal(0, 0.6, (2, 3)).tolist(), 'b': rng.normal(0, 0.1, 2).tolist(),
            'v': rng.normal(0, 1, 2).tolist(), 'c': 0.1}


def flat(weights):
    """The weight vector in the step's order (u, b, v, c: as given), a matrix by its rows."""
    return np.concatenate([np.ravel(weights[n]) for n in ('u', 'b', 'v', 'c')])


def torch_cell(x, y, weights):
    """(the sum of squared errors, its gradient in the order of flat) by torch's autograd, float64."""
    import torch
    ws = {n: torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for n, v in weights.items()}
    xs, ys = torch.tensor(x), torch.tensor(y)
    h = torch.zeros(2, dtype=torch.float64)
    loss = torch.zeros((), dtype=torch.float64)
    for t in range(len(x)):
        loss = loss + (ws['v'] @ h + ws['c'] - ys[t]) ** 2
        h = torch.tanh(ws['u'] @ torch.cat([h, xs[t:t + 1]]) + ws['b'])
    loss.backward()
    return loss.item(), np.concatenate([ws[n].grad.numpy().ravel() for n in ('u', 'b', 'v', 'c')])


def cell_step(weights):
    step, *_ = sequence.step_of(CELL_MODEL, 'squared', 'y', json.dumps(CELL), json.dumps(weights), DEFAULT, 1 << 30)
    return step


@pytest.mark.parametrize('mode', ['reverse', 'forward'])
@pytest.mark.parametrize('tile_bytes', [sequences.TILE_BYTES, 4096])  # all the states kept; or checkpoints
def test_recurrent_cell_gradient_matches_torch(mode, tile_bytes):
    x, y = cell_series(3000, 5)
    weights = cell_weights(6)
    step = cell_step(weights)
    assert step.weights == ('u[1][1]', 'u[1][2]', 'u[1][3]', 'u[2][1]', 'u[2][2]', 'u[2][3]', 'b[1]', 'b[2]',
                            'v[1]', 'v[2]', 'c')
    seqs = sequences.Sequences({'x': x, 'y': y}, np.array([0]), np.array([len(x)]))
    loss, grad = sequences.gradient(step, seqs, flat(weights), mode, tile_bytes)
    expected_loss, expected = torch_cell(x, y, weights)
    assert loss[0] == pytest.approx(expected_loss, rel=1e-12)
    np.testing.assert_allclose(grad[:, 0], expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())


def test_recurrent_cell_gradient_matches_central_differences():
    x, y = cell_series(2000, 7)
    weights = cell_weights(8)
    step = cell_step(weights)
    seqs = sequences.Sequences({'x': x, 'y': y}, np.array([0]), np.array([len(x)]))
    w = flat(weights)
    direction = np.random.default_rng(9).normal(size=len(w))
    h = 1e-5
    ahead, behind = (sequences.run(step, seqs, w + s * h * direction)[0][0] for s in (1, -1))
    slope = (ahead - behind) / (2 * h)
    for mode in ('reverse', 'forward'):
        grad = sequences.gradient(step, seqs, w, mode)[1][:, 0]
        assert grad @ direction == pytest.approx(slope, rel=1e-7)  # central differences: error O(h²) ≈ 1e-10


def test_recurrent_cell_gradient_through_sql_matches_torch(db):
    """No SQL function gives a sequence model's gradient itself; one step of 'gd' at learning_rate 1 does:
    the weights after it are w − ∇(mean loss), so n·(w − w') is the summed loss's gradient."""
    x, y = cell_series(600, 11)
    weights = cell_weights(12)
    load(db, 'cell', y, x)
    expected_loss, expected = torch_cell(x, y, weights)
    for mode in ('reverse', 'forward'):
        after, _, row = train(db, 'cell', CELL_MODEL, CELL, weights, optimizer='gd', learning_rate=1.0,
                              iterations=1, mode=mode)
        n = row[2]
        grad = n * (flat(weights) - flat(after))
        np.testing.assert_allclose(grad, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
