"""Models of many classes (issue 36 §1), against a real server and scikit-learn: loss 'softmax' over a label of
classes (text, integer, enum, boolean, a domain), its weights started at {} and sized by the classes, centred over
the classes after the fit, as scikit-learn's LogisticRegression (multinomial, penalty None and l2) parameterises
them; the scoring functions <name>, <name>_probability and <name>_class (inlined, NULL for NULL, the class in the
label's own type); a binary 'logistic' model of a text label; and the refusals (another role's enum, hostile class
names, an array of the wrong length).

The oracle is LogisticRegression(solver='newton-cholesky', tol=1e-14), which reaches the optimum to about 1e-10 on
this data (its 'lbfgs' stops near 1e-6). The data overlaps (no class is separable), so the optimum is unique up to
the shift of every class's weights together, which the centring takes out."""
import warnings

import numpy as np
import psycopg
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

import pgad.lang  # noqa: F401  (binds pgad.lang)
from conftest import error_of, heard, settings
from pgad.lang import parse
from pgad.models import classes

N = 240
NAMES = ['setosa', 'versicolor', 'virginica']
MODEL = 'λ(d, w) w.w @ [d.x1, d.x2, d.x3, d.x4] + w.b'
START = '{"w": {}, "b": {}}'
TOLERANCE = 1e-6  # relative, on the weights and the probabilities (the optimum's, scikit-learn's to ~1e-10)


def flowers():
    """Iris-like data whose classes overlap: 4 features, 3 classes."""
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, N)
    centres = np.array([[5.0, 3.4, 1.5, 0.3], [5.9, 2.8, 4.3, 1.3], [6.5, 3.0, 5.5, 2.0]])
    return centres[y] + rng.normal(0, [0.6, 0.4, 1.2, 0.6], (N, 4)), y


X, Y = flowers()


def sklearn(x, y, l2=False, C=1.0):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return LogisticRegression(penalty='l2' if l2 else None, C=C, tol=1e-14, max_iter=1000,
                                  solver='newton-cholesky').fit(x, y)


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TYPE flower AS ENUM ('virginica', 'versicolor', 'setosa')")  # not alphabetical
        db.execute('CREATE DOMAIN species_name AS text')
        db.execute('CREATE TABLE flowers (id int, x1 float8, x2 float8, x3 float8, x4 float8, species text, '
                   'k int, e flower, dm species_name, x float8[])')
        with db.cursor().copy('COPY flowers FROM STDIN') as copy:
            for i, (row, t) in enumerate(zip(X, Y)):
                copy.write_row((i, *map(float, row), NAMES[t], int(t) + 7, NAMES[t], NAMES[t],
                                '{' + ','.join(map(repr, map(float, row))) + '}'))


def train(db, name, label='species', data='flowers', model=MODEL, start=START, **options):
    extra = ''.join(f', {k} => {v}' for k, v in options.items())
    return db.execute(f"SELECT weights, options, converged, iterations FROM pgad.train(%s, %s, 'softmax', %s, %s, "
                      f"label => %s{extra})", (name, model, data, start, label)).fetchone()


def probabilities(db, name):
    return np.array([r[0] for r in db.execute(f'SELECT pgad_models.{name}_probability(x1, x2, x3, x4) FROM flowers '
                                              'ORDER BY id')])


def relative(got, expected):
    return np.max(np.abs(np.asarray(got) - expected)) / np.max(np.abs(expected))


@pytest.mark.parametrize('l2', [False, True])
def test_softmax_reaches_sklearns_optimum_centred(db, l2):
    """penalty None, and l2 with C = 1 (pgad's l2 = 1/(2·C·n) on W alone, the intercepts not penalised): the
    weights, centred, and the probabilities as scikit-learn's multinomial LogisticRegression's; the default
    optimizer (newton: 15 weights) says converged, with no WARNING."""
    db.execute('SET pgad.publish_data_values = on')  # the fit's WARNINGs only: tests/test_published_values.py
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.severity))
    extra = {'l2': 1 / (2 * N), 'regularize': "'[\"w\"]'"} if l2 else {}
    weights, options, converged, _ = train(db, 'iris_like', **extra)
    expected = sklearn(X, Y, l2)
    assert converged and 'WARNING' not in notices and options['optimizer'] == 'newton'
    assert options['classes'] == NAMES and options['label_type'] == 'pg_catalog.text'
    W, b = np.array(weights['w']), np.array(weights['b'])
    assert W.shape == (3, 4) and b.shape == (3,)
    assert np.abs(W.sum(axis=0)).max() < 1e-12 and abs(b.sum()) < 1e-12  # centred
    assert relative(W, expected.coef_) < TOLERANCE and relative(b, expected.intercept_) < TOLERANCE
    assert relative(probabilities(db, 'iris_like'), expected.predict_proba(X)) < TOLERANCE
    classes = [r[0] for r in db.execute('SELECT pgad_models.iris_like_class(x1, x2, x3, x4) FROM flowers ORDER BY id')]
    assert classes == [NAMES[k] for k in expected.predict(X)]
    logits = np.array([r[0] for r in db.execute('SELECT pgad_models.iris_like(x1, x2, x3, x4) FROM flowers '
                                                'ORDER BY id')])
    assert relative(logits, X @ expected.coef_.T + expected.intercept_) < TOLERANCE


def test_lbfgs_and_an_array_column_reach_it_too(db):
    """optimizer 'lbfgs' explicitly, and the features as one float8[] column (w.w @ d.x): converged, no WARNING,
    the same optimum (L-BFGS stops at its criterion: 1e-5)."""
    db.execute('SET pgad.publish_data_values = on')  # the fit's WARNINGs only: tests/test_published_values.py
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.severity))
    weights, _, converged, _ = train(db, 'iris_lbfgs', optimizer="'lbfgs'")
    expected = sklearn(X, Y)
    assert converged and 'WARNING' not in notices
    assert relative(weights['w'], expected.coef_) < 1e-5
    weights, options, converged, _ = train(db, 'iris_array', model='λ(d, w) w.w @ d.x + w.b')
    assert converged and options['optimizer'] == 'newton'
    assert relative(weights['w'], expected.coef_) < TOLERANCE


def test_iris_with_l2_against_sklearn(db):
    """scikit-learn's own iris (setosa is separable: without a penalty there is no optimum), l2 with C = 1."""
    iris = load_iris()
    db.execute('CREATE TABLE iris (x1 float8, x2 float8, x3 float8, x4 float8, species text)')
    with db.cursor().copy('COPY iris FROM STDIN') as copy:
        for row, t in zip(iris.data, iris.target):
            copy.write_row((*map(float, row), str(iris.target_names[t])))
    weights, options, converged, _ = train(db, 'iris', data='iris', l2=1 / (2 * len(iris.target)),
                                           regularize="'[\"w\"]'")
    expected = sklearn(iris.data, iris.target, l2=True)
    assert converged and options['classes'] == list(iris.target_names)
    assert relative(weights['w'], expected.coef_) < TOLERANCE
    assert relative(weights['b'], expected.intercept_) < TOLERANCE


@pytest.mark.parametrize('label, kind, classes, returns', [
    ('k', 'pg_catalog.int4', ['7', '8', '9'], 'integer'),
    ('e', 'public.flower', ['virginica', 'versicolor', 'setosa'], 'flower'),  # the enum's order
    ('dm', 'pg_catalog.text', NAMES, 'text'),  # a domain, as its base type
])
def test_labels_of_other_types(db, label, kind, classes, returns):
    weights, options, converged, _ = train(db, f'by_{label}', label=label)
    assert converged and options['classes'] == classes and options['label_type'] == kind
    order = [NAMES.index(c) if c in NAMES else int(c) - 7 for c in classes]
    expected = sklearn(X, Y)
    assert relative(weights['w'], expected.coef_[order]) < TOLERANCE
    got = db.execute(f'SELECT pgad_models.by_{label}_class(x1, x2, x3, x4), '
                     f'pg_catalog.pg_typeof(pgad_models.by_{label}_class(x1, x2, x3, x4))::text FROM flowers '
                     'ORDER BY id').fetchall()
    assert {t for _, t in got} == {returns}
    assert [str(c) for c, _ in got] == [str(int(k) + 7) if label == 'k' else NAMES[k] for k in expected.predict(X)]


def test_a_boolean_label_under_softmax_and_logistic(db):
    """Two classes, false and true: softmax's centred weights are half logistic's, its class a boolean."""
    data = "SELECT x1, x2, x3, x4, species = 'virginica' AS v FROM flowers"
    soft, options, converged, _ = train(db, 'virginica_soft', label='v', data=data)
    assert converged and options['classes'] == ['false', 'true'] and options['label_type'] == 'pg_catalog.bool'
    logistic = db.execute("SELECT weights FROM pgad.train('virginica', 'λ(d, w) w.a * d.x1 + w.b * d.x2 + w.c * d.x3 "
                          "+ w.d * d.x4 + w.e', 'logistic', %s, '{\"a\": 0, \"b\": 0, \"c\": 0, \"d\": 0, \"e\": 0}', "
                          "label => 'v')", (data,)).fetchone()[0]
    W = np.array(soft['w'])
    assert relative(W[1] - W[0], [logistic[k] for k in 'abcd']) < TOLERANCE
    assert db.execute('SELECT pg_catalog.pg_typeof(pgad_models.virginica_soft_class(6.5, 3, 5.5, 2))::text, '
                      'pgad_models.virginica_soft_class(6.5, 3, 5.5, 2)').fetchone() == ('boolean', True)
    assert db.execute('SELECT pg_catalog.pg_typeof(pgad_models.virginica_class(6.5, 3, 5.5, 2))::text'
                      ).fetchone()[0] == 'integer'  # a boolean label under 'logistic' keeps its int4 class


def test_binary_logistic_of_a_text_label_against_sklearn(db):
    """'B'/'M' under loss 'logistic': 'M', the second in order, is class 1; _class returns text."""
    data = "SELECT x1, x2, CASE WHEN species = 'setosa' OR x3 < 4 THEN 'B' ELSE 'M' END AS diagnosis FROM flowers"
    row = db.execute("SELECT weights, options FROM pgad.train('diagnosis', 'λ(d, w) w.a * d.x1 + w.b * d.x2 + w.c', "
                     "'logistic', %s, '{\"a\": 0, \"b\": 0, \"c\": 0}', label => 'diagnosis')", (data,)).fetchone()
    weights, options = row
    assert options['classes'] == ['B', 'M'] and options['label_type'] == 'pg_catalog.text'
    rows = db.execute(data).fetchall()
    x, y = np.array([r[:2] for r in rows]), np.array([r[2] == 'M' for r in rows])
    expected = sklearn(x, y)
    assert relative([weights['a'], weights['b']], expected.coef_[0]) < TOLERANCE
    assert abs(weights['c'] - expected.intercept_[0]) < TOLERANCE * abs(expected.intercept_[0])
    got = db.execute('SELECT pgad_models.diagnosis_probability(x1, x2), pgad_models.diagnosis_class(x1, x2), '
                     'pg_catalog.pg_typeof(pgad_models.diagnosis_class(x1, x2))::text FROM flowers ORDER BY id'
                     ).fetchall()
    assert relative([p for p, _, _ in got], expected.predict_proba(x)[:, 1]) < TOLERANCE
    assert [c for _, c, _ in got] == ['M' if k else 'B' for k in expected.predict(x)]
    assert {t for _, _, t in got} == {'text'}


def test_a_separated_class_and_a_missing_one_are_warned_of(db):
    """iris's setosa, separated by its petals: no optimum without a penalty, and a WARNING names the class; a group
    whose rows lack a class gets one too. With l2, neither."""
    db.execute('SET pgad.publish_data_values = on')  # the fit's WARNINGs only: tests/test_published_values.py
    notices = []
    db.add_notice_handler(lambda n: notices.append((n.severity, n.message_primary)))
    db.execute("SELECT pgad.train('setosa_apart', %s, 'softmax', "
               "'SELECT *, species = ''setosa'' AS g FROM flowers WHERE x3 < 2.5 OR species <> ''setosa''', %s, "
               "label => 'species')", (MODEL, START))
    warned = [m for s, m in notices if s == 'WARNING']
    assert any('class "setosa" is separated from the others' in m for m in warned), warned
    notices.clear()
    with heard(db, whole=True) as everything:
        db.execute("SELECT pgad.train('missing_class', %s, 'softmax', "
                   "'SELECT *, species = ''setosa'' AS g FROM flowers', %s, label => 'species', group_by => 'g')",
                   ('λ(d, w) w.w @ [d.x1, d.x3] + w.b', START))
    details = [detail or '' for _, _, detail, _ in everything]
    warned = [m for s, m in notices if s == 'WARNING']
    # the groups' messages in one WARNING for the call (issue 46), each group's in its DETAIL
    assert warned == ['model "missing_class": 2 of 2 groups warned, 1 did not converge'], warned
    assert any('Group {"g": true}: no row has classes "versicolor", "virginica"' in d for d in details), details
    assert not any('separated' in m for m in warned + details)
    notices.clear()
    train(db, 'penalised', l2=0.01)
    assert not [m for s, m in notices if s == 'WARNING']


def test_separated_text_labels_get_the_separation_warning(db):
    """The separation check reads a two-class label as the 0/1 the loss reads (its code less 1)."""
    notices = []
    db.add_notice_handler(lambda n: notices.append((n.severity, n.message_primary)))
    db.execute("SELECT pgad.train('separated', 'λ(d, w) w.a * d.x1 + w.b', 'logistic', "
               "'SELECT x1, CASE WHEN x1 > 5.5 THEN ''big'' ELSE ''small'' END AS size FROM flowers', "
               "'{\"a\": 0, \"b\": 0}', label => 'size')")
    assert any(s == 'WARNING' and 'the labels are separated' in m for s, m in notices)


def test_logistic_refuses_more_than_two_classes_and_says_softmax(db):
    e = error_of(db, "SELECT pgad.train('three', 'λ(d, w) w.a * d.x1 + w.c', 'logistic', 'flowers', "
                     "'{\"a\": 0, \"c\": 0}', label => 'species')")
    assert e.sqlstate == '22023'
    assert e.message_primary == 'loss "logistic" takes a label of two classes, but column "species" has 3'
    assert "loss => 'softmax'" in e.message_hint


def test_too_few_classes_and_a_label_of_numbers_are_refused(db):
    e = error_of(db, "SELECT pgad.train('one', %s, 'softmax', 'SELECT * FROM flowers WHERE k = 7', %s, "
                     "label => 'species')", (MODEL, START))
    assert e.sqlstate == '22023' and 'needs two classes or more' in e.message_primary
    e = error_of(db, "SELECT pgad.train('one', %s, 'softmax', 'flowers', %s, label => 'x1')",
                 ('λ(d, w) w.w @ [d.x2, d.x3] + w.b', START))
    assert e.sqlstate == '42804' and 'cannot be a class' in e.message_primary
    e = error_of(db, "SELECT pgad.train('one', 'λ(d, w) w.a * d.x1', 'softmax', 'flowers', '{\"a\": 0}', "
                     "label => 'species')")
    assert e.sqlstate == '22023' and 'takes a prediction of 3 logits' in e.message_primary
    assert fetch_count(db, "SELECT count(*) FROM pg_catalog.pg_proc WHERE proname = 'one'") == 0


def fetch_count(db, sql):
    return db.execute(sql).fetchone()[0]


MANY = "'SELECT g::float8 AS x, (g %% %s)::text AS y FROM pg_catalog.generate_series(1, 3000) AS g'"


@pytest.mark.parametrize('nodes, classes, most', [(200, 21, 20), (25, 3, 2)])
def test_too_many_classes_are_refused_before_anything_is_allocated(db, nodes, classes, most):
    """K is bounded as a categorical weight's categories: pgad.max_lambda_nodes / 10, never below 2 (54000, with a
    hint)."""
    with settings(db, {'pgad.max_lambda_nodes': nodes}):
        e = error_of(db, "SELECT pgad.train('many', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', " + MANY % classes
                     + f", '{START}')")
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '54000', f'the label column "y" has more than {most} classes, the most a model takes',
        'The limit is pgad.max_lambda_nodes / 10.',
        'Group rare classes into one in the data query, or have a superuser raise pgad.max_lambda_nodes.')


def test_the_classes_are_bounded_by_the_memory_limit(db):
    """1,100 classes take 1,100 × 1 kB, past pgad.memory_limit's 1 MB: 53200 before anything is loaded; 1,024 fit
    exactly, and go on to the next check (the model predicts a number, not 1,024 logits)."""
    with settings(db, {'pgad.max_lambda_nodes': 100000, 'pgad.memory_limit': '1MB'}):
        refused = error_of(db, "SELECT pgad.train('many', 'λ(d, w) w.a * d.x', 'softmax', " + MANY % 1100
                           + ", '{\"a\": 0}')")
        fit = error_of(db, "SELECT pgad.train('many', 'λ(d, w) w.a * d.x', 'softmax', " + MANY % 1024
                       + ", '{\"a\": 0}')")
    assert (refused.sqlstate, refused.message_primary, refused.message_detail, refused.message_hint) == (
        '53200', 'the classes of the label column "y" need 1.1 MB, more than pgad.memory_limit (1.0 MB)', None,
        'Group rare classes into one in the data query, or have a superuser raise pgad.memory_limit.')
    assert (fit.sqlstate, fit.message_primary[:48]) == ('22023', 'loss "softmax" takes a prediction of 1024 logits')


def test_explicit_shapes_and_init_weights_fit_alike(db):
    """Arrays of the classes' shapes, or pgad.init_weights's random start: the same optimum, centred."""
    expected = sklearn(X, Y)
    for start in ["'{\"w\": [[0,0,0,0],[0,0,0,0],[0,0,0,0]], \"b\": [0,0,0]}'",
                  "pgad.init_weights('{\"w\": [3, 4], \"b\": [3]}', seed => 3)"]:
        weights = db.execute(f"SELECT weights FROM pgad.train('shaped', %s, 'softmax', 'flowers', {start}, "
                             "label => 'species')", (MODEL,)).fetchone()[0]
        assert relative(weights['w'], expected.coef_) < TOLERANCE
        assert relative(weights['b'], expected.intercept_) < TOLERANCE


def test_a_hidden_layer_is_not_centred_but_the_output_layer_is(db):
    """w.h has 3 rows (as many as the classes) but sits inside tanh: centring it would change the logits; the class-
    sized output weights are centred."""
    weights = db.execute("SELECT weights FROM pgad.train('mlp', 'λ(d, w) w.o @ tanh(w.h @ [d.x1, d.x3]) + w.b', "
                         "'softmax', 'flowers', '{\"h\": [[0.1, 0.2], [0.3, -0.1], [0.2, 0.5]], \"o\": {}, "
                         "\"b\": {}}', label => 'species', l2 => 0.01, iterations => 30)").fetchone()[0]
    assert np.abs(np.sum(weights['o'], axis=0)).max() < 1e-12 and abs(sum(weights['b'])) < 1e-12
    assert np.abs(np.sum(weights['h'], axis=0)).max() > 1e-3


def test_a_weight_indexed_by_a_column_is_categorical_not_class_sized(db):
    """A weight that starts at {} and is indexed by a column is a categorical weight (an entry per category), not a
    class-sized one; a number weight is neither. w.e[d.g] and w.c * d.x2 add one number to every logit, which
    changes no probability, so they keep their start (about 0: rounding's gradient, in a direction of no curvature)
    and w and b are scikit-learn's, centred."""
    weights, _, converged, _ = train(db, 'with_category', data="SELECT *, (id % 4)::text AS g FROM flowers",
                                     model='λ(d, w) w.w @ [d.x1, d.x3] + w.b + w.e[d.g] + w.c * d.x2',
                                     start='{"w": {}, "b": {}, "e": {}, "c": 0}', l2=1 / (2 * N),
                                     regularize="'[\"w\"]'")
    expected = sklearn(X[:, [0, 2]], Y, l2=True)
    assert converged and sorted(weights['e']) == ['0', '1', '2', '3']
    assert max(abs(v) for v in [*weights['e'].values(), weights['c']]) < 1e-6
    assert relative(weights['w'], expected.coef_) < TOLERANCE
    assert relative(weights['b'], expected.intercept_) < TOLERANCE


@pytest.mark.parametrize('body, alike', [
    ('w.m @ [d.x1, d.x2] + w.b', True),
    ('w.m @ [d.x1, d.x2] - w.b', True),            # a difference of terms
    ('-(w.m @ [d.x1, d.x2]) + w.b + d.x1', True),  # a negated term; a term without a class-sized weight
    ('2 * (w.m @ [d.x1]) + w.b * 3', True),        # a number times a term, on either side
    ('w.m @ [d.x1] + w.b + w.c * d.x1', True),     # a term of another weight alone
    ('d.x1 * (w.m @ [d.x1]) + w.b', False),        # a column times a term: its shift varies by row
    ('w.b * w.b', False),                          # neither factor a number
    ('w.m @ tanh(w.b) + w.b', False),              # a class-sized weight under the vector it multiplies
    ('d.z @ w.b', False),                          # a class-sized weight on the right of @
    ('tanh(w.m @ [d.x1]) + w.b', False),           # under another function
    ('w.m[1] + w.b', False),                       # indexed
])
def test_centring_is_taken_only_where_it_shifts_every_logit_alike(body, alike):
    """shifts_alike on the structure of the prediction (class-sized weights m and b): a sum or difference of terms,
    each a class-sized weight, one @ an expression without one, a number times one of these, or free of them."""
    lam = parse('λ(d, w) ' + body)
    assert classes.shifts_alike(lam, {'m', 'b'}) is alike


def test_the_classes_are_shared_by_the_groups(db):
    """group_by: one set of classes over all the data; a group whose rows lack a class still has its logit."""
    rows = db.execute("SELECT group_key::text, options FROM pgad.train('grouped', %s, 'softmax', "
                      "'SELECT *, id %% 2 AS g FROM flowers', %s, label => 'species', group_by => 'g', l2 => 0.01) "
                      "ORDER BY 1", ('λ(d, w) w.w @ [d.x1, d.x3] + w.b', START)).fetchall()
    assert [k for k, _ in rows] == ['{"g": 0}', '{"g": 1}']
    assert all(o['classes'] == NAMES for _, o in rows)
    assert len(db.execute('SELECT pgad_models.grouped_probability(1, 5.0, 1.5)').fetchone()[0]) == 3


def test_validation_rows_of_an_unseen_class_are_skipped_and_counted(db):
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    unseen = sum(1 for k in Y if k == 0)
    history = db.execute("SELECT validation_history FROM pgad.train('seen', %s, 'softmax', "
                         "'SELECT * FROM flowers WHERE species <> ''setosa''', %s, label => 'species', "
                         "validation => 'SELECT * FROM flowers')", (MODEL, START)).fetchone()[0]
    assert all(np.isfinite(history))
    assert any(n.endswith(f'skipped {unseen} of {N} validation rows whose label is a class the training data does '
                          'not have') for n in notices)
    history = db.execute("SELECT validation_history FROM pgad.train('seen', %s, 'softmax', 'flowers', %s, "
                         "label => 'species', validation => 0.25)", (MODEL, START)).fetchone()[0]
    assert all(np.isfinite(history))


def test_scoring_functions_are_inlined_and_null_gives_null(db):
    train(db, 'scored')
    for suffix in ('', '_probability', '_class'):
        plan = '\n'.join(r[0] for r in db.execute(f'EXPLAIN VERBOSE SELECT pgad_models.scored{suffix}(x1, x2, x3, x4) '
                                                  'FROM flowers'))
        assert f'scored{suffix}(' not in plan and 'x1' in plan  # the body, not a call
        volatile, parallel = db.execute(f"SELECT provolatile, proparallel FROM pg_catalog.pg_proc "
                                        f"WHERE proname = 'scored{suffix}'").fetchone()
        assert (volatile, parallel) == ('i', 's')
        assert db.execute(f'SELECT pgad_models.scored{suffix}(NULL, 3, 4, 1)').fetchone()[0] is None
        assert db.execute(f'SELECT pgad_models.scored{suffix}(x1 => 5, x2 => 3, x3 => 4, x4 => NULL)'
                          ).fetchone()[0] is None
    assert db.execute('SELECT pgad._argmax(ARRAY[1, 3, 3, 2]::float8[]), pgad._softmax(ARRAY[1000, 1000]::float8[])'
                      ).fetchone() == (2, [0.5, 0.5])  # the first of a tie, as numpy; no overflow


def test_an_array_argument_of_another_length_is_refused(db):
    train(db, 'arrayed', model='λ(d, w) w.w @ d.x + w.b')
    for suffix in ('', '_probability', '_class'):
        e = error_of(db, f'SELECT pgad_models.arrayed{suffix}(ARRAY[1, 2, 3]::float8[])')
        assert e.sqlstate == '2202E' and e.message_primary == 'array argument "x" has 3 elements, the model reads 4'
    assert db.execute('SELECT pgad_models.arrayed_class(ARRAY[5, 3.4, 1.5, 0.3]::float8[])').fetchone()[0] == 'setosa'


HOSTILE = ["a'b'); DROP TABLE flowers; --", '$$ x $$', 'back\\slash\'', '"q"']


def test_hostile_class_names_are_literals(db):
    """Class names with quotes, $$ and backslashes: the class function returns them as they are, and runs nothing."""
    values = ', '.join(f"({k}, {psycopg.sql.Literal(v).as_string(db)})" for k, v in enumerate(HOSTILE))
    data = (f"SELECT f.x1, f.x3, h.c FROM flowers AS f JOIN (VALUES {values}) AS h (k, c) "
            f"ON h.k = f.id % {len(HOSTILE)}")
    _, options, _, _ = train(db, 'hostile', data=data, model='λ(d, w) w.w @ [d.x1, d.x3] + w.b', label='c',
                             l2=0.01)
    assert sorted(options['classes']) == sorted(HOSTILE)
    got = db.execute('SELECT pgad_models.hostile_class(x1, x3) FROM flowers').fetchall()
    assert {c for c, in got} <= set(HOSTILE) and len({c for c, in got}) > 1
    assert fetch_count(db, 'SELECT count(*) FROM flowers') == N


def test_an_enum_label_of_another_role_is_refused(db, cluster, dbname):
    """The class function would return, and compare as, a type another role owns: refused before training, as a
    categorical weight's column is; cast in the data query, it trains."""
    db.execute('DROP ROLE IF EXISTS class_owner; CREATE ROLE class_owner LOGIN; '
               'CREATE SCHEMA class_s AUTHORIZATION class_owner')
    with psycopg.connect(cluster.conninfo(dbname, user='class_owner'), autocommit=True) as owner:
        owner.execute("CREATE TYPE class_s.kind AS ENUM ('a', 'b', 'c')")
        owner.execute("CREATE TABLE class_s.rows AS SELECT g::float8 AS x, "
                      "(ARRAY['a', 'b', 'c'])[g % 3 + 1]::class_s.kind AS y FROM pg_catalog.generate_series(1, 30) AS g")
        owner.execute('GRANT USAGE ON SCHEMA class_s TO PUBLIC; GRANT SELECT ON class_s.rows TO PUBLIC')
    e = error_of(db, "SELECT pgad.train('foreign_enum', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', 'class_s.rows', %s)",
                 (START,))
    assert e.sqlstate == '0A000'
    assert e.message_primary == 'column "y" of the label is of type class_s.kind, which role "class_owner" owns'
    assert fetch_count(db, "SELECT count(*) FROM pg_catalog.pg_proc WHERE proname LIKE 'foreign_enum%'") == 0
    db.execute("SELECT pgad.train('foreign_enum', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', "
               "'SELECT x, y::text AS y FROM class_s.rows', %s, l2 => 0.01)", (START,))
    assert db.execute('SELECT pg_catalog.pg_typeof(pgad_models.foreign_enum_class(1))::text').fetchone()[0] == 'text'


def test_a_text_label_of_0_and_1_is_a_label_of_classes(db):
    """'0' and '1' as text under 'logistic': two classes (read as a number only where the column is one)."""
    options = db.execute("SELECT options FROM pgad.train('zero_one_text', 'λ(d, w) w.a * d.x1 + w.c', 'logistic', "
                         "'SELECT x1, (k = 9)::int::text AS y FROM flowers', '{\"a\": 0, \"c\": 0}')").fetchone()[0]
    assert options['classes'] == ['0', '1'] and options['label_type'] == 'pg_catalog.text'


@pytest.mark.parametrize('label', ['(k = 9)::int', '(k = 9)::int::float8', '(k = 9)::int::numeric'])
def test_existing_labels_keep_their_int4_class(db, label):
    """A 0/1 label under 'logistic', an integer or another number, is read as a number, as before: no classes, an
    int4 class, the same weights."""
    row = db.execute("SELECT options, weights FROM pgad.train('zero_one', 'λ(d, w) w.a * d.x1 + w.c', 'logistic', "
                     f"'SELECT x1, {label} AS y FROM flowers', '{{\"a\": 0, \"c\": 0}}')").fetchone()
    assert 'classes' not in row[0]
    expected = sklearn(X[:, :1], (Y == 2).astype(int))
    assert relative([row[1]['a']], expected.coef_[0]) < TOLERANCE and abs(row[1]['c'] - expected.intercept_[0]) < 1e-6
    assert db.execute('SELECT pg_catalog.pg_typeof(pgad_models.zero_one_class(6))::text').fetchone()[0] == 'integer'


SIZE_HINT = ("Start the weights that make the logits at {} to size them by the classes: 'λ(d, w) w.w @ [d.x1, d.x2] + "
             "w.b' with '{\"w\": {}, \"b\": {}}'.")


@pytest.mark.parametrize('loss, data, label, model, start, state, message, detail, hint', [
    ('logistic', 'flowers', 'species', 'λ(d, w) w.a * d.x1 + w.c', '{"a": 0, "c": 0}', '22023',
     'loss "logistic" takes a label of two classes, but column "species" has 3',
     "Its classes: 'setosa', 'versicolor', 'virginica'.",
     "Use loss => 'softmax' for a model of many classes (its prediction a vector of a logit per class, as "
     "'λ(d, w) w.w @ [d.x1, d.x2] + w.b' with '{\"w\": {}, \"b\": {}}')."),
    ('logistic', "SELECT *, (id % 11)::text AS t FROM flowers", 't', 'λ(d, w) w.a * d.x1 + w.c', '{"a": 0, "c": 0}',
     '22023', 'loss "logistic" takes a label of two classes, but column "t" has 11',
     "Its classes: '0', '1', '10', '2', '3', '4', '5', '6', '7', '8', ….",
     "Use loss => 'softmax' for a model of many classes (its prediction a vector of a logit per class, as "
     "'λ(d, w) w.w @ [d.x1, d.x2] + w.b' with '{\"w\": {}, \"b\": {}}')."),
    ('logistic', "SELECT *, (id % 10)::text AS t FROM flowers", 't', 'λ(d, w) w.a * d.x1 + w.c', '{"a": 0, "c": 0}',
     '22023', 'loss "logistic" takes a label of two classes, but column "t" has 10',
     "Its classes: '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'.",
     "Use loss => 'softmax' for a model of many classes (its prediction a vector of a logit per class, as "
     "'λ(d, w) w.w @ [d.x1, d.x2] + w.b' with '{\"w\": {}, \"b\": {}}')."),
    ('logistic', "SELECT * FROM flowers WHERE species = 'setosa'", 'species', 'λ(d, w) w.a * d.x1 + w.c',
     '{"a": 0, "c": 0}', '22023', 'loss "logistic" takes a label of two classes, but column "species" has 1',
     "Its classes: 'setosa'.", 'Give data with rows of both classes.'),
    ('softmax', "SELECT * FROM flowers WHERE species = 'setosa'", 'species', MODEL, START, '22023',
     'loss "softmax" needs two classes or more, but the label column "species" has 1', "Its classes: 'setosa'.",
     'Give data with rows of at least two classes.'),
    ('softmax', "SELECT *, NULL::text AS t FROM flowers", 't', MODEL, START, '22023',
     'loss "softmax" needs two classes or more, but the label column "t" has 0', 'Its classes: none (NULL in every '
     'row).', 'Give data with rows of at least two classes.'),
    ('softmax', 'flowers', 'x1', 'λ(d, w) w.w @ [d.x2, d.x3] + w.b', START, '42804',
     'the label column "x1" is of type pg_catalog.float8, which cannot be a class', None,
     "loss 'softmax' takes a label of classes: text, varchar, an enum, boolean or an integer; cast it in the data "
     'query ("x1"::text AS "x1"), or use loss \'squared\' for a number.'),
    ('logistic', 'SELECT *, x AS \"Odd x\" FROM flowers', 'Odd x', 'λ(d, w) w.a * d.x1 + w.c', '{"a": 0, "c": 0}',
     '42804', 'the label column "Odd x" is of type pg_catalog._float8, which cannot be a class', None,
     "loss 'logistic' takes a label of classes: text, varchar, an enum, boolean or an integer; cast it in the data "
     'query ("Odd x"::text AS "Odd x").'),
    ('softmax', 'flowers', 'species', 'λ(d, w) w.a * d.x1', '{"a": 0}', '22023',
     'loss "softmax" takes a prediction of 3 logits, a number per class of the label column "species", but the '
     'model predicts a number', "The classes: 'setosa', 'versicolor', 'virginica'.",
     "Start the weights that make the logits at {} to size them by the classes: 'λ(d, w) w.w @ [d.x1, d.x2] + w.b' "
     "with '{\"w\": {}, \"b\": {}}'."),
    ('softmax', 'flowers', 'nolabel', MODEL, START, '42703', 'the label column "nolabel" is not in the data',
     'The data has columns: "id", "x1", "x2", "x3", "x4", "species", "k", "e", "dm", "x".',
     "label => 'nolabel' names the column the loss 'softmax' compares the prediction with: give one of the data's "
     'columns (as it is spelt there, "Price" and price are two).'),
    ('logistic', 'flowers', 'nolabel', 'λ(d, w) w.a * d.x1 + w.c', '{"a": 0, "c": 0}', '42703', 'the label column "nolabel" is not in the data',
     'The data has columns: "id", "x1", "x2", "x3", "x4", "species", "k", "e", "dm", "x".',
     "label => 'nolabel' names the column the loss 'logistic' compares the prediction with: give one of the data's "
     'columns (as it is spelt there, "Price" and price are two).'),
    ('softmax', 'flowers', 'species', 'λ(d, w) w.w @ (w.h * d.x1)', '{"w": {}, "h": [[1, 2, 3], [4, 5, 6]]}', '22023',
     'loss "softmax" takes a prediction of 3 logits, a number per class of the label column "species", but the '
     'model predicts a 3×3 matrix', "The classes: 'setosa', 'versicolor', 'virginica'.", SIZE_HINT),
    ('softmax', "SELECT *, (id % 10)::text AS t FROM flowers", 't', 'λ(d, w) w.a * [d.x1, d.x2]', '{"a": 0}', '22023',
     'loss "softmax" takes a prediction of 10 logits, a number per class of the label column "t", but the model '
     "predicts a vector of 2", "The classes: '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'.", SIZE_HINT),
    ('softmax', "SELECT *, (id % 11)::text AS t FROM flowers", 't', 'λ(d, w) w.a * [d.x1, d.x2]', '{"a": 0}', '22023',
     'loss "softmax" takes a prediction of 11 logits, a number per class of the label column "t", but the model '
     "predicts a vector of 2", "The classes: '0', '1', '10', '2', '3', '4', '5', '6', '7', '8', ….", SIZE_HINT),
    ('softmax', 'flowers', 'species', MODEL, '{"w": {"a": 1}, "b": {}}', '22023',
     'weight "w" is class-sized and starts at {} only',
     "Under loss 'softmax' a weight that starts as a JSON object and is not indexed by a column has a row per class, "
     'each starting at 0.', 'Write "w": {}, or give its start as an array of its shape (a row per class).'),
])
def test_each_refusal_of_a_label_of_classes_in_full(db, loss, data, label, model, start, state, message, detail,
                                                    hint):
    """Each refusal of classes.py word for word, DETAIL and HINT (None: none): the classes listed as literals, the
    first ten and '…' past them; a label of no class (NULL in every row); a label name that needs quoting in the
    hint's cast; and nothing stored."""
    before = fetch_count(db, 'SELECT count(*) FROM pgad.model_versions')
    e = error_of(db, f"SELECT pgad.train('refused', %s, '{loss}', %s, %s, label => %s)", (model, data, start, label))
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (state, message, detail, hint)
    assert fetch_count(db, 'SELECT count(*) FROM pgad.model_versions') == before
