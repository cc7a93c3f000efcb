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
