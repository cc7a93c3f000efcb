"""pgad.evaluate (the metrics of a stored model, checked against scikit-learn on the same predictions) and the
probability and class functions of logistic and hinge models, against a real server."""
import json

import numpy as np
import psycopg
import pytest
from sklearn import metrics as sk

from conftest import error_of

LINEAR = 'λ(d, w) w.a*d.sqft + w.b*d.rooms + w.c'
LOGIT = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE houses AS SELECT g AS id, (ARRAY['north', 'south', 'east'])[g % 3 + 1] AS region, "
                   "(0.5 + (g * 37 % 100) / 40.0)::float8 AS sqft, (1 + g * 7 % 5)::int AS rooms FROM "
                   "generate_series(1, 300) AS g")
        db.execute("ALTER TABLE houses ADD COLUMN price float8")
        db.execute("UPDATE houses SET price = 100*sqft + 20*rooms + 7 + 5*sin(id) + CASE region WHEN 'north' THEN "
                   "30 WHEN 'south' THEN -20 ELSE 5 END")
        # labels with noise (not separable), ties in x1 (roc_auc's ties), and a group column
        db.execute("CREATE TABLE labels AS SELECT g AS id, (g % 11) / 3.0 - 1.6 AS x1, (g * 13 % 89) / 25.0 - 1.7 "
                   "AS x2, (CASE WHEN sin(g * 1.3) + (g % 11) / 3.0 - 1.0 > 0 THEN 1 ELSE 0 END)::float8 AS y, "
                   "(ARRAY['a', 'b'])[g % 2 + 1] AS part FROM generate_series(1, 400) AS g")


def train(db, name, model, loss, data, weights, **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, %(weights)s{args})",
                      dict(name=name, model=model, loss=loss, data=data, weights=weights, **options)).fetchall()


def evaluated(db, name, data):
    """{group_key (a jsonb's text, or None): {metric: value}}."""
    found = {}
    for key, metric, value in db.execute('SELECT * FROM pgad.evaluate(%s, %s)', [name, data]):
        found.setdefault(None if key is None else json.dumps(key, sort_keys=True), {})[metric] = value
    return found


def scores(db, name, columns, table, where=''):
    """(label, the scoring function's prediction) of each row of table, from SQL."""
    rows = db.execute(f'SELECT y, pgad_models.{name}({columns}) FROM {table} {where} ORDER BY id').fetchall()
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def test_a_squared_model_s_metrics_are_scikit_learn_s(db):
    train(db, 'prices', LINEAR, 'squared', 'houses', '{"a": 0, "b": 0, "c": 0}', label='price',
          optimizer='lbfgs', iterations=200)
    found = evaluated(db, 'prices', 'SELECT * FROM houses WHERE id % 2 = 0')
    assert list(found) == [None]
    m = found[None]
    y, z = scores(db, 'prices', 'sqft, rooms', '(SELECT *, price AS y FROM houses) AS h', 'WHERE id % 2 = 0')
    assert m['rows'] == 150 and m['skipped_rows'] == 0
    # the same predictions (the scoring function's, to 1e-12) give scikit-learn's values to 1e-9
    assert m['mse'] == pytest.approx(sk.mean_squared_error(y, z), rel=1e-9)
    assert m['rmse'] == pytest.approx(np.sqrt(sk.mean_squared_error(y, z)), rel=1e-9)
    assert m['mae'] == pytest.approx(sk.mean_absolute_error(y, z), rel=1e-9)
    assert m['r2'] == pytest.approx(sk.r2_score(y, z), rel=1e-9)
    assert m['loss'] == pytest.approx(m['mse'], rel=1e-12)  # the squared loss is the mse
    assert set(m) == {'rows', 'loss', 'mse', 'rmse', 'mae', 'r2', 'skipped_rows'}


def test_evaluate_on_the_training_data_gives_the_final_loss(db):
    for loss, label in (('squared', 'price'), ('absolute', 'price')):
        train(db, f'fit_{loss}', LINEAR, loss, 'houses', '{"a": 1, "b": 1, "c": 0}', label=label,
              optimizer='adam', learning_rate=0.5, iterations=50)
        final = db.execute('SELECT final_loss FROM pgad.models WHERE name = %s', [f'fit_{loss}']).fetchone()[0]
        assert evaluated(db, f'fit_{loss}', 'houses')[None]['loss'] == pytest.approx(final, rel=1e-9)
    train(db, 'fit_logistic', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs')
    final = db.execute("SELECT final_loss FROM pgad.models WHERE name = 'fit_logistic'").fetchone()[0]
    assert evaluated(db, 'fit_logistic', 'labels')[None]['loss'] == pytest.approx(final, rel=1e-9)


def test_a_logistic_model_s_metrics_are_scikit_learn_s(db):
    train(db, 'churn', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs')
    m = evaluated(db, 'churn', 'labels')[None]
    y, z = scores(db, 'churn', 'x1, x2', 'labels')
    p = 1 / (1 + np.exp(-z))
    assert m['rows'] == 400
    assert m['log_loss'] == pytest.approx(sk.log_loss(y, p), rel=1e-9)
    assert m['loss'] == pytest.approx(m['log_loss'], rel=1e-12)
    predicted = (p >= 0.5).astype(float)
    assert m['accuracy'] == pytest.approx(sk.accuracy_score(y, predicted), rel=1e-12)
    assert m['precision'] == pytest.approx(sk.precision_score(y, predicted), rel=1e-12)
    assert m['recall'] == pytest.approx(sk.recall_score(y, predicted), rel=1e-12)
    assert m['f1'] == pytest.approx(sk.f1_score(y, predicted), rel=1e-12)
    assert m['roc_auc'] == pytest.approx(sk.roc_auc_score(y, z), rel=1e-12)
    assert 0.5 < m['accuracy'] < 1  # not a trivial data set


def test_roc_auc_counts_ties_half(db):
    """A model that reads x1 alone (11 distinct values over 400 rows): every score is tied with many others."""
    train(db, 'tied', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', 'labels', '{"a": 0, "c": 0}', optimizer='lbfgs')
    m = evaluated(db, 'tied', 'labels')[None]
    y, z = scores(db, 'tied', 'x1', 'labels')
    assert len(set(z)) == 11
    assert m['roc_auc'] == pytest.approx(sk.roc_auc_score(y, z), rel=1e-12)


def test_a_hinge_model_s_accuracy(db):
    data = 'SELECT id, x1, x2, 2*y - 1 AS y FROM labels'
    train(db, 'svm', LOGIT, 'hinge', data, '{"a": 0, "b": 0, "c": 0}', optimizer='adam', learning_rate=0.1)
    m = evaluated(db, 'svm', data)[None]
    y, z = scores(db, 'svm', 'x1, x2', f'({data}) AS d')
    assert set(m) == {'rows', 'loss', 'accuracy', 'skipped_rows'}
    assert m['accuracy'] == pytest.approx(sk.accuracy_score(y, np.where(z >= 0, 1, -1)), rel=1e-12)
    assert m['loss'] == pytest.approx(np.mean(np.maximum(0, 1 - y * z)), rel=1e-9)


def test_a_lambda_loss_gets_rows_and_loss(db):
    train(db, 'own_loss', LINEAR, 'λ(p, d) (p - d.price)^4', 'houses', '{"a": 0, "b": 0, "c": 0}',
          learning_rate=1e-9, iterations=3)
    m = evaluated(db, 'own_loss', 'houses')[None]
    z = np.array([r[0] for r in db.execute('SELECT pgad_models.own_loss(sqft, rooms) - price FROM houses')])
    assert set(m) == {'rows', 'loss', 'skipped_rows'}
    assert m['loss'] == pytest.approx(np.mean(z ** 4), rel=1e-9)


def test_a_grouped_model_has_one_set_per_group_and_counts_unseen_groups(db):
    train(db, 'by_part', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs',
          group_by='part')
    data = "SELECT id, x1, x2, y, CASE WHEN id % 10 = 0 THEN 'c' ELSE part END AS part, " \
           "CASE WHEN id % 7 = 0 THEN NULL ELSE x1 END AS x1n FROM labels"
    found = evaluated(db, 'by_part', f'SELECT id, x1n AS x1, x2, y, part FROM ({data}) AS d')
    assert sorted(found) == ['{"part": "a"}', '{"part": "b"}', '{"part": "c"}']
    unseen = found['{"part": "c"}']
    expected_c = db.execute(f"SELECT count(*) FILTER (WHERE x1n IS NOT NULL), count(*) FILTER (WHERE x1n IS NULL) "
                            f"FROM ({data}) AS d WHERE part = 'c'").fetchone()
    assert unseen == {'unseen_rows': expected_c[0], 'skipped_rows': expected_c[1]}
    for part in 'ab':
        m = found[f'{{"part": "{part}"}}']
        rows = db.execute(f"SELECT y, pgad_models.by_part(part, x1n, x2) FROM ({data}) AS d "
                          f"WHERE part = '{part}' AND x1n IS NOT NULL ORDER BY id").fetchall()
        y, z = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        skipped = db.execute(f"SELECT count(*) FROM ({data}) AS d WHERE part = '{part}' AND x1n IS NULL").fetchone()
        assert m['rows'] == len(y) and m['skipped_rows'] == skipped[0] > 0
        p = 1 / (1 + np.exp(-z))
        assert m['log_loss'] == pytest.approx(sk.log_loss(y, p), rel=1e-9)
        assert m['accuracy'] == pytest.approx(sk.accuracy_score(y, p >= 0.5), rel=1e-12)
        assert m['f1'] == pytest.approx(sk.f1_score(y, p >= 0.5), rel=1e-12)
        assert m['roc_auc'] == pytest.approx(sk.roc_auc_score(y, z), rel=1e-12)


def test_a_grouped_squared_model(db):
    train(db, 'by_region', LINEAR, 'squared', 'houses', '{"a": 0, "b": 0, "c": 0}', label='price',
          optimizer='lbfgs', group_by='region', iterations=200)
    found = evaluated(db, 'by_region', 'houses')
    assert len(found) == 3
    for region in ('north', 'south', 'east'):
        m = found[f'{{"region": "{region}"}}']
        y, z = scores(db, 'by_region', 'region, sqft, rooms', '(SELECT *, price AS y FROM houses) AS h',
                      f"WHERE region = '{region}'")
        assert m['r2'] == pytest.approx(sk.r2_score(y, z), rel=1e-9)
        assert m['mae'] == pytest.approx(sk.mean_absolute_error(y, z), rel=1e-9)


def test_the_data_runs_as_the_caller(db, cluster, dbname):
    db.execute('DROP ROLE IF EXISTS evaluator')
    db.execute('CREATE ROLE evaluator LOGIN')
    train(db, 'secret_prices', LINEAR, 'squared', 'houses', '{"a": 0, "b": 0, "c": 0}', label='price', iterations=2)
    with psycopg.connect(cluster.conninfo(dbname, user='evaluator'), autocommit=True) as other:
        assert error_of(other, "SELECT * FROM pgad.evaluate('secret_prices', 'houses')").sqlstate == '42501'
    db.execute('GRANT SELECT ON houses TO evaluator')
    with psycopg.connect(cluster.conninfo(dbname, user='evaluator'), autocommit=True) as other:
        assert evaluated(other, 'secret_prices', 'houses')[None]['rows'] == 300


@pytest.mark.parametrize('sql, sqlstate, words', [
    ("SELECT * FROM pgad.evaluate('no_such_model', 'houses')", '42704', 'model "no_such_model" does not exist'),
    ("SELECT * FROM pgad.evaluate('errors', 'SELECT * FROM houses WHERE false')", '22000', 'the data has no rows'),
    ("SELECT * FROM pgad.evaluate('errors', 'SELECT NULL::float8 AS sqft, rooms, price FROM houses')", '22000',
     'every row of the data has NULL'),
    ("SELECT * FROM pgad.evaluate('errors', 'SELECT sqft, price FROM houses')", '42703', 'rooms'),
])
def test_errors(db, sql, sqlstate, words):
    train(db, 'errors', LINEAR, 'squared', 'houses', '{"a": 0, "b": 0, "c": 0}', label='price', iterations=2)
    e = error_of(db, sql)
    assert e.sqlstate == sqlstate and words in e.message_primary


def test_a_model_with_vectors_is_refused(db):
    db.execute('CREATE TABLE IF NOT EXISTS vecs AS SELECT ARRAY[g, g % 3]::float8[] AS v, g::float8 AS y '
               'FROM generate_series(1, 20) AS g')
    train(db, 'vec', 'λ(d, w) dot(w.a, d.v) + w.c', 'squared', 'vecs', '{"a": [0, 0], "c": 0}', iterations=2)
    e = error_of(db, "SELECT * FROM pgad.evaluate('vec', 'vecs')")
    assert e.sqlstate == '0A000' and 'vectors' in e.message_primary


def test_null_arguments_give_no_rows(db):
    assert db.execute('SELECT count(*) FROM pgad.evaluate(NULL, %s)', ['houses']).fetchone()[0] == 0
