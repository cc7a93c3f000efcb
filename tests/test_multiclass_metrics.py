"""pgad.evaluate and pgad.summary of multiclass ('softmax') models: the metrics against scikit-learn's on the same
logits, the coefficient table against statsmodels' MNLogit, against a real server."""
import json

import numpy as np
import psycopg
import pytest
import statsmodels.api as sm
from sklearn import metrics as sk

from conftest import error_of
from pgad.models import evaluate, summary

MODEL = 'λ(d, w) w.W @ [d.x1, d.x2] + w.b'
CLASSES = ['ant', 'bee', 'cat', 'dog']


def generated(seed, n, k, scale=(1.0, 3.0)):
    """(features n × 2, labels 0 … k−1) drawn from a multinomial logistic model with random coefficients."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)) * scale
    z = x @ rng.normal(size=(k, 2)).T + rng.normal(size=k)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return x, np.array([rng.choice(k, p=row) for row in p])


def softmax(z):
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def by_name(found):
    return dict(found)


# --- the metrics alone (evaluate.multiclass), against scikit-learn -------------------------------------------------

@pytest.mark.parametrize('k', [3, 4, 5])
def test_the_metrics_are_scikit_learn_s(k):
    rng = np.random.default_rng(k)
    y = rng.integers(0, k, size=200)
    y[y == k - 1] = 0  # the last class has no rows: precision, recall and f1 0, support 0
    z = rng.normal(size=(200, k)) + 2.0 * np.eye(k)[y]
    classes = [f'c{c}' for c in range(k)]
    m = by_name(evaluate.multiclass(y + 1, z, classes))
    p, labels = softmax(z), list(range(k))
    guess = np.argmax(z, axis=1)
    assert np.any(guess == k - 1)  # the absent class is predicted: its precision is 0 with a non-zero denominator
    assert m['accuracy'] == pytest.approx(sk.accuracy_score(y, guess), rel=1e-12)
    assert m['log_loss'] == pytest.approx(sk.log_loss(y, p, labels=labels), rel=1e-9)
    for average in ('macro', 'weighted'):
        want = sk.precision_recall_fscore_support(y, guess, labels=labels, average=average, zero_division=0)
        for metric, value in zip(('precision', 'recall', 'f1'), want[:3]):
            assert m[f'{metric}_{average}'] == pytest.approx(value, rel=1e-12, abs=1e-15), (metric, average)
    precision, recall, f1, support = sk.precision_recall_fscore_support(y, guess, labels=labels, zero_division=0)
    confusion = sk.confusion_matrix(y, guess, labels=labels)
    for c, name in enumerate(classes):
        assert m[f'precision["{name}"]'] == pytest.approx(precision[c], rel=1e-12, abs=1e-15)
        assert m[f'recall["{name}"]'] == pytest.approx(recall[c], rel=1e-12, abs=1e-15)
        assert m[f'f1["{name}"]'] == pytest.approx(f1[c], rel=1e-12, abs=1e-15)
        assert m[f'support["{name}"]'] == support[c]
        for g, guessed in enumerate(classes):
            assert m[f'confusion["{name}"]["{guessed}"]'] == confusion[c, g]
    assert m[f'support["c{k - 1}"]'] == 0 and m[f'recall["c{k - 1}"]'] == 0 and m[f'precision["c{k - 1}"]'] == 0
    assert len(m) == 8 + 4 * k + k * k


def test_a_tie_predicts_the_first_class():
    z = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    m = by_name(evaluate.multiclass(np.array([2, 3, 1]), z, ['a', 'b', 'c']))
    assert m['confusion["b"]["a"]'] == 1 and m['confusion["c"]["b"]'] == 1 and m['confusion["a"]["a"]'] == 1
    assert m['accuracy'] == pytest.approx(1 / 3)


def test_class_names_are_json_quoted():
    """A class named with quotes or brackets is written as a JSON string, so each metric's name reads one way."""
    m = by_name(evaluate.multiclass(np.array([1, 2]), np.array([[1.0, 0.0], [0.0, 1.0]]), ['a]["b', 'say "hi"']))
    assert m['confusion["a][\\"b"]["say \\"hi\\""]'] == 0
    assert m['confusion["say \\"hi\\""]["say \\"hi\\""]'] == 1
    assert json.loads('"a][\\"b"') == 'a]["b'


def test_no_known_label_gives_no_metric():
    m = by_name(evaluate.multiclass(np.zeros(0), np.zeros((0, 3)), ['a', 'b', 'c']))
    assert m['accuracy'] is None and m['log_loss'] is None and m['f1_macro'] is None


# --- the reference-class table alone (summary.multinomial), from the server's Hessian of a lambda loss --------------

LAMBDA_LOSS = 'λ(p, d) logsumexp(p) - p[d.label + 1]'
OBJECTIVE = 'λ(d, w) logsumexp(w.W @ [d.x1, d.x2] + w.b) - (w.W @ [d.x1, d.x2] + w.b)[d.label + 1]'


@pytest.fixture(scope='module')
def four(cluster, dbname):
    """300 rows of 4 classes (labels 0 … 3 as numbers), and statsmodels' MNLogit of them."""
    x, y = generated(5, 300, 4)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE four (id int, x1 float8, x2 float8, label float8, animal text)')
        with db.cursor().copy('COPY four FROM STDIN') as copy:
            for i, (row, label) in enumerate(zip(x, y)):
                copy.write_row((i, row[0], row[1], float(label), CLASSES[label]))
    fit = sm.MNLogit(y, sm.add_constant(x)).fit(disp=0, method='newton', maxiter=100, tol=1e-12)
    return x, y, fit


def test_the_reference_class_table_is_mnlogit_s(db, four):
    """The full Hessian of the summed loss (pgad.hessian's mean times n) at the fitted weights is singular along
    the shift of every class; its rows and columns of classes 2 … K give MNLogit's standard errors."""
    x, y, fit = four
    weights, = db.execute("SELECT weights FROM pgad.train('lam', %s, %s, 'four', pgad.init_weights("
                          "'{\"w\": [4, 2], \"b\": [4]}', 'zeros'), optimizer => 'newton', likelihood => true)",
                          [MODEL, LAMBDA_LOSS]).fetchone()
    hessian, = db.execute('SELECT pgad.hessian(%s, %s, %s)', [OBJECTIVE, 'four', json.dumps(weights)]).fetchone()
    gradient, = db.execute('SELECT pgad.gradient(%s, %s, %s)', [OBJECTIVE, 'four', json.dumps(weights)]).fetchone()
    names = [f'b[{k + 1}]' for k in range(4)] + [f'w[{k + 1},{x}]' for k in range(4) for x in ('x1', 'x2')]  # by column
    full = len(y) * np.array([[hessian[a][b] for b in names] for a in names])
    assert np.linalg.eigvalsh(full)[0] < 1e-9 * np.max(np.abs(full))  # singular along the shift
    flat = [*weights['b'], *np.ravel(weights['w'])]
    grad = len(y) * np.concatenate([gradient['b'], np.ravel(gradient['w'])])
    at = summary.Fit('model "lam"', np.array(flat), 0.0, grad, full, len(y), names)
    reduced = summary.multinomial(at, (('b', (4,)), ('w', (4, 2))), CLASSES)
    assert reduced.names == ['b["bee"]', 'w["bee",1]', 'w["bee",2]', 'b["cat"]', 'w["cat",1]', 'w["cat",2]',
                             'b["dog"]', 'w["dog",1]', 'w["dog",2]']
    table = summary.table('lam', summary.LIKELIHOODS['softmax'], reduced)
    expected(table, fit, rel=1e-6)


def expected(table, fit, rel):
    """Each row of the table (weight, estimate, std_error, z, p, ci_low, ci_high), in the order class after class and
    within one b then w's columns, against MNLogit's (params rows: const, x1, x2; columns the classes 2 … K)."""
    ci = np.asarray(fit.conf_int())  # (class, column, low/high)
    rows = iter(table)
    for k in range(fit.params.shape[1]):
        for j in range(fit.params.shape[0]):
            weight, estimate, se, z, p, ci_low, ci_high = next(rows)
            assert estimate == pytest.approx(fit.params[j, k], rel=rel), weight
            assert se == pytest.approx(fit.bse[j, k], rel=rel), weight
            assert z == pytest.approx(fit.tvalues[j, k], rel=rel), weight
            assert p == pytest.approx(fit.pvalues[j, k], rel=rel * 10, abs=1e-300), weight
            assert ci_low == pytest.approx(ci[k, j, 0], rel=rel), weight
            assert ci_high == pytest.approx(ci[k, j, 1], rel=rel), weight


# --- pgad.evaluate of a stored 'softmax' model ----------------------------------------------------------------------

def trained(db, name, data, label='animal'):
    """A 'softmax' model of MODEL on data (columns x1, x2 and the label), its weights sized by the classes."""
    db.execute("SELECT pgad.train(%s, %s, 'softmax', %s, '{\"w\": {}, \"b\": {}}', label => %s, "
               "optimizer => 'newton')", [name, MODEL, data, label])
    options, = db.execute('SELECT options FROM pgad.models WHERE name = %s', [name]).fetchone()
    return options['classes']


def logits_of(db, name, query):
    """(the label, the logits from the model's scoring function) of each row of query, in id order."""
    rows = db.execute(f'SELECT animal, pgad_models.{name}(x1, x2) FROM ({query}) AS q ORDER BY id').fetchall()
    return [r[0] for r in rows], np.array([r[1] for r in rows], dtype=np.float64)


@pytest.fixture(scope='module')
def animals(cluster, dbname, four):
    """The 'softmax' model of the four animals, trained by newton."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        assert trained(db, 'animals', 'four') == CLASSES
    return 'animals'


def test_evaluate_gives_scikit_learn_s_metrics(db, four, animals):
    """Rows of a label the model never saw are counted and left out, NULL labels skipped, a class with no rows in
    the data kept in the macro means (as scikit-learn's labels=)."""
    query = ("SELECT id, x1, x2, CASE WHEN id % 10 = 0 THEN 'emu' WHEN id % 10 = 1 THEN NULL ELSE animal END AS "
             "animal FROM four WHERE animal <> 'cat'")
    found = db.execute('SELECT * FROM pgad.evaluate(%s, %s)', ['animals', query]).fetchall()
    assert all(key is None for key, _, _ in found)
    m = {metric: value for _, metric, value in found}
    labels, z = logits_of(db, 'animals', query + ' AND id % 10 <> 1')
    known = np.array([label in CLASSES for label in labels])
    y = np.array([CLASSES.index(label) for label in np.array(labels)[known]])
    z = z[known]
    guess, every = np.argmax(z, axis=1), list(range(len(CLASSES)))
    assert m['skipped_rows'] == sum(1 for i in range(300) if i % 10 == 1 and four[1][i] != 2)
    assert m['rows'] == len(labels) and m['unseen_label_rows'] == len(labels) - len(y) > 0
    assert 2 not in y and m['support["cat"]'] == 0
    assert m['accuracy'] == pytest.approx(sk.accuracy_score(y, guess), rel=1e-12)
    assert m['log_loss'] == pytest.approx(sk.log_loss(y, softmax(z), labels=every), rel=1e-9)
    assert m['loss'] == m['log_loss']
    for average in ('macro', 'weighted'):
        want = sk.precision_recall_fscore_support(y, guess, labels=every, average=average, zero_division=0)
        for metric, value in zip(('precision', 'recall', 'f1'), want[:3]):
            assert m[f'{metric}_{average}'] == pytest.approx(value, rel=1e-12), (metric, average)
    precision, recall, f1, support = sk.precision_recall_fscore_support(y, guess, labels=every, zero_division=0)
    confusion = sk.confusion_matrix(y, guess, labels=every)
    for c, name in enumerate(CLASSES):
        assert [m[f'{what}["{name}"]'] for what in ('precision', 'recall', 'f1', 'support')] == pytest.approx(
            [precision[c], recall[c], f1[c], support[c]], rel=1e-12)
        assert [m[f'confusion["{name}"]["{other}"]'] for other in CLASSES] == list(confusion[c])


def test_evaluate_names_hostile_classes_unambiguously(db, four):
    hostile = ['a]["b', "it's", '$$', 'x"y']
    query = ("SELECT x1, x2, (ARRAY['a][\"b', 'it''s', '$$', 'x\"y'])[label + 1] AS animal FROM four")
    assert sorted(trained(db, 'hostile', query)) == sorted(hostile)
    m = {metric: value for _, metric, value in db.execute('SELECT * FROM pgad.evaluate(%s, %s)', ['hostile', query])}
    assert m['unseen_label_rows'] == 0 and m['rows'] == 300
    assert sum(m[f'support[{json.dumps(c)}]'] for c in hostile) == 300
    assert sum(m[f'confusion[{json.dumps(a)}][{json.dumps(b)}]'] for a in hostile for b in hostile) == 300
    assert m['support["a][\\"b"]'] == sum(four[1] == 0)


def test_evaluate_with_only_unseen_labels_gives_null_metrics(db, animals):
    m = {metric: value for _, metric, value in db.execute(
        "SELECT * FROM pgad.evaluate('animals', 'SELECT x1, x2, ''emu'' AS animal FROM four')")}
    assert m['rows'] == 300 and m['unseen_label_rows'] == 300
    assert m['accuracy'] is None and m['loss'] is None


def test_evaluate_without_the_label_column(db, animals):
    e = error_of(db, "SELECT * FROM pgad.evaluate('animals', 'SELECT x1, x2 FROM four')")
    assert e.sqlstate == '42703' and '"animal"' in e.message_primary


# --- pgad.summary of a stored 'softmax' model ------------------------------------------------------------------------

def summarised(db, name):
    return db.execute('SELECT weight, estimate, std_error, statistic, p_value, ci_low, ci_high FROM pgad.summary(%s)',
                      [name]).fetchall()


def test_summary_is_mnlogit_s(db, four, animals):
    table = summarised(db, 'animals')
    assert [row[0] for row in table] == [f'{w}["{c}"{j}]' for c in CLASSES[1:] for w, j in
                                         (('b', ''), ('w', ',x1'), ('w', ',x2'))]
    expected(table, four[2], rel=1e-6)


def test_summary_of_iris_is_mnlogit_s(db):
    """Iris's species (text) by its sepal length: the three classes overlap there, so MNLogit's fit exists (with both
    sepal columns setosa is separated)."""
    iris = pytest.importorskip('sklearn.datasets').load_iris()
    species = [str(iris.target_names[t]) for t in iris.target]
    db.execute('CREATE TABLE iris (x float8, species text)')
    with db.cursor().copy('COPY iris FROM STDIN') as copy:
        for x, s in zip(iris.data[:, 0], species):
            copy.write_row((float(x), s))
    db.execute("SELECT pgad.train('iris', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', 'iris', '{\"w\": {}, \"b\": {}}',"
               " label => 'species')")
    fit = sm.MNLogit(iris.target, sm.add_constant(iris.data[:, [0]])).fit(disp=0, method='newton', maxiter=100,
                                                                        tol=1e-12)
    table = summarised(db, 'iris')
    assert [row[0] for row in table] == ['b["versicolor"]', 'w["versicolor",x]', 'b["virginica"]',
                                         'w["virginica",x]']  # named by the column the weight multiplies
    expected(table, fit, rel=1e-6)


def test_summary_refuses_a_softmax_model_that_is_not_multinomial(db, four):
    """A hidden layer: the logits are not affine in class-sized weights, and the singular directions are not the
    shift alone."""
    db.execute("SELECT pgad.train('hidden', 'λ(d, w) w.v @ tanh(w.u @ [d.x1, d.x2])', 'softmax', 'four', "
               "pgad.init_weights('{\"u\": [2, 2], \"v\": [4, 2]}', 'glorot'), label => 'animal', "
               "iterations => 5)")
    e = error_of(db, "SELECT * FROM pgad.summary('hidden')")
    assert e.sqlstate == '0A000'
    assert e.message_primary == ('pgad.summary takes a \'softmax\' model whose logits are affine in weights of one '
                                 'row per class, not model "hidden"')
    # the multinomial model with a third, constant feature is affine too, and its table has a row more per class
    db.execute("SELECT pgad.train('three', 'λ(d, w) w.w @ [d.x1, d.x2, 1] + w.b', 'softmax', 'four', "
               "'{\"w\": {}, \"b\": {}}', label => 'animal')")
    e = error_of(db, "SELECT * FROM pgad.summary('three')")
    assert e.sqlstate == '22000' and '"w[\"bee\",3]"' in e.message_detail and '"b[\"bee\"]"' in e.message_detail


# --- a 'logistic' model of a text label of two classes -------------------------------------------------------------

def test_a_binary_text_label_s_metrics_and_table(db, four):
    """The second class in order ('yes') is the positive one: the metrics are scikit-learn's, the table Logit's."""
    x, y, _ = four
    data = "SELECT id, x1, x2, CASE WHEN label < 2 THEN 'no' ELSE 'yes' END AS answer FROM four"
    db.execute("SELECT pgad.train('answer', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'logistic', %s, "
               "'{\"a\": 0, \"b\": 0, \"c\": 0}', label => 'answer', optimizer => 'newton')", [data])
    m = {metric: value for _, metric, value in db.execute(
        "SELECT * FROM pgad.evaluate('answer', %s)",
        [data.replace("ELSE 'yes'", "WHEN id % 10 = 0 THEN 'maybe' ELSE 'yes'")])}
    known = (y < 2) | (np.arange(len(y)) % 10 != 0)  # the rows made 'maybe' are of the positive class
    positive = (y >= 2)[known]
    z = db.execute(f"SELECT pgad_models.answer(x1, x2) FROM ({data}) AS q ORDER BY id").fetchall()
    z = np.array([r[0] for r in z])[known]
    assert m['rows'] == 300 and m['unseen_label_rows'] == np.sum(~known)
    assert m['accuracy'] == pytest.approx(sk.accuracy_score(positive, z >= 0), rel=1e-12)
    assert m['f1'] == pytest.approx(sk.f1_score(positive, z >= 0), rel=1e-12)
    assert m['log_loss'] == pytest.approx(sk.log_loss(positive, 1 / (1 + np.exp(-z))), rel=1e-9)
    fit = sm.Logit((y >= 2).astype(float), sm.add_constant(x)).fit(disp=0, method='newton', tol=1e-12)
    table = {row[0]: row[1:3] for row in summarised(db, 'answer')}
    for name, k in (('c', 0), ('a', 1), ('b', 2)):
        assert table[name] == pytest.approx((fit.params[k], fit.bse[k]), rel=1e-6), name


def test_a_separated_binary_text_label_has_no_table(db, four):
    """Separation is judged on the label's classes read as 0 and 1 (the code less 1), as for a 0/1 label."""
    db.execute("SELECT pgad.train('apart', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', "
               "'SELECT x1, CASE WHEN x1 > 0 THEN ''yes'' ELSE ''no'' END AS answer FROM four', "
               "'{\"a\": 0, \"c\": 0}', label => 'answer', iterations => 20)")
    e = error_of(db, "SELECT * FROM pgad.summary('apart', unconverged => 'warning')")
    assert e.sqlstate == '22000' and 'the labels are separated' in e.message_primary


def test_per_group_metrics_and_tables(db, four):
    """With group_by, each group's metrics are scikit-learn's on its rows and its table MNLogit's of its rows; a
    group the model has no weights for is counted as unseen_rows."""
    x, y, _ = four
    db.execute("SELECT pgad.train('halves', %s, 'softmax', 'SELECT *, id %% 2 AS half FROM four', "
               "'{\"w\": {}, \"b\": {}}', label => 'animal', group_by => 'half', optimizer => 'newton')", [MODEL])
    found = db.execute("SELECT group_key->>'half', metric, value FROM pgad.evaluate('halves', "
                       "'SELECT *, id % 3 AS half FROM four')").fetchall()
    assert ('2', 'unseen_rows', 100) in found
    tables = {}
    for key, weight, *row in db.execute("SELECT group_key->>'half', weight, estimate, std_error, statistic, p_value, "
                                        "ci_low, ci_high FROM pgad.summary('halves')"):
        tables.setdefault(key, []).append((weight, *row))
    assert sorted(tables) == ['0', '1']
    for half in (0, 1):
        m = {metric: value for key, metric, value in found if key == str(half)}
        rows = np.arange(len(y)) % 3 == half
        z = np.array([r[0] for r in db.execute(
            'SELECT pgad_models.halves(%s, x1, x2) FROM four WHERE id %% 3 = %s ORDER BY id', [half, half])])
        every = list(range(len(CLASSES)))
        assert m['rows'] == rows.sum() and m['unseen_label_rows'] == 0
        assert m['accuracy'] == pytest.approx(sk.accuracy_score(y[rows], np.argmax(z, axis=1)), rel=1e-12)
        assert m['f1_macro'] == pytest.approx(sk.f1_score(y[rows], np.argmax(z, axis=1), labels=every,
                                                          average='macro', zero_division=0), rel=1e-12)
        assert m['log_loss'] == pytest.approx(sk.log_loss(y[rows], softmax(z), labels=every), rel=1e-9)
        trained_on = np.arange(len(y)) % 2 == half
        fit = sm.MNLogit(y[trained_on], sm.add_constant(x[trained_on])).fit(disp=0, method='newton', maxiter=100,
                                                                            tol=1e-12)
        expected(tables[str(half)], fit, rel=1e-6)


def test_many_classes_give_the_confusion_matrix_s_counted_cells():
    """Past `cells`, only the cells that count a row, the same counts as scikit-learn's matrix there."""
    rng = np.random.default_rng(3)
    y, z = rng.integers(0, 5, size=40), rng.normal(size=(40, 5))
    classes = list('abcde')
    full = {m: v for m, v in evaluate.multiclass(y + 1, z, classes) if m.startswith('confusion')}
    counted = {m: v for m, v in evaluate.multiclass(y + 1, z, classes, cells=24) if m.startswith('confusion')}
    confusion = sk.confusion_matrix(y, np.argmax(z, axis=1), labels=range(5))
    assert len(full) == 25 and counted == {m: v for m, v in full.items() if v}
    assert len(counted) == np.count_nonzero(confusion) < 25
    assert evaluate.multiclass(y + 1, z, classes, cells=25) == evaluate.multiclass(y + 1, z, classes)


def test_a_model_of_many_classes_bounds_its_confusion_rows(db):
    """70 classes at pgad.memory_limit's least (1 MB): 4,900 cells of 256 bytes are more, so the matrix comes as the
    cells that count a row, with a NOTICE."""
    db.execute("CREATE TABLE many AS SELECT g AS id, sin(g)::float8 AS x1, cos(g)::float8 AS x2, "
               "'c' || (g % 70) AS animal FROM generate_series(1, 140) AS g")
    db.execute("SELECT pgad.train('many', %s, 'softmax', 'many', '{\"w\": {}, \"b\": {}}', label => 'animal', "
               "iterations => 3)", [MODEL])
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    db.execute("SET pgad.memory_limit = '1MB'")
    try:
        m = dict(db.execute("SELECT metric, value FROM pgad.evaluate('many', 'many')").fetchall())
    finally:
        db.execute('RESET pgad.memory_limit')
    confusion = [v for k, v in m.items() if k.startswith('confusion')]
    assert 0 < len(confusion) <= 140 and sum(confusion) == 140 and all(confusion)
    assert notices == ['model "many" has 70 classes: the confusion matrix gives only its cells that count a row '
                       '(4900 cells would take more than pgad.memory_limit)']
    assert len([k for k in m if k.startswith('support[')]) == 70


def test_a_separated_class_or_a_class_without_rows_has_no_table(db):
    """As a logistic model's separated labels: a class every row of which the fit gives probability 1 (and 0 to
    every other row), or one that a group has no row of, has no finite estimate."""
    db.execute("CREATE TABLE sep AS SELECT g AS id, sin(g)::float8 AS x1, cos(g * 1.3)::float8 AS x2, g % 2 AS half, "
               "CASE WHEN sin(g) > 0.5 THEN 'a' WHEN cos(g * 1.3) + 0.4 * sin(g * 7) > 0 THEN 'b' ELSE 'c' END AS y "
               "FROM generate_series(1, 200) AS g")
    db.execute("SELECT pgad.train('sep', %s, 'softmax', 'sep', '{\"w\": {}, \"b\": {}}', label => 'y')", [MODEL])
    e = error_of(db, "SELECT * FROM pgad.summary('sep', unconverged => 'warning')")
    assert (e.sqlstate, e.message_primary) == ('22000', 'model "sep" has no standard errors: class "a" is separated '
                                                        'from the others')
    db.execute("SELECT pgad.train('gap', %s, 'softmax', $$SELECT * FROM sep WHERE half = 0 OR y <> 'c'$$, "
               "'{\"w\": {}, \"b\": {}}', label => 'y', group_by => 'half', l2 => 0)",
               [MODEL.replace('d.x1', 'd.x1 + sin(7 * d.x2)')])
    e = error_of(db, "SELECT * FROM pgad.summary('gap', unconverged => 'warning')")
    assert (e.sqlstate, e.message_primary) == ('22000', 'model "gap", group {"half": 1} has no standard errors: class '
                                                        '"c" is without a row')


def test_an_enum_label_is_read_in_its_declared_order(db, four):
    """The classes are the enum's order (zeta first): the metrics name them so and zeta is the reference class."""
    x, y, fit = four
    db.execute("CREATE TYPE kind AS ENUM ('zeta', 'alpha', 'mid', 'omega')")
    data = "SELECT x1, x2, (ARRAY['zeta', 'alpha', 'mid', 'omega']::kind[])[label::int + 1] AS animal FROM four"
    assert trained(db, 'kinds', data) == ['zeta', 'alpha', 'mid', 'omega']
    m = dict(db.execute("SELECT metric, value FROM pgad.evaluate('kinds', %s)", [data]).fetchall())
    assert [m[f'support["{c}"]'] for c in ('zeta', 'alpha', 'mid', 'omega')] == list(np.bincount(y, minlength=4))
    table = summarised(db, 'kinds')
    assert table[0][0] == 'b["alpha"]'
    expected(table, fit, rel=1e-6)
