"""pgad.train's defaults and its label checks (issue 28 §5), against a real server: the defaults reach the optimum
on columns in their natural units (dollars, square feet, rooms), where gradient descent at learning rate 0.05
diverges; the named losses refuse labels they do not take."""
import numpy as np
import psycopg
import pytest

from conftest import error_of

HOUSE = 'λ(d, w) w.a*d.sqft + w.b*d.rooms + w.c'
START = '{"a": 0, "b": 0, "c": 0}'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    rng = np.random.default_rng(28)
    sqft = rng.uniform(500, 4000, 500)
    rooms = rng.integers(1, 7, 500).astype(float)
    price = 50000 + 120 * sqft + 8000 * rooms + rng.normal(0, 20000, 500)
    x1, x2 = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-(0.5 + 1.5 * x1 - 2 * x2)))).astype(float)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE sales (id int, sqft float8, rooms float8, price float8)')
        with db.cursor().copy('COPY sales FROM STDIN') as copy:
            for row in zip(range(500), sqft, rooms, price):
                copy.write_row(row)
        db.execute('CREATE TABLE clicks (id int, x1 float8, x2 float8, y float8, region text)')
        with db.cursor().copy('COPY clicks FROM STDIN') as copy:
            for row in zip(range(400), x1, x2, y, ['north' if k % 2 else 'south' for k in range(400)]):
                copy.write_row(row)


def weights(db, sql, params=()):
    return db.execute(sql, params).fetchone()[0]


def test_the_defaults_reach_least_squares_on_prices_in_dollars(db):
    """Only name, model, loss, data, weights and label: L-BFGS by default, to lstsq's weights within 1e-6
    relative (gd at learning rate 0.05, the default before 0.11.0, overflows at once on these columns)."""
    row = db.execute("SELECT weights, options FROM pgad.train('prices', %s, 'squared', 'sales', %s, label => 'price')",
                     (HOUSE, START)).fetchone()
    data = np.array(db.execute('SELECT sqft, rooms, price FROM sales ORDER BY id').fetchall())
    a = np.column_stack([data[:, 0], data[:, 1], np.ones(len(data))])
    expected = np.linalg.lstsq(a, data[:, 2], rcond=None)[0]
    got = np.array([row[0][k] for k in 'abc'])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert row[1]['optimizer'] == 'newton' and row[1]['iterations'] == 100  # three weights: newton, until converged
    assert 'training diverged' in error_of(db, "SELECT pgad.train('prices_gd', %s, 'squared', 'sales', %s, "
                                               "label => 'price', optimizer => 'gd')", (HOUSE, START)).message_primary


def test_the_defaults_reach_the_maximum_likelihood_of_logistic_regression(db):
    """The logistic default against an unpenalised Newton's method on the same rows (what statsmodels' Logit and
    scikit-learn's LogisticRegression(penalty=None) compute), within 1e-5 relative."""
    row = db.execute("SELECT weights FROM pgad.train('clicks', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'logistic', "
                     "'clicks', %s)", (START,)).fetchone()
    data = np.array(db.execute('SELECT x1, x2, y FROM clicks ORDER BY id').fetchall())
    x, y = np.column_stack([data[:, 0], data[:, 1], np.ones(len(data))]), data[:, 2]
    beta = np.zeros(3)
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ beta))
        beta += np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]), x.T @ (y - p))
    np.testing.assert_allclose([row[0][k] for k in 'abc'], beta, rtol=1e-5)


def test_a_learning_rate_or_l1_keeps_gradient_descent(db):
    """Callers who give a learning_rate (or l1, which lbfgs does not take) get 'gd' as before."""
    for option in ('learning_rate => 0.1', 'l1 => 0.001'):
        options = weights(db, f"SELECT options FROM pgad.train('keep', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', "
                              f"'clicks', '{{\"a\": 0, \"c\": 0}}', {option})")
        assert options['optimizer'] == 'gd' and options['iterations'] == 100


@pytest.mark.parametrize('loss, data, first, count', [
    ('logistic', 'SELECT x1, x2, 2 * y - 1 AS y FROM clicks', -1, None),
    ('logistic', 'SELECT x1, x2, CASE WHEN id = 7 THEN 0.5 ELSE y END AS y FROM clicks', 0.5, 1),
    ('hinge', 'SELECT x1, x2, y FROM clicks', 0, None),
])
def test_a_named_loss_refuses_labels_it_does_not_take(db, loss, data, first, count):
    """The first bad label and how many rows have one, before any iteration (today −1/1 labels under logistic
    train silently to a loss of −3.5e10)."""
    bad = int(db.execute(f'SELECT count(*) FROM ({data}) AS d WHERE y <> ALL (%s)',
                         ([0, 1] if loss == 'logistic' else [-1, 1],)).fetchone()[0])
    e = error_of(db, "SELECT pgad.train('labelled', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', %s, %s, %s)",
                 (loss, data, START))
    assert e.sqlstate == '22023'
    assert f'loss "{loss}" takes labels' in e.message_primary and f'column "y" is {first:g}' in e.message_primary
    assert f'{count or bad} of 400 rows' in e.message_detail
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'labelled'").fetchone()[0] == 0


def test_labels_are_checked_per_group_and_the_message_names_the_group(db):
    e = error_of(db, "SELECT pgad.train('grouped', 'λ(d, w) w.a*d.x1 + w.c', 'logistic', "
                     "'SELECT x1, region, CASE WHEN region = ''south'' THEN y ELSE 2 * y - 1 END AS y FROM clicks', "
                     "'{\"a\": 0, \"c\": 0}', group_by => 'region')")
    assert e.sqlstate == '22023'
    assert e.message_primary.startswith('model "grouped", group {"region": "north"}: loss "logistic" takes labels')


def test_minus_one_one_labels_train_under_hinge(db):
    row = db.execute("SELECT final_loss FROM pgad.train('hinged', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'hinge', "
                     "'SELECT x1, x2, 2 * y - 1 AS y FROM clicks', %s)", (START,)).fetchone()
    assert 0 < row[0] < 1


def by_hand_split(db, seed, fraction=0.2):
    """The rows of sales that validation => fraction holds out, by pgad's own split (validation.split)."""
    from pgad.loader import Table
    from pgad.models import validation
    data = np.array(db.execute('SELECT sqft, rooms, price FROM sales ORDER BY id').fetchall())
    table = Table([np.ascontiguousarray(data[:, k]) for k in range(3)], len(data), 0)
    trained, held = validation.split(table, fraction, seed)
    return np.column_stack(trained.columns), np.column_stack(held.columns)


def test_validation_holds_out_a_fraction_by_a_hash_of_the_row_and_seed(db):
    """The training loss excludes the held-out rows (its optimum is lstsq's on the others), the validation history
    is the mean squared error on them, the same seed gives the same split, in any row order."""
    query = "SELECT weights, final_loss, rows, validation_history, options FROM pgad.train('held', %s, 'squared', " \
            "%s, %s, label => 'price', validation => 0.2, seed => 5)"
    first = db.execute(query, (HOUSE, 'sales', START)).fetchone()
    again = db.execute(query, (HOUSE, 'SELECT * FROM sales ORDER BY price DESC', START)).fetchone()
    trained, held = by_hand_split(db, 5)
    assert first[2] == again[2] == len(trained) and 60 < len(held) < 140
    a = np.column_stack([trained[:, 0], trained[:, 1], np.ones(len(trained))])
    expected = np.linalg.lstsq(a, trained[:, 2], rcond=None)[0]
    np.testing.assert_allclose([first[0][k] for k in 'abc'], expected, rtol=1e-6)
    np.testing.assert_allclose([again[0][k] for k in 'abc'], expected, rtol=1e-6)
    mse = np.mean((held[:, 0] * first[0]['a'] + held[:, 1] * first[0]['b'] + first[0]['c'] - held[:, 2]) ** 2)
    assert first[3][-1] == pytest.approx(mse, rel=1e-9)
    assert first[4]['validation'] == 0.2
    other = db.execute(query.replace('seed => 5', 'seed => 6'), (HOUSE, 'sales', START)).fetchone()
    assert other[2] != first[2] or other[0] != first[0]


def test_validation_takes_a_query_and_a_fraction_as_text_or_number(db):
    """validation => 'SELECT …' (text) and validation => 0.2 (numeric) through one anycompatible parameter."""
    row = db.execute("SELECT rows, validation_history FROM pgad.train('queried', %s, 'squared', "
                     "'SELECT * FROM sales WHERE id < 400', %s, label => 'price', "
                     "validation => 'SELECT * FROM sales WHERE id >= 400')", (HOUSE, START)).fetchone()
    assert row[0] == 400 and len(row[1]) >= 1
    no = db.execute("SELECT validation_history FROM pgad.train('unvalidated', %s, 'squared', 'sales', %s, "
                    "label => 'price')", (HOUSE, START)).fetchone()
    assert no[0] is None


@pytest.mark.parametrize('optimizer', ['gd', 'sgd', 'momentum', 'adam', 'lbfgs', 'newton'])
def test_every_optimizer_records_the_validation_loss_after_each_iteration(db, optimizer):
    """The validation history has one entry an iteration (epoch), the last the mean squared error on the held-out
    rows at the fitted weights, whichever optimizer trains."""
    rate = '' if optimizer in ('lbfgs', 'newton') else 'learning_rate => 0.01, '  # they take none (22023)
    weights, iterations, history = db.execute(
        "SELECT weights, iterations, validation_history FROM pgad.train('watched', %s, 'squared', 'sales', %s, "
        f"label => 'price', optimizer => %s, standardize => true, {rate}iterations => 5, "
        "validation => 'SELECT * FROM sales WHERE id >= 400')", (HOUSE, START, optimizer)).fetchone()
    held = np.array(db.execute('SELECT sqft, rooms, price FROM sales WHERE id >= 400').fetchall())
    mse = np.mean((held[:, 0] * weights['a'] + held[:, 1] * weights['b'] + weights['c'] - held[:, 2]) ** 2)
    assert len(history) == iterations >= 1
    assert history[-1] == pytest.approx(mse, rel=1e-9)


def test_early_stopping_keeps_the_weights_of_the_lowest_validation_loss(db):
    """gd on standardised columns overfits nothing here, so a validation query that disagrees with the training
    rows (prices doubled) has its lowest loss early: training stops `early_stopping` epochs after it, and the
    weights are those of that iteration (the final loss its training objective)."""
    row = db.execute("SELECT options, final_loss, loss_history, validation_history, iterations FROM pgad.train("
                     "'stopped', %s, 'squared', 'sales', %s, label => 'price', optimizer => 'gd', "
                     "learning_rate => 0.1, standardize => true, iterations => 500, early_stopping => 3, "
                     "validation => 'SELECT sqft, rooms, 2 * price - 150000 AS price FROM sales')",
                     (HOUSE, START)).fetchone()
    options, final, history, validation_history, iterations = row
    assert (options['early_stopping'], options['validation']) == (3, 'SELECT sqft, rooms, 2 * price - 150000 AS price '
                                                                      'FROM sales')
    best = int(np.argmin(validation_history))
    assert iterations == len(history) == len(validation_history) == best + 4 < 500
    assert final == pytest.approx(history[best], rel=1e-12)


def test_early_stopping_needs_validation_and_a_bad_fraction_is_refused(db):
    e = error_of(db, "SELECT pgad.train('x', %s, 'squared', 'sales', %s, label => 'price', early_stopping => 3)",
                 (HOUSE, START))
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22023', 'early_stopping needs validation rows',
        "Give validation => 0.2 (a fraction of the rows held out) or validation => 'SELECT …'.")
    e = error_of(db, "SELECT pgad.train('x', %s, 'squared', 'sales', %s, label => 'price', validation => 1.5)",
                 (HOUSE, START))
    assert e.sqlstate == '22023' and e.message_primary.startswith('validation must be a fraction')


@pytest.mark.parametrize('option, message', [
    ("validation => 0", 'validation must be a fraction between 0 and 1 or a query, not 0.0'),
    ("validation => 1", 'validation must be a fraction between 0 and 1 or a query, not 1.0'),
    ("validation => 0.2, early_stopping => 0", 'early_stopping must be a positive integer, not 0'),
])
def test_the_bounds_of_validation_and_early_stopping(db, option, message):
    """A fraction strictly between 0 and 1 (its HINT says how), early_stopping from 1 (which trains)."""
    e = error_of(db, f"SELECT pgad.train('x', %s, 'squared', 'sales', %s, label => 'price', {option})",
                 (HOUSE, START))
    assert (e.sqlstate, e.message_primary) == ('22023', message)
    if message.startswith('validation'):
        assert e.message_hint == ("Write validation => 0.2 to hold out a fifth of the rows, or validation => "
                                  "'SELECT …' with the columns of the data.")
    assert db.execute("SELECT iterations FROM pgad.train('one', %s, 'squared', 'sales', %s, label => 'price', "
                      "validation => 0.2, early_stopping => 1, seed => 3)", (HOUSE, START)).fetchone()[0] >= 1


def test_validation_and_early_stopping_per_group(db):
    rows = db.execute("SELECT group_key, rows, validation_history FROM pgad.train('grouped_held', "
                      "'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'logistic', 'clicks', %s, group_by => 'region', "
                      "validation => 0.25, early_stopping => 5, seed => 1) ORDER BY group_key::text",
                      (START,)).fetchall()
    assert [r[0] for r in rows] == [{'region': 'north'}, {'region': 'south'}]
    assert all(100 < r[1] < 200 and r[2] for r in rows)
