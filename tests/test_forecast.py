"""Forecasts of sequence models (issue 37, part 3), on a real server: pgad.forecast's values and analytic intervals
against statsmodels' ETSModel (simple and Holt, additive error) and AutoReg at the same parameters, the simulated
intervals against the analytic ones, exogenous columns from a query, and pgad.evaluate one step ahead."""
import json
import time

import numpy as np
import pandas as pd
import psycopg
import pytest

from conftest import error_of, settings

SES = '{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.y - s.level)"}}'
HOLT = ('{"level": {"start": "w.l0", "next": "s.level + s.trend + w.alpha*(d.y - s.level - s.trend)"}, '
        '"trend": {"start": "w.b0", "next": "s.trend + w.beta*(d.y - s.level - s.trend)"}}')
AR2 = '{"l1": {"start": "w.s1", "next": "d.y"}, "l2": {"start": "w.s2", "next": "s.l1"}}'
H = 12


def series(n=120, seed=3):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 50 + 0.3 * t + np.cumsum(rng.normal(0, 1, n)) + rng.normal(0, 2, n)


def load(db, table, groups, x=None):
    db.execute(f'DROP TABLE IF EXISTS {table}')
    db.execute(f'CREATE TABLE {table} (g int, day date, y float8, x float8)')
    with db.cursor().copy(f'COPY {table} (g, day, y, x) FROM STDIN') as copy:
        for g, ys in enumerate(groups):
            for k, v in enumerate(ys):
                copy.write_row((g, str(np.datetime64('2024-01-01') + k), None if v is None else float(v),
                                None if x is None else float(x[k])))


def train(db, name, table, model, state, weights, **more):
    """The model stored near its starting weights (one step of plain descent, learning rate 1e-9): the forecasts
    are checked at whatever weights it has, and a full fit of the python reference backend takes minutes."""
    more = dict(optimizer='gd', learning_rate=1e-9, iterations=1, **more)
    extra = ''.join(f', {k} => %({k})s' for k in more)
    return db.execute(f"SELECT weights, options FROM pgad.train(%(name)s, %(model)s, 'squared', %(data)s, "
                      f"%(weights)s, order_by => 'day', state => %(state)s{extra})",
                      dict(name=name, model=model, data=f'SELECT * FROM {table}', weights=weights, state=state,
                           **more)).fetchone()


def forecast(db, name, horizon=H, **more):
    extra = ''.join(f', {k} => %({k})s' for k in more)
    return db.execute(f'SELECT group_key, step, value, lower, upper FROM pgad.forecast(%(name)s, %(h)s{extra}) '
                      'ORDER BY group_key, step', dict(name=name, h=horizon, **more)).fetchall()


def ses_errors(level, alpha, ys):
    """Simple exponential smoothing's one-step-ahead errors along ys from level, the level updated with each actual
    value (pgad.evaluate of a sequence model)."""
    errors = []
    for v in ys:
        errors.append(v - level)
        level += alpha * (v - level)
    return np.array(errors)


def columns(rows):
    return [np.array([r[k] for r in rows], dtype=float) for k in (2, 3, 4)]


def test_simple_exponential_smoothing_forecast_matches_statsmodels_ets(db):
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel
    y = series()
    load(db, 'f_ses', [y])
    weights, options = train(db, 'f_ses', 'f_ses', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    value, lower, upper = columns(forecast(db, 'f_ses'))
    fit = ETSModel(pd.Series(y), error='add').smooth([weights['alpha'], weights['l0']])
    assert options['sigma2'] == pytest.approx(fit.mse, rel=1e-9)  # the same divisor: SSE over all n rows
    frame = fit.get_prediction(start=len(y), end=len(y) + H - 1).summary_frame(alpha=0.05)
    assert value == pytest.approx(frame['mean'].to_numpy(), rel=1e-9)
    assert lower == pytest.approx(frame['pi_lower'].to_numpy(), rel=1e-6)
    assert upper == pytest.approx(frame['pi_upper'].to_numpy(), rel=1e-6)
    assert upper[-1] - lower[-1] > upper[0] - lower[0]  # the interval widens with the step


def test_holt_forecast_matches_statsmodels_ets_at_level_80(db):
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel
    y = series(seed=5)
    load(db, 'f_holt', [y])
    weights, options = train(db, 'f_holt', 'f_holt', 'λ(d, w, s) s.level + s.trend', HOLT,
                             '{"alpha": 0.5, "beta": 0.1, "l0": 50, "b0": 0}')
    value, lower, upper = columns(forecast(db, 'f_holt', level=0.8))
    fit = ETSModel(pd.Series(y), error='add', trend='add').smooth([weights[k] for k in ('alpha', 'beta', 'l0', 'b0')])
    assert options['sigma2'] == pytest.approx(fit.mse, rel=1e-9)
    frame = fit.get_prediction(start=len(y), end=len(y) + H - 1).summary_frame(alpha=0.2)
    assert value == pytest.approx(frame['mean'].to_numpy(), rel=1e-9)
    assert lower == pytest.approx(frame['pi_lower'].to_numpy(), rel=1e-6)
    assert upper == pytest.approx(frame['pi_upper'].to_numpy(), rel=1e-6)


def ar2_at(y, weights, sigma2):
    """statsmodels' AutoReg(2) results at pgad's parameters and σ²."""
    from statsmodels.tsa.ar_model import AutoReg
    fit = AutoReg(y, 2).fit()
    fit._results._params = np.array([weights['c'], weights['a1'], weights['a2']])
    fit._results.sigma2 = sigma2
    return fit


def test_autoregression_forecast_matches_statsmodels_autoreg(db):
    y = series(seed=7)
    load(db, 'f_ar', [y])
    weights, options = train(db, 'f_ar', 'f_ar', 'λ(d, w, s) w.c + w.a1*s.l1 + w.a2*s.l2', AR2,
                             '{"c": 0, "a1": 0.5, "a2": 0, "s1": 50, "s2": 50}')
    value, lower, upper = columns(forecast(db, 'f_ar'))
    fit = ar2_at(y, weights, options['sigma2'])
    frame = fit.get_prediction(start=len(y), end=len(y) + H - 1).summary_frame(alpha=0.05)
    assert value == pytest.approx(frame['mean'].to_numpy(), rel=1e-9)
    assert lower == pytest.approx(frame['mean_ci_lower'].to_numpy(), rel=1e-6)
    assert upper == pytest.approx(frame['mean_ci_upper'].to_numpy(), rel=1e-6)


# SES with a term quadratic in the state, too small to move the forecast by more than 1e-5 of it: not linear along
# any path, so simulated
NONLINEAR = SES.replace('"s.level + w.alpha', '"s.level + 1e-7*(s.level - 50)*(s.level - 50) + w.alpha')


def test_a_recurrence_linear_along_its_forecast_but_not_as_written_gets_analytic_intervals(db):
    """The same SES written nonlinearly in the state (s.level*1 through exp(ln(…)) would be folded; a product of the
    state with itself divided by itself is not): at every step of its forecast its Jacobians do not move when the
    level does, so its intervals are SES's, analytic, the same for any seed."""
    y = series()
    load(db, 'f_lin2', [y])
    train(db, 'f_lin1', 'f_lin2', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    written = SES.replace('"s.level + w.alpha', '"s.level*s.level/s.level + w.alpha')
    train(db, 'f_lin2', 'f_lin2', 'λ(d, w, s) s.level', written, '{"alpha": 0.5, "l0": 50}')
    assert stored_forecaster(db, 'f_lin2').linear() is None
    want = np.array(columns(forecast(db, 'f_lin1')))
    np.testing.assert_allclose(np.array(columns(forecast(db, 'f_lin2', seed=3))), want, rtol=1e-8)
    assert forecast(db, 'f_lin2', seed=3) == forecast(db, 'f_lin2', seed=4)


def test_simulated_intervals_of_a_nonlinear_model_near_the_analytic_ones_of_the_same_recurrence(db):
    """SES with a tiny quadratic term (NONLINEAR) is simulated: 20000 paths, seeded, within Monte-Carlo error of
    SES's analytic intervals."""
    y = series()
    load(db, 'f_sim', [y])
    train(db, 'f_sim', 'f_sim', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    train(db, 'f_sim2', 'f_sim', 'λ(d, w, s) s.level', NONLINEAR, '{"alpha": 0.5, "l0": 50}')
    value, lower, upper = columns(forecast(db, 'f_sim'))
    rows = forecast(db, 'f_sim2', simulations=20000, seed=11)
    v2, l2, u2 = columns(rows)
    assert v2 == pytest.approx(value, rel=1e-4)  # the quadratic term moves it by about 1e-5
    # the 2.5% quantile of 20000 normal draws has a standard error of √(0.025·0.975/20000)/φ(1.96) = 0.019σ_h:
    # 0.08σ_h is 4 of them
    sigma_h = (upper - lower) / (2 * 1.959963984540054)
    assert np.all(np.abs(l2 - lower) < 0.08 * sigma_h) and np.all(np.abs(u2 - upper) < 0.08 * sigma_h)
    assert forecast(db, 'f_sim2', simulations=20000, seed=11) == rows  # the seed fixes the draws
    assert forecast(db, 'f_sim2', simulations=20000, seed=12) != rows


def test_a_model_with_an_exogenous_column_takes_it_from_the_data_per_group(db):
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, 140)
    groups = [10 + 2 * x[:140] + rng.normal(0, 0.5, 140), -5 + 2 * x[:140] + rng.normal(0, 0.5, 140)]
    load(db, 'f_arx', [g[:100] for g in groups], x)
    db.execute('CREATE TABLE f_arx_future AS SELECT g, day, x FROM f_arx WHERE false')
    for g in range(2):
        db.cursor().executemany('INSERT INTO f_arx_future VALUES (%s, %s, %s)',
                       [(g, str(np.datetime64('2024-01-01') + k), float(x[k])) for k in range(90, 140)])
    state = '{"l1": {"start": "w.s1", "next": "d.y"}}'
    train(db, 'f_arx', 'f_arx', 'λ(d, w, s) w.c + w.a*s.l1 + w.b*d.x', state, '{"c": 0.5, "a": 0.3, "b": 2, "s1": 0}',
          group_by='g')
    rows = db.execute("SELECT group_key, step, value FROM pgad.forecast('f_arx', 5, "
                      "'SELECT g, day, x FROM f_arx_future') ORDER BY group_key, step").fetchall()
    assert [(r[0], r[1]) for r in rows] == [({'g': g}, s) for g in range(2) for s in range(1, 6)]
    stored = {r[0]['g']: (r[1], r[2]) for r in db.execute(
        "SELECT group_key, weights, options FROM pgad.models WHERE name = 'f_arx'")}
    for g in range(2):
        w, options = stored[g]
        level = options['last_state']['l1']
        for step in range(5):  # the rows after day 100 (the data's rows 90…99 are the training's: left out)
            level = w['c'] + w['a'] * level + w['b'] * x[100 + step]
            assert rows[g * 5 + step][2] == pytest.approx(level, rel=1e-12)
    e = error_of(db, "SELECT * FROM pgad.forecast('f_arx', 5)")
    assert e.sqlstate == '22023' and 'column \'x\'' in e.message_primary
    e = error_of(db, "SELECT * FROM pgad.forecast('f_arx', 41, 'SELECT g, day, x FROM f_arx_future')")
    assert e.sqlstate == '22023' and 'group {"g": 0}' in e.message_primary and '40 rows' in e.message_primary


def test_evaluate_runs_one_step_ahead_from_the_last_state_with_the_actual_labels(db):
    y = series(150, seed=9)
    load(db, 'f_ev', [y[:120]])
    weights, options = train(db, 'f_ev', 'f_ev', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    load(db, 'f_ev_all', [y])
    found = dict(db.execute("SELECT metric, value FROM pgad.evaluate('f_ev', 'SELECT day, y FROM f_ev_all')")
                 .fetchall())
    errors = ses_errors(options['last_state']['level'], weights['alpha'], y[120:])
    assert found['rows'] == 30 and found['earlier_rows'] == 120 and found['skipped_rows'] == 0
    assert found['mse'] == pytest.approx(np.mean(errors ** 2), rel=1e-12)
    assert found['loss'] == pytest.approx(np.mean(errors ** 2), rel=1e-12)
    assert found['rmse'] == pytest.approx(np.sqrt(np.mean(errors ** 2)), rel=1e-12)
    assert found['mae'] == pytest.approx(np.mean(np.abs(errors)), rel=1e-12)
    assert 'r2' not in found
    e = error_of(db, "SELECT * FROM pgad.evaluate('f_ev', 'SELECT day, y FROM f_ev')")
    assert e.sqlstate == '22000' and 'after the training' in e.message_primary


def test_evaluate_of_groups_counts_a_group_the_model_lacks_and_each_group_starts_from_its_own_state(db):
    a, b = series(60, seed=1), series(60, seed=2) + 30
    load(db, 'f_evg', [a[:50], b[:50]])
    train(db, 'f_evg', 'f_evg', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}', group_by='g')
    load(db, 'f_evg_all', [a, b, a])
    found = {(r[0]['g'], r[1]): r[2] for r in db.execute(
        "SELECT group_key, metric, value FROM pgad.evaluate('f_evg', 'SELECT * FROM f_evg_all')")}
    stored = {r[0]['g']: (r[1], r[2]) for r in db.execute(
        "SELECT group_key, weights, options FROM pgad.models WHERE name = 'f_evg'")}
    for g, y in ((0, a), (1, b)):
        w, options = stored[g]
        errors = ses_errors(options['last_state']['level'], w['alpha'], y[50:])
        assert found[g, 'rows'] == 10 and found[g, 'earlier_rows'] == 50
        assert found[g, 'mse'] == pytest.approx(np.mean(np.square(errors)), rel=1e-12)
    assert found[2, 'unseen_rows'] == 60 and (2, 'rows') not in found


def test_bad_arguments_are_clear_errors_and_nulls_give_no_rows(db):
    y = series(40)
    load(db, 'f_bad', [y])
    train(db, 'f_bad', 'f_bad', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    for sql, state, words in [
            ("SELECT * FROM pgad.forecast('f_bad', 0)", '22023', 'horizon must be at least 1'),
            ("SELECT * FROM pgad.forecast('f_bad', -3)", '22023', 'horizon must be at least 1'),
            ("SELECT * FROM pgad.forecast('f_bad', 2000000000)", '54000', 'a forecast of 2000000000 steps'),
            ("SELECT * FROM pgad.forecast('f_bad', 3, level => 1)", '22023', 'level must be between 0 and 1'),
            ("SELECT * FROM pgad.forecast('f_bad', 3, simulations => 0)", '22023', 'simulations must be at least 1'),
            ("SELECT * FROM pgad.forecast('f_nothing', 3)", '42704', 'model "f_nothing" does not exist')]:
        e = error_of(db, sql)
        assert (e.sqlstate, words in e.message_primary) == (state, True), sql
    db.execute("SELECT * FROM pgad.train('f_flat', 'λ(d, w) w.a', 'squared', 'SELECT y FROM f_bad', '{\"a\": 0}', "
               "iterations => 1)")
    e = error_of(db, "SELECT * FROM pgad.forecast('f_flat', 3)")
    assert e.sqlstate == '0A000' and 'not a sequence model' in e.message_primary
    for sql in ["SELECT * FROM pgad.forecast(NULL, 3)", "SELECT * FROM pgad.forecast('f_bad', NULL)",
                "SELECT * FROM pgad.forecast('f_bad', 3, level => NULL)",
                "SELECT * FROM pgad.forecast('f_bad', 3, seed => NULL)"]:
        assert db.execute(sql).fetchall() == [], sql


def test_a_loss_without_a_variance_gives_null_bounds_and_says_why(db):
    y = series(60)
    load(db, 'f_abs', [y])
    db.execute("SELECT * FROM pgad.train('f_abs', 'λ(d, w, s) s.level', 'absolute', 'SELECT day, y FROM f_abs', "
               "'{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', state => %s, iterations => 1)", [SES])
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    rows = forecast(db, 'f_abs', 3)
    assert [r[3:] for r in rows] == [(None, None)] * 3 and all(r[2] is not None for r in rows)
    assert any('no prediction intervals' in n and "'absolute'" in n for n in notices)


def test_another_role_cannot_forecast_from_a_model_whose_rows_it_cannot_read(db, cluster, dbname):
    y = series(40)
    load(db, 'f_secret', [y])
    train(db, 'f_secret', 'f_secret', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    db.execute('DROP ROLE IF EXISTS f_outsider')
    db.execute('CREATE ROLE f_outsider LOGIN')
    with psycopg.connect(cluster.conninfo(dbname, user='f_outsider'), autocommit=True) as other:
        e = error_of(other, "SELECT * FROM pgad.forecast('f_secret', 3)")
        assert e.sqlstate == '42501' and 'permission denied for model "f_secret"' in e.message_primary
        e = error_of(other, "SELECT * FROM pgad.anomalies('f_secret', 'SELECT 1 AS y')")
        assert e.sqlstate == '42501' and 'permission denied for model "f_secret"' in e.message_primary
    db.execute('GRANT SELECT ON f_secret TO f_outsider')
    with psycopg.connect(cluster.conninfo(dbname, user='f_outsider'), autocommit=True) as other:
        assert len(other.execute("SELECT * FROM pgad.forecast('f_secret', 3)").fetchall()) == 3
        assert len(other.execute("SELECT * FROM pgad.anomalies('f_secret', 'SELECT * FROM f_secret')").fetchall()) == 40


def test_retraining_changes_the_forecast_and_dropping_the_model_ends_it(db):
    y = series(50)
    load(db, 'f_again', [y])
    train(db, 'f_again', 'f_again', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    before = forecast(db, 'f_again', 3)
    load(db, 'f_again', [y + 100])
    train(db, 'f_again', 'f_again', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    after = forecast(db, 'f_again', 3)
    assert after[0][2] == pytest.approx(before[0][2] + 100, rel=1e-6)
    db.execute("SELECT pgad.drop_model('f_again')")
    assert error_of(db, "SELECT * FROM pgad.forecast('f_again', 3)").sqlstate == '42704'


def test_a_large_simulation_is_cancelled(db, cluster, dbname):
    y = series(40)
    load(db, 'f_long', [y])
    weights = train(db, 'f_long', 'f_long', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')[0]
    nonlinear = SES.replace('"s.level + w.alpha', '"s.level*s.level/s.level + w.alpha')
    train(db, 'f_long2', 'f_long', 'λ(d, w, s) s.level', nonlinear, json.dumps(weights))
    db.execute("SET statement_timeout = '1s'")
    began = time.monotonic()
    try:
        e = error_of(db, "SELECT count(*) FROM pgad.forecast('f_long2', 100000, simulations => 10000)")
    finally:
        db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014' and time.monotonic() - began < 15  # generous: a loaded 2-core machine



AR2X = 'λ(d, w, s) w.c + w.a1*s.l1 + w.a2*s.l2 + w.b*d.x'
AR2X_WEIGHTS = '{"c": 1, "a1": 0.5, "a2": 0.2, "b": 2, "s1": 1, "s2": 1}'


def arx_table(db, table, keys, n, seed=4):
    """Groups of an AR(2) with an exogenous x, ordered by an integer t; {key: (y, x)}."""
    rng = np.random.default_rng(seed)
    found = {}
    db.execute(f'DROP TABLE IF EXISTS {table}')
    db.execute(f'CREATE TABLE {table} (g int, t int, y float8, x float8)')
    for key in keys:
        x, y = rng.normal(0, 1, n), np.zeros(n)
        for k in range(n):
            y[k] = 1 + 0.5 * y[k - 1] * (k > 0) + 0.2 * y[k - 2] * (k > 1) + 2 * x[k] + rng.normal(0, 0.5)
        found[key] = (y, x)
        db.cursor().executemany(f'INSERT INTO {table} VALUES (%s, %s, %s, %s)',
                                [(key, 10 * k, float(y[k]), float(x[k])) for k in range(n)])
    return found


def test_evaluate_of_groups_with_two_states_and_an_exogenous_column_ordered_by_an_integer(db):
    """One step ahead per group from its own last state (two states), x read at each row, y the actual label; a row
    with NULL x skipped and counted; a group the model lacks that sorts first counted too, the others still scored."""
    found = arx_table(db, 'f_arx2', (0, 1), 80)
    db.execute("SELECT FROM pgad.train('f_arx2', %s, 'squared', 'SELECT * FROM f_arx2 WHERE t < 600', %s, "
               "order_by => 't', state => %s, group_by => 'g', optimizer => 'gd', learning_rate => 1e-9, "
               "iterations => 1)", (AR2X, AR2X_WEIGHTS, AR2))
    db.execute('UPDATE f_arx2 SET x = NULL WHERE t = 650 AND g = 1')
    db.execute('INSERT INTO f_arx2 SELECT -1, t, y, x FROM f_arx2 WHERE g = 0')
    rows = {(r[0]['g'], r[1]): r[2] for r in db.execute(
        "SELECT group_key, metric, value FROM pgad.evaluate('f_arx2', 'SELECT * FROM f_arx2')")}
    stored = {r[0]['g']: (r[1], r[2]) for r in db.execute(
        "SELECT group_key, weights, options FROM pgad.models WHERE name = 'f_arx2'")}
    assert rows[-1, 'unseen_rows'] == 80
    for g in (0, 1):
        (y, x), (w, options) = found[g], stored[g]
        l1, l2 = options['last_state']['l1'], options['last_state']['l2']
        errors = []
        for k in range(60, 80):
            if g == 1 and k == 65:
                continue
            errors.append(w['c'] + w['a1'] * l1 + w['a2'] * l2 + w['b'] * x[k] - y[k])
            l1, l2 = y[k], l1
        assert (rows[g, 'rows'], rows[g, 'earlier_rows'], rows[g, 'skipped_rows']) == (20 - g, 60, g)
        assert rows[g, 'mse'] == pytest.approx(np.mean(np.square(errors)), rel=1e-12)
        assert rows[g, 'mae'] == pytest.approx(np.mean(np.abs(errors)), rel=1e-12)


def test_simulated_intervals_of_groups_with_two_states_and_an_exogenous_column(db):
    """The AR(2) with x and a tiny quadratic term in its second state (simulated) against the same model linear
    (analytic): per group, the values alike and the bounds within Monte-Carlo error, x taken from the data."""
    arx_table(db, 'f_arx3', (0, 1), 60, seed=5)
    nonlinear = AR2.replace('"next": "s.l1"', '"next": "s.l1 + 1e-6*s.l1*s.l1"')
    for name, state in (('f_lin', AR2), ('f_sim3', nonlinear)):
        db.execute("SELECT FROM pgad.train(%s, %s, 'squared', 'SELECT * FROM f_arx3 WHERE t < 500', %s, "
                   "order_by => 't', state => %s, group_by => 'g', optimizer => 'gd', learning_rate => 1e-9, "
                   "iterations => 1)", (name, AR2X, AR2X_WEIGHTS, state))
    future = 'SELECT g, t, x FROM f_arx3'
    linear = db.execute("SELECT group_key, step, value, lower, upper FROM pgad.forecast('f_lin', 6, %s) "
                        "ORDER BY group_key, step", (future,)).fetchall()
    simulated = db.execute("SELECT group_key, step, value, lower, upper FROM pgad.forecast('f_sim3', 6, %s, "
                           "simulations => 20000, seed => 3) ORDER BY group_key, step", (future,)).fetchall()
    assert [r[:2] for r in simulated] == [r[:2] for r in linear] == [({'g': g}, s) for g in (0, 1)
                                                                    for s in range(1, 7)]
    value, lower, upper = columns(linear)
    v2, l2, u2 = columns(simulated)
    assert v2 == pytest.approx(value, rel=1e-5, abs=1e-4)  # the quadratic term moves it by about 1e-6
    assert not np.allclose(value[:6], value[6:])  # the groups' own states and x
    sigma_h = (upper - lower) / (2 * 1.959963984540054)
    assert np.all(np.abs(l2 - lower) < 0.08 * sigma_h) and np.all(np.abs(u2 - upper) < 0.08 * sigma_h)


@pytest.mark.parametrize('kind', ['timestamptz', 'timestamp', 'date'])
def test_evaluate_from_the_last_row_of_a_time_order(db, kind):
    """The training's last row, stored as text in the session's time zone (here +05:30), is where evaluate starts,
    whatever the order column's type: 30 rows before it, 10 after, scored one step ahead."""
    y = series(40, seed=8)
    with settings(db, {'TimeZone': 'Asia/Kolkata'}):
        db.execute('DROP TABLE IF EXISTS f_times')
        db.execute(f"CREATE TABLE f_times AS SELECT (pg_catalog.timestamptz '2024-03-01 00:00:00+00' + k * "
                   f"interval '1 day')::{kind} AS at, v AS y FROM unnest(%s::float8[]) WITH ORDINALITY AS u(v, k)",
                   (list(map(float, y)),))
        _, options = db.execute("SELECT weights, options FROM pgad.train('f_times', 'λ(d, w, s) s.level', 'squared', "
                                "'SELECT * FROM f_times ORDER BY at LIMIT 30', '{\"alpha\": 0.5, \"l0\": 50}', "
                                "order_by => 'at', state => %s, optimizer => 'gd', learning_rate => 1e-9, "
                                "iterations => 1)", (SES,)).fetchone()
        found = dict(db.execute("SELECT metric, value FROM pgad.evaluate('f_times', 'SELECT * FROM f_times')")
                     .fetchall())
    assert (found['rows'], found['earlier_rows']) == (10, 30)
    errors = ses_errors(options['last_state']['level'], 0.5, y[30:])
    assert found['mse'] == pytest.approx(np.mean(np.square(errors)), rel=1e-6)


def test_evaluate_with_no_row_after_the_training_says_what_it_scores(db):
    y = series(30)
    load(db, 'f_none', [y])
    train(db, 'f_none', 'f_none', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    e = error_of(db, "SELECT * FROM pgad.evaluate('f_none', 'SELECT day, y FROM f_none')")
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22000', "the data has no rows after the training's last row",
        'pgad.evaluate scores sequence model "f_none" one step ahead on the rows after the ones it was trained on.')


def test_the_edges_of_horizon_and_level(db):
    """horizon 1 and the greatest level distinguishable from 1 forecast; 0 and 1 and past them are 22023, each with
    its message and hint whole."""
    load(db, 'f_edges', [series(30)])
    train(db, 'f_edges', 'f_edges', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    assert len(forecast(db, 'f_edges', 1)) == 1
    assert len(forecast(db, 'f_edges', 2, level=0.9999999999999998)) == 2
    for sql, message, hint in [
            ("SELECT * FROM pgad.forecast('f_edges', 0)", 'horizon must be at least 1, not 0',
             'Forecast 1 or more steps.'),
            *[(f"SELECT * FROM pgad.forecast('f_edges', 3, level => {level})",
               f'level must be between 0 and 1, not {level}',
               'Give the coverage of the intervals as a fraction: level => 0.95.') for level in ('0', '1', '1.5')],
            ("SELECT * FROM pgad.forecast('f_edges', 3, level => 0.9999999999999999)",
             'level must be between 0 and 1, and distinguishable from 1 in float8, not 0.9999999999999999',
             'Give a level of at most 0.9999999999999998.')]:
        e = error_of(db, sql)
        assert (e.sqlstate, e.message_primary, e.message_hint) == ('22023', message, hint), sql


def test_a_prediction_not_finite_past_the_training_says_where_and_why(db):
    """The label read as NaN past the last row: a branch not taken forecasts, a prediction that always reads it is
    22000 at step 1 with its hint whole."""
    y = series(30)
    load(db, 'f_own', [y])
    state = json.dumps({'n': {'start': '0', 'next': 's.n + 1'}, 'y1': {'start': '0', 'next': 'd.y'}})
    weights = db.execute("SELECT weights FROM pgad.train('f_own', 'λ(d, w, s) CASE WHEN s.n < 1 THEN d.y ELSE w.c + "
                         "w.a*s.y1 END', 'squared', 'SELECT day, y FROM f_own', '{\"c\": 0, \"a\": 0.5}', "
                         "order_by => 'day', state => %s, iterations => 3)", [state]).fetchone()[0]
    assert [r[2] for r in forecast(db, 'f_own', 2)] == pytest.approx(
        [weights['c'] + weights['a'] * y[-1], weights['c'] + weights['a'] * (weights['c'] + weights['a'] * y[-1])],
        rel=1e-12)
    train(db, 'f_always', 'f_own', 'λ(d, w, s) s.level + 0*d.y', SES, '{"alpha": 0.5, "l0": 50}')
    nonlinear = SES.replace('"s.level + w.alpha', '"s.level*s.level/s.level + w.alpha')
    train(db, 'f_always2', 'f_own', 'λ(d, w, s) s.level + 0*d.y', nonlinear, '{"alpha": 0.5, "l0": 50}')
    e = error_of(db, "SELECT * FROM pgad.forecast('f_always2', 2)")  # simulated
    assert (e.sqlstate, e.message_primary) == (
        '22000', 'the forecast of model "f_always2" is not a finite number at step 1')
    e = error_of(db, "SELECT * FROM pgad.forecast('f_always', 2)")
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22000', 'the forecast of model "f_always" is not a finite number at step 1',
        'A prediction that reads the label column "y" past the training\'s last row has no value to read: read the '
        'label through the state (its next values), as the examples in docs/sql.md ("Sequences") do.')


def test_a_state_that_reads_an_exogenous_column(db):
    """A next state that reads x (not the prediction): the analytic forecast takes each step's x from the data, as
    the recurrence by hand does; too few rows after the last, or none for a group, or no data, are 22023 whole."""
    rng = np.random.default_rng(6)
    x, y = rng.normal(0, 1, 50), series(50)
    db.execute('DROP TABLE IF EXISTS f_sx')
    db.execute('CREATE TABLE f_sx (t int, y float8, x float8, z float8)')
    db.cursor().executemany('INSERT INTO f_sx VALUES (%s, %s, %s, 1)',
                            [(k, float(y[k]), float(x[k])) for k in range(50)])
    state = '{"l": {"start": "w.l0", "next": "w.a*d.y + w.b*d.x*d.z"}}'
    weights, options = db.execute(
        "SELECT weights, options FROM pgad.train('f_sx', 'λ(d, w, s) s.l', 'squared', 'SELECT * FROM f_sx "
        "WHERE t < 40', '{\"a\": 0.5, \"b\": 1, \"l0\": 50}', order_by => 't', state => %s, optimizer => 'gd', "
        "learning_rate => 1e-9, iterations => 1)", (state,)).fetchone()
    rows = db.execute("SELECT value FROM pgad.forecast('f_sx', 4, 'SELECT t, x, z FROM f_sx')").fetchall()
    level, expected = options['last_state']['l'], []
    for k in range(4):
        expected.append(level)
        level = weights['a'] * level + weights['b'] * x[40 + k]
    assert [v for v, in rows] == pytest.approx(expected, rel=1e-12)
    weights, options = db.execute(
        "SELECT weights, options FROM pgad.train('f_sx2', 'λ(d, w, s) s.l', 'squared', 'SELECT * FROM f_sx WHERE "
        "t < 40', %s, order_by => 't', state => %s, optimizer => 'gd', learning_rate => 1e-9, iterations => 1)",
        (json.dumps(weights), state.replace('w.a*d.y', 'w.a*d.y*d.y/d.y'))).fetchone()
    simulated = db.execute("SELECT value FROM pgad.forecast('f_sx2', 4, 'SELECT t, x, z FROM f_sx', "
                           "simulations => 50)").fetchall()  # simulated: the next state's x from the data too
    level, expected = options['last_state']['l'], []
    for k in range(4):
        expected.append(level)
        level = weights['a'] * level + weights['b'] * x[40 + k]
    assert [v for v, in simulated] == pytest.approx(expected, rel=1e-12)
    assert len(db.execute("SELECT FROM pgad.forecast('f_sx', 10, 'SELECT t, x, z FROM f_sx')").fetchall()) == 10
    for sql, message, hint in [
            ("SELECT * FROM pgad.forecast('f_sx', 11, 'SELECT t, x, z FROM f_sx')",
             "the data has 10 rows after the training's last row, fewer than the horizon (11)",
             'Give the future values of x, z for every step.'),
            ("SELECT * FROM pgad.forecast('f_sx', 2, 'SELECT t, x, z FROM f_sx WHERE t < 41')",
             "the data has 1 row after the training's last row, fewer than the horizon (2)",
             'Give the future values of x, z for every step.'),
            ("SELECT * FROM pgad.forecast('f_sx', 2)",
             "model \"f_sx\" reads column 'x', column 'z' beside its state: a forecast takes their future values "
             "from data", "Give data => 'SELECT t, x, z FROM …', with at least the horizon's rows after the "
             "training's last row.")]:
        e = error_of(db, sql)
        assert (e.sqlstate, e.message_primary, e.message_hint) == ('22023', message, hint), sql
    e = error_of(db, "SELECT * FROM pgad.forecast('f_sx', 11, 'SELECT t, x, z FROM f_sx')")
    assert e.message_detail == "The training's last row is at 39."


def test_a_group_missing_from_the_future_data_is_named(db):
    load(db, 'f_gx', [series(20, seed=1), series(20, seed=2)], x=np.arange(20.0))
    train(db, 'f_gx', 'f_gx', 'λ(d, w, s) s.level + w.b*d.x', SES, '{"alpha": 0.5, "l0": 50, "b": 0}',
          group_by='g')
    e = error_of(db, "SELECT * FROM pgad.forecast('f_gx', 2, 'SELECT g, day + 20 AS day, x FROM f_gx WHERE g = 0')")
    assert (e.sqlstate, e.message_primary, e.message_detail) == (
        '22023', 'the data has 0 rows of group {"g": 1} after the training\'s last row, fewer than the horizon (2)',
        'The training\'s last row of group {"g": 1} is at 2024-01-20.')


def stored_forecaster(db, name):
    """The Forecaster of model name's stored rows, built in this process (its graph's size, for the bound)."""
    from types import SimpleNamespace
    from pgad import limits
    from pgad.models.forecast import Forecaster
    rows = db.execute("SELECT group_key::text AS group_key, model, loss, weights::text AS weights, options::text AS "
                      "options FROM pgad.models WHERE name = %s ORDER BY group_key", (name,)).fetchall()
    stored = [dict(zip(('group_key', 'model', 'loss', 'weights', 'options'), r)) for r in rows]
    return Forecaster(name, stored, SimpleNamespace(limits=limits.DEFAULT, memory_limit=1 << 30))


def test_the_memory_bounds_of_a_forecast_at_the_byte(db):
    """Under pgad.memory_limit = 1 MB: the result's rows at 256 bytes (8 more an exogenous column) a group and a
    step, and a simulation's paths at 8 bytes a node of the step's graph, a state, a weight and 2: each at the
    limit runs, a byte past it is 54000 with its message and hint whole; a linear model is not simulated, so its
    paths are not counted; simulations => 1 is a path. Groups whose paths together pass the limit are simulated a
    batch at a time, each group's draws its own (seed and its place): the same bounds as all at once."""
    load(db, 'f_mem', [series(30)], x=np.arange(30) / 10)
    load(db, 'f_memg', [series(30), series(30, seed=4)])
    train(db, 'f_mem', 'f_mem', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    train(db, 'f_memg', 'f_memg', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}', group_by='g')
    nonlinear = NONLINEAR
    train(db, 'f_mems', 'f_mem', 'λ(d, w, s) s.level', nonlinear, '{"alpha": 0.5, "l0": 50}')
    train(db, 'f_memx', 'f_mem', 'λ(d, w, s) s.level + w.b*d.x', SES, '{"alpha": 0.5, "l0": 50, "b": 0}')
    fc = stored_forecaster(db, 'f_mems')
    assert fc.linear() is None  # simulated; the check adds the derivatives' nodes to the graph the bound counts
    per_path = 8 * (len(fc.graph.nodes) + len(fc.step.states) + len(fc.step.weights) + 2)
    most = (1 << 20) // per_path

    def refused(sql):
        e = error_of(db, sql)
        return e.sqlstate, e.message_primary, e.message_hint
    with settings(db, {'pgad.memory_limit': '1MB'}):
        assert len(forecast(db, 'f_mem', 4096)) == 4096
        assert refused("SELECT FROM pgad.forecast('f_mem', 4097)") == (
            '54000', 'a forecast of 4097 steps for 1 group needs 1 MB, more than pgad.memory_limit (1 MB)',
            'Forecast fewer steps, or have a superuser raise pgad.memory_limit.')
        assert refused("SELECT FROM pgad.forecast('f_memg', 2049)")[1] == \
            'a forecast of 2049 steps for 2 groups needs 1 MB, more than pgad.memory_limit (1 MB)'
        assert refused("SELECT FROM pgad.forecast('f_memx', 3971, 'SELECT day, x FROM f_mem')")[0] == '22023'
        assert refused("SELECT FROM pgad.forecast('f_memx', 3972, 'SELECT day, x FROM f_mem')")[0] == '54000'
        assert len(forecast(db, 'f_mems', 2, simulations=most)) == 2
        assert refused(f"SELECT FROM pgad.forecast('f_mems', 2, simulations => {most + 1})") == (
            '54000', f'{most + 1} simulated paths of a group need {(most + 1) * per_path >> 20} MB, more than '
            'pgad.memory_limit (1 MB)', 'Simulate fewer paths, or have a superuser raise pgad.memory_limit.')
        assert len(forecast(db, 'f_mem', 2, simulations=10 * most)) == 2
    train(db, 'f_memsg', 'f_memg', 'λ(d, w, s) s.level', nonlinear, '{"alpha": 0.5, "l0": 50}', group_by='g')
    nodes = per_path // 8
    with settings(db, {'pgad.memory_limit': f'{nodes * -(-1024 // nodes)}kB'}):  # a multiple of 8·nodes bytes
        exact = nodes * -(-1024 // nodes) * 1024 // per_path
        assert len(forecast(db, 'f_mems', 1, simulations=exact)) == 1  # paths of exactly the limit run
        assert refused(f"SELECT FROM pgad.forecast('f_mems', 1, simulations => {exact + 1})")[0] == '54000'
        batched = [v for r in forecast(db, 'f_memsg', 3, simulations=exact) for v in r[2:]]  # a group at a time
    whole = [v for r in forecast(db, 'f_memsg', 3, simulations=exact) for v in r[2:]]  # all at once
    assert len(batched) == 18 and batched == pytest.approx(whole, rel=1e-12)
    one = forecast(db, 'f_mems', 3, simulations=1)
    assert [r[3] == r[4] for r in one] == [True] * 3  # one path: both bounds its value at each step
    assert refused("SELECT FROM pgad.forecast('f_mems', 3, simulations => 0)") == (
        '22023', 'simulations must be at least 1, not 0',
        'Simulate 1000 paths (the default), or more for steadier bounds.')


def test_a_label_named_otherwise_is_the_one_forecast_and_scored(db):
    """label => 'v': the forecast and evaluate read v as the label (one step ahead against v's values)."""
    y = series(40, seed=6)
    db.execute('DROP TABLE IF EXISTS f_label')
    db.execute('CREATE TABLE f_label (day int, v float8, y float8)')
    db.cursor().executemany('INSERT INTO f_label VALUES (%s, %s, %s)', [(k, float(y[k]), 0.0) for k in range(40)])
    weights, options = db.execute(
        "SELECT weights, options FROM pgad.train('f_label', 'λ(d, w, s) s.level', 'squared', 'SELECT day, v FROM "
        "f_label WHERE day < 30', '{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', label => 'v', state => %s, "
        "optimizer => 'gd', learning_rate => 1e-9, iterations => 1)",
        (SES.replace('d.y', 'd.v'),)).fetchone()
    found = dict(db.execute("SELECT metric, value FROM pgad.evaluate('f_label', 'SELECT day, v FROM f_label')")
                 .fetchall())
    errors = ses_errors(options['last_state']['level'], weights['alpha'], y[30:])
    assert found['mse'] == pytest.approx(np.mean(np.square(errors)), rel=1e-12)
    assert [r[2] for r in forecast(db, 'f_label', 2)] == pytest.approx([options['last_state']['level']] * 2,
                                                                       rel=1e-12)


def test_a_model_without_intervals_and_one_that_is_no_sequence_say_so_whole(db):
    load(db, 'f_say', [series(30)])
    db.execute("SELECT FROM pgad.train('f_say', 'λ(d, w, s) s.level', 'absolute', 'SELECT day, y FROM f_say', "
               "'{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', state => %s, iterations => 1)", [SES])
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    forecast(db, 'f_say', 2)
    assert "model \"f_say\" has no prediction intervals: its loss 'absolute' gives no variance of the one-step " \
           "error (only loss 'squared' does); lower and upper are NULL" in notices
    db.execute("SELECT FROM pgad.train('f_plain', 'λ(d, w) w.a', 'squared', 'SELECT y FROM f_say', '{\"a\": 0}', "
               "iterations => 1)")
    e = error_of(db, "SELECT * FROM pgad.forecast('f_plain', 3)")
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '0A000', 'model "f_plain" is not a sequence model',
        'pgad.forecast runs a model trained with order_by and state.')


def test_the_data_of_evaluate_is_loaded_under_the_memory_limit(db):
    """pgad.evaluate's data is loaded under pgad.memory_limit as training's is: 53200 before it is read whole."""
    load(db, 'f_big', [series(30)])
    train(db, 'f_big', 'f_big', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    with settings(db, {'pgad.memory_limit': '1MB'}):
        e = error_of(db, "SELECT * FROM pgad.evaluate('f_big', 'SELECT day + k AS day, y FROM f_big, "
                         "pg_catalog.generate_series(1, 4000) AS k')")
    assert e.sqlstate == '53200'


@pytest.mark.parametrize('cast', ['day::timestamp', 'day::timestamptz', '(day - DATE \'\'2000-01-01\'\')'])
def test_an_order_column_of_another_scale_than_the_trainings_is_refused(db, cast):
    """A model trained on a date order: data whose order column is a timestamp (seconds, not days) or a number would
    place the training's last row elsewhere (before the fix, a timestamp's every row came after it): 42804 whole;
    the same column cast back scores as the date does."""
    y = series(40, seed=8)
    load(db, 'f_mix', [y[:30]])
    load(db, 'f_mix_all', [y])
    train(db, 'f_mix', 'f_mix', 'λ(d, w, s) s.level', SES, '{"alpha": 0.5, "l0": 50}')
    kind = {'day::timestamp': 'timestamp without time zone', 'day::timestamptz': 'timestamp with time zone'}.get(
        cast, 'integer')
    e = error_of(db, f"SELECT * FROM pgad.evaluate('f_mix', 'SELECT {cast} AS day, y FROM f_mix_all')")
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '42804', f'column "day" of order_by is of type {kind} in the data, and model "f_mix" was trained on date',
        'A date, a timestamp and a timestamp with time zone order rows on different scales.',
        'Cast it in the data query: SELECT day::date AS day, ….')
    found = dict(db.execute(f"SELECT metric, value FROM pgad.evaluate('f_mix', 'SELECT ({cast})::date AS day, y "
                            "FROM f_mix_all')").fetchall()) if kind != 'integer' else None
    assert found is None or (found['rows'], found['earlier_rows']) == (10, 30)


# --- issue 46, item 5: the AR(p) and ARX of docs/sql.md, guarded by a counter, at their optimum ----------------
GUARDED = '{"n": {"start": "0", "next": "s.n + 1"}, "l1": {"start": "0", "next": "d.y"}, ' \
          '"l2": {"start": "0", "next": "s.l1"}, "l3": {"start": "0", "next": "s.l2"}}'


def guarded(p, exogenous=False):
    """The docs' AR(p) (an ARX with a column x): its first p rows predict their own label."""
    terms = ' + '.join(f'w.a{k}*s.l{k}' for k in range(1, p + 1)) + (' + w.b*d.x' if exogenous else '')
    return f'λ(d, w, s) CASE WHEN s.n < {p} THEN d.y ELSE w.c + {terms} END'


@pytest.mark.parametrize('p, exogenous, seed, level', [(1, False, 11, 0.95), (2, False, 12, 0.8),
                                                       (3, False, 13, 0.95), (2, True, 14, 0.95), (3, True, 15, 0.5)])
def test_a_guarded_autoregression_s_intervals_are_autoreg_s(db, p, exogenous, seed, level):
    """Trained at its optimum by conditional least squares, the guarded AR(p) or ARX is AutoReg(y, p, exog=x)'s
    fit: the same parameters, σ² = ssr/(T − p) (the rows it predicts), and analytic intervals (the counter is the
    same on every path, so the recurrence is linear along the forecast) equal to AutoReg's get_prediction's to
    1e-6, whatever the seed."""
    from statsmodels.tsa.ar_model import AutoReg
    rng = np.random.default_rng(seed)
    n = 150
    x = rng.normal(size=n + H)
    y = np.zeros(n)
    for t in range(n):
        y[t] = 3 + sum(phi * y[t - k] for k, phi in ((1, 0.5), (2, -0.2), (3, 0.1)) if t >= k) + \
            (1.5 * x[t] if exogenous else 0) + rng.normal()
    load(db, 'f_guard', [y], x)
    weights = json.dumps({'c': 0, **{f'a{k}': 0 for k in range(1, p + 1)}, **({'b': 0} if exogenous else {})})
    got, options = db.execute("SELECT weights, options FROM pgad.train('f_guard', %s, 'squared', "
                              "'SELECT day, y, x FROM f_guard', %s, order_by => 'day', state => %s)",
                              [guarded(p, exogenous), weights, GUARDED]).fetchone()
    fit = AutoReg(y, p, trend='c', exog=x[:n, None] if exogenous else None).fit()
    want = [fit.params[0], *fit.params[1:p + 1]] + ([fit.params[p + 1]] if exogenous else [])
    np.testing.assert_allclose([got['c'], *[got[f'a{k}'] for k in range(1, p + 1)]] + ([got['b']] if exogenous
                                                                                       else []), want, rtol=1e-6)
    assert options['sigma2'] == pytest.approx(fit.sigma2, rel=1e-8)
    assert options['predicted_rows'] == n - p
    db.execute('CREATE TABLE IF NOT EXISTS f_guard_future (day date, x float8)')
    db.execute('DELETE FROM f_guard_future')
    for k in range(H):
        db.execute('INSERT INTO f_guard_future VALUES (%s, %s)', [str(np.datetime64('2024-01-01') + n + k),
                                                                   float(x[n + k])])
    frame = fit.get_prediction(start=n, end=n + H - 1, exog_oos=x[n:, None] if exogenous else None) \
        .summary_frame(alpha=1 - level)
    for seed_ in (0, 99):
        value, lower, upper = columns(forecast(db, 'f_guard', level=level, seed=seed_,
                                               **({'data': 'SELECT day, x FROM f_guard_future'} if exogenous
                                                  else {})))
        assert value == pytest.approx(frame['mean'].to_numpy(), rel=1e-6)
        assert lower == pytest.approx(frame['mean_ci_lower'].to_numpy(), rel=1e-6)
        assert upper == pytest.approx(frame['mean_ci_upper'].to_numpy(), rel=1e-6)


# --- issue 46, item 6: anomalies ------------------------------------------------------------------------------
def test_anomalies_are_the_rows_outside_the_one_step_interval(db):
    """pgad.anomalies runs the model from its start along the data (the training's rows and later ones, one of them
    an outlier): each row's prediction is SES's, written here, its interval ŷ ± z·σ, σ² the stored sigma2, and the
    rows outside are flagged; `at` is the date as PostgreSQL prints it."""
    from statistics import NormalDist
    y = series(80, seed=21)
    later = list(series(100, seed=21)[80:])
    later[5] += 40  # an outlier
    load(db, 'f_anom', [y])
    weights, options = train(db, 'f_anom', 'f_anom', 'λ(d, w, s) s.level', SES, '{"alpha": 0.4, "l0": 50}')
    load(db, 'f_anom_all', [np.concatenate([y, later])])
    rows = db.execute("SELECT group_key, at, value, predicted, lower, upper, anomaly FROM "
                      "pgad.anomalies('f_anom', 'SELECT * FROM f_anom_all', level => 0.9)").fetchall()
    full = np.concatenate([y, later])
    assert len(rows) == len(full)
    level, z = weights['l0'], NormalDist().inv_cdf(0.95)
    half = z * np.sqrt(options['sigma2'])
    for t, (key, at, value, predicted, lower, upper, anomaly) in enumerate(rows):
        assert key is None and at == str(np.datetime64('2024-01-01') + t)
        assert value == full[t] and predicted == pytest.approx(level, rel=1e-12)
        assert (lower, upper) == pytest.approx((level - half, level + half), rel=1e-12)
        assert anomaly == (not level - half <= full[t] <= level + half)
        level += weights['alpha'] * (full[t] - level)
    assert rows[85][6] is True  # the outlier


def test_anomalies_of_a_guarded_autoregression_and_the_errors(db):
    """The first p rows of a guarded AR(p) predict their own label: no interval, no anomaly. A loss without a
    variance is 0A000; a level outside (0, 1) 22023; a NULL argument no rows; a group the model lacks is left out
    with a NOTICE."""
    y = series(60, seed=22)
    load(db, 'f_anom_ar', [y])
    db.execute("SELECT FROM pgad.train('f_anom_ar', %s, 'squared', 'SELECT day, y FROM f_anom_ar', "
               "'{\"c\": 0, \"a1\": 0, \"a2\": 0}', order_by => 'day', state => %s)", [guarded(2), GUARDED])
    rows = db.execute("SELECT lower, upper, anomaly FROM pgad.anomalies('f_anom_ar', 'SELECT day, y FROM f_anom_ar') "
                      "ORDER BY at").fetchall()
    assert rows[:2] == [(None, None, False), (None, None, False)] and all(r[0] is not None for r in rows[2:])
    db.execute("SELECT FROM pgad.train('f_anom_abs', 'λ(d, w, s) s.level', 'absolute', 'SELECT day, y FROM f_anom_ar', "
               "'{\"alpha\": 0.5, \"l0\": 50}', order_by => 'day', state => %s, optimizer => 'gd', "
               "learning_rate => 1e-9, iterations => 1)", [SES])
    e = error_of(db, "SELECT * FROM pgad.anomalies('f_anom_abs', 'SELECT day, y FROM f_anom_ar')")
    assert (e.sqlstate, e.message_primary) == ('0A000', 'model "f_anom_abs" has no variance of its one-step error')
    e = error_of(db, "SELECT * FROM pgad.anomalies('f_anom_ar', 'SELECT day, y FROM f_anom_ar', level => 1)")
    assert (e.sqlstate, e.message_primary) == ('22023', 'level must be between 0 and 1, not 1')
    assert db.execute("SELECT count(*) FROM pgad.anomalies('f_anom_ar', NULL)").fetchone()[0] == 0


# --- issue 46, item 6: rolling-origin cross-validation ----------------------------------------------------------
def test_cross_validation_is_ses_forecasts_from_each_origin(db):
    """Three windows of 5 rows, 5 apart, at the end of the data: from each origin SES's flat forecast (the level
    after the rows before it, run from the start, written here), its analytic interval σ²·(1 + (h − 1)·α²), and
    the metrics over the 15 rows scored: MAE, RMSE, MASE (the naive forecast's in-sample MAE, season 1) and the
    coverage."""
    from statistics import NormalDist
    y = series(100, seed=31)
    load(db, 'f_cv', [y[:85]])
    weights, options = train(db, 'f_cv', 'f_cv', 'λ(d, w, s) s.level', SES, '{"alpha": 0.4, "l0": 50}')
    load(db, 'f_cv_all', [y])
    got = dict(db.execute("SELECT metric, value FROM pgad.cross_validation('f_cv', 'SELECT * FROM f_cv_all', 5, "
                          "level => 0.8)").fetchall())
    alpha, z = weights['alpha'], NormalDist().inv_cdf(0.9)
    errors, scaled, inside = [], [], 0
    for origin in (85, 90, 95):
        level = weights['l0']
        for v in y[:origin]:
            level += alpha * (v - level)
        e = y[origin:origin + 5] - level
        errors += list(e)
        scaled.append(np.mean(np.abs(e)) / np.mean(np.abs(np.diff(y[:origin]))))
        half = z * np.sqrt(options['sigma2'] * (1 + np.arange(5) * alpha ** 2))
        inside += int(np.sum(np.abs(e) <= half))
    errors = np.array(errors)
    assert got['windows'] == 3 and got['points'] == 15
    assert got['mae'] == pytest.approx(np.mean(np.abs(errors)), rel=1e-9)
    assert got['rmse'] == pytest.approx(np.sqrt(np.mean(errors ** 2)), rel=1e-9)
    assert got['mase'] == pytest.approx(np.mean(scaled), rel=1e-9)
    assert got['coverage'] == inside / 15


def test_cross_validation_of_groups_and_its_errors(db):
    """Per group and over all groups ({}); a group too short for a window scores none; bad arguments are 22023."""
    load(db, 'f_cvg', [series(60, seed=32), series(60, seed=33), series(5, seed=34)])
    train(db, 'f_cvg', 'f_cvg', 'λ(d, w, s) s.level', SES, '{"alpha": 0.4, "l0": 50}', group_by='g')
    rows = db.execute("SELECT group_key, metric, value FROM pgad.cross_validation('f_cvg', 'SELECT * FROM f_cvg', 4, "
                      "windows => 2, step => 3)").fetchall()
    by = {(json.dumps(k), m): v for k, m, v in rows}
    assert by[('{"g": 0}', 'windows')] == 2 and by[('{"g": 2}', 'windows')] == 0
    assert by[('{}', 'points')] == 16
    assert by[('{}', 'mae')] == pytest.approx((by[('{"g": 0}', 'mae')] + by[('{"g": 1}', 'mae')]) / 2, rel=1e-12)
    for sql, message in (("pgad.cross_validation('f_cvg', 'SELECT * FROM f_cvg', 0)", 'horizon must be at least 1, '
                                                                                     'not 0'),
                         ("pgad.cross_validation('f_cvg', 'SELECT * FROM f_cvg', 2, windows => 0)",
                          'windows must be at least 1, not 0')):
        e = error_of(db, f'SELECT * FROM {sql}')
        assert (e.sqlstate, e.message_primary) == ('22023', message)
    assert db.execute("SELECT count(*) FROM pgad.cross_validation('f_cvg', NULL, 2)").fetchone()[0] == 0
