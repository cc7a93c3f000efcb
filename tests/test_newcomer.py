"""The newcomer's path (issue 47), against a real server: a model family by name in pgad.train (the hand-written
lambda's fit to 1e-10, scikit-learn's at its optimum), pgad.predict over a query (against the scoring functions,
NULLs, versions), probabilities keyed by class, standardize for vector and matrix forms, summary names by feature,
pgad.deploy(name, 'previous'), pgad.rollback, pgad.tune with pgad.train's arguments, and the messages that name
their fix.

The oracle for the families of classes is scikit-learn's pipeline of StandardScaler and LogisticRegression at
C = 1/(2·l2·n) (the penalty on the standardised coefficients, the intercepts free), solved to ~1e-10 by
newton-cholesky; for 'linear', numpy's lstsq."""
import warnings

import numpy as np
import psycopg
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from conftest import error_of as diagnosed


def error_of(db, sql):
    d = diagnosed(db, sql)
    return d.sqlstate, d.message_primary, d.message_hint or ''


N = 300
CLASSES = ['barbera', 'barolo', 'grignolino']  # in text order
L2 = 0.01


def data():
    """Three overlapping classes over three features of very different scales (wine's: proline in the hundreds)."""
    rng = np.random.default_rng(47)
    y = rng.integers(0, 3, N)
    centres = np.array([[13.0, 2.0, 700.0], [13.5, 2.5, 900.0], [12.5, 1.5, 500.0]])
    x = centres[y] + rng.normal(0, [0.8, 0.7, 250.0], (N, 3))
    return x, y


X, Y = data()


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for table, rows in (('vines', range(0, 240)), ('vines_test', range(240, N))):
            db.execute(f'CREATE TABLE {table} (id int PRIMARY KEY, alcohol float8, acid float8, proline float8, '
                       'cultivar text, y float8)')
            with db.cursor().copy(f'COPY {table} FROM STDIN') as copy:
                for i in rows:
                    copy.write_row((i, *map(float, X[i]), CLASSES[Y[i]], float(X[i] @ [1.5, -2.0, 0.01] + 3)))
        db.execute('INSERT INTO vines_test VALUES (1000, NULL, 1, 700, \'barolo\', 1)')


def oracle(l2, rows=240):
    scaler = StandardScaler().fit(X[:rows])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = LogisticRegression(C=1 / (2 * l2 * rows), tol=1e-14, max_iter=1000,
                                 solver='newton-cholesky').fit(scaler.transform(X[:rows]), Y[:rows])
    return scaler, fit


def test_softmax_by_name_is_scikit_learns_scaled_pipeline(db):
    row = db.execute("SELECT model, loss, options->>'family', options->'regularize', converged FROM "
                     "pgad.train('cult', 'softmax', 'vines', label => 'cultivar', l2 => %s)", [L2]).fetchone()
    assert row[0] == 'λ(d, w) w.coef @ [d.alcohol, d.acid, d.proline, d.y] + w.intercept'  # the key is no feature
    assert row[1:4] == ('softmax', 'softmax', ['coef']) and row[4]


@pytest.fixture(scope='module')
def cultivar(cluster, dbname):
    """The family over alcohol, acid and proline (the data query chooses the columns; the primary key of a table
    is no feature)."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        return db.execute("SELECT weights, model FROM pgad.train('cultivar', 'softmax', "
                          "'SELECT alcohol, acid, proline, cultivar FROM vines', label => 'cultivar', l2 => %s)",
                          [L2]).fetchone()


def test_the_family_is_the_scaled_pipelines_optimum(cultivar):
    weights, model = cultivar
    assert model == 'λ(d, w) w.coef @ [d.alcohol, d.acid, d.proline] + w.intercept'
    scaler, fit = oracle(L2)
    coef = fit.coef_ / scaler.scale_  # the pipeline's weights in the columns' own units
    intercept = fit.intercept_ - coef @ scaler.mean_
    coef, intercept = coef - coef.mean(axis=0), intercept - intercept.mean()  # centred over the classes
    assert np.allclose(weights['coef'], coef, rtol=1e-6, atol=1e-9)
    assert np.allclose(weights['intercept'], intercept, rtol=1e-6, atol=1e-7)


def test_the_family_equals_its_lambda_written_by_hand(db, cultivar):
    weights, model = cultivar
    hand = db.execute("SELECT weights FROM pgad.train('by_hand', %s, 'softmax', "
                      "'SELECT alcohol, acid, proline, cultivar FROM vines', '{\"coef\": {}, \"intercept\": {}}', "
                      "label => 'cultivar', l2 => %s, regularize => '[\"coef\"]', standardize => true)",
                      [model, L2]).fetchone()[0]
    for key in ('coef', 'intercept'):
        assert np.allclose(hand[key], weights[key], rtol=1e-10, atol=1e-12)


def test_predict_reads_rows_by_name_and_labels_the_probabilities(db, cultivar):
    scaler, fit = oracle(L2)
    rows = db.execute("SELECT (key->>'id')::int, prediction, class, probabilities, key FROM "
                      "pgad.predict('cultivar', 'vines_test') ORDER BY 1").fetchall()
    assert len(rows) == N - 240 + 1
    expected = fit.predict_proba(scaler.transform(X[240:]))
    for (i, prediction, cls, probabilities, key), p in zip(rows, expected):
        assert prediction is None and set(probabilities) == set(CLASSES)
        assert np.allclose([probabilities[c] for c in CLASSES], p, rtol=1e-6, atol=1e-9)
        assert cls == CLASSES[int(np.argmax(p))]
        assert set(key) == {'id', 'cultivar', 'y'}  # the columns the model does not read
    assert rows[-1][1:4] == (None, None, None)  # a NULL feature: NULLs, as the scoring functions give
    assert classes_differ(db, 'cultivar') == 0


def classes_differ(db, model):
    """The rows of vines_test whose class by pgad.predict is not model's class function's."""
    return db.execute(f"SELECT count(*) FROM pgad.predict('{model}', 'vines_test') AS p JOIN vines_test AS v "
                      "ON v.id = (p.key->>'id')::int WHERE p.class IS DISTINCT FROM "
                      f"pgad_models.{model}_class(v.alcohol, v.acid, v.proline)").fetchone()[0]


def test_predict_of_a_version_and_of_a_regression(db):
    db.execute("SELECT pgad.train('yfit', 'linear', 'SELECT alcohol, acid, proline, y FROM vines')")
    first = db.execute("SELECT weights FROM pgad.models WHERE name = 'yfit'").fetchone()[0]
    x = np.c_[X[:240], np.ones(240)]
    exact = np.linalg.lstsq(x, x[:, :3] @ [1.5, -2.0, 0.01] + 3, rcond=None)[0]
    assert np.allclose([first[k] for k in ('alcohol', 'acid', 'proline', 'intercept')], exact, rtol=1e-8, atol=1e-8)
    db.execute("SELECT pgad.train('yfit', 'linear', 'SELECT alcohol, acid, y FROM vines')")  # version 2, deployed
    got = db.execute("SELECT prediction FROM pgad.predict('yfit', 'SELECT 13.0 AS alcohol, 2.0 AS acid, "
                     "700.0 AS proline', version => 1)").fetchone()[0]
    assert got == pytest.approx(np.dot(exact, [13, 2, 700, 1]), rel=1e-9)
    assert error_of(db, "SELECT * FROM pgad.predict('yfit', 'SELECT 1.0 AS alcohol')")[:2] == \
        ('42703', 'model "yfit" reads column "acid", which the data does not have')


def test_the_family_by_name_matches_the_hand_written_logistic(db):
    base = "SELECT weights FROM pgad.train(%s, %s, %s, 'SELECT alcohol, acid, cultivar = ''barolo'' AS y FROM vines'"
    named = db.execute(base + ')', ['lg', 'logistic', None]).fetchone()[0]
    hand = db.execute(base + ", '{\"alcohol\": 0, \"acid\": 0, \"intercept\": 0}', standardize => true)",
                      ['lg2', 'λ(d, w) w.alcohol*d.alcohol + w.acid*d.acid + w.intercept', 'logistic']).fetchone()[0]
    assert set(named) == {'alcohol', 'acid', 'intercept'}
    for k in named:
        assert named[k] == pytest.approx(hand[k], rel=1e-10, abs=1e-12)


def test_standardize_of_a_matrix_form_changes_no_optimum(db):
    model = 'λ(d, w) w.w @ [d.alcohol, d.acid] + w.b'
    fits = [db.execute("SELECT weights FROM pgad.train('mx', %s, 'softmax', 'vines', '{\"w\": {}, \"b\": {}}', "
                       f"label => 'cultivar', standardize => {s})", [model]).fetchone()[0] for s in ('false', 'true')]
    assert np.allclose(fits[0]['w'], fits[1]['w'], rtol=1e-6, atol=1e-9)
    rows = db.execute("SELECT weight FROM pgad.summary('mx')").fetchall()
    assert ('w["barolo",alcohol]',) in rows and ('b["grignolino"]',) in rows


def test_deploy_by_strategy_second_and_rollback(db):
    for l2 in (0.1, 0.2):
        db.execute("SELECT pgad.train('rb', 'softmax', 'vines', label => 'cultivar', l2 => %s)", [l2])
    assert db.execute("SELECT version FROM pgad.rollback('rb')").fetchone()[0] == 1
    assert db.execute("SELECT version FROM pgad.deploy('rb', 'previous')").fetchone()[0] == 2
    assert db.execute("SELECT version FROM pgad.deploy('rb', 1)").fetchone()[0] == 1
    assert db.execute("SELECT version FROM pgad.deploy('rb', 'rollback')").fetchone()[0] == 2  # PostgresML's word
    assert db.execute("SELECT version FROM pgad.rollback('rb', 1)").fetchone()[0] == 1
    assert error_of(db, "SELECT * FROM pgad.deploy('rb', 'newest')")[:2] == \
        ('22023', 'unknown deployment strategy "newest"')


def test_tune_takes_trains_arguments_by_name(db):
    rows = db.execute("SELECT trial, error FROM pgad.tune('tn', 'softmax', 'vines', label => 'cultivar', "
                      "grid => '{\"l2\": [0.01, 0.1]}')").fetchall()
    assert rows == [(1, None), (2, None)]
    assert db.execute("SELECT options->>'label' FROM pgad.models WHERE name = 'tn'").fetchone()[0] == 'cultivar'
    assert error_of(db, "SELECT * FROM pgad.tune('tn', 'softmax', 'vines', label => 'cultivar', "
                        "options => '{\"label\": \"cultivar\"}', grid => '{\"l2\": [0.1]}')")[:2] == \
        ('22023', 'pgad.tune takes "label" once, but it is given both as an argument and in options')


@pytest.mark.parametrize('sql, expected', [
    ("SELECT * FROM pgad.train('m', 'softmax', 'SELECT alcohol, cultivar FROM vines')",
     ('42703', 'the label column "y" is not in the data', "label is 'y' unless given: label => 'cultivar'")),
    ("SELECT * FROM pgad.train('m', 'softmax', 'SELECT alcohol, cultivar FROM vines', label => 'Cultivar')",
     ('42703', 'the label column "Cultivar" is not in the data', "label => 'cultivar'")),
    ("SELECT * FROM pgad.evaluate('cultivar@1', 'vines')",
     ('42704', 'model "cultivar@1" does not exist', "'cultivar', version => 1")),
    ("SELECT * FROM pgad.train('m', 'λ(d, w) w.w @ [d.alcohol] + w.b', 'softmax', 'vines', '{\"b\": {}}', "
     "label => 'cultivar')", ('22023', 'weight "w" is not in the weights', '"w": {}')),
    ("SELECT * FROM pgad.train('m', 'λ(d, w) w.w @ [d.alcohol] + w.b', 'softmax', 'vines', '{\"w\": {}}', "
     "label => 'cultivar')", ('22023', 'weight "b" is not in the weights', '"b": {}')),
    ("SELECT * FROM pgad.train('m', 'linear', 'SELECT cultivar, now() AS t, y FROM vines')",
     ('42804', 'model "linear" reads every column of the data but the label, and column "t" is of type '
               'pg_catalog.timestamptz', 'Leave it out')),
    ("SELECT * FROM pgad.train('m', 'mlp(0)', 'vines')", ('22023', 'model "mlp(0)" has 1 layers of 0 units', 'mlp')),
    ("SELECT * FROM pgad.train('m', 'λ(d, w) w.a*d.alcohol + w.b', 'logistic', 'SELECT alcohol, cultivar FROM "
     "vines', '{\"a\": 0, \"b\": 0}', label => 'cultivar')",
     ('22023', 'loss "logistic" takes a label of two classes, but column "cultivar" has 3', "loss => 'softmax'")),
    ("SELECT * FROM pgad.train('m', 'poisson', 'huber', 'vines')",
     ('22023', 'model "poisson" trains with loss "poisson", not "huber"', "model 'linear'")),
])
def test_messages_name_their_fix(db, sql, expected):
    state, message, hint = error_of(db, sql)[:3]
    assert (state, message) == expected[:2]
    assert expected[2] in hint


def test_if_better_against_a_version_without_validation_says_so(db):
    db.execute("SELECT pgad.train('ib', 'linear', 'SELECT alcohol, y FROM vines')")
    heard = []
    db.add_notice_handler(lambda d: heard.append(d.message_primary))
    row = db.execute("SELECT version, deployed FROM pgad.train('ib', 'linear', 'SELECT alcohol, y FROM vines', "
                     "validation => 0.2, deploy => 'if_better')").fetchone()
    assert row == (2, True)
    assert any('has no validation loss to compare with' in m for m in heard)


def test_a_categorical_column_is_a_categorical_weight_in_the_intercepts_place(db):
    """A category column's weight is an intercept per category: the fit is least squares on the one-hot design, and
    identified, so pgad.summary gives its table."""
    model, weights = db.execute("SELECT model, weights FROM pgad.train('cat', 'linear', 'SELECT alcohol, cultivar, y "
                                "FROM vines')").fetchone()
    assert model == 'λ(d, w) w.alcohol*d.alcohol + w.cultivar[d.cultivar]'
    design = np.c_[X[:240, 0], np.eye(3)[Y[:240]]]
    exact = np.linalg.lstsq(design, X[:240] @ [1.5, -2.0, 0.01] + 3, rcond=None)[0]
    assert [weights['alcohol'], *(weights['cultivar'][c] for c in CLASSES)] == pytest.approx(exact, rel=1e-8)
    assert len(db.execute("SELECT * FROM pgad.summary('cat')").fetchall()) == 4


def test_the_documented_example_is_scikit_learns(cluster, tmp_path):
    """docs/sql.md's "Model families by name" run through psql: its probabilities are the scaled pipeline's."""
    from test_docs_sql import run_in_psql, section_sql
    result = run_in_psql(cluster, tmp_path, section_sql('## Model families by name'))
    assert result.returncode == 0, result.stderr
    shown = [line.split('|') for line in result.stdout.splitlines() if line.strip()[:1] in '123' and 'barolo' in line]
    x = np.array([[14.2, 1065], [13.2, 1050], [13.9, 1290], [12.4, 520], [12.0, 450], [12.3, 680], [13.1, 630],
                  [13.4, 560], [12.8, 600], [13.7, 1000], [12.2, 900], [13.0, 480]])
    y = ['barolo'] * 3 + ['grignolino'] * 3 + ['barbera'] * 3 + ['grignolino', 'barolo', 'grignolino']
    scaler = StandardScaler().fit(x)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = LogisticRegression(C=1 / (2 * 0.05 * 12), tol=1e-14, max_iter=1000,
                                 solver='newton-cholesky').fit(scaler.transform(x), y)
    p = fit.predict_proba(scaler.transform(x[:3]))[:, list(fit.classes_).index('barolo')]
    assert [float(row[2]) for row in shown] == [round(v, 2) for v in p]
    assert [row[1].strip() for row in shown] == list(fit.predict(scaler.transform(x[:3])))


def test_hostile_column_names_are_quoted_in_the_generated_lambda(db):
    """A column named to break out of the lambda (or of SQL) is one quoted identifier in it: the weight of that exact
    name, nothing else read or run."""
    hostile = 'x" + w.evil*d."y'
    db.execute(f'CREATE TABLE hostile AS SELECT alcohol AS "{hostile.replace(chr(34), chr(34) * 2)}", y FROM vines')
    model, weights = db.execute("SELECT model, weights FROM pgad.train('hostile', 'linear', 'hostile')").fetchone()
    assert set(weights) == {hostile, 'intercept'} and 'w."x"" + w.evil*d.""y"*d."x"" + w.evil*d.""y"' in model
    row = db.execute("SELECT prediction, key FROM pgad.predict('hostile', 'SELECT * FROM hostile LIMIT 1')"
                     ).fetchone()
    assert row[0] is not None and set(row[1]) == {'y'}


def test_another_role_can_neither_predict_with_nor_roll_back_a_model(cluster, dbname, db):
    db.execute('DROP ROLE IF EXISTS newcomer_other')
    db.execute('CREATE ROLE newcomer_other LOGIN')
    try:
        db.execute("SELECT pgad.train('owned', 'linear', 'SELECT alcohol, y FROM vines')")
        db.execute("SELECT pgad.train('owned', 'linear', 'SELECT acid, y FROM vines')")
        with psycopg.connect(cluster.conninfo(dbname, user='newcomer_other'), autocommit=True) as other:
            assert error_of(other, "SELECT * FROM pgad.rollback('owned')")[:2] == \
                ('42501', 'model "owned" belongs to role "postgres"')
            assert error_of(other, "SELECT * FROM pgad.deploy('owned', 'previous')")[:2] == \
                ('42501', 'model "owned" belongs to role "postgres"')
            assert error_of(other, "SELECT * FROM pgad.predict('owned', 'SELECT 1.0::float8 AS acid')")[:2] == \
                ('42501', 'permission denied for model "owned"')
            assert error_of(other, "SELECT pgad.prediction_query('owned', 'SELECT 1.0::float8 AS acid')")[:2] == \
                ('42501', 'permission denied for model "owned"')
        assert db.execute("SELECT version FROM pgad.models WHERE name = 'owned'").fetchone()[0] == 2
    finally:
        db.execute('DROP OWNED BY newcomer_other')
        db.execute('DROP ROLE newcomer_other')


def test_predict_runs_the_data_query_as_the_caller_under_its_search_path(db):
    """The data query is the caller's: a table of the caller's search_path, and nothing of pgad's own runs as another
    role (pgad.predict is no SECURITY DEFINER, and sets no search_path)."""
    db.execute('CREATE SCHEMA IF NOT EXISTS mine')
    db.execute('CREATE TABLE IF NOT EXISTS mine.rows AS SELECT 13.0::float8 AS alcohol, 2.0::float8 AS acid, '
               '700.0::float8 AS proline')
    db.execute('SET search_path = mine, public')
    try:
        assert db.execute("SELECT count(*) FROM pgad.predict('cultivar', 'rows')").fetchone()[0] == 1
    finally:
        db.execute('RESET search_path')
    definer = db.execute("SELECT bool_or(prosecdef), bool_or(proconfig IS NOT NULL) FROM pg_proc WHERE "
                         "pronamespace = 'pgad'::regnamespace AND proname IN ('predict', 'rollback', 'deploy', "
                         "'prediction_query')").fetchone()
    assert definer == (False, False)


def test_hessian_names_a_weight_that_multiplies_columns_by_them(db):
    h = db.execute("SELECT pgad.hessian('λ(d, w) (w.v @ [d.alcohol, d.acid] + w.m[1][2] - d.y)^2', 'vines', "
                   "'{\"v\": [0, 0], \"m\": [[0, 0]]}')").fetchone()[0]
    assert {'v[acid]', 'v[alcohol]', 'm[1,2]'} <= set(h)  # m is read by index: numbers
    assert h['v[alcohol]']['v[alcohol]'] == pytest.approx(2 * np.mean(X[:240, 0] ** 2), rel=1e-9)


def test_a_deployment_that_changes_the_arguments_says_so(db):
    heard = []
    db.add_notice_handler(lambda d: heard.append(d.message_primary))
    db.execute("SELECT pgad.train('sig', 'linear', 'SELECT alcohol, y FROM vines')")
    db.execute("SELECT pgad.train('sig', 'linear', 'SELECT alcohol, acid, y FROM vines')")
    assert any(m.startswith('model "sig": its scoring function takes other arguments now: ') and
               m.endswith('(pg_catalog.float8, pg_catalog.float8), was pgad_models.sig(pg_catalog.float8)')
               for m in heard), heard


def test_standardize_false_is_scikit_learns_c_on_the_raw_columns(db):
    weights = db.execute("SELECT weights FROM pgad.train('raw_c', 'softmax', 'SELECT alcohol, acid, proline, cultivar "
                         "FROM vines', label => 'cultivar', l2 => %s, standardize => false)", [L2]).fetchone()[0]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = LogisticRegression(C=1 / (2 * L2 * 240), tol=1e-14, max_iter=1000,
                                 solver='newton-cholesky').fit(X[:240], Y[:240])
    coef, intercept = fit.coef_ - fit.coef_.mean(axis=0), fit.intercept_ - fit.intercept_.mean()
    assert np.allclose(weights['coef'], coef, rtol=1e-6, atol=1e-9)
    assert np.allclose(weights['intercept'], intercept, rtol=1e-6, atol=1e-7)


def test_logistic_past_two_classes_is_multinomial(db, cultivar):
    heard = []
    db.add_notice_handler(lambda d: heard.append(d.message_primary))
    weights, model, loss = db.execute("SELECT weights, model, loss FROM pgad.train('multi', 'logistic', 'SELECT "
                                      "alcohol, acid, proline, cultivar FROM vines', label => 'cultivar', l2 => %s)",
                                      [L2]).fetchone()
    assert (model, loss) == (cultivar[1], 'softmax') and any("trains as model 'softmax'" in m for m in heard)
    assert np.allclose(weights['coef'], cultivar[0]['coef'], rtol=1e-10, atol=1e-12)


def test_predict_is_the_scoring_functions_bit_for_bit(db, cultivar):
    """The probabilities pgad.predict writes as SQL are pgad._softmax's (the same sum, in the same order), its class
    _argmax's; a key of more than 50 columns (jsonb_build_object's 100 arguments) is whole."""
    rows = db.execute("SELECT p.probabilities, p.class, pgad_models.cultivar_probability(v.alcohol, v.acid, v.proline), "
                      "pgad_models.cultivar_class(v.alcohol, v.acid, v.proline) FROM pgad.predict('cultivar', "
                      "'SELECT * FROM vines_test WHERE alcohol IS NOT NULL') AS p JOIN vines_test AS v "
                      "ON v.id = (p.key->>'id')::int").fetchall()
    assert len(rows) == N - 240
    for labelled, cls, probabilities, expected in rows:
        assert [labelled[c] for c in CLASSES] == probabilities and cls == expected
    wide = ', '.join(f'i AS k{i}' for i in range(60))
    key = db.execute(f"SELECT key FROM pgad.predict('cultivar', 'SELECT {wide}, alcohol, acid, proline FROM vines "
                     "AS v, LATERAL (SELECT v.id AS i) AS s LIMIT 1')").fetchone()[0]
    assert sorted(key) == sorted(f'k{i}' for i in range(60)) and len(set(key.values())) == 1


@pytest.mark.parametrize('family', ['poisson', 'gamma'])
def test_log_link_families_are_statsmodels_glm(db, family):
    """'poisson' and 'gamma' by name: statsmodels' GLM with the log link at its optimum, the weights in the columns'
    own units though the fit ran on standardised ones."""
    import statsmodels.api as sm
    rng = np.random.default_rng(3)
    mean = np.exp(0.3 + 0.2 * X[:240, 0] - 0.4 * X[:240, 1] + 0.001 * X[:240, 2] - 3)
    count = rng.poisson(mean * 5) if family == 'poisson' else rng.gamma(2.0, mean / 2.0)
    db.execute(f'CREATE TABLE {family}_rows (alcohol float8, acid float8, proline float8, y float8)')
    with db.cursor().copy(f'COPY {family}_rows FROM STDIN') as copy:
        for row, label in zip(X[:240], count):
            copy.write_row((*map(float, row), float(label)))
    weights = db.execute(f"SELECT weights FROM pgad.train('{family}_fit', '{family}', '{family}_rows')").fetchone()[0]
    glm = sm.GLM(count, sm.add_constant(X[:240]), family=sm.families.Poisson() if family == 'poisson' else
                 sm.families.Gamma(sm.families.links.Log())).fit(tol=1e-12)
    got = [weights['intercept'], weights['alcohol'], weights['acid'], weights['proline']]
    assert got == pytest.approx(list(glm.params), rel=1e-6, abs=1e-9)


def test_an_mlp_by_name_is_reproducible_and_scored_as_its_lambda(db):
    first = db.execute("SELECT model, weights FROM pgad.train('net', 'mlp(4)', 'SELECT alcohol, acid, proline, "
                       "cultivar FROM vines', label => 'cultivar', l2 => 0.001, seed => 7)").fetchone()
    again = db.execute("SELECT model, weights FROM pgad.train('net', 'mlp(4)', 'SELECT alcohol, acid, proline, "
                       "cultivar FROM vines', label => 'cultivar', l2 => 0.001, seed => 7)").fetchone()
    assert first == again  # the seed draws the start
    assert first[0] == ('λ(d, w) w.output @ tanh(w.layer1 @ [d.alcohol, d.acid, d.proline] + w.bias1) + '
                        'w.intercept')
    assert np.shape(first[1]['layer1']) == (4, 3) and np.shape(first[1]['output']) == (3, 4)
    assert classes_differ(db, 'net') == 0


def test_an_mlp_past_the_memory_limit_is_refused_before_its_start_is_drawn(db):
    db.execute("SET pgad.memory_limit = '1MB'")
    try:
        state, message, hint = error_of(db, "SELECT * FROM pgad.train('huge', 'mlp(1024, 1024)', 'SELECT alcohol, "
                                            "acid, proline, y FROM vines')")
    finally:
        db.execute('RESET pgad.memory_limit')
    assert (state, message) == ('53200', 'model "mlp(1024, 1024)" over 3 columns has 1054721 weights, 64 MB, more '
                                         'than pgad.memory_limit (1.0 MB)')
    assert db.execute("SELECT count(*) FROM pgad.model_versions WHERE name = 'huge'").fetchone()[0] == 0
