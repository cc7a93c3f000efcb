"""Categorical weights in pgad.evaluate, pgad.summary and pgad.hessian, against a real server: evaluate's metrics
against scikit-learn on the one-hot model's predictions (a category never trained contributing 0 and counted as
unseen_category_rows), grouped models too; summary's table against statsmodels' OLS and Logit on the one-hot design
(one row per category, named region[north]); the Hessian against the one-hot design's 2·XᵀX / n."""
import json

import numpy as np
import psycopg
import pytest
import statsmodels.api as sm
from sklearn import metrics as sk

from conftest import error_of

N = 240
REGIONS = ['east', 'north', 'south']
rng = np.random.default_rng(11)
REGION = np.array([REGIONS[k % 3] for k in range(N)])
PART = np.where(np.arange(N) % 2 == 0, 'a', 'b')
SQFT = rng.normal(size=N)
EFFECT = {'east': 1.0, 'north': -2.0, 'south': 0.5}
PRICE = np.array([EFFECT[r] for r in REGION]) + 0.7 * SQFT + rng.normal(scale=0.5, size=N)
T = (rng.uniform(size=N) < 1 / (1 + np.exp(-(np.array([EFFECT[r] for r in REGION]) * 0.6 + 0.9 * SQFT)))) * 1.0
MODEL = 'λ(d, w) w.region[d.region] + w.a*d.sqft'
START = '{"region": {}, "a": 0}'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE sales (region text, part text, sqft float8, price float8, t float8)')
        with db.cursor() as cur:
            cur.executemany('INSERT INTO sales VALUES (%s, %s, %s, %s, %s)',
                            [(str(r), str(p), float(x), float(y), float(t))
                             for r, p, x, y, t in zip(REGION, PART, SQFT, PRICE, T)])
        # new data: a region training never saw (west), and a NULL region (skipped)
        db.execute("CREATE TABLE fresh AS SELECT * FROM sales WHERE sqft > 0")
        db.execute("INSERT INTO fresh VALUES ('west', 'a', 0.5, 2.0, 1), ('west', 'b', -1.0, 0.0, 0), "
                   "(NULL, 'a', 1.0, 1.0, 1)")


def train(db, name, loss, label, **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, %(loss)s, 'sales', %(start)s, label => %(label)s, "
               f"optimizer => 'lbfgs', iterations => 500, tolerance => 1e-14{args})",
               dict(name=name, model=MODEL, loss=loss, start=START, label=label, **options))
    return {key: json.loads(w) for key, w in
            db.execute('SELECT group_key::text, weights::text FROM pgad.models WHERE name = %s', [name])}


def evaluated(db, name, data):
    found = {}
    for key, metric, value in db.execute('SELECT * FROM pgad.evaluate(%s, %s)', [name, data]):
        found.setdefault(None if key is None else json.dumps(key, sort_keys=True), {})[metric] = value
    return found


def fresh_rows(db, where='true'):
    return db.execute(f'SELECT region, sqft, price, t FROM fresh WHERE region IS NOT NULL AND {where} '
                      'ORDER BY ctid').fetchall()


def predict(weights, rows):
    """The one-hot model's prediction: an unseen region contributes 0."""
    return np.array([weights['region'].get(r, 0.0) + weights['a'] * x for r, x, _, _ in rows])


def test_evaluate_squared_with_an_unseen_category(db):
    weights = train(db, 'cat_sq', 'squared', 'price')[None]
    got = evaluated(db, 'cat_sq', 'fresh')[None]
    rows = fresh_rows(db)
    z, y = predict(weights, rows), np.array([r[2] for r in rows])
    assert got['rows'] == len(rows) and got['skipped_rows'] == 1
    assert got['unseen_category_rows'] == 2
    assert got['mse'] == pytest.approx(sk.mean_squared_error(y, z), rel=1e-12)
    assert got['mae'] == pytest.approx(sk.mean_absolute_error(y, z), rel=1e-12)
    assert got['r2'] == pytest.approx(sk.r2_score(y, z), rel=1e-12)
    assert got['loss'] == pytest.approx(sk.mean_squared_error(y, z), rel=1e-12)
    # the scoring function agrees row by row, the unseen region included
    scored = [v for v, in db.execute('SELECT pgad_models.cat_sq(region, sqft) FROM fresh WHERE region IS NOT NULL '
                                     'ORDER BY ctid')]
    assert scored == pytest.approx(z.tolist(), rel=1e-12)


def test_evaluate_logistic(db):
    weights = train(db, 'cat_lo', 'logistic', 't')[None]
    got = evaluated(db, 'cat_lo', 'fresh')[None]
    rows = fresh_rows(db)
    z, y = predict(weights, rows), np.array([r[3] for r in rows])
    p = 1 / (1 + np.exp(-z))
    assert got['unseen_category_rows'] == 2
    assert got['log_loss'] == pytest.approx(sk.log_loss(y, p), rel=1e-9)
    assert got['accuracy'] == pytest.approx(sk.accuracy_score(y, p >= 0.5))
    assert got['roc_auc'] == pytest.approx(sk.roc_auc_score(y, z), rel=1e-12)


def test_evaluate_grouped(db):
    weights = train(db, 'cat_gr', 'squared', 'price', group_by='part')
    got = evaluated(db, 'cat_gr', 'fresh')
    assert len(got) == 2
    for key, found in got.items():
        part = json.loads(key)['part']
        rows = fresh_rows(db, f"part = '{part}'")
        w = weights[next(k for k in weights if json.loads(k)['part'] == part)]
        z, y = predict(w, rows), np.array([r[2] for r in rows])
        assert found['rows'] == len(rows) and found['unseen_category_rows'] == 1
        assert found['mse'] == pytest.approx(sk.mean_squared_error(y, z), rel=1e-12)


def test_evaluate_no_unseen_category(db):
    train(db, 'cat_none', 'squared', 'price')
    assert evaluated(db, 'cat_none', 'sales')[None]['unseen_category_rows'] == 0


def design(mask=slice(None)):
    """The one-hot design of the model: a column per region (east, north, south), then sqft."""
    return np.column_stack([(REGION[mask] == r) * 1.0 for r in REGIONS] + [SQFT[mask]])


NAMES = ['region[east]', 'region[north]', 'region[south]', 'a']


def summarized(db, name):
    out = {}
    for key, *line in db.execute('SELECT * FROM pgad.summary(%s)', [name]):
        out.setdefault(None if key is None else key['part'], []).append(line)
    return out


def check(rows, result, estimate_tol):
    assert sorted(r[0] for r in rows) == sorted(NAMES)  # in the stored weights' order
    by_name = {r[0]: r[1:] for r in rows}
    got = np.array([by_name[n] for n in NAMES], dtype=float)
    assert got[:, 0] == pytest.approx(result.params, abs=estimate_tol)
    assert got[:, 1] == pytest.approx(result.bse, rel=1e-6)
    assert got[:, 2] == pytest.approx(result.tvalues, rel=1e-6)
    assert got[:, 3] == pytest.approx(result.pvalues, rel=1e-5, abs=1e-300)
    assert got[:, 4:] == pytest.approx(result.conf_int(), rel=1e-6, abs=1e-9)


def test_summary_ols_names_categories(db):
    train(db, 'cat_ols', 'squared', 'price')
    check(summarized(db, 'cat_ols')[None], sm.OLS(PRICE, design()).fit(), 1e-8)


def test_summary_logistic(db):
    train(db, 'cat_logit', 'logistic', 't')
    check(summarized(db, 'cat_logit')[None], sm.Logit(T, design()).fit(disp=0, tol=1e-12), 1e-6)


def test_summary_grouped(db):
    train(db, 'cat_parts', 'squared', 'price', group_by='part')
    tables = summarized(db, 'cat_parts')
    assert set(tables) == {'a', 'b'}
    for part, rows in tables.items():
        mask = PART == part
        check(rows, sm.OLS(PRICE[mask], design(mask)).fit(), 1e-8)


def test_summary_dummy_trap_is_singular(db):
    """An intercept beside a weight for every category: the Hessian is singular (22000)."""
    db.execute("SELECT * FROM pgad.train('cat_trap', 'λ(d, w) w.region[d.region] + w.a*d.sqft + w.c', 'squared', "
               "'sales', '{\"region\": {}, \"a\": 0, \"c\": 0}', label => 'price', optimizer => 'lbfgs')")
    diag = error_of(db, "SELECT * FROM pgad.summary('cat_trap')")
    assert diag.sqlstate == '22000' and 'singular' in diag.message_primary


def test_hessian_names_categories(db):
    loss = 'λ(d, w) (w.region[d.region] + w.a*d.sqft - d.price)^2'
    got = json.loads(db.execute('SELECT pgad.hessian(%s, %s, %s)::text', [loss, 'sales', START]).fetchone()[0])
    assert sorted(got) == sorted(NAMES)
    X = design()
    want = 2 * X.T @ X / N
    for i, a in enumerate(NAMES):
        assert [got[a][b] for b in NAMES] == pytest.approx(want[i].tolist(), rel=1e-12, abs=1e-12)


def test_evaluate_an_integer_category(db):
    """An integer column's categories are its text ('3'): a floor training never saw (4) contributes 0."""
    db.execute('CREATE TABLE floors AS SELECT (1 + g % 3)::int AS floor, g::float8 / 10 AS x, '
               '(1 + g % 3) * 2 + g::float8 / 10 AS y FROM generate_series(1, 30) AS g')
    db.execute("SELECT * FROM pgad.train('by_floor', 'λ(d, w) w.f[d.floor] + w.a*d.x', 'squared', 'floors', "
               "'{\"f\": {}, \"a\": 0}', optimizer => 'lbfgs', iterations => 500, tolerance => 1e-14)")
    got = {m: v for _, m, v in db.execute(
        "SELECT * FROM pgad.evaluate('by_floor', "
        "'SELECT * FROM (VALUES (2, 1.0, 5.0), (4, 1.0, 1.0)) AS v(floor, x, y)')")}
    # floor 2: 2·2 + 1 = 5 exactly; floor 4: 0 + 1·1 = 1 exactly
    assert got['rows'] == 2 and got['unseen_category_rows'] == 1
    assert got['mse'] == pytest.approx(0, abs=1e-12)


@pytest.mark.parametrize('group_by', [None, 'part'])
def test_validation_query_with_an_unseen_category(db, group_by):
    """A validation query with a region training never saw loads it as code 0 (loader.category_code's COALESCE, a
    keyword: there is no pg_catalog.coalesce), with group_by too."""
    options = {'validation': 'SELECT * FROM fresh'} | ({'group_by': group_by} if group_by else {})
    train(db, 'cat_valid', 'squared', 'price', **options)
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'cat_valid'").fetchone()[0] == (2 if group_by
                                                                                                     else 1)
