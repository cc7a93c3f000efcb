"""pgad.tune (models/tuning.py) and the metrics of a version on its validation rows (pgad.model_versions.metrics):
the tune deploys the version with the best validation metric, checked against scikit-learn's Ridge fitted on the
same training rows and scored on the same validation rows; every trial is a version; a failed trial is a row; a
cancel ends the tune; bad grids are clear errors that change nothing."""
import time
from datetime import timedelta

import numpy as np
import psycopg
import pytest
from sklearn.linear_model import Ridge

from conftest import error_of, settings

ROWS = 200
COLUMNS = ('x1', 'x2', 'x3', 'x4', 'x5', 'x6')
MODEL = 'λ(d, w) ' + ' + '.join(f'w.{c.replace("x", "b")}*d.{c}' for c in COLUMNS) + ' + w.c'
WEIGHTS = '{' + ', '.join(f'"{c.replace("x", "b")}": 0' for c in COLUMNS) + ', "c": 0}'
SLOPES = '[' + ', '.join(f'"{c.replace("x", "b")}"' for c in COLUMNS) + ']'  # regularize: not the intercept
TRAINING = f'SELECT {", ".join(COLUMNS)}, y FROM ridge WHERE id % 2 = 1'
HELD = f'SELECT {", ".join(COLUMNS)}, y FROM ridge WHERE id % 2 = 0'
# pgad's objective is mean((p − y)²) + l2·Σ b² over the slopes; scikit-learn's Ridge minimises Σ (p − y)² +
# alpha·Σ b², without the intercept: alpha = l2 · the training rows. On these rows the validation MSE is lowest at
# l2 = 0.3, inside the grid, 0.007 below the next (4.1769 against 4.1838).
GRID = [0, 0.01, 0.03, 0.1, 0.3, 1, 3]


@pytest.fixture(scope='module')
def ridge(cluster, dbname):
    """200 rows, y linear in six columns with much noise, the validation rows apart (id even)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 6))
    y = x @ [0.5, -0.3, 0.2, 0.1, 0.0, -0.2] + 1.0 + rng.normal(scale=2.0, size=ROWS)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f'CREATE TABLE ridge (id int, {", ".join(c + " float8" for c in COLUMNS)}, y float8)')
        with db.cursor().copy('COPY ridge FROM STDIN') as copy:
            for k in range(ROWS):
                copy.write_row((k, *x[k], y[k]))
    return x, y, np.arange(ROWS) % 2 == 0


def versions(db, name):
    return db.execute('SELECT version, deployed, options, metrics FROM pgad.model_versions WHERE name = %s '
                      'ORDER BY version', (name,)).fetchall()


def test_metrics_of_a_version_on_its_validation_rows(db, ridge):
    """metrics: validation_loss (the mean squared error: loss 'squared' is (p − y)²), rmse, mae and r2 of the
    stored weights on the validation query's rows, computed here with numpy; NULL without validation."""
    x, y, held = ridge
    w, metrics, history = db.execute("SELECT weights, metrics, validation_history FROM pgad.train('m', %s, 'squared', "
                                     "%s, %s, validation => %s)", (MODEL, TRAINING, WEIGHTS, HELD)).fetchone()
    err = x[held] @ [w[f'b{k}'] for k in range(1, 7)] + w['c'] - y[held]
    assert metrics['validation_rows'] == held.sum()
    assert metrics['rmse'] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-9)
    assert metrics['mae'] == pytest.approx(np.mean(np.abs(err)), rel=1e-9)
    assert metrics['r2'] == pytest.approx(1 - np.sum(err ** 2) / np.sum((y[held] - y[held].mean()) ** 2), rel=1e-9)
    assert metrics['validation_loss'] == pytest.approx(np.mean(err ** 2), rel=1e-9)
    assert metrics['validation_loss'] == pytest.approx(history[-1], rel=1e-9)
    assert db.execute("SELECT metrics FROM pgad.train('m', %s, 'squared', %s, %s)",
                      (MODEL, TRAINING, WEIGHTS)).fetchone()[0] is None


def test_tune_deploys_what_ridge_picks(db, ridge):
    """A grid of l2: each trial's validation MSE is scikit-learn Ridge's on the same rows (rtol 1e-6: Newton
    converges to the least-squares optimum), and the version deployed is the one of the l2 Ridge scores best, its
    weights pgad.models'; every trial is a version, the others not deployed; a NOTICE per trial."""
    x, y, held = ridge
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    found = db.execute("SELECT trial, version, parameters, value, converged, deployed, error, training_time "
                       "FROM pgad.tune('ridge', %s, 'squared', %s, %s, grid => %s, validation => %s, metric => 'mse', "
                       "options => %s) ORDER BY trial",
                       (MODEL, TRAINING, WEIGHTS, f'{{"l2": {GRID}}}', HELD,
                        f'{{"regularize": {SLOPES}}}')).fetchall()
    expected = []
    for l2 in GRID:
        fitted = Ridge(alpha=l2 * (~held).sum()).fit(x[~held], y[~held])
        expected.append(np.mean((fitted.predict(x[held]) - y[held]) ** 2))
    assert [r[0] for r in found] == list(range(1, len(GRID) + 1))
    assert [r[2] for r in found] == [{'l2': l2} for l2 in GRID]
    assert [r[3] for r in found] == pytest.approx(expected, rel=1e-6)
    assert all(r[4] and r[6] is None and timedelta(0) < r[7] < timedelta(minutes=5) for r in found)
    best = int(np.argmin(expected))
    assert GRID[best] == 0.3  # inside the grid: a tune that took the first or the last would fail
    assert [r[5] for r in found] == [k == best for k in range(len(GRID))]
    stored = versions(db, 'ridge')
    assert [v for v, *_ in stored] == [r[1] for r in found]
    assert [(v, o['l2']) for v, deployed, o, _ in stored if deployed] == [(found[best][1], GRID[best])]
    deployed = db.execute("SELECT version, weights FROM pgad.models WHERE name = 'ridge'").fetchone()
    assert deployed[0] == found[best][1]
    assert deployed[1]['b1'] == pytest.approx(fitted_slope(x, y, held, GRID[best]), rel=1e-6)
    assert sum('trial' in n and 'of 7' in n for n in notices) == len(GRID)


def fitted_slope(x, y, held, l2):
    return Ridge(alpha=l2 * (~held).sum()).fit(x[~held], y[~held]).coef_[0]


def test_higher_is_better_and_deploy_false(db, ridge):
    """metric r2 picks the highest (the same trial as the lowest mse); deploy => false keeps every version and
    deploys none of them: pgad.models keeps the version deployed before."""
    db.execute("SELECT FROM pgad.train('kept', %s, 'squared', %s, %s)", (MODEL, TRAINING, WEIGHTS))
    found = db.execute("SELECT value, deployed, version FROM pgad.tune('kept', %s, 'squared', %s, %s, grid => %s, "
                       "validation => %s, metric => 'r2', deploy => false, options => %s) ORDER BY trial",
                       (MODEL, TRAINING, WEIGHTS, f'{{"l2": {GRID}}}', HELD,
                        f'{{"regularize": {SLOPES}}}')).fetchall()
    assert int(np.argmax([v for v, *_ in found])) == GRID.index(0.3)
    assert not any(d for _, d, _ in found)
    assert db.execute("SELECT version FROM pgad.models WHERE name = 'kept'").fetchone()[0] == 1
    assert len(versions(db, 'kept')) == 1 + len(GRID)


def test_a_fraction_is_the_same_split_for_every_trial(db, ridge):
    """validation => 0.25 with a seed: every trial validates on the same rows (their count, and the same
    validation loss for equal parameters), and the deployed one has the lowest value, the earlier of equals."""
    found = db.execute("SELECT value, deployed, version FROM pgad.tune('split', %s, 'squared', 'SELECT * FROM ridge', "
                       "%s, grid => '{\"l2\": [0.1, 0, 0.1]}', validation => 0.25, seed => 3) ORDER BY trial",
                       (MODEL, WEIGHTS)).fetchall()
    rows = {m['validation_rows'] for *_, m in versions(db, 'split')}
    assert len(rows) == 1 and 0 < rows.pop() < ROWS
    assert found[0][0] == pytest.approx(found[2][0], rel=1e-12)
    assert found[0][0] != found[1][0]
    best = int(np.argmin([v for v, *_ in found]))  # the first of equals: trial 1 where l2 = 0.1 is the better
    assert [d for _, d, _ in found] == [k == best for k in range(3)]


def test_a_failed_trial_is_a_row(db, ridge):
    """A combination pgad.train refuses (lbfgs takes no learning_rate) is a row with its error, rolled back (no
    version); the others train, and the best is deployed. Every trial failing is the first one's error."""
    found = db.execute("SELECT trial, version, parameters, value, deployed, error FROM pgad.tune('failing', %s, "
                       "'squared', %s, %s, grid => '{\"optimizer\": [\"lbfgs\", \"gd\"], \"learning_rate\": [0.05]}', "
                       "validation => %s) ORDER BY trial", (MODEL, TRAINING, WEIGHTS, HELD)).fetchall()
    assert found[0][1] is None and found[0][3] is None and not found[0][4]
    assert found[0][5].startswith('22023: optimizer "lbfgs" takes no learning_rate')
    assert found[1][1] is not None and found[1][4] and found[1][5] is None
    assert [v for v, *_ in versions(db, 'failing')] == [found[1][1]]
    e = error_of(db, "SELECT FROM pgad.tune('never', %s, 'squared', %s, %s, grid => '{\"learning_rate\": [0.1]}', "
                     "options => '{\"optimizer\": \"newton\"}', validation => %s)", (MODEL, TRAINING, WEIGHTS, HELD))
    assert e.sqlstate == '22023' and 'takes no learning_rate' in e.message_primary
    assert versions(db, 'never') == []


def test_random_search(db, ridge):
    """trials draws of each key, reproducible by the seed, within the bounds; integers rounded."""
    def run(name):
        return db.execute("SELECT parameters FROM pgad.tune(%s, %s, 'squared', %s, %s, random => "
                          "'{\"l2\": {\"log_uniform\": [0.001, 1]}, \"iterations\": {\"uniform\": [5, 50]}, "
                          "\"optimizer\": [\"gd\", \"adam\"]}', trials => 6, seed => 4, validation => %s, "
                          "options => '{\"learning_rate\": 0.01}') ORDER BY trial",
                          (name, MODEL, TRAINING, WEIGHTS, HELD)).fetchall()
    first, second = run('random1'), run('random2')
    assert first == second and len(first) == 6
    for (p,) in first:
        assert 0.001 <= p['l2'] <= 1 and isinstance(p['iterations'], int) and 5 <= p['iterations'] <= 50
        assert p['optimizer'] in ('gd', 'adam')
    assert len({p['l2'] for (p,) in first}) == 6
    assert len(versions(db, 'random1')) == 6


def test_cancel(db, ridge):
    """statement_timeout ends a tune inside a trial (gd for ten million iterations) within a second or so, and the
    statement changes nothing."""
    db.execute("SET statement_timeout = '1s'")
    started = time.monotonic()
    e = error_of(db, "SELECT FROM pgad.tune('cancelled', %s, 'squared', %s, %s, grid => '{\"l2\": [0, 0.1]}', "
                     "validation => %s, options => '{\"optimizer\": \"gd\", \"learning_rate\": 0.001, "
                     "\"iterations\": 10000000}')", (MODEL, TRAINING, WEIGHTS, HELD))
    elapsed = time.monotonic() - started
    db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014'
    assert elapsed < 30  # generous: a loaded 2-core machine
    assert versions(db, 'cancelled') == []


TUNE = "SELECT FROM pgad.tune('bad', 'λ(d, w) w.a*d.x1 + w.c', 'squared', 'SELECT x1, y FROM ridge', " \
       "'{\"a\": 0, \"c\": 0}'"
BAD = [
    (", grid => '{\"mode\": [\"forward\"]}')", '22023', 'pgad.tune cannot tune argument "mode"', 'l1, l2, '),
    (", grid => '{\"seed\": [1, 2]}')", '22023', 'pgad.tune cannot tune argument "seed"', 'options'),
    (", grid => '{\"l2\": 0.1}')", '22023', 'the grid\'s "l2" must be a non-empty JSON array', None),
    (", grid => '{\"l2\": []}')", '22023', 'the grid\'s "l2" must be a non-empty JSON array', None),
    (", grid => '{\"l2\": [\"a\"]}')", '22023', 'grid value of "l2" must be a number, not "a"', None),
    (", grid => '{\"iterations\": [1.5]}')", '22023', 'grid value of "iterations" must be an integer', None),
    (", grid => '{\"standardize\": [1]}')", '22023', 'grid value of "standardize" must be true or false', None),
    (", grid => '{\"l2\": [1e400]}')", '22023', 'grid value of "l2" must be a finite number', None),
    (", grid => '[0.1]')", '22023', 'grid must be a JSON object of the arguments to tune', None),
    (", grid => '{}')", '22023', 'grid must be a JSON object of the arguments to tune', None),
    (", grid => '{\"l2\": [0,1,2,3,4,5,6,7,8,9,10], \"l1\": [0,1,2,3,4,5,6,7,8,9]}')", '54000',
     'pgad.tune would run 110 trials, more than 100', 'fewer'),
    (")", '22023', 'pgad.tune takes a grid or a random search, one of them', None),
    (", grid => '{\"l2\": [0]}', random => '{\"l2\": [0]}')", '22023', 'one of them', None),
    (", grid => '{\"l2\": [0]}', trials => 3)", '22023', 'trials is the count of a random search', None),
    (", random => '{\"l2\": [0, 1]}')", '22023', 'a random search takes trials, a positive integer, not None',
     'trials => 20'),
    (", random => '{\"l2\": [0, 1]}', trials => 101)", '54000', 'would run 101 trials', None),
    (", random => '{\"l2\": {\"normal\": [0, 1]}}', trials => 3)", '22023', 'the random search\'s "l2" must be', None),
    (", random => '{\"l2\": {\"log_uniform\": [0, 1]}}', trials => 3)", '22023', 'low > 0', None),
    (", random => '{\"l2\": {\"uniform\": [1, 0]}}', trials => 3)", '22023', 'low <= high', None),
    (", random => '{\"optimizer\": {\"uniform\": [1, 2]}}', trials => 3)", '22023', 'of a numeric argument', None),
    (", grid => '{\"l2\": [0]}', metric => 'auc')", '22023', 'unknown metric "auc" of loss \'squared\'',
     'validation_loss, mse, rmse, mae, r2'),
    (", grid => '{\"l2\": [0]}', options => '{\"seed\": 1}')", '22023', 'pgad.tune takes no option "seed"', None),
    (", grid => '{\"l2\": [0]}', options => '{\"l2\": 1}')", '22023', 'argument "l2" is both tuned and given', None),
    (", grid => '{\"l2\": [0]}', options => '{\"label\": 1}')", '22023', 'option "label" must be a string', None),
    (", grid => '{\"l2\": [0]}', validation => NULL::text)", '22004', 'pgad.tune needs validation rows', None),
    (", grid => '{\"l2\": [0]}', metric => NULL)", '22004', 'argument "metric" of pgad.tune must not be NULL', None),
    (", grid => '{\"l2\": [0]}', seed => -1)", '22023', 'seed must be 0 or a positive number, not -1', None),
    (", random => '{\"l2\": [0, 1]}', trials => 0)", '22023', 'a random search takes trials, a positive integer, '
     'not 0', None),
    (", grid => '{\"l2\": [0]}', options => '[1]')", '22023', 'options must be a JSON object', None),
]


@pytest.mark.parametrize('tail, sqlstate, message, hint', BAD)
def test_bad_arguments(db, ridge, tail, sqlstate, message, hint):
    """Each is its SQLSTATE with a message naming what is wrong (and a hint where given), before any training:
    the catalog is unchanged."""
    before = db.execute('SELECT count(*) FROM pgad.model_versions').fetchone()
    e = error_of(db, TUNE + tail)
    assert e.sqlstate == sqlstate and message in e.message_primary, e.message_primary
    if hint:
        assert hint in (e.message_hint or ''), e.message_hint
    assert db.execute('SELECT count(*) FROM pgad.model_versions').fetchone() == before


def test_text_is_never_spliced(db, ridge):
    """A key or a value written as SQL is a key that is not tuned (22023, before anything runs) or a value
    pgad.train refuses as its own argument: every trial fails, the tune is the first one's error, and nothing ran."""
    e = error_of(db, TUNE + ", grid => '{\"l2\\\"); DROP TABLE ridge; --\": [0]}')")
    assert e.sqlstate == '22023' and e.message_primary.startswith('pgad.tune cannot tune argument "l2"); DROP')
    e = error_of(db, TUNE + ", grid => '{\"optimizer\": [\"adam''); DROP TABLE ridge; --\"]}')")
    assert e.sqlstate == '22023' and e.message_primary.startswith('unknown optimizer "adam\'); DROP')
    assert db.execute('SELECT count(*) FROM ridge').fetchone()[0] == ROWS
    assert versions(db, 'bad') == []


def test_another_roles_model_name_is_refused(db, cluster, dbname, ridge):
    """A tune is trainings of the name under pgad.train's rules: another role's model is 42501 before any trial."""
    db.execute("SELECT FROM pgad.train('owned', %s, 'squared', %s, %s)", (MODEL, TRAINING, WEIGHTS))
    db.execute('DROP ROLE IF EXISTS pgad_tuner')
    db.execute('CREATE ROLE pgad_tuner LOGIN')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO pgad_tuner')
    db.execute('GRANT SELECT ON ridge TO pgad_tuner')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='pgad_tuner'), autocommit=True) as other:
            e = error_of(other, "SELECT FROM pgad.tune('owned', %s, 'squared', %s, %s, grid => '{\"l2\": [0, 1]}', "
                                "validation => %s)", (MODEL, TRAINING, WEIGHTS, HELD))
        assert e.sqlstate == '42501' and e.message_primary == 'model "owned" belongs to role "postgres"'
        assert [v for v, *_ in versions(db, 'owned')] == [1]
    finally:
        db.execute('REVOKE ALL ON ridge FROM pgad_tuner')
        db.execute('REVOKE ALL ON SCHEMA pgad_models FROM pgad_tuner')
        db.execute('DROP ROLE pgad_tuner')


def test_every_trial_is_kept_past_keep_versions(db, ridge):
    """pgad.keep_versions below the trials: the tune keeps every trial's version, and the setting is the caller's
    again after it."""
    db.execute('SET pgad.keep_versions = 2')
    try:
        found = db.execute("SELECT version FROM pgad.tune('kept4', %s, 'squared', %s, %s, "
                           "grid => '{\"l2\": [0, 0.1, 1, 10]}', validation => %s)",
                           (MODEL, TRAINING, WEIGHTS, HELD)).fetchall()
        assert db.execute('SHOW pgad.keep_versions').fetchone()[0] == '2'
    finally:
        db.execute('RESET pgad.keep_versions')
    assert [v for v, *_ in versions(db, 'kept4')] == [v for v, in found] == [1, 2, 3, 4]


def test_logistic_metrics_per_group(db, ridge):
    """A logistic model by group: each group's version row holds log_loss, accuracy and roc_auc on its own
    validation rows, as scikit-learn computes them from the stored weights."""
    from sklearn import metrics as sk
    x, y, held = ridge
    label = (y > 1).astype(int)
    group = np.arange(ROWS) % 3
    db.execute('CREATE TABLE classes AS SELECT id, id % 3 AS g, x1, x2, (y > 1)::int AS y FROM ridge')
    rows = db.execute("SELECT group_key, weights, metrics FROM pgad.train('logit', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + "
                      "w.c', 'logistic', 'SELECT g, x1, x2, y FROM classes WHERE id % 2 = 1', "
                      "'{\"a\": 0, \"b\": 0, \"c\": 0}', group_by => 'g', "
                      "validation => 'SELECT g, x1, x2, y FROM classes WHERE id % 2 = 0')").fetchall()
    assert len(rows) == 3
    for key, w, metrics in rows:
        at = held & (group == key['g'])
        z = w['a'] * x[at, 0] + w['b'] * x[at, 1] + w['c']
        p = 1 / (1 + np.exp(-z))
        assert metrics['validation_rows'] == at.sum()
        assert metrics['log_loss'] == pytest.approx(sk.log_loss(label[at], p), rel=1e-9)
        assert metrics['validation_loss'] == pytest.approx(sk.log_loss(label[at], p), rel=1e-9)
        assert metrics['accuracy'] == pytest.approx(sk.accuracy_score(label[at], p >= 0.5), rel=1e-12)
        assert metrics['roc_auc'] == pytest.approx(sk.roc_auc_score(label[at], z), rel=1e-12)


def test_softmax_metrics_and_tune(db, ridge):
    """A 'softmax' model's metrics on its validation rows are scikit-learn's log_loss, accuracy and f1_macro of its
    _probability function's output there; a tune by f1_macro deploys the highest."""
    from sklearn import metrics as sk
    db.execute("CREATE TABLE three AS SELECT id, x1, x2, CASE WHEN y < 0 THEN 'low' WHEN y < 2 THEN 'mid' "
               "ELSE 'high' END AS y FROM ridge")
    held = 'SELECT x1, x2, y FROM three WHERE id % 2 = 0'
    model = 'λ(d, w) w.W @ [d.x1, d.x2] + w.b'
    found = db.execute("SELECT version, value, deployed FROM pgad.tune('three', %s, 'softmax', "
                       "'SELECT x1, x2, y FROM three WHERE id %% 2 = 1', '{\"W\": {}, \"b\": {}}', "
                       "grid => '{\"l2\": [0, 0.3, 3]}', validation => %s, metric => 'f1_macro') ORDER BY trial",
                       (model, held)).fetchall()
    assert [d for *_, d in found] == [k == int(np.argmax([v for _, v, _ in found])) for k in range(3)]
    options, metrics = db.execute("SELECT options, metrics FROM pgad.models WHERE name = 'three'").fetchone()
    rows = db.execute('SELECT pgad_models.three_probability(x1, x2), y FROM (' + held + ') AS h').fetchall()
    p = np.array([r[0] for r in rows])
    y = [r[1] for r in rows]
    labels = options['classes']
    assert metrics['log_loss'] == pytest.approx(sk.log_loss(y, p, labels=labels), rel=1e-9)
    assert metrics['validation_loss'] == pytest.approx(sk.log_loss(y, p, labels=labels), rel=1e-9)
    predicted = [labels[k] for k in np.argmax(p, axis=1)]
    assert metrics['accuracy'] == pytest.approx(sk.accuracy_score(y, predicted), rel=1e-12)
    assert metrics['f1_macro'] == pytest.approx(sk.f1_score(y, predicted, labels=labels, average='macro'), rel=1e-12)
    assert found[[d for *_, d in found].index(True)][1] == pytest.approx(metrics['f1_macro'], rel=1e-12)


@pytest.mark.parametrize('name, model, loss, weights, data', [
    ('by_region', 'λ(d, w) w.a*d.x1 + w.r[d.region]', 'squared', '{"a": 0, "r": {}}',
     "SELECT id, x1, CASE WHEN x2 > 0.5 THEN 'north' WHEN x2 > -0.5 THEN 'mid' ELSE 'south' END AS region, y "
     "FROM ridge"),
    ('texts', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'logistic', '{"a": 0, "b": 0, "c": 0}',
     "SELECT id, x1, x2, CASE WHEN y > 1 THEN 'yes' ELSE 'no' END AS y FROM ridge"),
])
def test_metrics_are_pgad_evaluates_on_the_validation_rows(db, ridge, name, model, loss, weights, data):
    """A categorical weight's model and a logistic model of a text label: the metrics stored at training are
    pgad.evaluate's on the validation query's rows (its loss as validation_loss), to 1e-9."""
    held = f'SELECT * FROM ({data}) AS d WHERE id % 2 = 0'
    metrics, = db.execute("SELECT metrics FROM pgad.train(%s, %s, %s, %s, %s, validation => %s)",
                          (name, model, loss, f'SELECT * FROM ({data}) AS d WHERE id % 2 = 1', weights,
                           held)).fetchone()
    evaluated = dict(db.execute('SELECT metric, value FROM pgad.evaluate(%s, %s)', (name, held)).fetchall())
    assert metrics['validation_rows'] == evaluated['rows'] == ROWS // 2
    assert metrics['validation_loss'] == pytest.approx(evaluated['loss'], rel=1e-9)
    shared = set(metrics) - {'validation_loss', 'validation_rows'}
    assert len(shared) >= 4 and shared <= set(evaluated)
    assert {m: metrics[m] for m in shared} == pytest.approx({m: evaluated[m] for m in shared}, rel=1e-9)


def test_the_validation_loss_of_an_early_stopped_version_is_its_lowest(db, ridge):
    """With early_stopping, the version keeps the weights of its lowest validation loss: metrics' validation_loss is
    that one, not the last of validation_history."""
    metrics, history = db.execute(
        "SELECT metrics, validation_history FROM pgad.train('early', %s, 'squared', %s, %s, optimizer => 'adam', "
        "learning_rate => 0.5, iterations => 300, early_stopping => 3, validation => %s)",
        (MODEL, TRAINING, WEIGHTS, HELD)).fetchone()
    assert min(history) < history[-1]
    assert metrics['validation_loss'] == pytest.approx(min(history), rel=1e-9)


@pytest.mark.parametrize('argument', ['model', 'loss', 'data', 'weights', 'deploy', 'validation'])
def test_a_null_argument_is_22004(db, ridge, argument):
    """Each argument pgad.tune needs, NULL, is 22004 naming it; validation's says what to give."""
    given = {'model': "'λ(d, w) w.a*d.x1 + w.c'", 'loss': "'squared'", 'data': "'SELECT x1, y FROM ridge'",
             'weights': "'{\"a\": 0, \"c\": 0}'", 'deploy': 'true', 'validation': '0.3'}
    given[argument] = 'NULL::' + ('bool' if argument == 'deploy' else 'jsonb' if argument == 'weights' else 'text')
    e = error_of(db, "SELECT FROM pgad.tune('nulls', " + ', '.join(f'{k} => {v}' for k, v in given.items()) +
                 ", grid => '{\"l2\": [0]}')")
    if argument == 'validation':
        assert (e.sqlstate, e.message_primary, e.message_hint) == (
            '22004', 'pgad.tune needs validation rows',
            "Give validation => 0.2 (a fraction of the rows held out) or validation => 'SELECT …'.")
    else:
        assert (e.sqlstate, e.message_primary) == ('22004', f'argument "{argument}" of pgad.tune must not be NULL')


def test_an_unknown_metric_of_a_lambda_loss(db, ridge):
    e = error_of(db, "SELECT FROM pgad.tune('lambda_loss', 'λ(d, w) w.a*d.x1 + w.c', "
                     "'λ(d, w) (w.a*d.x1 + w.c - d.y)^2', 'SELECT x1, y FROM ridge', '{\"a\": 0, \"c\": 0}', "
                     "grid => '{\"l2\": [0]}', metric => 'r2')")
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22023', 'unknown metric "r2" of a lambda loss', 'The metrics are validation_loss.')


def test_a_null_name_is_22004(db, ridge):
    e = error_of(db, "SELECT FROM pgad.tune(NULL, %s, 'squared', %s, %s, grid => '{\"l2\": [0]}')",
                 (MODEL, TRAINING, WEIGHTS))
    assert (e.sqlstate, e.message_primary) == ('22004', 'argument "name" of pgad.tune must not be NULL')


def test_a_grouped_trials_value_is_its_groups_mean_by_validation_rows(db, ridge):
    """With group_by, a trial's value is the mean of its groups' metric weighted by their validation rows."""
    data = 'SELECT id, id % 3 AS g, x1, x2, y FROM ridge'
    found = db.execute("SELECT version, value FROM pgad.tune('grouped', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', "
                       "'squared', %s, '{\"a\": 0, \"b\": 0, \"c\": 0}', grid => '{\"l2\": [0, 1]}', metric => 'mae', "
                       "validation => 0.3, seed => 2, options => '{\"group_by\": \"g\"}') ORDER BY trial",
                       (data,)).fetchall()
    for version, value in found:
        groups = db.execute("SELECT metrics FROM pgad.model_versions WHERE name = 'grouped' AND version = %s",
                            (version,)).fetchall()
        assert len(groups) == 3
        rows = np.array([m['validation_rows'] for m, in groups])
        assert value == pytest.approx(np.dot(rows, [m['mae'] for m, in groups]) / rows.sum(), rel=1e-12)


LONG = 'a' * 50
EXACT = [  # (tail, message, detail, hint): the whole of each
    (", grid => '{\"l2\": 0.1}')", 'the grid\'s "l2" must be a non-empty JSON array of its values', None,
     'Write "l2": [0.1, 0.01].'),
    (", grid => '{\"optimizer\": \"adam\"}')", 'the grid\'s "optimizer" must be a non-empty JSON array of its values',
     None, 'Write "optimizer": […].'),
    (f", grid => '{{\"l2\": [\"{LONG}\"]}}')", f'grid value of "l2" must be a number, not "{LONG[:39]}', None, None),
    (", random => '{\"l2\": 5}', trials => 3)", 'the random search\'s "l2" must be {"uniform": [low, high]}, '
     '{"log_uniform": [low, high]} or {"choice": [value, …]}', 'It is 5.', None),
    (", random => '{\"l2\": {\"normal\": [" + ', '.join(map(str, range(40))) + "]}}', trials => 3)",
     'the random search\'s "l2" must be {"uniform": [low, high]}, {"log_uniform": [low, high]} or {"choice": '
     '[value, …]}', 'It is ' + ('{"normal": [' + ', '.join(map(str, range(40))) + ']}')[:80] + '.', None),
    (", random => '{\"l2\": {\"choice\": 5}}', trials => 3)",
     'the random search\'s "l2" choice must be a non-empty JSON array', None, None),
    (", random => '{\"l2\": {\"choice\": []}}', trials => 3)",
     'the random search\'s "l2" choice must be a non-empty JSON array', None, None),
    (", random => '{\"l2\": {\"choice\": [0.1, \"a\"]}}', trials => 3)",
     'random value of "l2" must be a number, not "a"', None, None),
    *[(f", random => '{{\"l2\": {{\"uniform\": {bounds}}}}}', trials => 3)",
       'the random search\'s "l2" uniform must be [low, high], two finite numbers, low <= high, of a numeric argument',
       'It is ' + f'{{"uniform": {shown}}}'[:80] + '.',
       'Write {"choice": [value, …]} for an argument that is not a number.')
      for bounds, shown in (('[0, 1, 2]', '[0, 1, 2]'), ('5', '5'), ('[true, 1]', '[true, 1]'),
                            ('[\"a\", 1]', '["a", 1]'), ('[0, 1e400]', '[0, 1' + '0' * 400 + ']'),
                            ('[2, 1]', '[2, 1]'))],
    (", random => '{\"l2\": {\"log_uniform\": [0, 1]}}', trials => 3)",
     'the random search\'s "l2" log_uniform must be [low, high], two finite numbers, low <= high, low > 0, of a '
     'numeric argument', 'It is {"log_uniform": [0, 1]}.',
     'Write {"choice": [value, …]} for an argument that is not a number.'),
    (", grid => '{\"l2\": [0]}', options => '{\"progress_every\": 2147483648}')",
     'option "progress_every" must be an integer, not 2147483648', None, None),
    (")", 'pgad.tune takes a grid or a random search, one of them', None,
     'Write grid => \'{"l2": [0, 0.01, 0.1]}\', or random => \'{"l2": {"log_uniform": [0.0001, 1]}}\' with '
     'trials => 20.'),
    (", grid => '{\"l2\": [0]}', trials => 3)", 'trials is the count of a random search, not of a grid', None,
     'A grid trains every combination of its lists once.'),
    (", random => '{}', trials => 3)", 'random must be a JSON object of the arguments to tune', None,
     'Write grid => \'{"l2": [0, 0.01, 0.1], "learning_rate": [0.1, 0.01]}\'.'),
    (", grid => '[]')", 'grid must be a JSON object of the arguments to tune', None,
     'Write grid => \'{"l2": [0, 0.01, 0.1], "learning_rate": [0.1, 0.01]}\'.'),
    (", random => '{\"l2\": [0]}', trials => 3, options => '{\"l2\": 1}')",
     'argument "l2" is both tuned and given in options', None, 'Leave "l2" out of options, or out of the random.'),
    (", grid => '{\"seed\": [1]}')", 'pgad.tune cannot tune argument "seed"', None,
     'The arguments it tunes are l1, l2, learning_rate, tolerance, iterations, batch_size, early_stopping, optimizer, '
     'standardize; give the others of pgad.train in options.'),
    (", random => '{\"l2\": [0]}', trials => -1)", 'a random search takes trials, a positive integer, not -1', None,
     'Write trials => 20.'),
    (", grid => '{\"l2\": [0]}', options => '[1]')", 'options must be a JSON object', None,
     'Write the other arguments of pgad.train as {"optimizer": "adam", "label": "y"}.'),
    (", grid => '{\"l2\": [0]}', options => '{\"seed\": 1}')", 'pgad.tune takes no option "seed"',
     'Its options are the arguments of pgad.train but name, model, loss, data, weights, validation, seed and deploy, '
     'which are pgad.tune\'s own.',
     'The options are l1, l2, learning_rate, tolerance, iterations, batch_size, early_stopping, optimizer, '
     'standardize, mode, backend, regularize, label, group_by, progress_every, dtype, likelihood, order_by, state, '
     'impute, bounds, frequency.'),
]


@pytest.mark.parametrize('tail, message, detail, hint', EXACT)
def test_the_whole_message_of_a_bad_search(db, ridge, tail, message, detail, hint):
    """The message, DETAIL and HINT of each refusal, whole (22023, before any training): long values are cut."""
    e = error_of(db, TUNE + tail)
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == \
        ('22023', message, detail, hint)
    assert versions(db, 'bad') == []


BIG = '[' + ', '.join(['0'] * 4000) + ']'  # 4,000 numbers at 320 bytes: 1.2 MB


@pytest.mark.parametrize('tail, what, key', [
    (f", grid => '{{\"l2\": {BIG}}}')", 'grid', 'key'),
    (f", random => '{{\"l2\": {BIG}}}', trials => 3)", 'random', 'key'),
    (f", grid => '{{\"l2\": [0]}}', options => '{{\"l1\": {BIG}}}')", 'options', 'option'),
])
def test_a_search_past_the_memory_limit_is_refused_before_it_is_read(db, ridge, tail, what, key):
    """The grid, random or options text that could cost more than pgad.memory_limit to read is 53200, its size
    and what it holds said, before it is parsed."""
    with settings(db, {'pgad.memory_limit': '1MB'}):
        e = error_of(db, TUNE + tail)
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '53200', f'the {what} need 1.2 MB, more than pgad.memory_limit (1.0 MB)',
        f'The {what} jsonb holds up to 4000 numbers of 1 {key}s, 320 bytes a number and 384 a {key} while the call '
        'reads them, uses them and gives them back.', 'Have a superuser raise pgad.memory_limit.')


def test_the_bound_on_trials_is_100(db, ridge):
    """A grid of 100 combinations runs (here each fails at once, so the tune is the first one's error); 101 are
    54000 before any runs, with why."""
    grid = '{"optimizer": ["lbfgs"], "learning_rate": [' + ', '.join(f'0.{k + 1}' for k in range(100)) + ']}'
    e = error_of(db, TUNE + ', grid => %s)', (grid,))
    assert (e.sqlstate, e.message_primary) == ('22023', 'optimizer "lbfgs" takes no learning_rate')
    e = error_of(db, TUNE + ', grid => %s)', (grid.replace('["lbfgs"]', '["lbfgs", "gd"]'),))
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '54000', 'pgad.tune would run 200 trials, more than 100',
        'Each trial is a training of the model, kept as a version with its functions.',
        'Tune fewer values at once, or a random search of fewer trials.')


def test_random_draws_are_numpys(db, ridge):
    """Each trial draws every key in the jsonb's key order (shorter keys first, then bytewise) from numpy's PCG64 of
    the seed: uniform, exp of a uniform of the logs, an index of the choice; an integer's draw rounded. No seed is
    seed 0; bounds may be equal; an integer at int4's largest is taken."""
    spec = ('{"learning_rate": {"log_uniform": [0.001, 0.1]}, "iterations": {"uniform": [5, 50]}, '
            '"optimizer": ["gd", "adam"], "l2": {"uniform": [0.5, 2]}, "l1": {"uniform": [0.25, 0.25]}}')
    order = [('l1', 'uniform', [0.25, 0.25]), ('l2', 'uniform', [0.5, 2]), ('optimizer', 'choice', ['gd', 'adam']),
             ('iterations', 'uniform', [5, 50]), ('learning_rate', 'log_uniform', [0.001, 0.1])]

    def expected(seed, trials):
        generator = np.random.Generator(np.random.PCG64(seed))
        out = []
        for _ in range(trials):
            trial = {}
            for key, kind, values in order:
                if kind == 'choice':
                    trial[key] = values[int(generator.integers(len(values)))]
                elif kind == 'uniform':
                    trial[key] = float(generator.uniform(*values))
                else:
                    trial[key] = float(np.exp(generator.uniform(np.log(values[0]), np.log(values[1]))))
            trial['iterations'] = int(round(trial['iterations']))
            out.append(trial)
        return out

    def drawn(name, seed):
        return [p for p, in db.execute(
            "SELECT parameters FROM pgad.tune(%s, %s, 'squared', %s, %s, random => %s, trials => 3, seed => %s, "
            "validation => %s, options => '{\"progress_every\": 2147483647}') ORDER BY trial",
            (name, MODEL, TRAINING, WEIGHTS, spec, seed, HELD)).fetchall()]
    assert drawn('drawn7', 7) == expected(7, 3)
    one = db.execute("SELECT parameters FROM pgad.tune('drawn1', %s, 'squared', %s, %s, random => %s, trials => 1, "
                     "seed => 7, validation => %s)", (MODEL, TRAINING, WEIGHTS, spec, HELD)).fetchall()
    assert one == [(expected(7, 1)[0],)]
    assert drawn('drawn0', None) == expected(0, 3) != expected(1, 3)


def test_the_trials_notices_and_rows(db, ridge):
    """A NOTICE a trial: its parameters, and the metric (6 significant digits, null where it has none) with the
    version, or the error; a failed trial's row holds its parameters and the seconds it took."""
    notices, hints = [], []
    db.add_notice_handler(lambda d: (notices.append((d.severity_nonlocalized, d.message_primary)),
                                     hints.append(d.message_hint)))
    started = time.monotonic()
    found = db.execute("SELECT trial, version, parameters, value, extract(epoch FROM training_time)::float8 "
                       "FROM pgad.tune('noted', %s, 'squared', %s, %s, "
                       "grid => '{\"optimizer\": [\"lbfgs\", \"gd\"], \"learning_rate\": [0.05]}', "
                       "validation => %s) ORDER BY trial", (MODEL, TRAINING, WEIGHTS, HELD)).fetchall()
    elapsed = time.monotonic() - started
    assert found[0][2] == {'optimizer': 'lbfgs', 'learning_rate': 0.05}
    assert 0 <= found[0][4] <= found[0][4] + found[1][4] <= elapsed
    assert [n for n in notices if 'trial' in n[1]] == [
        ('NOTICE', 'model "noted": trial 1 of 2 {"optimizer": "lbfgs", "learning_rate": 0.05} failed: optimizer '
                   '"lbfgs" takes no learning_rate'),
        ('NOTICE', f'model "noted": trial 2 of 2 {{"optimizer": "gd", "learning_rate": 0.05}}: validation_loss '
                   f'{found[1][3]:.6g}, version {found[1][1]}')]
    notices.clear()
    found = db.execute("SELECT version, value, deployed FROM pgad.tune('constant', 'λ(d, w) w.a*d.x1 + w.c', "
                       "'squared', 'SELECT x1, 1.0::float8 AS y FROM ridge', '{\"a\": 0, \"c\": 0}', "
                       "grid => '{\"l2\": [0]}', validation => 0.3, metric => 'r2')").fetchall()
    assert found == [(1, None, False)]
    assert [n for n in notices if 'trial' in n[1]] == [
        ('NOTICE', 'model "constant": trial 1 of 1 {"l2": 0.0}: r2 null, version 1'),
        ('WARNING', 'model "constant": no trial has a value of metric "r2"; no version deployed')]
    assert hints[-1] == 'A metric is null where it is not finite or has nothing to divide by (r2 of a constant ' \
                        'label, roc_auc of one class).'


def test_a_trials_seed_is_the_tunes(db, ridge):
    """The tune's seed is each training's: a trial's validation rows and loss are pgad.train's with that seed."""
    value, = db.execute("SELECT value FROM pgad.tune('seeded', %s, 'squared', 'SELECT * FROM ridge', %s, "
                        "grid => '{\"l2\": [0.1]}', validation => 0.25, seed => 3)", (MODEL, WEIGHTS)).fetchone()
    metrics, = db.execute("SELECT metrics FROM pgad.train('seeded_alone', %s, 'squared', 'SELECT * FROM ridge', %s, "
                          "l2 => 0.1, validation => 0.25, seed => 3)", (MODEL, WEIGHTS)).fetchone()
    other, = db.execute("SELECT metrics FROM pgad.train('seeded_other', %s, 'squared', 'SELECT * FROM ridge', %s, "
                        "l2 => 0.1, validation => 0.25)", (MODEL, WEIGHTS)).fetchone()
    assert value == metrics['validation_loss'] != other['validation_loss']


@pytest.mark.parametrize('sqlstate', ['53200', '40001'])
def test_a_trial_out_of_memory_or_serialization_ends_the_tune(db, cluster, dbname, ridge, sqlstate):
    """Out of memory (pgad.memory_limit) and a serialization failure (a snapshot older than another transaction's
    training of the name) are not a failed trial: the tune ends at the first, with no NOTICE of a trial."""
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    tune = ("SELECT FROM pgad.tune('ended', %s, 'squared', 'SELECT * FROM ridge, pg_catalog.generate_series(1, 300)', "
            "%s, grid => '{\"l2\": [0, 1]}', validation => 0.3)")
    if sqlstate == '53200':
        with settings(db, {'pgad.memory_limit': '1MB'}):
            e = error_of(db, tune, (MODEL, WEIGHTS))
    else:
        db.execute('BEGIN ISOLATION LEVEL REPEATABLE READ')
        db.execute('SELECT count(*) FROM pgad.models')
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
            other.execute("SELECT FROM pgad.train('ended', %s, 'squared', %s, %s)", (MODEL, TRAINING, WEIGHTS))
        e = error_of(db, tune, (MODEL, WEIGHTS))
        db.execute('ROLLBACK')
        db.execute("SELECT pgad.drop_model('ended')")
    assert e.sqlstate == sqlstate
    assert not [n for n in notices if 'trial' in n], notices
