"""pgad.train's impute (models/preprocess.py) against a real server, with oracles that need no pgad: the weights
trained with impute equal numpy's least squares on the same rows imputed by hand with numpy's mean, median and most
frequent value; the scoring functions give, on a row with NULLs, what they give on the row with the stored
statistics written in (coalesce); pgad.evaluate's metrics are those of the scoring function over the same rows; the
statistics come from the training rows only; standardize after impute reports the weights, pgad.summary and the
explanations in the columns' own units at scales 1e-8 … 1e8; each version keeps its own statistics; and every refused
impute is its SQLSTATE with nothing stored. The attacks: a category of quotes and $$, a column name of SQL, a NaN of
the data's, a mean past float64's range, a statistic of many rows that must answer a cancel.
Tolerances: weights rtol 1e-6 (Newton stops at a gradient norm well above rounding), SQL against numpy 1e-9."""
import json

import numpy as np
import pytest

from conftest import error_of

LINEAR = 'λ(d, w) w.a*d.x + w.b*d.z + w.c*d.v + w.i'


def _rows(seed=0, n=200, scale=1.0):
    """(x, z, v, y) with NULLs: x and z missing in about a fifth of the rows each, v in a tenth."""
    rng = np.random.default_rng(seed)
    x, z, v = rng.normal(3, 2, n) * scale, rng.normal(-1, 1, n), rng.integers(0, 4, n).astype(float)
    y = 1.5 * x / scale - 2 * z + 0.5 * v + 4 + rng.normal(0, 0.1, n)
    masks = rng.random(n) < 0.2, rng.random(n) < 0.2, rng.random(n) < 0.1
    return [np.where(m, np.nan, c) for c, m in zip((x, z, v), masks)] + [y]


def _table(db, name, columns, ids=None):
    x, z, v, y = columns
    ids = range(len(y)) if ids is None else ids
    db.execute(f'DROP TABLE IF EXISTS {name}')
    db.execute(f'CREATE TABLE {name} (id int, x float8, z float8, v int, y float8)')
    with db.cursor() as cur:
        cur.executemany(f'INSERT INTO {name} VALUES (%s, %s, %s, %s, %s)',
                        [(k, *(None if np.isnan(c) else float(c) for c in (a, b)),
                          None if np.isnan(c3) else int(c3), float(d))
                         for k, a, b, c3, d in zip(ids, x, z, v, y)])


def _mode(values):
    found, counts = np.unique(values, return_counts=True)
    return found[np.argmax(counts)]


def _options(db, name):
    return db.execute('SELECT options FROM pgad.models WHERE name = %s', [name]).fetchone()[0]


def test_the_fit_with_impute_is_least_squares_on_the_rows_imputed_by_hand(db):
    x, z, v, y = _rows()
    _table(db, 'gaps', (x, z, v, y))
    db.execute("SELECT pgad.train('gapped', %s, 'squared', 'gaps', '{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', "
               "impute => '{\"x\": \"mean\", \"z\": \"median\", \"v\": \"most_frequent\"}')", [LINEAR])
    stats = {'x': np.nanmean(x), 'z': np.nanmedian(z), 'v': _mode(v[~np.isnan(v)])}
    stored = _options(db, 'gapped')['impute']
    assert stored == {'x': {'strategy': 'mean', 'value': pytest.approx(stats['x'], rel=1e-12)},
                      'z': {'strategy': 'median', 'value': pytest.approx(stats['z'], rel=1e-12)},
                      'v': {'strategy': 'most_frequent', 'value': stats['v']}}
    filled = [np.where(np.isnan(c), stats[k], c) for k, c in zip('xzv', (x, z, v))]
    expected, *_ = np.linalg.lstsq(np.column_stack(filled + [np.ones(len(y))]), y, rcond=None)
    weights, rows = db.execute("SELECT weights, rows FROM pgad.models WHERE name = 'gapped'").fetchone()
    assert rows == len(y)  # no row skipped
    np.testing.assert_allclose([weights[n] for n in 'abci'], expected, rtol=1e-6)


def test_a_column_not_named_keeps_skipping_its_rows(db):
    x, z, v, y = _rows(1)
    _table(db, 'half', (x, z, v, y))
    db.execute("SELECT pgad.train('half_gapped', %s, 'squared', 'half', '{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', "
               "impute => '{\"x\": 0}')", [LINEAR])
    keep = ~np.isnan(z) & ~np.isnan(v)
    filled = np.where(np.isnan(x), 0.0, x)
    expected, *_ = np.linalg.lstsq(np.column_stack([filled[keep], z[keep], v[keep], np.ones(keep.sum())]), y[keep],
                                   rcond=None)
    weights, rows, options = db.execute("SELECT weights, rows, options FROM pgad.models "
                                        "WHERE name = 'half_gapped'").fetchone()
    assert rows == keep.sum() and options['impute'] == {'x': {'strategy': 'constant', 'value': 0.0}}
    np.testing.assert_allclose([weights[n] for n in 'abci'], expected, rtol=1e-6)
    # scoring: an imputed column's NULL is its constant; another column's NULL is NULL, as before
    assert db.execute("SELECT pgad_models.half_gapped(NULL, 1, 2) = pgad_models.half_gapped(0, 1, 2), "
                      "pgad_models.half_gapped(1, NULL, 2) IS NULL").fetchone() == (True, True)


def test_scoring_a_row_with_nulls_is_scoring_it_with_the_stored_statistics(db):
    x, z, v, y = _rows(2)
    _table(db, 'scored', (x, z, v, y))
    db.execute("SELECT pgad.train('scored_m', %s, 'squared', 'scored', '{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', "
               "impute => '{\"x\": \"mean\", \"z\": \"median\", \"v\": \"most_frequent\"}')", [LINEAR])
    stored = _options(db, 'scored_m')['impute']
    got = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE pgad_models.scored_m(x, z, v) IS NULL), "
        "count(*) FILTER (WHERE pgad_models.scored_m(x, z, v) IS DISTINCT FROM pgad_models.scored_m("
        "coalesce(x, %s), coalesce(z, %s), coalesce(v, %s)))::int, "
        "count(*) FILTER (WHERE pgad_models.scored_m_explain(x, z, v) IS NULL) FROM scored",
        [stored['x']['value'], stored['z']['value'], stored['v']['value']]).fetchone()
    assert got == (len(y), 0, 0, 0)
    # the same from the stored weights by numpy, to 1e-9
    weights = db.execute("SELECT weights FROM pgad.models WHERE name = 'scored_m'").fetchone()[0]
    filled = [np.where(np.isnan(c), stored[k]['value'], c) for k, c in zip('xzv', (x, z, v))]
    expected = weights['a'] * filled[0] + weights['b'] * filled[1] + weights['c'] * filled[2] + weights['i']
    scores = [r[0] for r in db.execute('SELECT pgad_models.scored_m(x, z, v) FROM scored ORDER BY id')]
    np.testing.assert_allclose(scores, expected, rtol=1e-9, atol=1e-12)
    # still inlined: the plan holds the body (its COALESCE), not a call
    plan = '\n'.join(r[0] for r in db.execute('EXPLAIN VERBOSE SELECT pgad_models.scored_m(x, z, v) FROM scored'))
    assert 'pgad_models' not in plan and 'COALESCE' in plan


def test_a_boolean_column_imputed_with_its_most_frequent_value(db):
    db.execute('DROP TABLE IF EXISTS flags')
    db.execute("CREATE TABLE flags AS SELECT CASE WHEN k % 6 = 0 THEN NULL ELSE k % 4 <> 0 END AS big, "
               "k::float8 AS x, (CASE WHEN k % 4 <> 0 THEN 3 ELSE 1 END * k)::float8 AS y "
               "FROM generate_series(1, 48) AS k")
    db.execute("SELECT pgad.train('flags_m', 'λ(d, w) CASE WHEN d.big THEN w.a ELSE w.b END*d.x', 'squared', "
               "'flags', '{\"a\": 0, \"b\": 0}', impute => '{\"big\": \"most_frequent\"}')")
    assert _options(db, 'flags_m')['impute'] == {'big': {'strategy': 'most_frequent', 'value': 1.0}}
    assert db.execute("SELECT pgad_models.flags_m(NULL, 2) = pgad_models.flags_m(true, 2), "
                      "pgad_models.flags_m(NULL, 2) <> pgad_models.flags_m(false, 2), "
                      "(SELECT rows FROM pgad.models WHERE name = 'flags_m')").fetchone() == (True, True, 48)
    e = error_of(db, "SELECT pgad.train('flags_m', 'λ(d, w) CASE WHEN d.big THEN w.a ELSE w.b END*d.x', 'squared', "
                     "'flags', '{\"a\": 0, \"b\": 0}', impute => '{\"big\": \"mean\"}')")
    assert (e.sqlstate, e.message_primary) == (
        '42804', 'impute strategy "mean" needs a numeric column, and column "big" is a boolean one')


def test_evaluate_and_importance_impute_as_scoring_does(db):
    x, z, v, y = _rows(3)
    _table(db, 'judged', (x, z, v, y))
    db.execute("SELECT pgad.train('judged_m', %s, 'squared', 'judged', '{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', "
               "impute => '{\"x\": \"mean\", \"z\": \"median\", \"v\": 1}')", [LINEAR])
    metrics = dict(db.execute("SELECT metric, value FROM pgad.evaluate('judged_m', 'judged')").fetchall())
    rows, mse, mae = db.execute("SELECT count(*), avg((pgad_models.judged_m(x, z, v) - y) ^ 2), "
                                "avg(abs(pgad_models.judged_m(x, z, v) - y)) FROM judged").fetchone()
    assert metrics['rows'] == rows == len(y) and metrics['skipped_rows'] == 0
    assert metrics['mse'] == pytest.approx(mse, rel=1e-9) and metrics['mae'] == pytest.approx(mae, rel=1e-9)
    # pgad.importance's mean contribution of each feature: the mean over the rows of the explain function's
    found = {f: m for _, _, f, _, m, _ in db.execute("SELECT * FROM pgad.importance('judged_m', 'judged')")}
    for feature in 'xzv':
        mean = db.execute(f"SELECT avg((pgad_models.judged_m_explain(x, z, v) ->> '{feature}')::float8) "
                          "FROM judged").fetchone()[0]
        assert found[feature] == pytest.approx(mean, rel=1e-9, abs=1e-12)


def test_the_statistics_leave_the_validation_rows_out(db):
    x, z, v, y = _rows(4, n=300)
    _table(db, 'split', (x, z, v, y))
    db.execute("UPDATE split SET x = x + 1000 WHERE id >= 200")  # the held-out rows: a mean of their own
    db.execute("SELECT pgad.train('split_m', %s, 'squared', 'SELECT * FROM split WHERE id < 200', "
               "'{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', validation => 'SELECT * FROM split WHERE id >= 200', "
               "impute => '{\"x\": \"mean\", \"z\": \"median\"}')", [LINEAR])
    stored = _options(db, 'split_m')['impute']
    trained = ~np.isnan(v[:200])  # the rows trained on: a NULL in v, not imputed, skips its row
    assert stored['x']['value'] == pytest.approx(np.nanmean(x[:200][trained]), rel=1e-12)
    assert stored['z']['value'] == pytest.approx(np.nanmedian(z[:200][trained]), rel=1e-12)
    # the validation rows imputed with the training rows' statistics: the last validation loss is pgad.evaluate's
    # loss on them at the stored weights
    history = db.execute("SELECT validation_history FROM pgad.models WHERE name = 'split_m'").fetchone()[0]
    loss = db.execute("SELECT value FROM pgad.evaluate('split_m', 'SELECT * FROM split WHERE id >= 200') "
                      "WHERE metric = 'loss'").fetchone()[0]
    assert history[-1] == pytest.approx(loss, rel=1e-9)
    # a validation fraction: the statistic is of the rows trained on, not of every row
    db.execute("SELECT pgad.train('split_f', %s, 'squared', 'split', '{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', "
               "validation => 0.3, seed => 7, impute => '{\"x\": \"mean\"}')", [LINEAR])
    assert _options(db, 'split_f')['impute']['x']['value'] != pytest.approx(np.nanmean(
        np.where(np.arange(300) >= 200, x + 1000, x)), rel=1e-9)


def test_most_frequent_of_a_categorical_column_is_its_category(db):
    rng = np.random.default_rng(5)
    cities = rng.choice(['oslo', 'rome', 'lima'], 150, p=[0.5, 0.3, 0.2])
    x = rng.normal(0, 1, 150)
    y = x + np.select([cities == 'oslo', cities == 'rome'], [1.0, 2.0], 3.0) + rng.normal(0, 0.1, 150)
    missing = rng.random(150) < 0.2
    db.execute('DROP TABLE IF EXISTS towns')
    db.execute('CREATE TABLE towns (city text, x float8, y float8)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO towns VALUES (%s, %s, %s)',
                        [(None if m else str(c), float(a), float(b)) for c, a, b, m in zip(cities, x, y, missing)])
    db.execute("SELECT pgad.train('towns_m', 'λ(d, w) w.c[d.city] + w.a*d.x', 'squared', 'towns', "
               "'{\"c\": {}, \"a\": 0}', impute => '{\"city\": \"most_frequent\"}')")
    frequent = _mode(cities[~missing])
    assert _options(db, 'towns_m')['impute'] == {'city': {'strategy': 'most_frequent', 'value': frequent}}
    weights = db.execute("SELECT weights FROM pgad.models WHERE name = 'towns_m'").fetchone()[0]
    filled = np.where(missing, frequent, cities)
    keys = sorted(weights['c'])
    design = np.column_stack([filled == k for k in keys] + [x]).astype(float)
    expected, *_ = np.linalg.lstsq(design, y, rcond=None)
    np.testing.assert_allclose([weights['c'][k] for k in keys] + [weights['a']], expected, rtol=1e-6)
    assert db.execute("SELECT pgad_models.towns_m(NULL, 0.5) = pgad_models.towns_m(%s, 0.5)",
                      [frequent]).fetchone()[0]


def refused(db, impute):
    """(the error of a training of a table whose column x is all NULL with impute, the versions stored before it)."""
    db.execute('DROP TABLE IF EXISTS blank')
    db.execute("CREATE TABLE blank AS SELECT NULL::float8 AS x, k::text AS city, k::float8 AS y "
               "FROM generate_series(1, 5) AS k")
    before = db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()[0]
    e = error_of(db, "SELECT pgad.train('refused', 'λ(d, w) w.c[d.city] + w.a*d.x', 'squared', 'blank', "
                     "'{\"c\": {}, \"a\": 0}', impute => %s)", [impute])
    return e, before


@pytest.mark.parametrize('impute, state, message', [
    ('{"q": "mean"}', '42703', 'column "q" of impute is not a column the model reads'),
    ('{"x": "average"}', '22023', 'unknown impute strategy "average" for column "x"'),
    ('{"x": true}', '22023', 'unknown impute strategy true for column "x"'),
    ('["x"]', '22023', 'impute must be a jsonb object of columns and strategies'),
    ('{"city": "mean"}', '42804', 'impute strategy "mean" needs a numeric column, and column "city" is a '
                                  'categorical one'),
    ('{"city": 3}', '42804', 'impute constant 3 is a number, and column "city" is a categorical one'),
    ('{"x": "median"}', '22000', 'column "x" of impute has no value that is not NULL in the training rows'),
])
def test_a_refused_impute_is_its_sqlstate_and_stores_nothing(db, impute, state, message):
    e, before = refused(db, impute)
    assert (e.sqlstate, e.message_primary) == (state, message)
    if state == '22023' and 'strategy' in message:
        assert "'mean', 'median', 'most_frequent' or a number" in e.message_hint
    assert db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()[0] == before
    assert db.execute("SELECT count(*) FROM pg_catalog.pg_proc WHERE proname LIKE 'refused%'").fetchone()[0] == 0


def test_impute_is_refused_where_it_is_not_supported(db):
    db.execute('DROP TABLE IF EXISTS grouped')
    db.execute("CREATE TABLE grouped AS SELECT k % 2 AS g, k::float8 AS x, k::float8 AS y, k AS t "
               "FROM generate_series(1, 20) AS k")
    e = error_of(db, "SELECT pgad.train('grouped_m', 'λ(d, w) w.a*d.x', 'squared', 'grouped', '{\"a\": 0}', "
                     "group_by => 'g', impute => '{\"x\": \"mean\"}')")
    assert e.sqlstate == '0A000' and e.message_primary == 'pgad.train takes no impute with group_by'
    e = error_of(db, "SELECT pgad.train('ordered_m', 'λ(d, w) w.a*d.x', 'squared', 'grouped', '{\"a\": 0}', "
                     "order_by => 't', impute => '{\"x\": \"mean\"}')")
    assert e.sqlstate == '0A000' and e.message_primary == 'pgad.train takes no impute for a sequence model'


def test_a_nan_of_the_data_in_an_imputed_column_is_still_the_data_s_nan(db):
    db.execute('DROP TABLE IF EXISTS nans')
    db.execute("CREATE TABLE nans AS SELECT CASE WHEN k = 3 THEN 'NaN' WHEN k = 4 THEN NULL ELSE k::float8 END AS x, "
               "k::float8 AS y FROM generate_series(1, 10) AS k")
    e = error_of(db, "SELECT pgad.train('nans_m', 'λ(d, w) w.a*d.x + w.b', 'squared', 'nans', "
                     "'{\"a\": 0, \"b\": 0}', impute => '{\"x\": \"mean\"}')")
    assert (e.sqlstate, e.message_primary) == ('22000', 'column "x" of the data is NaN')
    db.execute("SELECT pgad.train('nans_m', 'λ(d, w) w.a*d.x + w.b', 'squared', "
               "'SELECT * FROM nans WHERE x IS DISTINCT FROM ''NaN''', '{\"a\": 0, \"b\": 0}', "
               "impute => '{\"x\": \"mean\"}')")
    assert _options(db, 'nans_m')['impute']['x']['value'] == pytest.approx(np.mean([1, 2, 5, 6, 7, 8, 9, 10]))


@pytest.mark.parametrize('scale', [1e-8, 1.0, 1e8])
def test_standardize_after_impute_reports_the_weights_in_the_original_units(db, scale):
    """Columns at 1e-8, 1 and 1e8 together, standardize => true with impute: the stored weights, pgad.summary's
    estimates and standard errors, the baseline and <name>_explain's contributions are those of the original
    columns imputed by hand (statsmodels' OLS, numpy), to 1e-6 relative: the scaling is undone in all of them."""
    import statsmodels.api as sm
    rng = np.random.default_rng(6)
    n = 150
    x, z = rng.normal(3, 1, n) * scale, rng.normal(-1, 1, n) / scale
    t = rng.normal(0, 1, n)
    y = 2 * x / scale + 3 * z * scale - t + 1 + rng.normal(0, 0.1, n)
    x[rng.random(n) < 0.2] = np.nan
    z[rng.random(n) < 0.2] = np.nan
    db.execute('DROP TABLE IF EXISTS scaled')
    db.execute('CREATE TABLE scaled (x float8, z float8, t float8, y float8)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO scaled VALUES (%s, %s, %s, %s)',
                        [(None if np.isnan(a) else float(a), None if np.isnan(b) else float(b), float(c), float(d))
                         for a, b, c, d in zip(x, z, t, y)])
    name = f'scaled_{int(np.log10(scale)) + 8}'
    db.execute(f"SELECT pgad.train('{name}', 'λ(d, w) w.a*d.x + w.b*d.z + w.c*d.t + w.i', 'squared', 'scaled', "
               "'{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', standardize => true, "
               "impute => '{\"x\": \"mean\", \"z\": \"median\"}')")
    filled = np.column_stack([np.where(np.isnan(x), np.nanmean(x), x), np.where(np.isnan(z), np.nanmedian(z), z), t])
    s = np.r_[filled.std(axis=0), 1.0]  # OLS in a well-scaled basis (pinv would drop a column at 1e-8), scaled back
    ols = sm.OLS(y, sm.add_constant(filled, prepend=False) / s).fit()
    params, bse = ols.params / s, ols.bse / s
    weights, options = db.execute('SELECT weights, options FROM pgad.models WHERE name = %s', [name]).fetchone()
    assert options['standardize'] is True
    np.testing.assert_allclose([weights[w] for w in 'abci'], params, rtol=1e-6)
    table = {w: (e, s) for w, e, s in db.execute(f"SELECT weight, estimate, std_error FROM pgad.summary('{name}')")}
    np.testing.assert_allclose([table[w][0] for w in 'abci'], params, rtol=1e-6)
    np.testing.assert_allclose([table[w][1] for w in 'abci'], bse, rtol=1e-6)
    # the baseline: the imputed training rows' means; a contribution: aᵢ·(xᵢ − x̄ᵢ) in the columns' own units
    mean = filled.mean(axis=0)
    assert [options['baseline'][c] for c in 'xzt'] == pytest.approx(mean, rel=1e-9)
    found = db.execute(f'SELECT pgad_models.{name}_explain(x, z, t) FROM scaled').fetchall()
    phi = np.array([[e[c] for c in 'xzt'] for e, in found])
    w = np.array([weights[c] for c in 'abc'])
    np.testing.assert_allclose(phi, w * (filled - mean), rtol=1e-9, atol=1e-9 * np.max(np.abs(w * filled)))


def test_a_category_of_quotes_and_dollars_is_a_literal_in_the_scoring_function(db):
    """The most frequent category, which pgad writes into the scoring function's SQL, is quote_literal's: a value of
    quotes, backslashes and $$ is compared as itself, and breaks out of nothing."""
    odd = "o'slo$$\\'); DROP TABLE odd; --"
    db.execute('DROP TABLE IF EXISTS odd')
    db.execute("CREATE TABLE odd AS SELECT CASE WHEN k %% 5 = 0 THEN NULL WHEN k %% 3 = 0 THEN 'rome' ELSE %s END "
               "AS city, k::float8 AS x, (k %% 7)::float8 AS y FROM generate_series(1, 60) AS k", [odd])
    db.execute("SELECT pgad.train('odd_m', 'λ(d, w) w.c[d.city] + w.a*d.x', 'squared', 'odd', "
               "'{\"c\": {}, \"a\": 0}', impute => '{\"city\": \"most_frequent\"}')")
    assert _options(db, 'odd_m')['impute']['city']['value'] == odd
    assert db.execute("SELECT pgad_models.odd_m(NULL, 2) = pgad_models.odd_m(%s, 2), "
                      "pgad_models.odd_m(NULL, 2) <> pgad_models.odd_m('rome', 2), count(*) FROM odd",
                      [odd]).fetchone() == (True, True, 60)


def test_a_column_name_of_sql_in_impute_is_refused_as_no_column_of_the_model(db):
    db.execute('DROP TABLE IF EXISTS kept')
    db.execute('CREATE TABLE kept AS SELECT k::float8 AS x, k::float8 AS y FROM generate_series(1, 5) AS k')
    key = 'x" FROM kept; DROP TABLE kept; --'
    e = error_of(db, "SELECT pgad.train('kept_m', 'λ(d, w) w.a*d.x', 'squared', 'kept', '{\"a\": 0}', "
                     "impute => %s)", [json.dumps({key: 'mean'})])
    assert (e.sqlstate, e.message_primary) == ('42703', f'column "{key}" of impute is not a column the model reads')
    assert db.execute('SELECT count(*) FROM kept').fetchone()[0] == 5


def test_a_mean_past_float64_s_range_is_still_the_mean(db):
    """1.5e308 + 1.7e308 overflows a plain sum: the mean and median are taken in scaled units, finite."""
    db.execute('DROP TABLE IF EXISTS huge')
    db.execute("CREATE TABLE huge AS SELECT v AS x, k::float8 AS y FROM unnest(ARRAY[1.5e308, 1.7e308, NULL, 1.6e308,"
               " 1.7e308]::float8[]) WITH ORDINALITY AS t(v, k)")
    for strategy, expected in (('mean', 1.625e308), ('median', 1.65e308)):
        db.execute("SELECT pgad.train('huge_m', 'λ(d, w) w.a*d.x*1e-308 + w.b', 'squared', 'huge', "
                   "'{\"a\": 0, \"b\": 0}', impute => %s)", [json.dumps({'x': strategy})])
        assert _options(db, 'huge_m')['impute']['x']['value'] == pytest.approx(expected, rel=1e-12)


def test_a_softmax_model_s_functions_and_evaluate_impute_alike(db):
    """Three classes from two columns with gaps: the _class function on the rows as they are equals it on the rows
    filled with the stored statistics, and pgad.evaluate's accuracy over every row is the _class function's."""
    rng = np.random.default_rng(8)
    n = 240
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    label = np.select([a + b > 0.7, a - b > 0.3], ['high', 'left'], 'low')
    a[rng.random(n) < 0.15] = np.nan
    b[rng.random(n) < 0.15] = np.nan
    db.execute('DROP TABLE IF EXISTS kinds')
    db.execute('CREATE TABLE kinds (a float8, b float8, y text)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO kinds VALUES (%s, %s, %s)',
                        [(None if np.isnan(p) else float(p), None if np.isnan(q) else float(q), str(c))
                         for p, q, c in zip(a, b, label)])
    db.execute("SELECT pgad.train('kinds_m', 'λ(d, w) w.w @ [d.a, d.b] + w.c', 'softmax', 'kinds', "
               "'{\"w\": {}, \"c\": {}}', l2 => 0.01, impute => '{\"a\": \"mean\", \"b\": 0}')")
    stored = _options(db, 'kinds_m')['impute']
    assert stored == {'a': {'strategy': 'mean', 'value': pytest.approx(np.nanmean(a), rel=1e-12)},
                      'b': {'strategy': 'constant', 'value': 0.0}}
    same, accuracy, rows = db.execute(
        "SELECT bool_and(pgad_models.kinds_m_class(a, b) = pgad_models.kinds_m_class(coalesce(a, %s), "
        "coalesce(b, 0))), avg((pgad_models.kinds_m_class(a, b) = y)::int), count(*) FROM kinds",
        [stored['a']['value']]).fetchone()
    metrics = dict(db.execute("SELECT metric, value FROM pgad.evaluate('kinds_m', 'kinds')").fetchall())
    assert same and metrics['rows'] == rows == n and metrics['skipped_rows'] == 0
    assert metrics['accuracy'] == pytest.approx(float(accuracy), rel=1e-12)


def test_a_long_statistic_answers_an_interrupt_while_it_runs():
    """preprocess.waited, in process: past THREAD_VALUES the work runs in a thread of its own with every signal
    blocked, and the caller's interrupt check runs meanwhile and is raised while the work has not ended (the work
    here waits on a gate the test opens only after: no timing is assumed)."""
    import signal
    import threading
    from pgad.models import preprocess

    gate, started, seen = threading.Event(), threading.Event(), {}

    def work():
        seen['mask'] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        started.set()
        gate.wait(10)  # bounded: a waited() that never calls interrupts() fails the test, not hangs it
        return 1.0

    class Cancelled(Exception):
        pass

    def interrupts():
        raise Cancelled
    with pytest.raises(Cancelled):
        preprocess.waited(work, preprocess.THREAD_VALUES + 1, interrupts)
    assert started.wait(60) and signal.SIGINT in seen['mask'] and signal.SIGTERM in seen['mask']
    gate.set()
    assert preprocess.waited(lambda: 2.0, preprocess.THREAD_VALUES + 1, lambda: None) == 2.0
    assert preprocess.waited(lambda: 3.0, 10, interrupts) == 3.0  # small: here, no thread, no check


def test_a_most_frequent_value_of_a_million_rows_is_taken_in_its_thread(db):
    """Past THREAD_VALUES (2^20) values the statistic runs in preprocess.waited's thread inside the backend: the same
    value as numpy's on the same rows."""
    n = (1 << 20) * 10 // 9 + 2000  # past 2^20 values that are not NULL
    db.execute('DROP TABLE IF EXISTS many')
    db.execute("CREATE TABLE many AS SELECT CASE WHEN k %% 10 = 0 THEN NULL ELSE (k %% 977)::float8 END AS x, "
               "0::float8 AS y FROM generate_series(1, %s) AS k", [n])
    db.execute("SELECT pgad.train('many_m', 'λ(d, w) w.a*d.x', 'squared', 'many', '{\"a\": 0}', "
               "impute => '{\"x\": \"most_frequent\"}', iterations => 1)")
    k = np.arange(1, n + 1)
    assert _options(db, 'many_m')['impute']['x']['value'] == _mode((k % 977)[k % 10 != 0].astype(float))


def test_each_version_keeps_its_own_imputation(db):
    """Version 1 imputes x with its mean, version 2 (not deployed) with 0: each version's function and pgad.evaluate
    of each version use its own statistic, and pgad.deploy moves the deployed function from one to the other."""
    x, z, v, y = _rows(9)
    _table(db, 'versioned', (x, z, v, y))
    train = ("SELECT version FROM pgad.train('versioned_m', %s, 'squared', 'versioned', "
             "'{\"a\": 0, \"b\": 0, \"c\": 0, \"i\": 0}', deploy => %s, impute => %s)")
    assert db.execute(train, [LINEAR, True, '{"x": "mean", "z": 0, "v": 0}']).fetchone()[0] == 1
    assert db.execute(train, [LINEAR, False, '{"x": 0, "z": 0, "v": 0}']).fetchone()[0] == 2
    mean = db.execute("SELECT options->'impute'->'x'->>'value' FROM pgad.model_versions "
                      "WHERE name = 'versioned_m' AND version = 1").fetchone()[0]
    assert float(mean) == pytest.approx(np.nanmean(x), rel=1e-12)
    same = ('SELECT bool_and(pgad_models.{f}(x, z, v) = pgad_models.{f}(coalesce(x, %s), coalesce(z, 0), '
            'coalesce(v, 0))) FROM versioned')
    assert db.execute(same.format(f='"versioned_m@1"'), [float(mean)]).fetchone()[0]
    assert db.execute(same.format(f='"versioned_m@2"'), [0.0]).fetchone()[0]
    assert db.execute(same.format(f='versioned_m'), [float(mean)]).fetchone()[0]
    for version in (1, 2):
        mse = db.execute("SELECT value FROM pgad.evaluate('versioned_m', 'versioned', %s) WHERE metric = 'mse'",
                         [version]).fetchone()[0]
        assert mse == pytest.approx(db.execute(f'SELECT avg((pgad_models."versioned_m@{version}"(x, z, v) - y) ^ 2) '
                                               'FROM versioned').fetchone()[0], rel=1e-9)
    db.execute("SELECT pgad.deploy('versioned_m', 2)")
    assert db.execute(same.format(f='versioned_m'), [0.0]).fetchone()[0]


@pytest.mark.parametrize('impute, state, message, detail, hint', [
    ('["x"]', '22023', 'impute must be a jsonb object of columns and strategies', 'It is ["x"].',
     "Give each column 'mean', 'median', 'most_frequent' or a number, as in impute => '{\"x\": \"mean\"}'."),
    ('{"q": "mean"}', '42703', 'column "q" of impute is not a column the model reads', 'The model reads: "city", "x".',
     'Name the columns of the model lambda (d.x) whose NULLs are to be replaced.'),
    ('{"x": [1]}', '22023', 'unknown impute strategy [1] for column "x"', None,
     "Give each column 'mean', 'median', 'most_frequent' or a number, as in impute => '{\"x\": \"mean\"}'."),
    ('{"x": {"k": 1}}', '22023', 'unknown impute strategy {"k": 1} for column "x"', None,
     "Give each column 'mean', 'median', 'most_frequent' or a number, as in impute => '{\"x\": \"mean\"}'."),
    ('{"x": null}', '22023', 'unknown impute strategy null for column "x"', None,
     "Give each column 'mean', 'median', 'most_frequent' or a number, as in impute => '{\"x\": \"mean\"}'."),
    ('{"x": 1e400}', '22023', 'the impute constant of column "x" must be a finite number', None, None),
    ('{"x": -1e400}', '22023', 'the impute constant of column "x" must be a finite number', None, None),
    ('{"city": "median"}', '42804', 'impute strategy "median" needs a numeric column, and column "city" is a '
                                    'categorical one', None, "Impute it with 'most_frequent'."),
    ('{"city": 3}', '42804', 'impute constant 3 is a number, and column "city" is a categorical one', None,
     "Impute it with 'most_frequent', or replace its NULLs in the data query."),
    ('{"x": "median"}', '22000', 'column "x" of impute has no value that is not NULL in the training rows',
     'Its median is taken from the rows the model trains on.',
     'Give the column a constant to impute, or train on rows that have its values.'),
])
def test_a_refused_impute_says_what_is_wrong_and_what_to_give(db, impute, state, message, detail, hint):
    """Each refusal of impute, its DETAIL and HINT word for word (None: none), and nothing stored: a strategy that is
    no string nor number (a list, an object, null), and a constant past float8's range (jsonb writes 1e400 as an
    integer of 401 digits, which float() cannot take: it raised OverflowError, XX000, before)."""
    e, before = refused(db, impute)
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (state, message, detail, hint)
    assert db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()[0] == before


def test_a_boolean_column_imputed_with_a_constant_takes_0_or_1_alone(db):
    """A boolean column's constant is 0 (false) or 1 (true): 0 is stored as the constant and the function reads NULL
    as false; 2 is 22023 and the median 42804, each with its HINT, and neither stores a version."""
    db.execute('DROP TABLE IF EXISTS flags')
    db.execute("CREATE TABLE flags AS SELECT CASE WHEN k % 6 = 0 THEN NULL ELSE k % 4 <> 0 END AS big, "
               "k::float8 AS x, (CASE WHEN k % 4 <> 0 THEN 3 ELSE 1 END * k)::float8 AS y "
               "FROM generate_series(1, 48) AS k")
    train = ("SELECT pgad.train('flags_c', 'λ(d, w) CASE WHEN d.big THEN w.a ELSE w.b END*d.x', 'squared', "
             "'flags', '{\"a\": 0, \"b\": 0}', impute => %s)")
    db.execute(train, ['{"big": 0}'])
    assert _options(db, 'flags_c')['impute'] == {'big': {'strategy': 'constant', 'value': 0.0}}
    assert db.execute("SELECT pgad_models.flags_c(NULL, 2) = pgad_models.flags_c(false, 2), "
                      "pgad_models.flags_c(NULL, 2) <> pgad_models.flags_c(true, 2)").fetchone() == (True, True)
    before = db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()[0]
    e = error_of(db, train, ['{"big": 2}'])
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22023', 'the impute constant of boolean column "big" must be 0 or 1', "Give 0 (false) or 1 (true), or "
                                                                             "'most_frequent'.")
    e = error_of(db, train, ['{"big": "median"}'])
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '42804', 'impute strategy "median" needs a numeric column, and column "big" is a boolean one',
        "Impute it with 'most_frequent'.")
    assert db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()[0] == before


def test_a_statistic_s_error_in_its_thread_is_raised_to_the_caller():
    """preprocess.waited, in process: an error the work raises in its thread is raised, as itself, in the caller's
    thread; THREAD_VALUES values exactly are still taken in the caller's thread (the bound is "past"); past it, in a
    daemon thread named 'pgad statistic' (the name a stack dump of the backend shows)."""
    import threading
    from pgad.models import preprocess

    class Broken(Exception):
        pass

    def work():
        raise Broken('the sort failed')
    with pytest.raises(Broken, match='the sort failed'):
        preprocess.waited(work, preprocess.THREAD_VALUES + 1, lambda: None)
    assert preprocess.waited(lambda: threading.current_thread() is threading.main_thread(), preprocess.THREAD_VALUES,
                             lambda: None) is True
    thread = preprocess.waited(threading.current_thread, preprocess.THREAD_VALUES + 1, lambda: None)
    assert (thread is threading.main_thread(), thread.name, thread.daemon) == (False, 'pgad statistic', True)


def test_impute_of_a_model_that_reads_no_column_says_so(db):
    """A model of a constant reads no column: impute naming one is 42703, whose DETAIL says the model reads none."""
    db.execute('DROP TABLE IF EXISTS level')
    db.execute('CREATE TABLE level AS SELECT k::float8 AS x, k::float8 AS y FROM generate_series(1, 5) AS k')
    e = error_of(db, "SELECT pgad.train('level_m', 'λ(d, w) w.b', 'squared', 'level', '{\"b\": 0}', "
                     "impute => '{\"x\": \"mean\"}')")
    assert (e.sqlstate, e.message_primary, e.message_detail) == (
        '42703', 'column "x" of impute is not a column the model reads', 'The model reads: no column.')
