"""Separation (pgad/models/separation.py): a logistic model whose labels its weights separate, completely or
quasi-completely, warns at training (per model and group, whichever optimizer fitted it) and has no pgad.summary
(22000); a hinge model whose loss reaches 0 warns that its weights are not unique; data that are not separated give
no warning, and their summary matches statsmodels' Logit.
"""
import numpy as np
import psycopg
import pytest
import statsmodels.api as sm

from conftest import error_of
from pgad.models import separation

MODEL = 'λ(d, w) w.c + w.a*d.x + w.b*d.x2'
START = '{"c": 0, "a": 0, "b": 0}'
# the optimizers, each with options under which it goes far enough along the separating direction to show it: gd
# needs a learning rate large for these rows (its default 0.05 crawls, and ends unconverged, saying so)
OPTIMIZERS = {'gd': ", optimizer => 'gd', learning_rate => 50, iterations => 300",
              'lbfgs': ", optimizer => 'lbfgs'",
              'newton': ", optimizer => 'newton'"}


@pytest.fixture
def tables(db):
    db.execute('DROP TABLE IF EXISTS complete, quasi, mixed, grouped')
    # complete: x < 0 gives 0, x > 0 gives 1, 20 rows with a gap around 0
    db.execute('CREATE TABLE complete AS SELECT (i - 10.5)::float8 AS x, sin(i)::float8 AS x2, '
               '(i > 10)::int::float8 AS y FROM generate_series(1, 20) AS i')
    # quasi-complete: x > 0 gives 1, x < 0 gives 0, and at x = 0 both
    db.execute('CREATE TABLE quasi AS SELECT ((i % 7) - 3)::float8 AS x, sin(i)::float8 AS x2, '
               'CASE WHEN i % 7 > 3 THEN 1 WHEN i % 7 < 3 THEN 0 ELSE i % 2 END::float8 AS y '
               'FROM generate_series(1, 70) AS i')
    # not separated: labels drawn from the logistic model
    rng = np.random.default_rng(4)
    x, x2 = rng.normal(size=200), rng.normal(size=200)
    y = (rng.uniform(size=200) < 1 / (1 + np.exp(-(0.3 + 1.2 * x - 0.7 * x2)))).astype(float)
    db.execute('CREATE TABLE mixed (x float8, x2 float8, y float8)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO mixed VALUES (%s, %s, %s)', list(zip(x.tolist(), x2.tolist(), y.tolist())))
    # grouped: group 'sep' separated, group 'mix' not
    db.execute("CREATE TABLE grouped AS SELECT 'sep' AS g, * FROM complete UNION ALL SELECT 'mix', * FROM mixed")
    return db, (x, x2, y)


def train(db, name, data, options, loss='logistic', extra=''):
    """The WARNINGs and NOTICEs pgad.train sent, as (severity, message, hint)."""
    notes = []
    db.add_notice_handler(lambda d: notes.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
    db.execute(f"SELECT pgad.train(%s, %s, %s, %s, %s{options}{extra})", (name, MODEL, loss, data, START))
    return notes


def warnings(notes):
    return [n for n in notes if n[0] == 'WARNING' and ('separated' in n[1] or 'not unique' in n[1])]


@pytest.mark.parametrize('optimizer', OPTIMIZERS)
def test_complete_separation_warns_and_has_no_summary(tables, optimizer):
    db, _ = tables
    found = warnings(train(db, 'sep', 'complete', OPTIMIZERS[optimizer]))
    assert len(found) == 1
    assert found[0][1].startswith('model "sep": the labels are separated: every row is classified correctly')
    assert 'All 20 rows are on their side' in found[0][1] and 'l2' in found[0][2]
    e = error_of(db, "SELECT * FROM pgad.summary('sep', unconverged => 'warning')")
    assert e.sqlstate == '22000'
    assert e.message_primary.startswith('model "sep" has no standard errors: the labels are separated')


@pytest.mark.parametrize('optimizer', OPTIMIZERS)
def test_quasi_separation_warns_and_has_no_summary(tables, optimizer):
    db, _ = tables
    found = warnings(train(db, 'qsep', 'quasi', OPTIMIZERS[optimizer]))
    assert len(found) == 1
    assert found[0][1].startswith('model "qsep": fitted probabilities numerically 0 or 1 occurred (')
    assert 'of 70 rows within 1e-6): the labels are quasi-completely separated' in found[0][1]
    e = error_of(db, "SELECT * FROM pgad.summary('qsep', unconverged => 'warning')")
    assert e.sqlstate == '22000'
    assert e.message_primary.startswith('model "qsep" has no standard errors: fitted probabilities numerically 0 or 1')


def test_a_penalised_fit_of_separated_labels_has_its_estimate_and_no_warning(tables):
    """l2 gives separated labels a finite optimum (the warning's own hint): nothing to warn about."""
    db, _ = tables
    assert warnings(train(db, 'ridge', 'complete', ", optimizer => 'newton', l2 => 0.01")) == []
    assert len(warnings(train(db, 'ridge', 'complete', ", optimizer => 'newton'"))) == 1


def test_one_group_of_several_separated_warns_for_that_group(tables):
    db, _ = tables
    found = warnings(train(db, 'gsep', 'grouped', OPTIMIZERS['newton'], extra=", group_by => 'g'"))
    assert [n[1][:n[1].index(': the labels are separated')] for n in found] == ['model "gsep", group {"g": "sep"}']
    e = error_of(db, "SELECT * FROM pgad.summary('gsep', unconverged => 'warning')")
    assert e.sqlstate == '22000' and e.message_primary.startswith('model "gsep", group {"g": "sep"} has no standard')


@pytest.mark.parametrize('optimizer', OPTIMIZERS)
def test_only_separated_data_warn_and_the_others_get_their_summary(tables, optimizer):
    db, (x, x2, y) = tables
    options = OPTIMIZERS[optimizer].replace('learning_rate => 50', 'learning_rate => 1').replace('300', '3000')
    assert warnings(train(db, 'mix', 'mixed', options)) == []
    got = dict((r[0], r[1:]) for r in db.execute("SELECT weight, estimate, std_error FROM "
                                                 "pgad.summary('mix', unconverged => 'warning')"))
    result = sm.Logit(y, np.column_stack([np.ones(200), x, x2])).fit(disp=0, tol=1e-12)
    # gd's 3000 steps come within 1e-4 of the optimum; lbfgs and newton to 1e-6
    np.testing.assert_allclose([got[w] for w in 'cab'], np.column_stack([result.params, result.bse]), rtol=1e-4)
    assert len(warnings(train(db, 'mix', 'complete', options))) == 1  # the same call on separated rows warns


def test_hinge_on_separable_data_warns_that_the_weights_are_not_unique(tables):
    db, _ = tables
    data = 'SELECT x, x2, 2 * y - 1 AS y FROM complete'
    found = warnings(train(db, 'hsep', data, ", optimizer => 'gd', learning_rate => 0.1, iterations => 300",
                           loss='hinge'))
    assert len(found) == 1 and found[0][1].startswith('model "hsep": the hinge loss is 0 on every row: the data '
                                                      'are separable, and the solution is not unique')
    data = 'SELECT x, x2, 2 * y - 1 AS y FROM mixed'
    assert warnings(train(db, 'hmix', data, ", optimizer => 'gd', learning_rate => 0.1, iterations => 300",
                          loss='hinge')) == []


def gram_of(X):
    """separation.grams' answer for a linear model of design X."""
    return lambda mask: (X.T @ X, X[mask].T @ X[mask])


def test_found_reads_the_margins():
    """separation.found on margins made by hand: complete, quasi where only the confident rows inform a direction,
    neither."""
    y = np.array([0.0, 0.0, 1.0, 1.0, 1.0])
    X = np.column_stack([np.ones(5), [0.0, -1.0, 0.0, 1.0, 2.0]])  # x separates all but the rows at x = 0
    assert separation.found('logistic', y, np.array([-0.1, -3.0, 0.2, 5.0, 9.0])) == ('complete', 5)
    assert separation.found('logistic', y, np.array([0.0, -3.0, 0.2, 5.0, 9.0])) is None  # a tie is on no side
    quasi = np.array([0.1, -20.0, 0.1, 20.0, 40.0])  # the rows at x = 0 fitted at 0.1, the others past 1e-6
    assert separation.found('logistic', y, quasi) is None  # no Jacobian: complete separation only
    assert separation.found('logistic', y, quasi, gram_of(X)) == ('quasi', 3)
    assert separation.found('logistic', y, np.array([0.1, -20.0, 0.1, 5.0, 40.0]), gram_of(X)) is None  # x = 1 too
    assert separation.found('hinge', 2 * y - 1, np.array([-1.0, -2.0, 1.0, 3.0, 1.0])) == ('hinge', 5)
    assert separation.found('hinge', 2 * y - 1, np.array([-1.0, -2.0, 0.99, 3.0, 1.0])) is None
    assert separation.found('squared', y, np.array([-1.0, -2.0, 1.0, 3.0, 1.0])) is None


def test_a_strong_predictor_is_not_separation():
    """Six raw breast-cancer features at statsmodels' optimum: 7 rows have fitted probabilities within 10·ε of 0 or
    1 (R's glm warns), margins up to 100, and the labels are not separated: every direction is informed by the
    other rows, and found says so."""
    from sklearn.datasets import load_breast_cancer
    data = load_breast_cancer()
    X = sm.add_constant(data.data[:, [7, 19, 25, 28, 13, 18]])
    result = sm.Logit(data.target.astype(float), X).fit(disp=0, method='newton', maxiter=100)
    z = X @ result.params
    margin = np.where(data.target > 0, z, -z)
    assert np.sum(margin > 33.7) == 7 and margin.max() > 100
    assert separation.found('logistic', data.target, z, gram_of(X)) is None


def test_a_strong_predictor_trains_without_a_warning(db):
    """The same six features in pgad, by newton: no separation warning (R's glm would warn)."""
    from sklearn.datasets import load_breast_cancer
    data = load_breast_cancer()
    columns = data.data[:, [7, 19, 25, 28, 13, 18]]
    db.execute('DROP TABLE IF EXISTS cancer')
    db.execute('CREATE TABLE cancer (x1 float8, x2 float8, x3 float8, x4 float8, x5 float8, x6 float8, y float8)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO cancer VALUES (%s, %s, %s, %s, %s, %s, %s)',
                        [(*map(float, row), float(t)) for row, t in zip(columns, data.target)])
    notes = []
    db.add_notice_handler(lambda d: notes.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
    db.execute("SELECT pgad.train('cancer', 'λ(d, w) w.c + w.a1*d.x1 + w.a2*d.x2 + w.a3*d.x3 + w.a4*d.x4 + "
               "w.a5*d.x5 + w.a6*d.x6', 'logistic', 'cancer', "
               "'{\"c\": 0, \"a1\": 0, \"a2\": 0, \"a3\": 0, \"a4\": 0, \"a5\": 0, \"a6\": 0}', "
               "optimizer => 'newton', iterations => 100)")
    z = np.array([r[0] for r in db.execute('SELECT pgad_models.cancer(x1, x2, x3, x4, x5, x6) FROM cancer')])
    assert np.max(np.where(data.target > 0, z, -z)) > 33.7  # as confident as statsmodels' fit
    assert warnings(notes) == []
