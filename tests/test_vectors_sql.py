"""Vectors and matrices through SQL, on a real server: matrix weights in and out of the jsonb, an MLP trained by
pgad.gradient_descent against the same descent in PyTorch, float8[] columns (NULL arrays, NULL elements, arrays of
other lengths or dimensions), the aggregates with vector literals, pgad.init_weights, and the errors."""
import json

import numpy as np
import psycopg
import pytest
import torch

from conftest import error_of

CLASSES = 3
ROWS = 90


@pytest.fixture(scope='module')
def tables(cluster, dbname):
    """blobs: 90 rows of three Gaussian blobs in x1, x2, x3 with label 0..2, and the same as a float8[] column x;
    arrays: rows with arrays of every kind a float8[] column can hold."""
    rng = np.random.default_rng(3)
    label = np.arange(ROWS) % CLASSES
    centres = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float64)
    x = centres[label] + rng.normal(0, 0.3, (ROWS, 3))
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE blobs (id int, x1 float8, x2 float8, x3 float8, x float8[], label int)')
        with db.cursor() as cur:
            cur.executemany('INSERT INTO blobs VALUES (%s, %s, %s, %s, %s, %s)',
                            [(k, *map(float, x[k]), list(map(float, x[k])), int(label[k])) for k in range(ROWS)])
        db.execute('CREATE TABLE arrays (id int, v float8[], i int[], y float8)')
        db.execute("INSERT INTO arrays VALUES (1, '{1, 2}', '{1, 2}', 1), (2, '{3, 4}', '{3, 4}', 2), "
                   "(3, NULL, NULL, 3), (4, '{5, NULL}', '{5, NULL}', 4), (5, '{0.5, 0.25}', '{6, 7}', 5)")
    return x, label


MLP = '(w.w2 @ relu(w.w1 @ [d.x1, d.x2, d.x3] + w.b1) + w.b2)'
CROSS_ENTROPY = f'λ(d, w) logsumexp({MLP}) - {MLP}[d.label + 1]'


def start_weights(hidden=5):
    rng = np.random.default_rng(7)
    return {'w1': rng.normal(0, 0.5, (hidden, 3)).tolist(), 'b1': [0.0] * hidden,
            'w2': rng.normal(0, 0.5, (CLASSES, hidden)).tolist(), 'b2': [0.0] * CLASSES}


def torch_descent(x, label, weights, learning_rate, iterations):
    """Full-batch gradient descent on the mean cross-entropy, in PyTorch, float64."""
    w = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    X, y = torch.tensor(x), torch.tensor(label)
    for _ in range(iterations):
        z = torch.relu(X @ w['w1'].T + w['b1']) @ w['w2'].T + w['b2']
        loss = torch.nn.functional.cross_entropy(z, y)
        grads = torch.autograd.grad(loss, list(w.values()))
        with torch.no_grad():
            for t, g in zip(w.values(), grads):
                t -= learning_rate * g
    with torch.no_grad():
        z = torch.relu(X @ w['w1'].T + w['b1']) @ w['w2'].T + w['b2']
        return {k: t.detach().numpy() for k, t in w.items()}, float(torch.nn.functional.cross_entropy(z, y)), \
            float((z.argmax(1) == y).double().mean())


@pytest.mark.parametrize('backend', ['python', 'llvm'])
def test_an_mlp_trains_as_in_pytorch(db, tables, backend):
    x, label = tables
    weights = start_weights()
    fitted, loss, iterations = db.execute(
        "SELECT (f).weights, (f).loss, (f).iterations FROM pgad.gradient_descent(%s, 'blobs', %s, 0.5, 40, "
        "backend => %s) AS f", (CROSS_ENTROPY, json.dumps(weights), backend)).fetchone()
    expected, expected_loss, accuracy = torch_descent(x, label, weights, 0.5, 40)
    assert iterations == 40 and sorted(fitted) == sorted(weights)
    for name in weights:
        assert np.shape(fitted[name]) == np.shape(weights[name])
        np.testing.assert_allclose(fitted[name], expected[name], rtol=1e-9, atol=1e-12)
    assert loss == pytest.approx(expected_loss, rel=1e-9) and accuracy > 0.9


def test_the_gradient_keeps_the_shapes(db, tables):
    x, label = tables
    weights = start_weights(2)
    grad = db.execute("SELECT pgad.gradient(%s, 'blobs', %s)", (CROSS_ENTROPY, json.dumps(weights))).fetchone()[0]
    w = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    z = torch.relu(torch.tensor(x) @ w['w1'].T + w['b1']) @ w['w2'].T + w['b2']
    expected = torch.autograd.grad(torch.nn.functional.cross_entropy(z, torch.tensor(label)), list(w.values()))
    for name, g in zip(weights, expected):
        np.testing.assert_allclose(grad[name], g.numpy(), rtol=1e-10, atol=1e-14)


def test_a_float8_array_column_is_a_vector(db, tables):
    """The same loss over the array column x as over [d.x1, d.x2, d.x3]."""
    weights = json.dumps({'v': [0.1, 0.2, 0.3], 'c': 0.5})
    from_array = db.execute("SELECT pgad.loss('λ(d, w) (w.v @ d.x + w.c - d.label)^2', 'blobs', %s)",
                            (weights,)).fetchone()[0]
    from_columns = db.execute("SELECT pgad.loss('λ(d, w) (w.v @ [d.x1, d.x2, d.x3] + w.c - d.label)^2', 'blobs', "
                              "%s)", (weights,)).fetchone()[0]
    assert from_array == pytest.approx(from_columns, rel=1e-14)


def test_null_arrays_and_null_elements_skip_their_rows(db, tables):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    loss = db.execute("SELECT pgad.loss('λ(d, w) (w.v @ d.v - d.y)^2', 'arrays', '{\"v\": [1, 0]}')").fetchone()[0]
    assert loss == pytest.approx(((1 - 1) ** 2 + (3 - 2) ** 2 + (0.5 - 5) ** 2) / 3)
    assert any('skipped 2 of 5 rows with NULL' in n for n in notices)
    ints = db.execute("SELECT pgad.loss('λ(d, w) sum(d.i * w.v)', 'SELECT i FROM arrays WHERE id <> 4', "
                      "'{\"v\": [1, 10]}')").fetchone()[0]
    assert ints == pytest.approx((21 + 43 + 76) / 3)  # an int[] column is a vector too


@pytest.mark.parametrize('data, message, detail', [
    ("SELECT * FROM (VALUES (ARRAY[1, 2]::float8[]), (ARRAY[3, 4]), (ARRAY[5]), (ARRAY[6])) AS t(v)",
     'column "v" has arrays of different lengths', "The first row's array has 2 elements; row 3's has 1."),
    ("SELECT * FROM (VALUES (NULL::float8[]), (ARRAY[1, 2]), (ARRAY[1, 2, 3])) AS t(v)",
     'column "v" has arrays of different lengths', "The first row's array has 2 elements; row 3's has 3."),
    ("SELECT * FROM (VALUES (ARRAY[1, 2]::float8[]), (ARRAY[[1, 2], [3, 4]])) AS t(v)",
     'column "v" has a 2-dimensional array in row 2 of the data', 'pgad reads a one-dimensional array as a vector.'),
    ("SELECT * FROM (VALUES (ARRAY[1, 2]::float8[]), ('[0:1]={3, 4}')) AS t(v)",
     'column "v" has an array that starts at index 0 in row 2 of the data', 'pgad reads arrays indexed from 1.'),
    ("SELECT * FROM (VALUES ('{}'::float8[]), ('{}')) AS t(v)", 'column "v" has an empty array in row 1 of the data',
     None),
    # an empty array among others (it has no dimensions: once "has a None-dimensional array"), and after a NULL
    ("SELECT * FROM (VALUES (ARRAY[1, 2, 3]::float8[]), (ARRAY[4, 5, 6]), ('{}')) AS t(v)",
     'column "v" has an empty array in row 3 of the data', None),
    ("SELECT * FROM (VALUES (NULL::float8[]), ('{}'), (ARRAY[1, 2])) AS t(v)",
     'column "v" has an empty array in row 2 of the data', None),
])
def test_arrays_of_another_shape_are_named_by_their_row(db, data, message, detail):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) sum(d.v * w.a)', %s, '{\"a\": 1}')", (data,))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == ('2202E', message, detail)
    assert diag.message_hint.startswith('Every row\'s "v" must be a one-dimensional array of the same length')


def test_every_array_null_is_no_row(db):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) sum(d.v * w.a)', 'SELECT NULL::float8[] AS v', '{\"a\": 1}')")
    assert (diag.sqlstate, diag.message_primary) == ('22000', 'every row of the data has NULL in column "v", which '
                                                               'the lambda reads')


def test_shape_errors_point_into_the_lambda(db, tables):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) sum(w.m @ [d.x1, d.x2])', 'blobs', '{\"m\": [[1, 2, 3]]}')")
    assert (diag.sqlstate, diag.message_primary) == ('2202E', 'cannot multiply a 1×3 matrix by a vector of 2 with @')
    assert (diag.message_detail, diag.internal_query, diag.internal_position) == (
        None, 'λ(d, w) sum(w.m @ [d.x1, d.x2])', str(len('λ(d, w) sum(w.m ') + 1))
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.v @ d.x', 'blobs', '{\"v\": [1, 2]}')")
    assert diag.message_primary == 'cannot multiply a vector of 2 by a vector of 3 with @'


def test_an_index_past_the_vector_is_an_error_that_names_the_row(db, tables):
    """A row's index outside the vector (label 3 of 3 classes, +1) makes the loss NaN there: the error says so."""
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) (w.v * d.x1)[d.label + 2]', 'blobs', '{\"v\": [1, 2, 3]}')")
    assert (diag.sqlstate, diag.message_primary) == ('2202E', 'index 4 is out of range for a vector of 3')
    assert diag.message_detail == 'The lambda computes d.label + 2 = 4 where d.label = 2.'
    assert diag.message_hint == 'Indexes run from 1 to 3: a 0-based label is written v[d.label + 1].'


def test_the_aggregates_take_vector_literals_and_matrices(db, tables):
    loss = 'λ(d, w) (w.v @ [d.x1, d.x2, d.x3] - d.label)^2'
    fitted = db.execute("SELECT (pgad.gradient_descent_agg(%s, '{\"v\": [0, 0, 0]}', b, "
                        "'{\"iterations\": 3}')).weights FROM blobs AS b", (loss,)).fetchone()[0]
    direct = db.execute("SELECT (pgad.gradient_descent(%s, 'blobs', '{\"v\": [0, 0, 0]}', 0.05, 3)).weights",
                        (loss,)).fetchone()[0]
    np.testing.assert_allclose(fitted['v'], direct['v'], rtol=1e-12)
    diag = error_of(db, "SELECT pgad.loss_agg('λ(d, w) sum(d.x)', '{}', b) FROM blobs AS b")
    assert (diag.sqlstate, diag.message_primary) == ('42804', 'column "x" is of type double precision[]: the aggregates take numbers')


# --- pgad.init_weights ---------------------------------------------------------------------------------------------

def test_init_weights_is_reproducible_and_shaped(db):
    shapes = '{"w1": [20, 4], "b1": [20], "w2": [3, 20], "b2": 3, "c": []}'
    first = db.execute('SELECT pgad.init_weights(%s)', (shapes,)).fetchone()[0]
    again = db.execute("SELECT pgad.init_weights(%s, 'glorot', 0)", (shapes,)).fetchone()[0]
    other = db.execute("SELECT pgad.init_weights(%s, seed => 1)", (shapes,)).fetchone()[0]
    assert first == again and first != other
    assert np.shape(first['w1']) == (20, 4) and np.shape(first['w2']) == (3, 20)
    assert first['b1'] == [0.0] * 20 and first['b2'] == [0.0] * 3 and first['c'] == 0.0
    bound = np.sqrt(6 / 24)
    assert np.all(np.abs(first['w1']) <= bound) and np.std(first['w1']) > bound / 3
    he = db.execute("SELECT pgad.init_weights('{\"m\": [200, 50]}', 'he')").fetchone()[0]
    assert np.std(he['m']) == pytest.approx(np.sqrt(2 / 50), rel=0.05)
    zeros = db.execute("SELECT pgad.init_weights('{\"m\": [2, 2]}', 'zeros')").fetchone()[0]
    assert zeros == {'m': [[0.0, 0.0], [0.0, 0.0]]}


@pytest.mark.parametrize('args, sqlstate, message', [
    ("'{\"m\": [2, 2]}', 'xavier'", '22023', 'unknown scheme "xavier"'),
    ("'{\"m\": [2, 2]}', 'glorot', -1", '22023', 'seed must be 0 or a positive integer, not -1'),
    ("'[2, 2]'", '22023', 'shapes must be a JSON object'),
    ("'{\"m\": [2, 0]}'", '22023', 'the shape of weight "m" must be [], [n] or [m, n] with positive n and m, not [2, 0]'),
    ("'{\"m\": [2, 2, 2]}'", '22023', 'the shape of weight "m" must be [], [n] or [m, n] with positive n and m, not '
                                      '[2, 2, 2]'),
    ("'{\"m\": \"2\"}'", '22023', 'the shape of weight "m" must be [], [n] or [m, n] with positive n and m, not "2"'),
    ("'{\"m\": [100000, 100000]}'", '54001', 'the shapes hold more than 100000 numbers'),
])
def test_init_weights_errors(db, args, sqlstate, message):
    diag = error_of(db, f'SELECT pgad.init_weights({args})')
    assert (diag.sqlstate, diag.message_primary) == (sqlstate, message)


# --- tape ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('tape', ['store', 'recompute'])
def test_every_tape_trains_the_same_network(db, tables, tape):
    weights = json.dumps(start_weights())
    run = "SELECT (f).weights, (f).loss FROM pgad.gradient_descent(%s, 'blobs', %s, 0.5, 10, tape => %s) AS f"
    fitted, loss = db.execute(run, (CROSS_ENTROPY, weights, tape)).fetchone()
    # the python backend: 'auto' gives this network the loop kernel too (its unrolled kernel compiles unvectorised)
    reference, reference_loss = db.execute(run.replace('tape => %s', "backend => 'python'"),
                                           (CROSS_ENTROPY, weights)).fetchone()
    assert loss == pytest.approx(reference_loss, rel=1e-12)
    for name in fitted:
        np.testing.assert_allclose(fitted[name], reference[name], rtol=1e-10, atol=1e-13)


def test_a_reversible_tape_gives_the_gradient_or_names_the_step(db, tables):
    grad = db.execute("SELECT pgad.gradient('λ(d, w) exp(w.a*d.x1 + w.b)', 'blobs', '{\"a\": 0.5, \"b\": -1}', "
                      "tape => 'reversible')").fetchone()[0]
    expected = db.execute("SELECT pgad.gradient('λ(d, w) exp(w.a*d.x1 + w.b)', 'blobs', '{\"a\": 0.5, \"b\": -1}')"
                          ).fetchone()[0]
    assert grad == pytest.approx(expected, rel=1e-12)
    diag = error_of(db, "SELECT pgad.gradient(%s, 'blobs', %s, tape => 'reversible')",
                    (CROSS_ENTROPY, json.dumps(start_weights())))
    assert (diag.sqlstate, diag.message_primary) == ('0A000', 'tape "reversible" cannot run "-" backwards')


@pytest.mark.parametrize('tape', ['auto', 'store', 'recompute', 'reversible'])
def test_an_array_column_read_only_in_a_branch_never_taken(db, tables, tape):
    """The loader loads x, which the lambda names only in a branch never taken: a loop kernel's arguments leave it
    out (they had it, with no elements to pack: XX000). 'auto' past 39 weights runs the loop kernel."""
    text = 'λ(d, w) CASE WHEN false THEN sum(d.x) ELSE sum(w.a) * d.x1 END'
    weights = json.dumps({'a': [0.01 * k for k in range(40)]})
    loss, grad = db.execute("SELECT pgad.loss(%s, 'blobs', %s), pgad.gradient(%s, 'blobs', %s, tape => %s)",
                            (text, weights, text, weights, tape)).fetchone()
    expected = db.execute("SELECT pgad.gradient(%s, 'blobs', %s, backend => 'python')", (text, weights)).fetchone()[0]
    assert loss == pytest.approx(sum(0.01 * k for k in range(40)) * float(db.execute(
        'SELECT avg(x1) FROM blobs').fetchone()[0]), rel=1e-12)  # the mean loss
    np.testing.assert_allclose(grad['a'], expected['a'], rtol=1e-12)


def test_a_reversible_tape_recovers_exactly_or_names_the_step(db, tables):
    """The reverse sweep recovers a value by its own step again or an exact inverse (negation), never by one that
    rounds or loses it: logsumexp(w.v)'s exps once read unset slots (a NaN gradient), and x = out / y for a column
    y of zeros, ln(out) for an exp underflowed to 0, gave NaN or wrong gradients."""
    weights = '{"v": [0.5, -1, 2], "a": -1000}'
    for text in ('λ(d, w) logsumexp(w.v) * d.x1', 'λ(d, w) -exp(w.a * d.x1 - 800)'):  # exp underflows to 0 here
        got = db.execute("SELECT pgad.gradient(%s, 'blobs', %s, tape => 'reversible')", (text, weights)).fetchone()[0]
        stored = db.execute("SELECT pgad.gradient(%s, 'blobs', %s, tape => 'store')", (text, weights)).fetchone()[0]
        # the store tape sums a tile's rows in another order: equal but for the last bits, and finite
        assert got.keys() == stored.keys() and all(np.all(np.isfinite(got[k])) for k in got), (text, got)
        for k in got:
            np.testing.assert_allclose(got[k], stored[k], rtol=1e-12, err_msg=text)
    for text, step in [('λ(d, w) exp(w.a * d.x1) * (d.x2 - d.x2)', '*'),  # y = 0: out / y is NaN
                       ('λ(d, w) ln(exp(w.a * d.x1 - 800) + 1)', 'ln'),     # exp underflows: ln(0) = -inf
                       ('λ(d, w) tanh(w.a * d.x1) + 1e20', '+')]:           # x + y loses x
        diag = error_of(db, "SELECT pgad.gradient(%s, 'blobs', %s, tape => 'reversible')", (text, weights))
        assert (diag.sqlstate, diag.message_primary) == ('0A000', f'tape "reversible" cannot run "{step}" backwards')


@pytest.mark.parametrize('args, message', [
    ("tape => 'tiled'", 'unknown tape "tiled"'),
    ("mode => 'forward', tape => 'store'", 'tape "store" is not available in mode "forward"'),
    ("backend => 'python', tape => 'recompute'", 'tape "recompute" is not available on backend "python"'),
])
def test_tape_errors(db, tables, args, message):
    diag = error_of(db, f"SELECT pgad.gradient('λ(d, w) w.a*d.x1', 'blobs', '{{\"a\": 1}}', {args})")
    assert (diag.sqlstate, diag.message_primary) == ('22023', message)


# --- pgad.train ------------------------------------------------------------------------------------------------------

MODEL = 'λ(d, w) w.w2 @ relu(w.w1 @ [d.x1, d.x2, d.x3] + w.b1) + w.b2'
CROSS_ENTROPY_LOSS = 'λ(p, d) logsumexp(p) - p[d.label + 1]'


def test_train_an_mlp_and_score_it_in_sql(db, tables):
    """The network of the tests above through pgad.train: the same fit as pgad.gradient_descent, stored in its
    shapes, and a scoring function that returns the logits as a float8[], equal to numpy's."""
    x, label = tables
    weights = json.dumps(start_weights())
    stored = db.execute("SELECT weights, iterations FROM pgad.train('blobs_mlp', %s, %s, 'blobs', %s, "
                        "learning_rate => 0.5, iterations => 40)", (MODEL, CROSS_ENTROPY_LOSS, weights)).fetchone()
    fitted, _, _ = db.execute("SELECT (f).weights, (f).loss, (f).iterations FROM pgad.gradient_descent(%s, 'blobs', "
                              "%s, 0.5, 40) AS f", (CROSS_ENTROPY, weights)).fetchone()
    assert stored[1] == 40
    for name in fitted:
        np.testing.assert_allclose(stored[0][name], fitted[name], rtol=1e-10, atol=1e-13)
    scores = db.execute('SELECT pgad_models.blobs_mlp(x1, x2, x3) FROM blobs ORDER BY id').fetchall()
    w = {k: np.array(v) for k, v in stored[0].items()}
    expected = np.maximum(x @ w['w1'].T + w['b1'], 0) @ w['w2'].T + w['b2']
    np.testing.assert_allclose(np.array([s for s, in scores]), expected, rtol=1e-12, atol=1e-12)
    predicted = db.execute('SELECT avg((array_position(s, (SELECT max(v) FROM unnest(s) AS v)) - 1 = label)::int) '
                           'FROM (SELECT pgad_models.blobs_mlp(x1, x2, x3) AS s, label FROM blobs) AS t').fetchone()[0]
    assert predicted > 0.9


def test_train_reads_an_array_column(db, tables):
    db.execute("SELECT pgad.train('blobs_linear', 'λ(d, w) w.v @ d.x + w.c', 'squared', 'blobs', "
               "'{\"v\": [0, 0, 0], \"c\": 0}', label => 'label', iterations => 5)")
    signature, returns = db.execute("SELECT p.oid::regprocedure::text, p.prorettype::regtype::text FROM pg_proc AS p "
                                    "WHERE p.proname = 'blobs_linear'").fetchone()
    assert (signature, returns) == ('pgad_models.blobs_linear(double precision[])', 'double precision')
    w = db.execute("SELECT weights FROM pgad.models WHERE name = 'blobs_linear'").fetchone()[0]
    score = db.execute("SELECT pgad_models.blobs_linear(ARRAY[1, 2, 3]::float8[])").fetchone()[0]
    assert score == pytest.approx(np.dot(w['v'], [1, 2, 3]) + w['c'], rel=1e-12)


@pytest.mark.parametrize('name, model, loss, returns', [
    ('arrays_relu', 'λ(d, w) sum(relu(w.m @ d.v))', 'squared', 'double precision'),
    ('arrays_logits', 'λ(d, w) relu(w.m @ d.v)', 'λ(p, d) (sum(p) - d.y)^2', 'double precision[]'),
    ('arrays_extremes', 'λ(d, w) greatest(w.m @ d.v, 0) + least(d.v, 1)', 'λ(p, d) (sum(p) - d.y)^2',
     'double precision[]'),
])
def test_a_scoring_function_takes_the_arrays_training_takes(db, tables, name, model, loss, returns):
    """Issue 34, item 5c: training skips a row whose array is NULL or holds a NULL, and refuses an array that is not
    one-dimensional from index 1 with the model's length; the scoring function gives NULL for the first and 2202E for
    the second (GREATEST and LEAST skip NULLs, and v[1] of a 2-D array is NULL: it gave a number for all four)."""
    db.execute("SELECT pgad.train(%s, %s, %s, 'arrays', '{\"m\": [[1, 0.5], [0.25, -1]]}', iterations => 3)",
               (name, model, loss))
    assert db.execute('SELECT prorettype::regtype::text FROM pg_proc WHERE proname = %s', (name,)).fetchone()[0] \
        == returns
    score = lambda v: db.execute(f'SELECT pgad_models.{name}({v}::float8[])').fetchone()[0]  # noqa: E731
    assert score("'{1, 2}'") is not None
    for v in ['NULL', "'{1, NULL}'", "'{NULL, 2}'", "'{NULL, NULL}'"]:
        assert score(v) is None, v
    for v, message in [("'{{1}, {2}}'", 'array argument "v[1:2][1:1]" has 2 elements, the model reads 2'),
                       ("'[0:1]={1, 2}'", 'array argument "v[0:1]" has 2 elements, the model reads 2'),
                       ("'[2:3]={1, 2}'", 'array argument "v[2:3]" has 2 elements, the model reads 2'),
                       ("'{{1, 2}, {3, 4}}'", 'array argument "v" has 4 elements, the model reads 2'),
                       ("'{1, 2, 3}'", 'array argument "v" has 3 elements, the model reads 2'),
                       ("'{}'", 'array argument "v" has 0 elements, the model reads 2')]:
        diag = error_of(db, f'SELECT pgad_models.{name}({v}::float8[])')
        assert (diag.sqlstate, diag.message_primary) == ('2202E', message), v
    inlined = db.execute(f'EXPLAIN (VERBOSE) SELECT pgad_models.{name}(v) FROM arrays').fetchall()
    assert not any(name in line for line, in inlined)  # still inlined: the expression, not a call


def test_train_refuses_what_it_cannot_do_with_vectors(db, tables):
    diag = error_of(db, "SELECT pgad.train('m', %s, %s, 'blobs', %s, group_by => 'id')",
                    (MODEL, CROSS_ENTROPY_LOSS, json.dumps(start_weights())))
    assert (diag.sqlstate, diag.message_primary) == ('0A000', 'pgad.train takes no group_by for a model with vectors')
    diag = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.m * d.x1', 'λ(p, d) sum(p)', 'blobs', "
                        "'{\"m\": [[1, 2], [3, 4]]}')")
    assert (diag.sqlstate, diag.message_primary) == ('0A000', 'pgad.train takes a model whose prediction is a number '
                                                              'or a vector, not a 2×2 matrix')


# --- pgad.derivatives and pgad.explain at the shapes -------------------------------------------------------------

def test_derivatives_of_vectors_are_vector_expressions(db, tables):
    found = dict(db.execute("SELECT * FROM pgad.derivatives('λ(d, w) sum((w.m @ d.x - [d.label, 1, 0])^2)', "
                            "'{\"m\": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}', 'blobs')").fetchall())
    assert found == {'m': 'outer(2*(w.m @ d.x - [d.label, 1, 0]), d.x)'}
    diag = error_of(db, "SELECT * FROM pgad.derivatives('λ(d, w) sum(w.m @ [d.x1, d.x2])')")
    assert (diag.sqlstate, diag.message_primary) == ('2202E', 'cannot multiply a number by a vector of 2 with @')


def test_explain_shows_the_shapes_the_kernel_and_the_vector_derivatives(db, tables):
    for tape in ('auto', 'store', 'recompute'):
        stages = dict((s, d) for s, d, _ in db.execute(
            "SELECT * FROM pgad.explain(%s, backend => 'llvm', weights => %s, tape => %s)",
            (CROSS_ENTROPY, json.dumps(start_weights()), tape)).fetchall())
        assert list(stages) == ['parse', 'vectors', 'differentiate', 'backend', 'IR generation', 'optimisation',
                                'machine code']
        assert stages['vectors'].startswith('shapes: b1 vector of 5, b2 vector of 3, w1 5×3 matrix, w2 3×5 matrix')
        # 'auto': the loop kernel, since this network's unrolled kernel (243 nodes, 38 outputs) compiles unvectorised
        assert stages['vectors'].endswith(f'loops, tape "{"store" if tape == "auto" else tape}"')
        assert '∂/∂w2 = outer(' in stages['differentiate']
