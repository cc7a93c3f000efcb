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
    # standardize => true trains on scaled columns and stores the weights in the columns' units: the same loss
    train(db, 'fit_scaled', LINEAR, 'squared', 'houses', '{"a": 0, "b": 0, "c": 0}', label='price',
          standardize=True, learning_rate=0.1, iterations=30)
    final = db.execute("SELECT final_loss FROM pgad.models WHERE name = 'fit_scaled'").fetchone()[0]
    assert evaluated(db, 'fit_scaled', 'houses')[None]['loss'] == pytest.approx(final, rel=1e-9)
    # per group, each group's own final_loss
    train(db, 'fit_groups', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs',
          group_by='part')
    finals = dict(db.execute("SELECT group_key->>'part', final_loss FROM pgad.models WHERE name = 'fit_groups'"))
    found = evaluated(db, 'fit_groups', 'labels')
    assert {part: found[f'{{"part": "{part}"}}']['loss'] for part in 'ab'} == pytest.approx(finals, rel=1e-9)
    # the loss is without regularisation: below the final_loss of a model trained with l2
    train(db, 'fit_l2', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs', l2=0.1)
    final, w = db.execute("SELECT final_loss, weights FROM pgad.models WHERE name = 'fit_l2'").fetchone()
    penalty = 0.1 * sum(v ** 2 for v in w.values())
    assert evaluated(db, 'fit_l2', 'labels')[None]['loss'] == pytest.approx(final - penalty, rel=1e-9)


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


# §2: the probability and class functions of logistic and hinge models, and the array length check

def functions(db, name):
    """{function name in pgad_models: (volatility, parallel, language, arguments, result)} of those named name*, but
    every model's <name>_explain (tests/test_explain_models.py) and a version's own (name@3: tests/test_versions.py)."""
    return {r[0]: r[1:] for r in db.execute(
        "SELECT p.proname, p.provolatile, p.proparallel, l.lanname, pg_get_function_arguments(p.oid), "
        "pg_get_function_result(p.oid) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
        "WHERE p.pronamespace = 'pgad_models'::regnamespace AND p.proname LIKE %s AND p.proname NOT LIKE "
        "'%%\\_explain' AND p.proname NOT LIKE '%%@%%'", [name + '%'])}


def inlined(db, call, table):
    plan = '\n'.join(r[0] for r in db.execute(f'EXPLAIN VERBOSE SELECT {call} FROM {table}'))
    return 'pgad_models' not in plan


def test_a_logistic_model_gets_probability_and_class_functions_that_are_inlined(db):
    train(db, 'buyer', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs')
    args = 'x1 double precision, x2 double precision'
    assert functions(db, 'buyer') == {'buyer': ('i', 's', 'sql', args, 'double precision'),
                                      'buyer_probability': ('i', 's', 'sql', args, 'double precision'),
                                      'buyer_class': ('i', 's', 'sql', args, 'integer')}
    rows = db.execute('SELECT pgad_models.buyer(x1, x2), pgad_models.buyer_probability(x1, x2), '
                      'pgad_models.buyer_class(x1, x2) FROM labels').fetchall()
    z, p, c = (np.array([r[k] for r in rows]) for k in range(3))
    assert p == pytest.approx(1 / (1 + np.exp(-z)), abs=1e-15, rel=1e-14)
    assert list(c) == [int(v >= 0.5) for v in p] and set(c) == {0, 1}
    for call in ('pgad_models.buyer_probability(x1, x2)', 'pgad_models.buyer_class(x1, x2)'):
        assert inlined(db, call, 'labels')
    # NULL gives NULL; the score 0 is the probability 1/2 and class 1; large scores neither overflow nor underflow
    assert db.execute('SELECT pgad_models.buyer_probability(NULL, 1), pgad_models.buyer_class(NULL, 1)').fetchone() \
        == (None, None)
    w = db.execute("SELECT weights FROM pgad.models WHERE name = 'buyer'").fetchone()[0]
    x1 = -w['c'] / w['a']
    assert db.execute('SELECT pgad_models.buyer_probability(%s, 0), pgad_models.buyer_class(%s, 0)',
                      [x1, x1]).fetchone() == (pytest.approx(0.5, abs=1e-15), 1)
    big = 1e6 / abs(w['a'])
    assert db.execute('SELECT pgad_models.buyer_probability(%s, 0), pgad_models.buyer_probability(%s, 0)',
                      [big, -big]).fetchone() in ((1.0, 0.0), (0.0, 1.0))


def test_a_hinge_model_gets_a_class_function_of_minus_one_and_one(db):
    data = 'SELECT x1, x2, 2*y - 1 AS y FROM labels'
    train(db, 'margin', LOGIT, 'hinge', data, '{"a": 0, "b": 0, "c": 0}', optimizer='adam', learning_rate=0.1)
    assert set(functions(db, 'margin')) == {'margin', 'margin_class'}
    rows = db.execute('SELECT pgad_models.margin(x1, x2), pgad_models.margin_class(x1, x2) FROM labels').fetchall()
    assert [c for _, c in rows] == [1 if z >= 0 else -1 for z, _ in rows] and {c for _, c in rows} == {-1, 1}
    assert inlined(db, 'pgad_models.margin_class(x1, x2)', 'labels')


def test_a_grouped_logistic_model_s_probability_is_null_for_an_unknown_group(db):
    train(db, 'grouped_buyer', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs',
          group_by='part')
    rows = db.execute("SELECT pgad_models.grouped_buyer(part, x1, x2), pgad_models.grouped_buyer_probability(part, "
                      "x1, x2), pgad_models.grouped_buyer_class(part, x1, x2) FROM labels").fetchall()
    assert all(p == pytest.approx(1 / (1 + np.exp(-z)), abs=1e-15) and c == int(z >= 0) for z, p, c in rows)
    assert db.execute("SELECT pgad_models.grouped_buyer_probability('zz', 1, 1), "
                      "pgad_models.grouped_buyer_class('zz', 1, 1)").fetchone() == (None, None)
    assert inlined(db, 'pgad_models.grouped_buyer_probability(part, x1, x2)', 'labels')


def test_retraining_with_another_loss_drops_the_functions_no_longer_wanted_and_drop_model_drops_them(db):
    train(db, 'switch', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', iterations=2)
    assert set(functions(db, 'switch')) == {'switch', 'switch_probability', 'switch_class'}
    data = 'SELECT x1, x2, 2*y - 1 AS y FROM labels'
    train(db, 'switch', LOGIT, 'hinge', data, '{"a": 0, "b": 0, "c": 0}', iterations=2)
    assert set(functions(db, 'switch')) == {'switch', 'switch_class'}
    train(db, 'switch', LOGIT, 'squared', 'labels', '{"a": 0, "b": 0, "c": 0}', iterations=2)
    assert set(functions(db, 'switch')) == {'switch'}
    train(db, 'switch', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', 'labels', '{"a": 0, "c": 0}', iterations=2)
    assert functions(db, 'switch')['switch_class'][3] == 'x1 double precision'
    db.execute("SELECT pgad.drop_model('switch')")
    assert functions(db, 'switch') == {}


def test_a_view_on_the_probability_function_stops_a_retraining_that_would_drop_it(db):
    train(db, 'viewed', LOGIT, 'logistic', 'labels', '{"a": 0, "b": 0, "c": 0}', iterations=2)
    db.execute('CREATE VIEW viewed_p AS SELECT pgad_models.viewed_probability(x1, x2) AS p FROM labels')
    e = error_of(db, "SELECT pgad.train('viewed', %s, 'squared', 'labels', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                     "iterations => 2)", [LOGIT])
    assert e.sqlstate == '2BP01' and 'probability function of model "viewed"' in e.message_primary
    assert 'viewed_p' in e.message_detail
    db.execute('DROP VIEW viewed_p')
    db.execute("SELECT pgad.drop_model('viewed')")


@pytest.mark.parametrize('first, second', [('pair', 'pair_probability'), ('pair_class', 'pair')])
def test_a_model_and_another_model_s_function_cannot_share_a_name(db, first, second):
    """Model "pair"'s pair_probability and a model named pair_probability: refused whichever comes second."""
    losses = {'pair': 'logistic', 'pair_probability': 'squared', 'pair_class': 'squared'}
    train(db, first, LOGIT, losses[first], 'labels', '{"a": 0, "b": 0, "c": 0}', iterations=2)
    e = error_of(db, "SELECT pgad.train(%s, %s, %s, 'labels', '{\"a\": 0, \"b\": 0, \"c\": 0}', iterations => 2)",
                 [second, LOGIT, losses[second]])
    assert e.sqlstate == '42710'
    assert ('model "pair" has a probability function named "pair_probability"' if first == 'pair' else
            'model "pair_class" exists, and the class function of model "pair" would take its name') \
        in e.message_primary
    assert db.execute('SELECT count(*) FROM pgad.models WHERE name = %s', [second]).fetchone()[0] == 0
    db.execute('SELECT pgad.drop_model(%s)', [first])


def test_a_function_name_past_namedatalen_is_refused(db):
    name = 'm' * 52  # "<name>_probability": 64 bytes
    e = error_of(db, "SELECT pgad.train(%s, %s, 'logistic', 'labels', '{\"a\": 0, \"b\": 0, \"c\": 0}')",
                 [name, LOGIT])
    assert e.sqlstate == '42622' and f'"{name}_probability", longer than 63 bytes' in e.message_primary
    assert functions(db, name) == {}


def test_another_role_s_function_of_the_probability_s_name_is_refused_and_survives(db, cluster, dbname):
    db.execute('DROP ROLE IF EXISTS squatter')
    db.execute('CREATE ROLE squatter LOGIN')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO squatter')
    with psycopg.connect(cluster.conninfo(dbname, user='squatter'), autocommit=True) as other:
        other.execute('CREATE FUNCTION pgad_models.owned_probability(x1 float8, x2 float8) RETURNS float8 '
                      'LANGUAGE sql IMMUTABLE RETURN 42')
    e = error_of(db, "SELECT pgad.train('owned', %s, 'logistic', 'labels', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                     "iterations => 2)", [LOGIT])
    assert e.sqlstate == '42501' and 'belongs to role "squatter"' in e.message_primary
    assert db.execute('SELECT pgad_models.owned_probability(1, 2)').fetchone()[0] == 42
    # a model trained before the squatter's function of another signature leaves it alone when dropped
    train(db, 'owned', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', 'labels', '{"a": 0, "c": 0}', iterations=2)
    db.execute("SELECT pgad.drop_model('owned')")
    assert db.execute('SELECT pgad_models.owned_probability(1, 2)').fetchone()[0] == 42
    db.execute('DROP FUNCTION pgad_models.owned_probability(float8, float8)')
    db.execute('REVOKE CREATE ON SCHEMA pgad_models FROM squatter')
    db.execute('DROP ROLE squatter')


def test_an_array_argument_of_another_length_is_an_error_and_the_function_stays_inlined(db):
    db.execute('CREATE TABLE IF NOT EXISTS vecs AS SELECT ARRAY[g, g % 3]::float8[] AS v, g::float8 AS y '
               'FROM generate_series(1, 20) AS g')
    train(db, 'vlen', 'λ(d, w) dot(w.a, d.v) + w.c', 'squared', 'vecs', '{"a": [0, 0], "c": 0}', iterations=2)
    w = db.execute("SELECT weights FROM pgad.models WHERE name = 'vlen'").fetchone()[0]
    assert db.execute("SELECT pgad_models.vlen('{3, 4}')").fetchone()[0] == \
        pytest.approx(3 * w['a'][0] + 4 * w['a'][1] + w['c'], rel=1e-14)
    for short in ("'{3}'", "'{3, 4, 5}'"):
        e = error_of(db, f'SELECT pgad_models.vlen({short}) FROM vecs')
        assert e.sqlstate == '2202E'
        assert e.message_primary == f'array argument "v" has {short.count(",") + 1} elements, the model reads 2'
    assert db.execute('SELECT pgad_models.vlen(NULL)').fetchone()[0] is None
    assert inlined(db, 'pgad_models.vlen(v)', 'vecs')
    db.execute('INSERT INTO vecs VALUES (ARRAY[1]::float8[], 1)')
    assert error_of(db, 'SELECT sum(pgad_models.vlen(v)) FROM vecs').sqlstate == '2202E'
    db.execute('DELETE FROM vecs WHERE cardinality(v) = 1')
