"""Sequence models (issue 37): a state carried along ordered rows, trained through the recurrence, against
statsmodels' ExponentialSmoothing (simple, Holt, additive Holt-Winters) and AutoReg at their optimum, on a real
server."""
import json
import warnings

import numpy as np
import pytest

from conftest import error_of

SES_STATE = '{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.y - s.level)"}}'


def series(n=120, seed=3, season=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    y = 50 + 0.3 * t + np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 2, n)
    if season:
        y += np.array([3, -1, 0, 2, -4, 5, -5])[t % season]
    return y


def load(db, table, y, groups=None):
    """table (g int, day date, y float8): the series y, or each of groups in group g = 0, 1, …, a day a row."""
    db.execute(f'CREATE TABLE {table} (g int, day date, y float8)')
    with db.cursor().copy(f'COPY {table} (g, day, y) FROM STDIN') as copy:
        for g, ys in enumerate(groups or [y]):
            for k, v in enumerate(ys):
                copy.write_row((g, str(np.datetime64('2024-01-01') + k), float(v)))


def test_simple_exponential_smoothing_matches_statsmodels(db):
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing
    y = series()
    load(db, 'ses', y)
    row = db.execute("SELECT weights, final_loss, rows, converged, options FROM pgad.train('ses', "
                     "'λ(d, w, s) s.level', 'squared', 'SELECT day, y FROM ses', '{\"alpha\": 0.5, \"l0\": 50}', "
                     "order_by => 'day', state => %s)", [SES_STATE]).fetchone()
    weights, loss, rows, converged = row[0], row[1], row[2], row[3]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = SimpleExpSmoothing(y, initialization_method='estimated').fit(optimized=True)
    assert converged
    assert weights['alpha'] == pytest.approx(fit.params['smoothing_level'], rel=1e-5)
    assert weights['l0'] == pytest.approx(fit.params['initial_level'], rel=1e-6)
    assert loss * rows == pytest.approx(fit.sse, rel=1e-8)


HOLT_STATE = json.dumps({
    'level': {'start': 'w.l0', 'next': 's.level + s.trend + w.alpha*(d.y - s.level - s.trend)'},
    'trend': {'start': 'w.b0', 'next': 's.trend + w.alpha*w.beta*(d.y - s.level - s.trend)'}})


def holt_series(n, seed, alpha=0.5, beta=0.2, level=50.0, trend=0.3):
    """A series from Holt's model itself (additive errors), so that the optimum is inside (0, 1)²."""
    rng = np.random.default_rng(seed)
    y = []
    for _ in range(n):
        e = rng.normal()
        y.append(level + trend + e)
        level, trend = level + trend + alpha * e, trend + alpha * beta * e
    return np.array(y)


def test_holt_per_group_matches_statsmodels_in_one_call(db):
    """Three sequences of other lengths, fitted together (lockstep L-BFGS): each group's parameters as statsmodels'
    Holt fits that series alone."""
    from statsmodels.tsa.holtwinters import Holt
    ys = [holt_series(n, seed) for n, seed in ((150, 1), (90, 2), (200, 3))]
    load(db, 'holt', None, ys)
    found = db.execute("SELECT group_key->>'g', weights, final_loss * rows, converged FROM pgad.train('holt', "
                       "'λ(d, w, s) s.level + s.trend', 'squared', 'SELECT g, day, y FROM holt', "
                       "'{\"alpha\": 0.5, \"beta\": 0.1, \"l0\": 50, \"b0\": 0}', order_by => 'day', state => %s, "
                       "group_by => 'g') ORDER BY 1", [HOLT_STATE]).fetchall()
    assert len(found) == 3
    for (g, weights, sse, converged), y in zip(found, ys):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            fit = Holt(y, initialization_method='estimated').fit(optimized=True)
        assert converged
        assert sse <= fit.sse * (1 + 1e-9)  # statsmodels' optimiser stops near the optimum, never below pgad's
        assert weights['alpha'] == pytest.approx(fit.params['smoothing_level'], rel=1e-4)
        assert weights['beta'] == pytest.approx(fit.params['smoothing_trend'], rel=1e-3)
        assert weights['l0'] == pytest.approx(fit.params['initial_level'], rel=1e-5)


def test_the_last_state_is_stored_for_forecasts(db):
    y = holt_series(60, 5)
    load(db, 'last', y)
    options, weights = db.execute("SELECT options, weights FROM pgad.train('last', 'λ(d, w, s) s.level + s.trend', "
                                  "'squared', 'SELECT day, y FROM last', '{\"alpha\": 0.5, \"beta\": 0.1, \"l0\": 50, "
                                  "\"b0\": 0}', order_by => 'day', state => %s)", [HOLT_STATE]).fetchone()
    level, trend = weights['l0'], weights['b0']
    for v in y:
        e = v - level - trend
        level, trend = level + trend + weights['alpha'] * e, trend + weights['alpha'] * weights['beta'] * e
    assert options['last_state']['level'] == pytest.approx(level, rel=1e-12)
    assert options['last_state']['trend'] == pytest.approx(trend, rel=1e-12, abs=1e-12)
    assert options['last_order'] == str(np.datetime64('2024-01-01') + 59)
    assert options['order_by'] == 'day' and options['order_type'] == 'date'
    score = db.execute("SELECT pgad_models.last(state_level => 10, state_trend => 2)").fetchone()[0]
    assert score == 12


def test_summary_and_importance_refuse_a_sequence_model(db):
    load(db, 'refused', holt_series(40, 6))
    db.execute("SELECT FROM pgad.train('refused', 'λ(d, w, s) s.level', 'squared', 'SELECT day, y FROM refused', "
               "'{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', state => %s)", [SES_STATE])
    e = error_of(db, "SELECT * FROM pgad.summary('refused')")
    assert e.sqlstate == '0A000' and 'sequence model' in e.message_primary
    e = error_of(db, "SELECT * FROM pgad.importance('refused', 'SELECT day, y FROM refused')")
    assert e.sqlstate == '0A000'



def test_a_prediction_that_reads_its_label_forecasts_only_where_that_branch_is_not_taken(db):
    """AR(1)'s first row predicts its own label (a loss of 0): past the last row that branch is not taken, and the
    forecast is the recurrence's; a prediction that reads the label on every row has nothing to read there: 22000."""
    y = holt_series(50, 8)
    load(db, 'own', y)
    state = json.dumps({'n': {'start': '0', 'next': 's.n + 1'}, 'y1': {'start': '0', 'next': 'd.y'}})
    weights = db.execute("SELECT weights FROM pgad.train('own', 'λ(d, w, s) CASE WHEN s.n < 1 THEN d.y ELSE w.c + "
                         "w.a*s.y1 END', 'squared', 'SELECT day, y FROM own', '{\"c\": 0, \"a\": 0.5}', "
                         "order_by => 'day', state => %s)", [state]).fetchone()[0]
    values = [v for v, in db.execute("SELECT value FROM pgad.forecast('own', 3)")]
    expected, last = [], y[-1]
    for _ in range(3):
        last = weights['c'] + weights['a'] * last
        expected.append(last)
    assert values == pytest.approx(expected, rel=1e-12)
    db.execute("SELECT FROM pgad.train('always', 'λ(d, w, s) s.level + 0*d.y', 'squared', 'SELECT day, y FROM own', "
               "'{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', state => %s)", [SES_STATE])
    e = error_of(db, "SELECT * FROM pgad.forecast('always', 2)")
    assert e.sqlstate == '22000' and 'not a finite number at step 1' in e.message_primary
