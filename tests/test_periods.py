"""A sequence model's periods (issue 46, item 4): pgad.train's frequency, declared or detected per group; missing
periods as rows whose state advances without an update; pgad.forecast's at, each step's order value. Oracles: the
ETS equations in numpy with a missing period's error 0 (test_families.ets_sse), scipy's L-BFGS-B on them, Python's
calendar for the dates a forecast steps to, on a real server."""
import datetime

import numpy as np
import pytest
from scipy.optimize import minimize

from conftest import error_of, heard
from test_families import draw_ets, ets_sse


def load(db, table, series, start='2024-01-01', step=lambda first, k: first + datetime.timedelta(days=k)):
    """series: {g: y with NaN at a missing period}: a row for each value that is not NaN, at step(first, k)."""
    db.execute(f'DROP TABLE IF EXISTS {table}')
    db.execute(f'CREATE TABLE {table} (g int, day date, y float8)')
    first = datetime.date.fromisoformat(start)
    with db.cursor().copy(f'COPY {table} (g, day, y) FROM STDIN') as copy:
        for g, ys in series.items():
            for k, v in enumerate(ys):
                if not np.isnan(v):
                    copy.write_row((g, step(first, k).isoformat(), float(v)))


def train(db, name, table, family, **more):
    extra = ''.join(f', {k} => %({k})s' for k in more)
    return db.execute(f"SELECT group_key->>'g' AS g, weights, converged, final_loss, rows, options "
                      f"FROM pgad.train(%(name)s, %(family)s, 'squared', 'SELECT * FROM {table}', NULL, "
                      f"order_by => 'day', group_by => 'g'{extra}) ORDER BY 1",
                      dict(name=name, family=family, **more)).fetchall()


def gapped(n, seed, missing, trend='N', season='N', m=1):
    y = draw_ets(n, seed, trend, season, m)
    y[missing] = np.nan
    return y


def test_a_missing_period_advances_the_state_without_an_update(db):
    """SES and additive Holt-Winters on daily series with missing days: the stored fit's sum of squares is the
    numpy recurrence's whose error is 0 at a missing day (so the lambda ran it), and no lower one is found by
    L-BFGS-B from pgad's weights; a NOTICE counts the missing days, each group's options hold them."""
    series = {0: gapped(150, 1, [20, 21, 22, 90]), 1: gapped(150, 2, [5, 140])}
    load(db, 'per_ses', series)
    with heard(db) as said:
        rows = train(db, 'per_ses', 'per_ses', 'ets(A,N,N)')
    assert any('6 missing periods in 2 groups advance the state without an update' in m for m in said), said
    for (g, weights, converged, final_loss, n, options), y in zip(rows, series.values()):
        assert converged
        assert options['frequency'] == '1 day'
        assert options['missing_periods'] == int(np.isnan(y).sum())
        assert n == int((~np.isnan(y)).sum())
        sse = ets_sse(y, weights, 'N', 'N', 1)
        np.testing.assert_allclose(final_loss * n, sse, rtol=1e-9)
        found = minimize(lambda v: ets_sse(y, {'alpha': v[0], 'l0': v[1]}, 'N', 'N', 1),
                         [weights['alpha'], weights['l0']], method='L-BFGS-B', bounds=[(0, 1), (None, None)],
                         options=dict(ftol=1e-15, gtol=1e-12))
        assert sse <= found.fun * (1 + 1e-7), (g, weights, found.x)
        level = y[0] + weights['l0']
        for v in y:
            level += weights['alpha'] * (0.0 if np.isnan(v) else v - level)
        at = db.execute("SELECT at, value FROM pgad.forecast('per_ses', 2) WHERE group_key->>'g' = %s "
                        "ORDER BY step", [g]).fetchall()
        assert [a for a, _ in at] == [(datetime.date(2024, 1, 1) + datetime.timedelta(days=len(y) - 1 + h))
                                      .isoformat() for h in (1, 2)]
        np.testing.assert_allclose([v for _, v in at], [level, level], rtol=1e-9)
    series = {0: gapped(140, 3, [30, 31, 77], 'N', 'A', 7)}
    load(db, 'per_hw', series)
    (_, weights, converged, final_loss, n, options), = train(db, 'per_hw', 'per_hw', 'ets(A,N,A,7)')
    assert options['missing_periods'] == 3
    np.testing.assert_allclose(final_loss * n, ets_sse(series[0], weights, 'N', 'A', 7), rtol=1e-9)


def test_a_null_label_is_a_missing_period(db):
    """A row whose label is NULL is a missing period as an absent row is: the same fit."""
    y = gapped(120, 4, [40, 41])
    load(db, 'per_absent', {0: y})
    db.execute('DROP TABLE IF EXISTS per_null')
    db.execute('CREATE TABLE per_null (g int, day date, y float8)')
    db.cursor().executemany('INSERT INTO per_null VALUES (0, %s, %s)',
                            [(datetime.date(2024, 1, 1) + datetime.timedelta(days=k), None if np.isnan(v) else v)
                             for k, v in enumerate(y)])
    absent = train(db, 'per_absent', 'per_absent', 'ets(A,N,N)')[0]
    null = train(db, 'per_null', 'per_null', 'ets(A,N,N)')[0]
    assert null[5]['missing_periods'] == absent[5]['missing_periods'] == 2
    np.testing.assert_allclose([null[1]['alpha'], null[3]], [absent[1]['alpha'], absent[3]], rtol=1e-12)


def add_months(day, k):
    month = day.month - 1 + k
    year, month = day.year + month // 12, month % 12 + 1
    last = (datetime.date(year + month // 12, month % 12 + 1, 1) - datetime.timedelta(days=1)).day
    return datetime.date(year, month, min(day.day, last))


@pytest.mark.parametrize('start, months, shown', [('2020-01-31', 1, '1 mon'), ('2019-03-31', 3, '3 mons'),
                                                  ('2016-02-29', 12, '1 year')])
def test_a_calendar_frequency_is_detected_and_steps_as_postgresql_adds_months(db, start, months, shown):
    """Month ends, quarters and years (a leap day): the frequency detected is the calendar's, a missing month is
    a missing period, and each forecast step is the last row's date plus k such steps, the end of a shorter month
    where the day does not exist (as PostgreSQL adds an interval: Python's calendar here)."""
    first = datetime.date.fromisoformat(start)
    y = 5 + np.arange(36, dtype=float)
    y[[7, 8]] = np.nan
    load(db, 'per_cal', {0: y}, start, lambda day, k: add_months(day, k * months))
    (_, _, _, _, _, options), = train(db, 'per_cal', 'per_cal', 'ets(A,A,N)')
    assert options['frequency'] == shown
    assert options['missing_periods'] == 2
    got = [r[0] for r in db.execute("SELECT at FROM pgad.forecast('per_cal', 4) ORDER BY step")]
    assert got == [add_months(first, (35 + h) * months).isoformat() for h in range(1, 5)]


def test_other_frequencies_and_orders(db):
    """An hourly timestamp, a weekly date, an integer order and its declared step: each step's at; an irregular
    order has none (NULL), and no missing period."""
    db.execute('DROP TABLE IF EXISTS per_kinds')
    db.execute("CREATE TABLE per_kinds AS SELECT TIMESTAMP '2024-03-09 22:00' + k * INTERVAL '1 hour' AS t, "
               "DATE '2024-01-05' + 7 * k AS w, 3 * k AS n, (k * k)::float8 AS irregular, "
               "10 + sin(k) AS y FROM generate_series(0, 59) AS k WHERE k <> 13")
    cases = [('t', None, ['2024-03-12 10:00:00', '2024-03-12 11:00:00'], '01:00:00'),
             ('w', None, ['2025-02-28', '2025-03-07'], '7 days'),
             ('n', None, ['180', '183'], '3'),
             ('n', '1.5', ['178.5', '180.0'], '1.5'),
             ('irregular', None, [None, None], None)]
    for order, frequency, want, shown in cases:
        rows = db.execute("SELECT options FROM pgad.train('per_kind', 'ets(A,N,N)', 'squared', "
                          "'SELECT * FROM per_kinds', NULL, order_by => %s, frequency => %s)",
                          [order, frequency]).fetchall()
        options = rows[0][0]
        assert options.get('frequency') == shown, (order, options)
        assert options.get('missing_periods', 0) == (1 if shown in ('01:00:00', '7 days', '3') else
                                                    0 if shown is None else 60), (order, options)
        got = [r[0] for r in db.execute("SELECT at FROM pgad.forecast('per_kind', 2) ORDER BY step")]
        assert got == want, (order, got)


def test_the_columns_beside_the_label_leave_missing_periods_unfilled(db):
    """A model that reads a column beside its label has no value of it at a missing period: the rows follow one
    another, as without a frequency, and a NOTICE says how many periods were not filled."""
    db.execute('DROP TABLE IF EXISTS per_x')
    db.execute("CREATE TABLE per_x AS SELECT DATE '2024-01-01' + k AS day, k::float8 AS x, 2.0 * k + 1 AS y "
               "FROM generate_series(0, 49) AS k WHERE k NOT IN (10, 11)")
    with heard(db) as said:
        (options,), = db.execute("SELECT options FROM pgad.train('per_x', 'λ(d, w, s) w.a * d.x + w.b', 'squared', "
                                 "'SELECT * FROM per_x', '{\"a\": 0, \"b\": 0}', order_by => 'day', "
                                 "state => '{\"n\": {\"start\": \"0\", \"next\": \"s.n + 1\"}}')").fetchall()
    assert any('2 missing periods in the data are not filled: the model reads columns beside its label "y"' in m
               for m in said), said
    assert 'missing_periods' not in options and options['frequency'] == '1 day'


@pytest.mark.parametrize('frequency, order, sqlstate, message', [
    ('xyz', 'day', '22023', 'frequency "xyz" is not an interval'),
    ('1 mon 2 days', 'day', '22023', 'frequency "1 mon 2 days" mixes months and a time of days'),
    ('36 hours', 'day', '22023', 'frequency "36 hours" is not a step of whole days'),
    ('-1 day', 'day', '22023', 'frequency "-1 day" is not a step above 0'),
    ('0', 'n', '22023', 'frequency "0" is not a number above 0'),
    ('NaN', 'n', '22023', 'frequency "NaN" is not a number above 0'),
    ('2 days', 'day', '22023', 'the rows are not one per period of frequency "2 days"'),
])
def test_a_frequency_that_does_not_fit_is_refused(db, frequency, order, sqlstate, message):
    db.execute('DROP TABLE IF EXISTS per_bad')
    db.execute("CREATE TABLE per_bad AS SELECT DATE '2024-01-01' + k AS day, k AS n, 1.0 + k AS y "
               "FROM generate_series(0, 29) AS k")
    e = error_of(db, "SELECT * FROM pgad.train('per_bad', 'ets(A,N,N)', 'squared', 'SELECT * FROM per_bad', NULL, "
                     "order_by => %s, frequency => %s)", [order, frequency])
    assert (e.sqlstate, e.message_primary) == (sqlstate, message)
    assert e.message_hint
    assert not db.execute("SELECT count(*) FROM pgad.models WHERE name = 'per_bad'").fetchone()[0]


def test_frequency_needs_order_by(db):
    db.execute('DROP TABLE IF EXISTS per_plain')
    db.execute('CREATE TABLE per_plain AS SELECT k::float8 AS x, 2.0 * k AS y FROM generate_series(1, 9) AS k')
    e = error_of(db, "SELECT * FROM pgad.train('per_plain', 'λ(d, w) w.a * d.x', 'squared', 'SELECT * FROM per_plain', "
                     "'{\"a\": 0}', frequency => '1 day')")
    assert (e.sqlstate, e.message_primary) == ('22023', "frequency is the period of a sequence model's rows, and this "
                                                        'model has no order_by')


def test_a_span_past_the_memory_limit_is_refused_before_it_is_filled(db):
    """Two rows a million periods apart: the rows the missing periods would add are counted against
    pgad.memory_limit before anything is allocated (54000)."""
    db.execute('DROP TABLE IF EXISTS per_span')
    db.execute("CREATE TABLE per_span AS SELECT k::int8 * 1000000000 AS n, 1.0 + k AS y FROM generate_series(0, 3) "
               "AS k UNION ALL SELECT 1, 5.0")
    e = error_of(db, "SELECT * FROM pgad.train('per_span', 'ets(A,N,N)', 'squared', 'SELECT * FROM per_span', NULL, "
                     "order_by => 'n', frequency => '1')")
    assert e.sqlstate == '54000' and 'span 3000000001 periods of frequency "1"' in e.message_primary, \
        e.message_primary


def test_the_forecast_function_returns_the_data_s_own_columns(db):
    """pgad_models.<name>_forecast: pgad.forecast's rows with each group column and the order column under their own
    names and types, usable in a view that follows a deploy; replaced where its columns change (refused while a view
    uses it), dropped with the model."""
    series = {0: gapped(80, 6, [10]), 1: gapped(80, 7, [])}
    load(db, 'per_fn', series)
    train(db, 'per_fn', 'per_fn', 'ets(A,N,N)')
    got = db.execute("SELECT * FROM pgad_models.per_fn_forecast(2, level => 0.8) ORDER BY g, day").fetchall()
    want = db.execute("SELECT (group_key->>'g')::int, at::date, step, value, lower, upper, level "
                      "FROM pgad.forecast('per_fn', 2, level => 0.8) ORDER BY 1, 2").fetchall()
    assert got == want and len(got) == 4
    assert got[0][1] == datetime.date(2024, 1, 1) + datetime.timedelta(days=80)
    types = db.execute("SELECT pg_catalog.pg_get_function_result('pgad_models.per_fn_forecast(int4, text, float8, "
                       "int4, int8, float8[])'::regprocedure)").fetchone()[0]
    assert types == ('TABLE(g integer, day date, step integer, forecast double precision, lower double precision, '
                     'upper double precision, level double precision)')
    db.execute('CREATE VIEW per_fn_view AS SELECT * FROM pgad_models.per_fn_forecast(3)')
    train(db, 'per_fn', 'per_fn', 'ets(A,A,N)')  # the same columns: kept, the view follows the deployed version
    assert db.execute('SELECT count(*) FROM per_fn_view').fetchone()[0] == 6
    db.execute('DROP TABLE IF EXISTS per_fn2')
    db.execute('CREATE TABLE per_fn2 AS SELECT g::text AS g, day, y FROM per_fn')
    e = error_of(db, "SELECT * FROM pgad.train('per_fn', 'ets(A,N,N)', 'squared', 'SELECT * FROM per_fn2', NULL, "
                     "order_by => 'day', group_by => 'g')")
    assert (e.sqlstate, e.message_primary) == ('2BP01', 'cannot replace the forecast function of model "per_fn": its '
                                                        'columns change, and other objects depend on it')
    e = error_of(db, "SELECT pgad.drop_model('per_fn')")
    assert e.sqlstate == '2BP01' and 'DROP VIEW per_fn_view' in e.message_hint
    db.execute('DROP VIEW per_fn_view')
    train(db, 'per_fn', 'per_fn2', 'ets(A,N,N)')
    assert db.execute("SELECT pg_catalog.pg_get_function_result('pgad_models.per_fn_forecast(int4, text, float8, "
                      "int4, int8, float8[])'::regprocedure)").fetchone()[0].startswith('TABLE(g text, day date')
    db.execute("SELECT pgad.drop_model('per_fn')")
    assert db.execute("SELECT pg_catalog.to_regproc('pgad_models.per_fn_forecast')").fetchone()[0] is None


def test_the_forecast_function_s_name_is_its_own(db):
    """A model named like a sequence model's forecast function, and a sequence model whose forecast function would
    take a model's name, are refused (42710); so is another role's function of its name and arguments (42501)."""
    load(db, 'per_names', {0: gapped(40, 8, [])})
    train(db, 'per_nm', 'per_names', 'ets(A,N,N)')
    e = error_of(db, "SELECT * FROM pgad.train('per_nm_forecast', 'λ(d, w) w.a', 'squared', 'SELECT y FROM per_names', "
                     "'{\"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('42710', 'model "per_nm" has a forecast function named '
                                                        '"per_nm_forecast"')
    db.execute("SELECT * FROM pgad.train('per_taken_forecast', 'λ(d, w) w.a', 'squared', 'SELECT y FROM per_names', "
               "'{\"a\": 0}')")
    e = error_of(db, "SELECT * FROM pgad.train('per_taken', 'ets(A,N,N)', 'squared', 'SELECT * FROM per_names', NULL, "
                     "order_by => 'day')")
    assert (e.sqlstate, e.message_primary) == ('42710', 'model "per_taken_forecast" exists, and the forecast function '
                                                        'of model "per_taken" would take its name')
    db.execute('DROP ROLE IF EXISTS per_other')
    db.execute('CREATE ROLE per_other')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO per_other')
    db.execute('SET ROLE per_other')
    db.execute("CREATE FUNCTION pgad_models.per_squat_forecast(int4, text DEFAULT NULL, float8 DEFAULT 0.95, "
               "int4 DEFAULT 1000, int8 DEFAULT 0, float8[] DEFAULT NULL) RETURNS int4 LANGUAGE sql AS 'SELECT 1'")
    db.execute('RESET ROLE')
    e = error_of(db, "SELECT * FROM pgad.train('per_squat', 'ets(A,N,N)', 'squared', 'SELECT * FROM per_names', NULL, "
                     "order_by => 'day')")
    assert e.sqlstate == '42501' and 'belongs to role "per_other"' in e.message_primary
    assert not db.execute("SELECT count(*) FROM pgad.models WHERE name = 'per_squat'").fetchone()[0]
    db.execute('DROP FUNCTION pgad_models.per_squat_forecast(int4, text, float8, int4, int8, float8[])')
    db.execute('REVOKE CREATE ON SCHEMA pgad_models FROM per_other')
    db.execute('DROP ROLE per_other')


def ses_path(y, alpha, l0):
    """The one-step predictions of SES along y (NaN a missing period: no update) and the level after it."""
    level, out = y[0] + l0, []
    for v in y:
        out.append(level)
        level += alpha * (0.0 if np.isnan(v) else v - level)
    return np.array(out), level


def test_anomalies_evaluate_and_cross_validation_step_through_missing_periods(db):
    """The state advances at a missing period in every run of a stored model as in training: pgad.anomalies' rows
    (the observed ones alone) predict as the numpy recurrence with the missing day's error 0; pgad.evaluate steps
    through the days missing between the training's last row and the rows after it; pgad.cross_validation scores the
    observed rows of each window alone."""
    y = gapped(130, 9, [30, 31, 101, 104, 120])
    load(db, 'per_all', {0: y})
    db.execute("CREATE OR REPLACE VIEW per_train AS SELECT * FROM per_all WHERE day < DATE '2024-01-01' + 100")
    (_, weights, _, _, _, _), = train(db, 'per_run', 'per_train', 'ets(A,N,N)')
    alpha, l0 = weights['alpha'], weights['l0']
    rows = db.execute("SELECT at, value, predicted FROM pgad.anomalies('per_run', 'SELECT * FROM per_all') "
                      "ORDER BY at").fetchall()
    predicted, _ = ses_path(y, alpha, l0)
    seen = ~np.isnan(y)
    assert [r[0] for r in rows] == [(datetime.date(2024, 1, 1) + datetime.timedelta(days=int(k))).isoformat()
                                    for k in np.flatnonzero(seen)]
    np.testing.assert_allclose([r[2] for r in rows], predicted[seen], rtol=1e-9)
    metrics = dict(db.execute("SELECT metric, value FROM pgad.evaluate('per_run', 'SELECT * FROM per_all') "
                              "WHERE group_key->>'g' = '0'").fetchall())
    after = np.arange(130) >= 100
    errors = (y - predicted)[after & seen]
    assert metrics['rows'] == len(errors)
    np.testing.assert_allclose([metrics['mae'], metrics['mse']], [np.mean(np.abs(errors)), np.mean(errors ** 2)],
                               rtol=1e-9)
    cv = dict(db.execute("SELECT metric, value FROM pgad.cross_validation('per_run', 'SELECT * FROM per_all', 10, "
                         "windows => 1) WHERE group_key->>'g' = '0'").fetchall())
    _, origin = ses_path(y[:120], alpha, l0)
    window = y[120:]
    assert cv['points'] == int(np.sum(~np.isnan(window))) == 9
    np.testing.assert_allclose(cv['mae'], np.nanmean(np.abs(window - origin)), rtol=1e-9)


def test_several_levels_in_one_forecast(db):
    """levels => '{0.5, 0.8, 0.95}': a row for each level of each step, the intervals each level's alone gives
    (analytic here, and from one simulation for a nonlinear recurrence: nested, and each as its own call's at the
    same seed); level is NULL-free and within (0, 1), at most 100 of them."""
    load(db, 'per_levels', {0: gapped(60, 10, []), 1: gapped(60, 11, [])})
    train(db, 'per_levels', 'per_levels', 'ets(A,A,N)')
    rows = db.execute("SELECT group_key->>'g', step, level, lower, upper FROM pgad.forecast('per_levels', 3, "
                      "levels => '{0.5, 0.8, 0.95}') ORDER BY 1, 2, 3").fetchall()
    assert len(rows) == 18
    for g, step, level, lower, upper in rows:
        alone = db.execute("SELECT lower, upper FROM pgad.forecast('per_levels', 3, level => %s) "
                           "WHERE group_key->>'g' = %s AND step = %s", [level, g, step]).fetchone()
        assert (lower, upper) == pytest.approx(alone, rel=1e-12)
    db.execute('DROP TABLE IF EXISTS per_mul')
    db.execute("CREATE TABLE per_mul AS SELECT DATE '2024-01-01' + k AS day, "
               "(10 + sin(k)) * (1.5 + sin(2 * pi() * k / 7)) AS y FROM generate_series(0, 69) AS k")
    db.execute("SELECT * FROM pgad.train('per_mul', 'ets(A,N,M,7)', 'squared', 'SELECT * FROM per_mul', NULL, "
               "order_by => 'day')")
    many = db.execute("SELECT step, level, lower, upper FROM pgad.forecast('per_mul', 4, levels => '{0.8, 0.95}', "
                      "seed => 3) ORDER BY 1, 2").fetchall()
    for step, level, lower, upper in many:
        alone = db.execute("SELECT lower, upper FROM pgad.forecast('per_mul', 4, level => %s, seed => 3) "
                           "WHERE step = %s", [level, step]).fetchone()
        assert (lower, upper) == pytest.approx(alone, rel=1e-12)
    for a, b in zip(many[0::2], many[1::2]):
        assert b[2] <= a[2] <= a[3] <= b[3]
    for levels, sqlstate in (("'{}'", '22023'), ("'{0.5, NULL}'", '22004'), ("'{1}'", '22023'),
                             ("array_fill(0.5::float8, ARRAY[101])", '22023')):
        e = error_of(db, f"SELECT * FROM pgad.forecast('per_levels', 3, levels => {levels})")
        assert e.sqlstate == sqlstate, (levels, e.message_primary)


def test_evaluate_bounds_the_periods_it_steps_through(db):
    """Rows a billion days after the training's: the forecast steps through the missing periods are counted against
    pgad.memory_limit before any runs (54000), not run one by one past a cancel."""
    load(db, 'per_far', {0: gapped(40, 12, [])})
    train(db, 'per_far', 'per_far', 'ets(A,N,N)')
    e = error_of(db, "SELECT * FROM pgad.evaluate('per_far', 'SELECT 0 AS g, DATE ''5000000-01-01'' AS day, 1.0 AS y')")
    assert e.sqlstate == '54000' and 'periods of frequency "1 day" missing' in e.message_primary, e.message_primary


def test_cross_validation_scales_by_each_group_s_season(db):
    """MASE's scale is the seasonal naive's of the group's family: 12 for 'arima(0,0,0)(0,1,0)12' (whose forecast is
    the seasonal naive's itself), read from the family's name as an ETS's season is."""
    y = 50 + 10 * np.sin(2 * np.pi * np.arange(96) / 12) + np.random.default_rng(13).normal(size=96)
    load(db, 'per_cv', {0: y}, step=lambda first, k: datetime.date(2000 + k // 12, k % 12 + 1, 1))
    train(db, 'per_cv', 'per_cv', 'arima(0,0,0)(0,1,0)12')
    got = dict(db.execute("SELECT metric, value FROM pgad.cross_validation('per_cv', 'SELECT * FROM per_cv', 6, "
                          "windows => 1) WHERE group_key->>'g' = '0'").fetchall())
    o = 90
    error = np.mean(np.abs(y[o:] - y[o - 12:o - 6]))
    np.testing.assert_allclose(got['mase'], error / np.mean(np.abs(y[12:o] - y[:o - 12])), rtol=1e-9)
