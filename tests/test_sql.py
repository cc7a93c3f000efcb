"""The SQL functions against a real PostgreSQL server: values, training, data handling, and every bad input."""
import json
import math
import re
import threading
import time

import numpy as np
import psycopg
import pytest

from conftest import error_of
from test_boundaries import BOUNDARIES


def diverging_hint(rate):
    """The HINT of a training that diverges at learning rate `rate` (descent.diverging)."""
    return (f"Try a smaller learning_rate than {rate}, or pgad.train's optimizer => 'lbfgs' (a line search "
            "instead of a learning rate) or standardize => true.")


LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
WEIGHTS = {'a': 0.7, 'b': -0.3}


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE points AS SELECT x::float8 AS x, (2*x + 1 + 0.1*sin(17*x))::float8 AS y "
                   "FROM generate_series(0, 2, 0.01) AS x")
        db.execute("CREATE TABLE mixed (i int, s smallint, b bigint, r real, n numeric, f float8, t text, "
                   "\"Upper\" float8)")
        db.execute("INSERT INTO mixed SELECT g, g, g, g / 4.0, g / 3.0, g / 7.0, 'row ' || g, g "
                   "FROM generate_series(1, 50) AS g")
        db.execute("CREATE TABLE with_nulls AS SELECT * FROM points")
        db.execute("UPDATE with_nulls SET y = NULL WHERE x < 0.05")
        db.execute("CREATE VIEW points_view AS SELECT x, y FROM points WHERE x > 1")


def scalar(db, sql, params=None):
    return db.execute(sql, params).fetchone()[0]


def test_readme_example(db):
    weights, loss, iterations = db.execute(
        "SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'SELECT x, y FROM points', "
        "'{\"a\": 0, \"b\": 0}')").fetchone()
    assert iterations == 100
    # 100 steps of w ← w − 0.05·∇mean((a·x + b − y)²) from 0, by hand in numpy, and the loss at the result
    x, y = np.array(db.execute('SELECT x, y FROM points').fetchall()).T
    w = np.zeros(2)
    for _ in range(100):
        r = w[0] * x + w[1] - y
        w = w - 0.05 * np.array([2 * np.mean(r * x), 2 * np.mean(r)])
    assert weights == pytest.approx({'a': w[0], 'b': w[1]}, rel=1e-12)
    assert loss == pytest.approx(np.mean((w[0] * x + w[1] - y) ** 2), rel=1e-12)


def test_rows_with_null_count_for_nothing(db):
    """loss, gradient and gradient_descent over data with NULL rows equal the same calls without those rows."""
    with_nulls, without = 'with_nulls', 'SELECT x, y FROM with_nulls WHERE y IS NOT NULL'
    for function in ('loss', 'gradient'):
        got, expected = [scalar(db, f'SELECT pgad.{function}(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS)))
                         for data in (with_nulls, without)]
        assert got == pytest.approx(expected, rel=1e-14), function
    got, expected = [db.execute('SELECT * FROM pgad.gradient_descent(%s, %s, %s, iterations => 3)',
                                (LINEAR, data, json.dumps(WEIGHTS))).fetchone() for data in (with_nulls, without)]
    assert got[0] == pytest.approx(expected[0], rel=1e-14) and got[1:] == pytest.approx(expected[1:], rel=1e-14)


# --- primal values against PostgreSQL's own evaluation of the same expression -----------------------------------
# Each pair: the lambda's body, and the same expression in SQL over `d` (the data) and `w` (one row of weights).
# Most bodies are SQL already; sigmoid, relu and softplus, which SQL lacks, are spelt out.
PRIMAL = [
    ('(w.a*d.x + w.b - d.y)^2', None),
    ('-w.a^2 + d.x^3^0.5', None),
    ('d.x/2 - w.b/d.y', None),
    ('exp(w.a*d.x) + ln(d.y) + log(d.y) + sqrt(d.x + 1) + cbrt(d.x - 1)', None),
    ('log(2, d.y) * power(d.y, w.a)', 'log(2, d.y::numeric)::float8 * power(d.y, w.a)'),
    ('abs(d.x - 1) + sign(d.x - 1) + greatest(d.x, w.a, d.y / 3) - least(d.x, w.b)', None),
    ('sin(d.x) + cos(w.a*d.x) + tan(d.x / 4) + asin(d.x / 3) + acos(d.x / 3) + atan(d.y) + atan2(d.y, w.b)', None),
    ('sinh(d.x) + cosh(w.a) * tanh(d.y - 2)', None),
    ('sigmoid(w.a*d.x + w.b) + relu(d.x - 1) + softplus(d.y - 2)',
     '1/(1 + exp(-(w.a*d.x + w.b))) + greatest(d.x - 1, 0) + ln(1 + exp(d.y - 2))'),
    ('CASE WHEN d.x > 1 AND NOT d.y < 3 OR d.x = 0 THEN w.a*d.x WHEN d.x <> 0.5 THEN d.y ELSE 7 END', None),
    ('1/2 + d.x', '0.5 + d.x'),
    ('CASE WHEN d.x <= 1 OR d.y >= 2.5 AND d.x != 0.25 THEN d.x ELSE -d.y END', None),
    # = and <> of booleans
    ('CASE WHEN (d.x > 1) = (d.y > 2.5) THEN d.x WHEN (d.x < 0.5) <> true THEN d.y ELSE w.a END', None),
    ('CASE WHEN true = false OR (d.x > 1) != (w.a > 0) THEN 1 ELSE 2 END', None),
    # % at the precedence of * and /, the sign of the dividend: PostgreSQL has % of numeric, not of float8
    ('(7*d.x - 5) % 3 + d.y % w.a * 2 - 2 * d.x % 1.5',
     'mod((7*d.x - 5)::numeric, 3)::float8 + mod(d.y::numeric, w.a::numeric)::float8 * 2 '
     '- mod((2*d.x)::numeric, 1.5)::float8'),
]


@pytest.mark.parametrize('body, sql', PRIMAL)
def test_loss_equals_postgres_avg_of_the_same_expression(db, body, sql):
    weights_row = ', '.join(f'{v}::float8 AS {k}' for k, v in WEIGHTS.items())
    expected = scalar(db, f"SELECT avg({sql or body}) FROM points AS d, (SELECT {weights_row}) AS w")
    got = scalar(db, 'SELECT pgad.loss(%s, %s, %s)', ('λ(d, w) ' + body, 'points', json.dumps(WEIGHTS)))
    assert got == pytest.approx(float(expected), rel=1e-12, abs=1e-300)


def test_gradient_has_exactly_the_keys_of_the_weights(db):
    grad = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)', (LINEAR, 'points', '{"a": 1, "b": 2, "unused": 3}'))
    assert set(grad) == {'a', 'b', 'unused'} and grad['unused'] == 0


@pytest.mark.parametrize('body', [body for body, _ in PRIMAL])
def test_forward_equals_reverse_from_sql(db, body):
    args = ('λ(d, w) ' + body, 'points', json.dumps(WEIGHTS))
    forward = scalar(db, "SELECT pgad.gradient(%s, %s, %s, 'forward', 'python')", args)
    reverse = scalar(db, "SELECT pgad.gradient(%s, %s, %s, mode => 'reverse')", args)
    for k in WEIGHTS:
        assert forward[k] == pytest.approx(reverse[k], rel=1e-10, abs=1e-12)


def test_gradient_matches_the_closed_form_for_linear_regression(db):
    x, y = np.array(db.execute('SELECT x, y FROM points').fetchall()).T
    a, b = WEIGHTS['a'], WEIGHTS['b']
    r = a * x + b - y
    grad = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)', (LINEAR, 'points', json.dumps(WEIGHTS)))
    assert grad['a'] == pytest.approx(np.mean(2 * r * x), rel=1e-12)
    assert grad['b'] == pytest.approx(np.mean(2 * r), rel=1e-12)


def test_derivatives_are_readable_and_simplified(db):
    rows = dict(db.execute("SELECT * FROM pgad.derivatives(%s)", (LINEAR,)).fetchall())
    assert rows == {'a': 'd.x*(2*(w.a*d.x + w.b - d.y))', 'b': '2*(w.a*d.x + w.b - d.y)'}


# --- training --------------------------------------------------------------------------------------------------
def test_gradient_descent_recovers_linear_regression(db):
    db.execute("CREATE TEMP TABLE lin AS SELECT x1, x2, 3*x1 - 2*x2 + 0.5 + 0.01*(random() - 0.5) AS y FROM "
               "(SELECT random() AS x1, random() AS x2 FROM generate_series(1, 2000)) AS s")
    x1, x2, y = np.array(db.execute('SELECT x1, x2, y FROM lin').fetchall()).T
    expected = np.linalg.lstsq(np.c_[x1, x2, np.ones_like(x1)], y, rcond=None)[0]
    for mode in ('forward', 'reverse'):
        weights, loss, iterations = db.execute(
            "SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c - d.y)^2', 'lin', "
            "'{\"a\": 0, \"b\": 0, \"c\": 0}', learning_rate => 0.5, iterations => 5000, mode => %s)",
            (mode,)).fetchone()
        assert iterations == 5000
        assert [weights[k] for k in 'abc'] == pytest.approx(expected, abs=1e-6)


def test_gradient_descent_recovers_logistic_regression(db):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 2))
    p = 1 / (1 + np.exp(-(1.5 * x[:, 0] - 2 * x[:, 1] + 0.3)))
    y = (rng.random(3000) < p).astype(float)
    db.execute('CREATE TEMP TABLE logit (x1 float8, x2 float8, y float8)')
    with db.cursor().copy('COPY logit FROM STDIN') as copy:
        for row in zip(x[:, 0], x[:, 1], y):
            copy.write_row(row)
    # the maximum-likelihood fit, by Newton's method in numpy
    X, beta = np.c_[x, np.ones(len(x))], np.zeros(3)
    for _ in range(30):
        mu = 1 / (1 + np.exp(-X @ beta))
        beta += np.linalg.solve(X.T @ (X * (mu * (1 - mu))[:, None]), X.T @ (y - mu))
    weights, loss, _ = db.execute(
        "SELECT * FROM pgad.gradient_descent('λ(d, w) softplus(w.a*d.x1 + w.b*d.x2 + w.c) - d.y*(w.a*d.x1 + "
        "w.b*d.x2 + w.c)', 'logit', '{\"a\": 0, \"b\": 0, \"c\": 0}', learning_rate => 2, iterations => 3000)"
    ).fetchone()
    assert [weights[k] for k in 'abc'] == pytest.approx(beta, abs=1e-4)


def test_zero_iterations_return_the_starting_weights_and_their_loss(db):
    weights, loss, iterations = db.execute('SELECT * FROM pgad.gradient_descent(%s, %s, %s, iterations => 0)',
                                           (LINEAR, 'points', json.dumps(WEIGHTS))).fetchone()
    assert weights == WEIGHTS and iterations == 0
    assert loss == scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, 'points', json.dumps(WEIGHTS)))


# --- the data argument -----------------------------------------------------------------------------------------
@pytest.mark.parametrize('data', ['points', 'public.points', 'SELECT x, y FROM points', 'select * from points',
                                  'TABLE points', 'WITH p AS (SELECT * FROM points) SELECT x, y FROM p',
                                  '(SELECT x, y FROM points)', 'SELECT x, y FROM points;', 'TABLE points ;\n\t',
                                  'SELECT x, y FROM points -- a comment;\n;'])
def test_data_is_a_query_or_a_table(db, data):
    assert scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS))) == \
        pytest.approx(scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, 'points', json.dumps(WEIGHTS))), rel=1e-15)


def test_values_and_views(db):
    assert scalar(db, "SELECT pgad.loss('λ(d, w) (d.column1 - w.a)^2', 'VALUES (1), (3)', '{\"a\": 0}')") == 5
    assert scalar(db, "SELECT pgad.loss(%s, 'points_view', %s)", (LINEAR, json.dumps(WEIGHTS))) == pytest.approx(
        float(scalar(db, "SELECT avg((0.7*x - 0.3 - y)^2) FROM points WHERE x > 1")), rel=1e-12)


def test_every_numeric_type_is_read_as_float8(db):
    got = scalar(db, "SELECT pgad.loss('λ(d, w) d.i + d.s + d.b + d.r + d.n + d.f + d.\"Upper\"', 'mixed', '{}')")
    expected = scalar(db, 'SELECT avg(i::float8 + s::float8 + b::float8 + r::float8 + n::float8 + f + "Upper") '
                          'FROM mixed')
    assert got == pytest.approx(expected, rel=1e-12)


def test_boolean_columns_are_read_where_postgresql_takes_a_boolean(db):
    """A boolean column in CASE WHEN, AND, OR, NOT and = gives what PostgreSQL gives for the same expression (a row
    with NULL in it is skipped, as avg skips NULL); the gradient is the same by forward and reverse mode."""
    db.execute("CREATE TABLE IF NOT EXISTS flags AS SELECT x, y, x > 1 AS big, CASE WHEN (x*100)::int % 7 = 3 THEN "
               "NULL ELSE (x*100)::int % 3 = 0 END AS third FROM points")
    body = ('CASE WHEN d.big AND NOT d.third OR d.third = (d.x < 0.5) THEN w.a*d.x WHEN d.big <> true THEN d.y '
            'ELSE w.b END')
    expected = scalar(db, f"SELECT avg({body}) FROM flags AS d, (SELECT 0.7::float8 AS a, -0.3::float8 AS b) AS w "
                          "WHERE d.third IS NOT NULL")
    args = ('λ(d, w) ' + body, 'flags', json.dumps(WEIGHTS))
    assert scalar(db, 'SELECT pgad.loss(%s, %s, %s)', args) == pytest.approx(float(expected), rel=1e-12)
    forward = scalar(db, "SELECT pgad.gradient(%s, %s, %s, 'forward', 'llvm')", args)
    reverse = scalar(db, "SELECT pgad.gradient(%s, %s, %s, 'reverse', 'python')", args)
    assert forward == pytest.approx(reverse, rel=1e-12) and forward['a'] != 0
    # the aggregates read the boolean column as the loader does (extension/aggregates.c: true is 1)
    assert scalar(db, "SELECT pgad.loss_agg(%s, %s, f) FROM flags AS f", (args[0], args[2])) == \
        pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize('body, message', [
    ('w.a * d.big', 'column "big" is of type boolean, not a number'),  # PostgreSQL: no boolean * float8
    ('CASE WHEN d.x THEN w.a ELSE 0 END', 'column "x" is of type double precision, not boolean'),
])
def test_a_column_must_have_the_type_the_lambda_reads_it_as(db, body, message):
    db.execute("CREATE TABLE IF NOT EXISTS typed_flags AS SELECT x, x > 1 AS big FROM points")
    diag = error_of(db, 'SELECT pgad.loss(%s, %s, %s)', ('λ(d, w) ' + body, 'typed_flags', '{"a": 1}'))
    assert (diag.sqlstate, diag.message_primary) == ('42804', message)


def test_rows_with_null_are_skipped_with_a_notice(db):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    got = scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, 'with_nulls', json.dumps(WEIGHTS)))
    expected = scalar(db, 'SELECT avg((0.7*x - 0.3 - y)^2) FROM with_nulls')  # avg skips NULL too
    assert got == pytest.approx(expected, rel=1e-12)
    assert notices == ['skipped 5 of 201 rows with NULL in "y" (5 rows)']  # x has none


def test_tiny_chunks_give_the_same_answer(db):
    """pgad.load_chunk_rows = 7 loads the 201 rows in 29 chunks (DEBUG2 says so) and changes no result."""
    args = (LINEAR, 'SELECT x, y FROM with_nulls', json.dumps(WEIGHTS))
    messages = []
    db.add_notice_handler(lambda d: messages.append(d.message_primary))
    db.execute("SET client_min_messages = debug2")
    try:
        whole = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)', args)
        db.execute("SET pgad.load_chunk_rows = 7")
        chunked = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)', args)
    finally:
        db.execute("RESET pgad.load_chunk_rows")
        db.execute("RESET client_min_messages")
    loads = [m for m in messages if m.startswith('pgad: loaded')]
    assert loads == ['pgad: loaded 196 rows of 2 columns in 1 part', 'pgad: loaded 196 rows of 2 columns in 29 parts']
    assert chunked == pytest.approx(whole, rel=1e-12)


def test_a_lambda_that_reads_no_column_averages_over_the_rows(db):
    assert scalar(db, "SELECT pgad.loss('λ(d, w) (w.a - 3)^2', 'points', '{\"a\": 1}')") == 4
    assert scalar(db, "SELECT pgad.gradient('λ(d, w) (w.a - 3)^2', 'points', '{\"a\": 1}')") == {'a': -4}


# --- bad input: a clear ERROR, and nothing changed -------------------------------------------------------------
BAD = [
    # (sql arguments: loss, data, weights, extra named args), sqlstate, words the message must hold
    (("λ(d, w) (w.a*d.x +", 'points', '{"a": 0}', ''), '42601', 'syntax error at end of input'),
    (("λ(d, w) w.a * * d.x", 'points', '{"a": 0}', ''), '42601', 'syntax error at or near "*"'),
    (("λ(d, w) w.a*d.x^-1", 'points', '{"a": 0}', ''), '42883',
     'operator does not exist: double precision ^- double precision'),  # as psql says of 2^-1
    (("(w.a*d.x)^2", 'points', '{"a": 0}', ''), '42601', 'must start with λ(d, w)'),
    (("λ(d, w) foo(d.x)", 'points', '{"a": 0}', ''), '42883', 'function foo(double precision) does not exist'),
    (("λ(d, w) w.a*d.z", 'points', '{"a": 0}', ''), '42703', 'column "z" does not exist in the data'),
    (("λ(d, w) w.a*d.t", 'mixed', '{"a": 0}', ''), '42804', 'column "t" is of type text'),
    (("λ(d, w) w.c*d.x", 'points', '{"a": 0}', ''), '22023', 'weight "c" is not in the weights'),
    ((LINEAR, 'points', '[1, 2]', ''), '22023', 'weights must be a JSON object of numbers'),
    ((LINEAR, 'points', '{"a": "1", "b": 0}', ''), '22023', 'weight "a" must be a number'),
    ((LINEAR, 'points', '{"a": null, "b": 0}', ''), '22023', 'weight "a" must be a number'),
    ((LINEAR, 'SELECT x, y FROM points WHERE false', '{"a": 0, "b": 0}', ''), '22000', 'the data has no rows'),
    ((LINEAR, 'no_such_table', '{"a": 0, "b": 0}', ''), '42P01', 'relation "no_such_table" does not exist'),
    ((LINEAR, 'DELETE FROM points', '{"a": 0, "b": 0}', ''), '42601', 'data is neither a query nor the name'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ', learning_rate => 0'), '22023', 'learning_rate must be a positive'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ', learning_rate => -1'), '22023', 'learning_rate must be a positive'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ', iterations => -1'), '22023', 'iterations must be 0 or more'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ", mode => 'sideways'"), '22023', 'unknown mode "sideways"'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ", backend => 'abacus'"), '22023', 'unknown backend "abacus"'),
    ((LINEAR, 'points', '{"a": 0, "b": 0}', ', learning_rate => 10'), '22003', 'training diverged at iteration'),
    (("λ(d, w) ln(d.x - w.a)", 'points', '{"a": 0}', ''), '2201E', 'cannot take logarithm of zero'),
    (("λ(d, w) ln(d.x - w.a)", 'points', '{"a": 1}', ''), '2201E', 'cannot take logarithm of a negative number'),
    (("λ(d, w) sqrt(w.a*d.x)", 'points', '{"a": 0}', ''), '22003', 'the gradient by "a" is infinite at the start'),
    ((LINEAR, 'points', '{"a": 1e400, "b": 0}', ''), '22023', 'weight "a" is not a finite double precision'),
    ((LINEAR, 'points', '{"a": -1e309, "b": 0}', ''), '22023', 'weight "a" is not a finite double precision'),
    (('λ(d, w) d."" * w.a', 'points', '{"a": 0}', ''), '42601', 'zero-length delimited identifier'),
    (('λ(d, w) w.a*d.x + 1e400', 'points', '{"a": 0}', ''), '22003', '"1e400" is out of range for type double'),
    (('λ(d, w) ' + '(' * 50_000 + 'w.a' + ')' * 50_000, 'points', '{"a": 0}', ''), '54001', 'too deeply nested'),
    (('λ(d, w) ' + 'sin(' * 20_000 + 'w.a' + ')' * 20_000, 'points', '{"a": 0}', ''), '54001', 'too deeply nested'),
]


PYTHON_EXCEPTION = re.compile(r'\b[A-Z][a-z]+(Error|Exception)\b|Traceback')  # RecursionError, KeyError…


@pytest.mark.parametrize('args, sqlstate, words', BAD, ids=[words for _, _, words in BAD])
def test_bad_input_is_a_clear_error_and_changes_nothing(db, args, sqlstate, words):
    loss, data, weights, extra = args
    before = scalar(db, 'SELECT count(*) FROM points')
    diag = error_of(db, f'SELECT * FROM pgad.gradient_descent(%s, %s, %s{extra})', (loss, data, weights))
    assert diag.sqlstate == sqlstate
    assert words in diag.message_primary
    assert not diag.message_primary.startswith(('plpy', 'spiexceptions'))
    assert not PYTHON_EXCEPTION.search(diag.message_primary + (diag.message_detail or ''))
    assert diag.context is None or '\n' not in diag.context.strip()  # at most a line: no Traceback, no wrapper
    assert scalar(db, 'SELECT count(*) FROM points') == before


def test_errors_carry_detail_and_hint(db):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.z', 'points', '{\"a\": 0}')")
    assert diag.message_detail == 'The data has columns: "x", "y".'
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x +', 'points', '{\"a\": 0}')")
    assert (diag.message_detail, diag.internal_query, diag.internal_position) == (None, 'λ(d, w) w.a*d.x +', '18')
    diag = error_of(db, "SELECT pgad.gradient_descent(%s, 'points', '{\"a\": 0, \"b\": 0}', 10)", (LINEAR,))
    assert diag.message_hint == diverging_hint('10')
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.upper', 'mixed', '{\"a\": 0}')")
    assert 'd."Name"' in diag.message_hint


def test_errors_in_the_data_query_show_the_query(db):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) d.x', 'SELECT x FROM points WHERE', '{}')")
    assert diag.sqlstate == '42601' and diag.message_primary.startswith('syntax error')
    assert diag.message_detail == 'The data query: SELECT x FROM points WHERE'


def test_a_column_name_longer_than_postgresql_allows_is_a_clear_error(db):
    name = 'x' * 64
    diag = error_of(db, f"SELECT pgad.loss('λ(d, w) d.{name}', 'points', '{{}}')")
    assert diag.sqlstate == '42622' and diag.message_primary == f'column name "{name}" is too long'
    assert 'at most 63 bytes' in diag.message_hint
    longest = 'é' * 31 + 'x'  # 63 bytes
    db.execute(f'CREATE TEMP TABLE wide AS SELECT 1::float8 AS "{longest}"')
    assert scalar(db, f"SELECT pgad.loss('λ(d, w) d.\"{longest}\"', 'wide', '{{}}')") == 1


def test_null_arguments_give_null(db):
    assert scalar(db, "SELECT pgad.loss(NULL, 'points', '{}')") is None
    assert db.execute("SELECT * FROM pgad.gradient_descent(%s, 'points', NULL)", (LINEAR,)).fetchone() == \
        (None, None, None)
    assert scalar(db, """SELECT pgad.gradient(%s, 'points', '{}', dtype => NULL)""", (LINEAR,)) is None
    # pgad.explain is not STRICT (rows is NULL unless given): a NULL loss, mode or backend gives no rows, as STRICT
    for args in ['NULL', "%s, NULL", "%s, 'reverse', NULL", "%s, NULL, 'auto', 10"]:
        assert db.execute(f'SELECT * FROM pgad.explain({args})', (LINEAR,) * args.count('%s')).fetchall() == []


def test_dtype_reaches_the_python_side(db):
    """gradient, gradient_descent and train pass dtype on: float32 is the cuda backend's, refused on llvm."""
    weights = json.dumps(WEIGHTS)
    for sql, args in [("SELECT pgad.gradient(%s, 'points', %s, 'reverse', 'llvm', 'float32')", (LINEAR, weights)),
                      ("""SELECT pgad.gradient_descent(%s, 'points', %s, backend => 'llvm',
                          dtype => 'float32')""", (LINEAR, weights)),
                      ("""SELECT pgad.train('p32', 'λ(d, w) w.a*d.x + w.b', 'squared', 'points', %s, backend => 'llvm',
                          dtype => 'float32')""", (weights,))]:
        diag = error_of(db, sql, args)
        assert (diag.sqlstate, diag.message_primary) == \
            ('22023', 'dtype "float32" is not available on backend "llvm"'), sql
    assert error_of(db, """SELECT pgad.gradient(%s, 'points', %s, dtype => 'float16')""",
                    (LINEAR, weights)).message_primary == 'unknown dtype "float16"'
    assert scalar(db, """SELECT pgad.gradient(%s, 'points', %s, dtype => 'float64')""", (LINEAR, weights)) == \
        scalar(db, "SELECT pgad.gradient(%s, 'points', %s)", (LINEAR, weights))


# --- injection: the lambda, column names and weight keys never become code --------------------------------------
def test_injection_through_the_lambda_column_names_and_weight_keys_changes_nothing(db):
    db.execute('CREATE TABLE victim AS SELECT 1 AS x, 2 AS y')
    evil = 'x"); DROP TABLE victim; --'
    db.execute(f'CREATE TABLE evil_columns ("{evil.replace(chr(34), chr(34) * 2)}" float8, y float8)')
    db.execute('INSERT INTO evil_columns VALUES (1, 2), (3, 4)')
    quoted = evil.replace('"', '""')
    # a column whose name is SQL: read exactly as a name
    assert scalar(db, f"""SELECT pgad.loss('λ(d, w) d."{quoted}" * w.a', 'evil_columns', '{{"a": 1}}')""") == 2
    # SQL in the lambda: a syntax error or an unknown column, never run
    for loss, sqlstate in [('λ(d, w) d.x); DROP TABLE victim; --', '42601'),
                           ("λ(d, w) d.\"x; DROP TABLE victim\"", '42703'),
                           ("λ(d, w) __import__('os').system('touch /tmp/pgad-pwned')", '22P02')]:  # 'os': no float8
        assert error_of(db, 'SELECT pgad.loss(%s, %s, %s)', (loss, 'victim', '{}')).sqlstate == sqlstate, loss
    # weight keys that look like SQL or Python are only keys
    key = "a'); DROP TABLE victim; --"
    got = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)', (f'λ(d, w) w."{key}" * d.x', 'victim', json.dumps({key: 1})))
    assert got == {key: 1}
    # a data argument holding a second statement: refused whole
    assert error_of(db, 'SELECT pgad.loss(%s, %s, %s)', ('λ(d, w) d.x', 'SELECT x FROM victim) AS v; DROP TABLE '
                    'victim; SELECT * FROM (SELECT 1 AS x', '{}')).sqlstate == '42P11'  # one SELECT only
    assert error_of(db, 'SELECT pgad.loss(%s, %s, %s)', ('λ(d, w) d.x', 'WITH v AS (DELETE FROM victim RETURNING x) '
                                                         'SELECT x FROM v', '{}')).sqlstate == '0A000'
    assert db.execute('SELECT x, y FROM victim').fetchall() == [(1, 2)]


def test_data_runs_with_the_callers_privileges(db, cluster, dbname):
    db.execute("DROP ROLE IF EXISTS pgad_reader")
    db.execute("CREATE ROLE pgad_reader LOGIN")
    db.execute("CREATE TABLE secret AS SELECT 1::float8 AS x")
    db.execute("GRANT SELECT ON points TO pgad_reader")
    with psycopg.connect(cluster.conninfo(dbname, user='pgad_reader'), autocommit=True) as reader:
        assert scalar(reader, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, 'points', json.dumps(WEIGHTS))) > 0
        diag = error_of(reader, "SELECT pgad.loss('λ(d, w) d.x', 'secret', '{}')")
        assert diag.sqlstate == '42501'


# --- the functions PUBLIC may call ----------------------------------------------------------------------------------
def test_the_implementations_are_strict_and_not_executable_by_public(db, cluster, dbname):
    # Not strict: the transition and combine functions (a NULL state, a NULL argument), the aggregates' final
    # implementations (options NULL when not given), pgad.train's (seed, regularize and group_by NULL by default),
    # pgad.explain's (rows NULL by default), pgad.derivatives' (weights and data NULL by default), pgad.forecast's
    # (data NULL by default), pgad.deploy's (version and strategy NULL unless given), pgad.tune's (grid, random, trials,
    # seed and options NULL unless given).
    internal = db.execute("SELECT p.oid::regprocedure::text, p.proisstrict OR p.proname ~ '^_(pack_step|pack_combine|"
                          "lambda_step|lambda_combine|loss_agg|gradient_agg|gradient_descent_agg|train|explain|"
                          "derivatives|wrong_length|importance|forecast|deploy|tune|anomalies|cross_validation|"
                          "prediction_query|recommend|embeddings)$', "
                          "p.proacl::text FROM pg_proc AS p "
                          "WHERE p.pronamespace = 'pgad'::regnamespace AND p.proname LIKE '\\_%'").fetchall()
    # the five implementations, pgad.pack's four support functions, the aggregates' three implementations, their
    # column finder and their eight support functions, pgad.train's and pgad.drop_model's, pgad.partial_sums's,
    # pgad.init_weights's, the catalog's writer, pgad.evaluate's, the scoring functions' length error, pgad.hessian's
    # and pgad.summary's, the element reader of pgad.pack's loads, the owners of a model's name, and
    # pgad.importance's, the softmax and argmax of a softmax model's probability and class functions, and
    # pgad.forecast's, pgad.deploy's, the version's pgad.drop_model's and pgad.evaluate's, pgad.tune's, and the free
    # name of a version's functions (pgad._version_function_name), and pgad.anomalies's and pgad.cross_validation's,
    # pgad.prediction_query's (version NULL by default) and the labelled probabilities pgad.predict's query calls,
    # and pgad.recommend's and pgad.embeddings' (seen and version NULL by default) and the keyed weight tables' policy
    assert len(internal) == 48
    assert [(name, strict) for name, strict, _ in internal if not strict] == []
    # The writer of pgad.models alone is executable by PUBLIC: pgad's Python calls it as the caller, and it writes
    # only what pgad.train or pgad.drop_model left for it (a direct call is refused: test_model_trust.py).
    # So is pgad._wrong_length, which every scoring function that takes an array calls to raise its error (not
    # strict: its last argument, the type it stands in for, is NULL), and pgad._element, which the loader's pgad.pack
    # queries read an array's elements with, as the caller, and pgad._model_owners, which tells pgad.train and
    # pgad.drop_model the roles that own a name whatever rows the caller may read (its owners and loss alone), and
    # pgad._softmax and pgad._argmax, which a softmax model's probability and class functions call as the caller, and
    # pgad._labelled, which pgad.predict's query calls as the caller, and pgad._weights_readable, which the policy of
    # a keyed model's weight tables calls as the caller (issue 48).
    writer = [acl for name, _, acl in internal if name == 'pgad._write_models()']
    assert len(writer) == 1 and '"=X' not in writer[0] and ',=X/' in writer[0]
    public = ('pgad._write_models()', 'pgad._wrong_length(text,integer,integer,anyelement)',
              'pgad._element(anyarray,integer,integer,text)', 'pgad._model_owners(text)',
              'pgad._softmax(double precision[])', 'pgad._argmax(double precision[])',
              'pgad._labelled(text[],double precision[])', 'pgad._weights_readable(text,integer)')
    assert [(name, acl) for name, _, acl in internal if name not in public and
            (acl is None or '"=X' in acl or '{=X' in acl or ',=X' in acl)] == []
    db.execute("DROP ROLE IF EXISTS pgad_outsider")
    db.execute("CREATE ROLE pgad_outsider LOGIN")
    calls = ["pgad._loss('λ(d, w) 1', 'SELECT 1', '{}')",
             "pgad._gradient('λ(d, w) 1', 'SELECT 1', '{}', 'reverse', 'auto', 'float64', 'auto')",
             "pgad._gradient_descent('λ(d, w) 1', 'SELECT 1', '{}', 0.1, 1, 'reverse', 'auto', 'float64', 'auto')",
             "pgad._derivatives('λ(d, w) 1', NULL, NULL)",
             "pgad._explain('λ(d, w) 1', 'reverse', 'auto', NULL, NULL, NULL, 'auto')",
             "pgad._partial_sums('λ(d, w) 1', 'SELECT 1', '{}', '{}', 'reverse', 'auto', 'float64')",
             "pgad._lambda_columns('λ(d, w) d.x', '{x}', '{integer}')",
             "pgad._loss_agg('\\x', '{}', 'λ(d, w) 1', '{}', NULL)",
             "pgad._train('m', 'λ(d, w) w.a', 'squared', 'SELECT 1 AS y', '{\"a\": 0}', 0.1, 1, 'reverse', 'auto', "
             "'gd', 1, NULL, 0, 0, 0, NULL, false, 'y', NULL, 0, 'float64', NULL, NULL, NULL, NULL, NULL, 't', NULL, "
             "NULL, NULL)",
             "pgad._drop_model('m')", "pgad._drop_model('m', 1)", "pgad._deploy('m', 1, NULL)",
             "pgad._evaluate('m', 'SELECT 1', 1)",
             "pgad._init_weights('{}', 'glorot', 0)", "pgad._evaluate('m', 'SELECT 1')",
             "pgad._hessian('λ(d, w) w.a', 'SELECT 1', '{\"a\": 0}', 'auto')", "pgad._summary('m', 'error')",
             "pgad._forecast('m', 3, NULL::text, 0.95::float8, 1000, 0::int8, NULL::float8[])",
             "pgad._anomalies('m', 'SELECT 1', 0.95)", "pgad._cross_validation('m', 'SELECT 1', 1, 1, 1, 0.95)",
             "pgad._tune('m', 'λ(d, w) w.a', 'squared', 'SELECT 1 AS y', '{\"a\": 0}', '{\"l2\": [0]}', NULL, NULL, "
             "NULL, '0.2', 'validation_loss', true, NULL" + ', NULL' * 22 + ")",
             "pgad._prediction_query('m', 'SELECT 1', NULL)"]
    with psycopg.connect(cluster.conninfo(dbname, user='pgad_outsider'), autocommit=True) as outsider:
        for call in calls:
            diag = error_of(outsider, f'SELECT * FROM {call}')
            assert diag.sqlstate == '42501' and diag.message_primary.startswith('permission denied for function _')
        assert scalar(outsider, "SELECT pgad.loss('λ(d, w) w.a', 'SELECT 1', '{\"a\": 2}')") == 2  # the public door


# --- long work is cancellable -----------------------------------------------------------------------------------
@pytest.fixture(scope='module')
def big(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE big AS SELECT random() AS x, random() AS y FROM generate_series(1, 300000)")
    return 'big'


def test_statement_timeout_stops_training_within_a_second(db, big):
    db.execute("SET statement_timeout = '1s'")
    started = time.monotonic()
    diag = error_of(db, "SELECT pgad.gradient_descent(%s, 'big', '{\"a\": 0, \"b\": 0}', 0.01, 1000000)",
                    (LINEAR,))
    elapsed = time.monotonic() - started
    assert diag.sqlstate == '57014'
    assert elapsed < 2.5  # the 1 s timeout, plus at most one iteration and the load


@pytest.mark.parametrize('data', ['big', 'SELECT x, y FROM big'])
def test_a_cancel_in_any_of_pgads_queries_is_reported_as_itself(cluster, dbname, big, data):
    """A statement_timeout from 1 ms on lands in each of pgad's own queries in turn (its settings, the data's name
    and columns, the load, the interrupt checks): every one is reported as the cancel it is, 57014."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS)))  # imported, compiled
        states = set()
        for timeout in range(1, 60, 3):
            db.execute(f'SET statement_timeout = {timeout}')
            try:
                db.execute('SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS)))
                states.add(None)
            except psycopg.Error as e:
                states.add(e.diag.sqlstate)
            db.execute('RESET statement_timeout')
    assert states <= {'57014', None} and '57014' in states


@pytest.mark.parametrize('locked, data', [('pg_catalog.pg_class', 'big'), ('big', 'SELECT x, y FROM big')])
def test_a_timeout_while_pgad_waits_for_a_lock_is_reported_as_itself(cluster, dbname, big, locked, data):
    """A lock held elsewhere stops pgad in one of its own queries (the data's name, the data's columns) until the
    statement_timeout: the error is that timeout, not 'data is neither a query nor …' or the data query's error."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db, \
            psycopg.connect(cluster.conninfo(dbname)) as locker:
        scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS)))
        locker.execute(f'LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE')
        db.execute('SET statement_timeout = 300')
        diag = error_of(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, json.dumps(WEIGHTS)))
        locker.rollback()
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == \
        ('57014', 'canceling statement due to statement timeout', None)


def test_pg_cancel_backend_stops_training(db, cluster, dbname, big):
    pid = scalar(db, 'SELECT pg_backend_pid()')

    def cancel():
        time.sleep(1.0)
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
            other.execute('SELECT pg_cancel_backend(%s)', (pid,))
    threading.Thread(target=cancel).start()
    started = time.monotonic()
    diag = error_of(db, "SELECT pgad.gradient_descent(%s, 'big', '{\"a\": 0, \"b\": 0}', 0.01, 1000000)",
                    (LINEAR,))
    assert diag.sqlstate == '57014' and time.monotonic() - started < 2.5


# --- boundaries: pgad against PostgreSQL's own evaluation, at the points of tests/test_boundaries.py ----------------
def outcome(db, sql, params):
    """('value', the number) or ('error', SQLSTATE, message) of one query, in a savepoint."""
    try:
        with db.transaction():
            return ('value', scalar(db, sql, params))
    except psycopg.Error as e:
        return ('error', e.diag.sqlstate, e.diag.message_primary)


@pytest.mark.parametrize('body, w, x, loss, grad, sql, postgres', BOUNDARIES)
def test_boundary_against_postgres(db, body, w, x, loss, grad, sql, postgres):
    """Where PostgreSQL computes the expression, pgad.loss gives its value; where PostgreSQL raises an error, so does
    pgad, with PostgreSQL's SQLSTATE — except exp's underflow, which pgad leaves at 0 (IEEE) where PostgreSQL
    refuses. pgad.gradient gives the gradient by hand, or a 22003 error where that is not finite."""
    row = 'SELECT %s::float8 AS x'
    weights = ', '.join(f'%s::float8 AS {name}' for name in w)
    theirs = outcome(db, f'SELECT {sql or body} FROM ({row}) AS d, (SELECT {weights}) AS w', [x, *w.values()])
    args = (f'λ(d, w) {body}', f'SELECT {x!r}::float8 AS x', json.dumps(w))
    ours = outcome(db, 'SELECT pgad.loss(%s, %s, %s)', args)
    if theirs[0] == 'value' and not math.isfinite(theirs[1]):  # no loss to train on: an error
        assert postgres is None and ours == ('error', '22003', 'value out of range: overflow')
    elif theirs[0] == 'value':
        assert postgres is None and ours[0] == 'value'
        assert ours[1] == pytest.approx(theirs[1], rel=1e-12, abs=1e-300)
    elif math.isfinite(loss):  # PostgreSQL's exp underflows to an error, pgad's to 0
        assert theirs[1:] == (postgres, 'value out of range: underflow') and ours == ('value', loss)
    else:
        assert theirs[1] == postgres and ours == theirs
    gradient = outcome(db, 'SELECT pgad.gradient(%s, %s, %s)', args)
    if math.isfinite(loss) and all(map(math.isfinite, grad)):
        assert gradient[0] == 'value' and gradient[1] == pytest.approx(dict(zip(w, grad)), rel=1e-14)
    elif math.isfinite(loss):
        assert gradient[:2] == ('error', '22003') and gradient[2].startswith('the gradient by')
    else:
        assert gradient == ours  # the loss's error first


def test_a_domain_error_names_the_operation_and_the_row(db):
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) (w.a*d.x - ln(d.x - 1))^2', 'points', '{\"a\": 1}')")
    assert (diag.sqlstate, diag.message_primary) == ('2201E', 'cannot take logarithm of a negative number')
    assert diag.message_detail == 'The lambda computes ln(d.x - 1) = NaN where d.x = 0, at the starting weights.'
    diag = error_of(db, "SELECT * FROM pgad.gradient_descent('λ(d, w) sqrt(w.a*d.x + 1)', 'points', '{\"a\": -1}')")
    assert (diag.sqlstate, diag.message_primary) == ('2201F', 'cannot take square root of a negative number')
    diag = error_of(db, "SELECT pgad.gradient('λ(d, w) sqrt(w.a*d.x)', 'points', '{\"a\": 0}')")
    assert (diag.sqlstate, diag.message_primary) == ('22003', 'the gradient by "a" is infinite at the starting weights')
    assert diag.message_detail == 'The first value that is infinite: 0.5/sqrt(w.a*d.x) = Infinity where w.a = 0, d.x = 0.'


def test_the_data_querys_error_keeps_its_hint_in_the_server(db):
    """PL/Python keeps a query error's DETAIL and HINT in SPIError.spidata: the HINT reaches the caller."""
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT lower(1) AS x', '{\"a\": 1}')")
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == \
        ('42883', 'function lower(integer) does not exist', 'The data query: SELECT lower(1) AS x')
    assert diag.message_hint.startswith('No function matches the given name and argument types.')


def diverging_by_hand(db, rate, iterations):
    """Gradient descent on LINEAR over points from 0, in numpy: the loss at the start of each iteration (the
    progress report's), and the first iteration whose loss exceeds the first by more than 10⁶ times it."""
    x, y = np.array(db.execute('SELECT x, y FROM points').fetchall()).T
    w, losses = np.zeros(2), []
    for _ in range(iterations + 1):
        r = w[0] * x + w[1] - y
        losses.append(np.mean(r * r))
        w = w - rate * np.array([2 * np.mean(r * x), 2 * np.mean(r)])
    k = next(k for k, loss in enumerate(losses) if loss - losses[0] > 1e6 * losses[0])
    return f'the loss grew from {losses[0]:.6g} to {losses[k]:.6g} by iteration {k + 1}: gradient descent is diverging'


def test_a_finite_divergence_is_one_warning_with_a_hint_and_the_descent_returns(db):
    """learning_rate 1 on points grows the loss about tenfold a step: past 10⁶ times the start in a few steps,
    finite after 20. The WARNING (once) names the iteration; the HINT the learning rate; the result comes back."""
    warnings_ = []
    db.add_notice_handler(lambda d: warnings_.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
    weights, loss, iterations = db.execute("SELECT * FROM pgad.gradient_descent(%s, 'SELECT x, y FROM points', "
                                           "'{\"a\": 0, \"b\": 0}', learning_rate => 1, iterations => 20)",
                                           (LINEAR,)).fetchone()
    assert iterations == 20 and math.isfinite(loss) and loss > 1e12
    assert warnings_ == [('WARNING', diverging_by_hand(db, 1.0, 20), diverging_hint('1'))]


def test_a_divergence_to_infinity_warns_then_stays_the_22003_error(db):
    warnings_ = []
    db.add_notice_handler(lambda d: warnings_.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
    diag = error_of(db, "SELECT * FROM pgad.gradient_descent(%s, 'SELECT x, y FROM points', '{\"a\": 0, \"b\": 0}', "
                        "learning_rate => 1, iterations => 1000)", (LINEAR,))
    assert (diag.sqlstate, diag.message_hint) == ('22003', diverging_hint('1'))
    assert diag.message_primary.startswith('training diverged at iteration ')
    assert warnings_ == [('WARNING', diverging_by_hand(db, 1.0, 20), diverging_hint('1'))]


def test_a_diverging_model_is_named_in_its_warning(db):
    db.execute('SET pgad.publish_data_values = on')  # the fit's WARNINGs only: tests/test_published_values.py
    warnings_ = []
    db.add_notice_handler(lambda d: warnings_.append((d.severity_nonlocalized, d.message_primary, d.message_hint)))
    db.execute("SELECT pgad.train('diverging', 'λ(d, w) w.a*d.x + w.b', 'squared', 'SELECT x, y FROM points', "
               "'{\"a\": 0, \"b\": 0}', learning_rate => 1, iterations => 20)")
    assert warnings_[0] == ('WARNING', 'model "diverging": ' + diverging_by_hand(db, 1.0, 20), diverging_hint('1'))
    # and, at its end, that it did not converge (tests/test_convergence.py)
    assert len(warnings_) == 2 and warnings_[1][1].startswith('model "diverging": optimizer "gd" did not converge')
