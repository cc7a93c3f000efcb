"""pgad.api and pgad.loader in the test process, through plpy_client (plpy over psycopg) against tables in a real
database: values against closed forms computed in numpy, NULL rows, the descent's result, chunked loads, bad
weights and the loader's edge cases."""
import json
import math
import sys

import numpy as np
import psycopg
import pytest

from pgad import api, loader, server
from plpy_client import Error, Plpy

LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
W = {'a': 0.7, 'b': -0.3}
NULL_ROWS = 5


@pytest.fixture(scope='module')
def xy(cluster, dbname):
    """(x, y) of table points, 50 rows; with_nulls is points with NULL_ROWS rows more that have NULL in x or y."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE points AS SELECT g / 25.0::float8 AS x, "
                   "(2 * g / 25.0 + 1 + 0.1 * sin(17 * g))::float8 AS y FROM generate_series(1, 50) AS g")
        db.execute("CREATE TABLE with_nulls AS SELECT * FROM points")
        db.execute("INSERT INTO with_nulls VALUES (NULL, 1), (1, NULL), (NULL, NULL), (2, NULL), (NULL, 3)")
        db.execute("CREATE TABLE mixed (s smallint, i int, b bigint, r real, n numeric, f float8, t text, "
                   "\"Upper\" float8)")
        db.execute("INSERT INTO mixed SELECT -g, g * 1000003, g * 9007199254740, g / 4.0, g / 3.0, g / 7.0, "
                   "'row ' || g, g FROM generate_series(1, 20) AS g")
        db.execute("CREATE TABLE empty (x float8, y float8)")
        db.execute("CREATE TABLE all_null AS SELECT x, NULL::float8 AS y FROM generate_series(1, 3) AS x")
        return np.array(db.execute('SELECT x, y FROM points').fetchall()).T


@pytest.fixture
def plpy(cluster, dbname, xy, monkeypatch):
    """The adapter as sys.modules['plpy'] for one test, on a connection with pgad's library (its settings) loaded."""
    p = Plpy(cluster.conninfo(dbname))
    p.conn.execute("LOAD 'pgad'")
    p.conn.execute("SET pgad.cache_directory = ''")  # the cluster's kernel directory is the server's, not ours
    monkeypatch.setitem(sys.modules, 'plpy', p)
    monkeypatch.setattr(server, '_check', None)  # a plan prepared on an earlier test's connection
    yield p
    p.close()


def mse(x, y, a, b):
    return np.mean((a * x + b - y) ** 2)


def mse_gradient(x, y, a, b):
    r = a * x + b - y
    return np.array([2 * np.mean(r * x), 2 * np.mean(r)])


def numpy_descent(x, y, w, learning_rate, iterations):
    w = np.array(w, dtype=float)
    for _ in range(iterations):
        w = w - learning_rate * mse_gradient(x, y, *w)
    return w


def fails(call, *args):
    """The ERROR (plpy_client.Error) a pgad.api call ends with."""
    with pytest.raises(Error) as caught:
        call(*args)
    return caught.value


# --- values against closed forms -------------------------------------------------------------------------------
@pytest.mark.parametrize('mode, backend', [('reverse', 'auto'), ('forward', 'python')])
def test_loss_and_gradient_equal_the_closed_form(plpy, xy, mode, backend):
    x, y = xy
    assert api.loss(LINEAR, 'points', json.dumps(W)) == pytest.approx(mse(x, y, **W), rel=1e-12)
    grad = json.loads(api.gradient(LINEAR, 'points', json.dumps(W), mode, backend))
    assert list(grad) == ['a', 'b']
    assert [grad['a'], grad['b']] == pytest.approx(mse_gradient(x, y, **W), rel=1e-12)
    assert [m for m in plpy.messages if m[0] in ('NOTICE', 'WARNING')] == []


def test_null_rows_are_skipped_and_not_counted(plpy):
    """(a): averaging over the rows loaded, not over those plus the skipped ones."""
    weights = json.dumps(W)
    assert api.loss(LINEAR, 'with_nulls', weights) == pytest.approx(api.loss(LINEAR, 'points', weights),
                                                                    rel=1e-12, abs=0)
    with_nulls, clean = (json.loads(api.gradient(LINEAR, data, weights)) for data in ('with_nulls', 'points'))
    assert [with_nulls[k] for k in W] == pytest.approx([clean[k] for k in W], rel=1e-12, abs=0)
    fit_nulls, fit_clean = (api.gradient_descent(LINEAR, data, weights, 0.1, 5) for data in ('with_nulls', 'points'))
    assert fit_nulls[1] == pytest.approx(fit_clean[1], rel=1e-12) and fit_nulls[2] == fit_clean[2] == 5
    assert [json.loads(fit_nulls[0])[k] for k in W] == pytest.approx([json.loads(fit_clean[0])[k] for k in W],
                                                                     rel=1e-12)
    expected = f'skipped {NULL_ROWS} of {50 + NULL_ROWS} rows with NULL in "x", "y"'
    assert plpy.notices() == [expected] * 3


# --- gradient descent ------------------------------------------------------------------------------------------
@pytest.mark.parametrize('iterations', [0, 1, 2, 7])
def test_descent_returns_numpy_descents_weights_and_the_loss_at_them(plpy, xy, iterations):
    """(b): the loss is the loss at the weights returned, not at those before the last step; the steps are
    learning_rate times the mean gradient."""
    x, y = xy
    fitted, loss, ran = api.gradient_descent(LINEAR, 'points', '{"a": 0, "b": 0}', 0.3, iterations)
    fitted = json.loads(fitted)
    expected = numpy_descent(x, y, [0, 0], 0.3, iterations)
    assert ran == iterations and list(fitted) == ['a', 'b']
    assert [fitted['a'], fitted['b']] == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert loss == pytest.approx(api.loss(LINEAR, 'points', json.dumps(fitted)), rel=1e-12)
    assert loss == pytest.approx(mse(x, y, *expected), rel=1e-12)


def test_descent_in_forward_mode_on_python_is_the_same_descent(plpy, xy):
    x, y = xy
    fitted, loss, _ = api.gradient_descent(LINEAR, 'points', json.dumps(W), 0.2, 3, 'forward', 'python')
    expected = numpy_descent(x, y, [W['a'], W['b']], 0.2, 3)
    assert list(json.loads(fitted).values()) == pytest.approx(expected, rel=1e-12)
    assert loss == pytest.approx(mse(x, y, *expected), rel=1e-12)


# --- the load, in chunks ---------------------------------------------------------------------------------------
def chunk_queries(plpy):
    return [(sql, rows) for sql, rows in plpy.queries if sql.endswith(' GROUP BY chunk')]


def test_load_chunk_rows_loads_in_chunks_of_that_many_rows(plpy, xy):
    """(c): pgad.load_chunk_rows = 7 loads the 50 rows in ceil(50/7) chunks, with the same results; 0 loads them
    in one aggregate."""
    weights = json.dumps(W)
    whole = api.loss(LINEAR, 'points', weights), json.loads(api.gradient(LINEAR, 'points', weights))
    assert chunk_queries(plpy) == []
    assert [rows for sql, rows in plpy.queries if 'string_agg' in sql] == [1, 1]
    plpy.conn.execute('SET pgad.load_chunk_rows = 7')
    assert api.settings().chunk_rows == 7
    plpy.queries.clear()
    chunked = api.loss(LINEAR, 'points', weights), json.loads(api.gradient(LINEAR, 'points', weights))
    assert chunked[0] == pytest.approx(whole[0], rel=1e-12)
    assert [chunked[1][k] for k in W] == pytest.approx([whole[1][k] for k in W], rel=1e-12)
    chunks = chunk_queries(plpy)
    assert len(chunks) == 2 and all(' 7 AS chunk' in sql and rows == math.ceil(50 / 7) for sql, rows in chunks)
    table = loader.load('points', ['x', 'y'], 7)
    assert (table.rows, table.skipped) == (50, 0)
    order = np.argsort(table.columns[0])
    assert np.array_equal(table.columns[0][order], xy[0]) and np.array_equal(table.columns[1][order], xy[1])


# --- weights ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('value', ['NaN', 'Infinity', '-Infinity', '1e999'])
def test_non_finite_starting_weights_are_refused(plpy, value):
    """(d): 1e999 is valid jsonb (the others reach pgad only from Python); each is a clean 22023."""
    for call in (lambda w: api.loss(LINEAR, 'points', w), lambda w: api.gradient(LINEAR, 'points', w),
                 lambda w: api.gradient_descent(LINEAR, 'points', w, 0.1, 1)):
        error = fails(call, f'{{"a": {value}, "b": 0}}')
        assert (error.sqlstate, error.message) == ('22023', 'weight "a" is not a finite double precision number')


def test_a_weight_past_double_precision_is_refused(plpy):
    """jsonb takes a 400-digit integer (and writes 1e400 so); json.loads makes it an int that float() overflows."""
    error = fails(api.loss, LINEAR, 'points', '{"a": 1' + '0' * 400 + ', "b": 0}')
    assert (error.sqlstate, error.message) == ('22023', 'weight "a" is not a finite double precision number')


@pytest.mark.parametrize('weights, message', [
    ('{"a": "1", "b": 0}', 'weight "a" must be a number, not "1"'),
    ('{"a": true, "b": 0}', 'weight "a" must be a number, not true'),
    ('{"a": null, "b": 0}', 'weight "a" must be a number, not null'),
    ('[0, 0]', 'weights must be a JSON object of numbers'),
    ('{"a": 0}', 'weight "b" is not in the weights'),
])
def test_weights_that_are_not_numbers_are_refused(plpy, weights, message):
    error = fails(api.gradient, LINEAR, 'points', weights)
    assert (error.sqlstate, error.message) == ('22023', message)


# --- settings --------------------------------------------------------------------------------------------------
def test_settings_are_read_per_call(plpy):
    config = api.settings()
    assert (config.limits.lambda_bytes, config.chunk_rows, config.cache.directory) == (1 << 20, 0, '')
    plpy.conn.execute('SET pgad.max_lambda_bytes = 64')
    error = fails(api.loss, LINEAR + ' + 0' * 20, 'points', json.dumps(W))
    assert error.sqlstate == '54001' and 'pgad.max_lambda_bytes' in error.detail


# --- the loader's edge cases -----------------------------------------------------------------------------------
@pytest.mark.parametrize('data', ['public.points', 'SELECT x, y FROM points', '  select * from points ;\n ;',
                                  'TABLE points;', '(SELECT y, x FROM points)', 'WITH p AS (SELECT * FROM points) '
                                  'SELECT * FROM p', 'SELECT x, y, x AS z FROM points WHERE y IS NOT NULL'])
def test_a_name_and_queries_load_the_same_rows(plpy, xy, data):
    assert api.loss(LINEAR, data, json.dumps(W)) == pytest.approx(mse(*xy, **W), rel=1e-12)


def test_every_numeric_type_loads_exactly(plpy, cluster, dbname):
    columns = ['s', 'i', 'b', 'r', 'n', 'f', 'Upper']
    table = loader.load('mixed', columns)
    with psycopg.connect(cluster.conninfo(dbname)) as db:
        rows = db.execute('SELECT s, i, b, r, n, f, "Upper" FROM mixed').fetchall()
    expected = np.array([[float(v) for v in row] for row in rows])
    assert (table.rows, table.skipped) == (20, 0)
    for k, column in enumerate(table.columns):
        assert column.dtype == np.float64 and column.flags.c_contiguous
        assert np.array_equal(column, expected[:, k]), columns[k]
    assert api.loss('λ(d, w) d.s + d.i + d.b + d.r + d.n + d.f + d."Upper"', 'mixed', '{}') == pytest.approx(
        expected.sum(axis=1).mean(), rel=1e-15)


@pytest.mark.parametrize('lam, data, sqlstate, message', [
    ('λ(d, w) (w.a*d.x + w.b - d.nope)^2', 'points', '42703', 'column "nope" does not exist in the data'),
    ('λ(d, w) w.a*d.upper', 'mixed', '42703', 'column "upper" does not exist in the data'),
    ('λ(d, w) w.a*d.t', 'mixed', '42804', 'column "t" is of type text, not a number'),
    (LINEAR, 'empty', '22000', 'the data has no rows'),
    (LINEAR, 'all_null', '22000', 'every row of the data has NULL in a column the lambda reads (3 rows)'),
    (LINEAR, 'no_such_table', '42P01', 'relation "no_such_table" does not exist'),
    (LINEAR, 'DELETE FROM points', '42601', 'data is neither a query nor the name of a table or view'),
    (LINEAR, 'SELECT x, y FROM nowhere', '42P01', 'relation "nowhere" does not exist'),
])
def test_bad_data_is_a_clean_error(plpy, lam, data, sqlstate, message):
    error = fails(api.loss, lam, data, json.dumps(W))
    assert (error.sqlstate, error.message) == (sqlstate, message)
    if 'upper' in lam:
        assert error.hint.startswith('Column names fold to lower case')
    if data.startswith('SELECT'):
        assert error.detail == f'The data query: {data}'


def test_the_transaction_is_usable_after_a_failed_data_query(plpy, xy):
    fails(api.loss, LINEAR, 'SELECT 1/0 AS x, 1 AS y', json.dumps(W))
    assert api.loss(LINEAR, 'points', json.dumps(W)) == pytest.approx(mse(*xy, **W), rel=1e-12)


# --- derivatives and explain -----------------------------------------------------------------------------------
def test_derivatives(plpy):
    assert dict(api.derivatives(LINEAR)) == {'a': 'd.x*(2*(w.a*d.x + w.b - d.y))', 'b': '2*(w.a*d.x + w.b - d.y)'}


def test_explain(plpy):
    rows = api.explain(LINEAR, 'forward')
    assert [stage for stage, _, _ in rows] == ['parse', 'differentiate', 'IR generation', 'optimisation',
                                               'machine code']
    assert 'columns: x, y; weights: a, b' in rows[0][1]
    assert rows[1][1].startswith('forward mode:') and all(ms >= 0 for _, _, ms in rows)
    assert fails(api.explain, LINEAR, 'sideways').sqlstate == '22023'


def test_data_that_is_several_statements_runs_none_of_them(plpy):
    """describe() opens a cursor first, which refuses a second statement: the DROP never runs."""
    data = 'SELECT 1 AS x, 2 AS y) AS q; DROP TABLE points; SELECT * FROM (SELECT 1 AS x, 2 AS y'
    with pytest.raises((Error, plpy.SPIError)):
        api.loss(LINEAR, data, json.dumps(W))
    assert plpy.execute('SELECT count(*) AS n FROM points')[0]['n'] == 50
