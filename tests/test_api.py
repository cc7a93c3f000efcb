"""pgad.api and pgad.loader in the test process, through plpy_client (plpy over psycopg) against tables in a real
database: values against closed forms computed in numpy, NULL rows, the descent's result, chunked loads, bad
weights and the loader's edge cases."""
import json
import math
import sys
import time
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest

from pgad import api, loader, server
from pgad.models import descent
from pgad.errors import Interrupted, PgadError
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
    expected = f'skipped {NULL_ROWS} of {50 + NULL_ROWS} rows with NULL in "x" (3 rows), "y" (3 rows)'
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
    return [(sql, rows) for sql, rows in plpy.queries if sql.endswith(' GROUP BY pgad_rows.pgad_chunk')]


def test_load_chunk_rows_loads_in_chunks_of_that_many_rows(plpy, xy):
    """(c): pgad.load_chunk_rows = 7 loads the 50 rows in ceil(50/7) chunks, with the same results; 0 loads them
    in one aggregate."""
    weights = json.dumps(W)
    whole = api.loss(LINEAR, 'points', weights), json.loads(api.gradient(LINEAR, 'points', weights))
    assert chunk_queries(plpy) == []
    assert [rows for sql, rows in plpy.queries if 'pgad.pack(' in sql] == [1, 1]
    plpy.conn.execute('SET pgad.load_chunk_rows = 7')
    assert api.settings().chunk_rows == 7
    plpy.queries.clear()
    chunked = api.loss(LINEAR, 'points', weights), json.loads(api.gradient(LINEAR, 'points', weights))
    assert chunked[0] == pytest.approx(whole[0], rel=1e-12)
    assert [chunked[1][k] for k in W] == pytest.approx([whole[1][k] for k in W], rel=1e-12)
    chunks = chunk_queries(plpy)
    assert len(chunks) == 2 and all(' 7 AS pgad_chunk' in sql and rows == math.ceil(50 / 7) for sql, rows in chunks)
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
    assert [stage for stage, _, _ in rows] == ['parse', 'differentiate', 'backend', 'IR generation', 'optimisation',
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


# --- what the survivors of mutation testing showed untested ---------------------------------------------------
def test_a_lambda_that_reads_no_column_averages_over_every_row(plpy):
    """A lambda of the weights alone loads no column: the rows are counted (NULLs too, since no column is read)."""
    constant = 'λ(d, w) (w.a - 3)^2'
    assert api.loss(constant, 'points', '{"a": 1}') == 4.0
    assert json.loads(api.gradient(constant, 'points', '{"a": 1}')) == {'a': -4.0}
    assert loader.load('points', []) == loader.Table([], 50, 0)
    assert loader.load('with_nulls', []) == loader.Table([], 50 + NULL_ROWS, 0)
    assert plpy.notices() == []
    error = fails(api.loss, constant, 'empty', '{"a": 1}')
    assert (error.sqlstate, error.message) == ('22000', 'the data has no rows')


def test_the_load_reports_its_rows_and_parts_in_a_debug_message(plpy):
    def loaded():
        messages = [text for level, text in plpy.messages if level == 'DEBUG' and text.startswith('pgad: loaded')]
        plpy.messages.clear()
        return messages
    assert loader.load('points', ['x', 'y']).rows == 50
    assert loaded() == ['pgad: loaded 50 rows of 2 columns in 1 part']
    assert loader.load('points', ['x', 'y'], 7).rows == 50
    assert loaded() == ['pgad: loaded 50 rows of 2 columns in 8 parts']
    two = loader.load('points', ['y'], 25)  # two parts: both are read, not just the first
    assert (two.rows, np.sort(two.columns[0]).tolist()) == (50, np.sort(loader.load('points', ['y']).columns[0])
                                                            .tolist())
    assert loaded()[0] == 'pgad: loaded 50 rows of 1 columns in 2 parts'


DATA_HINT = 'data is a query (SELECT, VALUES, WITH or TABLE) or the name of a table or view.'


@pytest.mark.parametrize('lam, data, error', [
    (LINEAR, 'empty', ('22000', 'the data has no rows', None,
                       'data must have at least one row to average the loss over.')),
    (LINEAR, 'DELETE FROM points', ('42601', 'data is neither a query nor the name of a table or view',
                                    'The data: DELETE FROM points', DATA_HINT)),
    (LINEAR, 'no_such_table', ('42P01', 'relation "no_such_table" does not exist', None, DATA_HINT)),
    ('λ(d, w) (w.a*d.x + w.b - d.nope)^2', 'points', ('42703', 'column "nope" does not exist in the data',
                                                     'The data has columns: "x", "y".', None)),
    ('λ(d, w) w.a*d.upper', 'mixed', ('42703', 'column "upper" does not exist in the data',
                                      'The data has columns: "s", "i", "b", "r", "n", "f", "t", "Upper".',
                                      'Column names fold to lower case; write d."Name" for a mixed-case column.')),
    ('λ(d, w) w.a*d.t', 'mixed', ('42804', 'column "t" is of type text, not a number', None,
                                  'Cast it in the data query, for example SELECT "t"::float8 AS "t" …, or use a '
                                  'numeric column (smallint to float8, numeric). To read its values as categories, '
                                  'index a weight by it: w.t[d.t] with "t": {} in the weights (a weight per '
                                  'category).')),
    (LINEAR, 'SELECT lower(1) AS x, 1 AS y', ('42883', 'function lower(integer) does not exist',
                                              'The data query: SELECT lower(1) AS x, 1 AS y',
                                              'No function matches the given name and argument types. You might '
                                              'need to add explicit type casts.')),
])
def test_bad_data_errors_in_full(plpy, lam, data, error):
    """Each field of the loader's errors, exactly; the data query's own HINT is passed on."""
    caught = fails(api.loss, lam, data, json.dumps(W))
    assert (caught.sqlstate, caught.message, caught.detail, caught.hint) == error


def test_a_cancel_while_the_data_is_read_is_passed_on_as_it_is(plpy, monkeypatch):
    """57014 from the data query (statement_timeout while it is planned) or from the name's lookup is not turned
    into a data error: it leaves pgad as the server raised it."""
    plpy.execute("CREATE FUNCTION pg_temp.slow() RETURNS float8 IMMUTABLE LANGUAGE plpgsql "
                 "AS 'BEGIN PERFORM pg_catalog.pg_sleep(2); RETURN 1; END'")
    plpy.execute("SET statement_timeout = '50ms'")
    with pytest.raises(plpy.SPIError) as caught:  # the planner folds slow() while describing the query
        api.loss(LINEAR, 'SELECT pg_temp.slow() AS x, 1 AS y', json.dumps(W))
    assert caught.value.sqlstate == '57014'
    plpy.execute('RESET statement_timeout')
    query = server.query

    def cancelled(sql, *args):
        if sql == loader.RELATION:
            raise plpy.SPIError('canceling statement due to user request', '57014')
        return query(sql, *args)
    monkeypatch.setattr(server, 'query', cancelled)
    with pytest.raises(plpy.SPIError) as caught:
        api.loss(LINEAR, 'points', json.dumps(W))
    assert caught.value.sqlstate == '57014'


def test_max_lambda_nodes_bounds_the_derivatives_too(plpy):
    """LINEAR parses into 9 nodes and 19 with both derivatives: at 16 (the least the setting takes) the loss is computed, its gradient is not."""
    plpy.conn.execute('SET pgad.max_lambda_nodes = 16')
    assert api.settings().limits.lambda_nodes == 16
    assert api.loss(LINEAR, 'points', json.dumps(W)) > 0
    for call in (api.gradient, lambda *a: api.gradient_descent(*a, 0.1, 1)):
        error = fails(call, LINEAR, 'points', json.dumps(W))
        assert (error.sqlstate, error.message, error.detail) == (
            '54001', 'lambda is too large: more than 16 expression nodes with its derivatives',
            'The limit, pgad.max_lambda_nodes, is 16.')


def test_kernels_are_kept_in_pgad_cache_directory(plpy, tmp_path):
    directory = tmp_path / 'kernels'
    directory.mkdir(mode=0o700)
    plpy.conn.execute(f"SET pgad.cache_directory = '{directory}'")
    unique = f'λ(d, w) (w.a*d.x + w.b - d.y + {time.time_ns() % 10 ** 9})^2'  # compiled by no earlier test
    api.gradient(unique, 'points', json.dumps(W), 'reverse', 'llvm')
    assert [p.suffix for p in directory.iterdir() if not p.name.startswith('.')] == ['.kernel']


def test_a_domain_error_names_the_operation_and_the_row(plpy):
    """ln of a negative number at the starting weights: PostgreSQL's own SQLSTATE and message, the row in DETAIL,
    from every call that evaluates the lambda (gradient_descent with 0 iterations too)."""
    expected = ('2201E', 'cannot take logarithm of a negative number',
                'The lambda computes ln(d.x - 1) = NaN where d.x = 0.04, at the starting weights.',
                'Keep the data and the starting weights inside the domain of every function, or guard the '
                'expression with CASE WHEN.')
    for call in (api.loss, api.gradient, lambda *a: api.gradient_descent(*a, 0.1, 0),
                 lambda *a: api.gradient_descent(*a, 0.1, 3)):
        error = fails(call, 'λ(d, w) w.a*ln(d.x - 1)', 'points', '{"a": 1}')
        assert (error.sqlstate, error.message, error.detail, error.hint) == expected


# --- the aggregates' Python: the packed rows the C transition function hands over -------------------------------
def packed(plpy, sql):
    return bytes(next(iter(plpy.conn.execute(sql).fetchone().values())))


def test_the_aggregates_give_the_functions_numbers_on_the_packed_rows(plpy, xy):
    """The names say which packed column is which: packed as (y, x), read as the lambda's (x, y)."""
    rows, weights = packed(plpy, 'SELECT pgad.pack(y, x) FROM with_nulls'), json.dumps(W)
    assert api.loss_agg(rows, ['y', 'x'], LINEAR, weights) == pytest.approx(mse(*xy, **W), rel=1e-12)
    gradient = json.loads(api.gradient_agg(rows, ['y', 'x'], LINEAR, weights, '{"mode": "forward"}'))
    assert [gradient[k] for k in W] == pytest.approx(mse_gradient(*xy, **W), rel=1e-12)
    fit, loss, ran = api.gradient_descent_agg(rows, ['y', 'x'], LINEAR, weights, '{"learning_rate": 0.1}')
    assert [json.loads(fit)[k] for k in W] == pytest.approx(numpy_descent(*xy, list(W.values()), 0.1, 100), rel=1e-9)
    assert ran == 100 and loss == pytest.approx(mse(*xy, *json.loads(fit).values()), rel=1e-9)
    assert plpy.notices() == [f'skipped {NULL_ROWS} of {50 + NULL_ROWS} rows with NULL in "x", "y"'] * 3


def test_an_aggregate_with_no_row_to_average_over_gives_none(plpy):
    rows = packed(plpy, 'SELECT pgad.pack(x::float8, y) FROM all_null')
    assert api.gradient_agg(rows, ['x', 'y'], LINEAR, json.dumps(W)) is None
    nothing = loader.HEADER.pack(loader.MAGIC, 0, 0, 2)  # no row read at all: no column either, 2 NULL rows
    assert api.loss_agg(nothing, [], LINEAR, json.dumps(W)) is None
    assert plpy.notices() == ['skipped 3 of 3 rows with NULL in "x", "y"', 'skipped 2 of 2 rows with NULL in "x", "y"']


@pytest.mark.parametrize('aggregate, options, message, hint', [
    (api.loss_agg, '{"mode": "forward"}', 'unknown option "mode" of pgad.loss_agg', 'pgad.loss_agg takes no options.'),
    (api.gradient_agg, '{"iterations": 5}', 'unknown option "iterations" of pgad.gradient_agg',
     'The options are mode, backend, dtype, tape.'),
    (api.gradient_descent_agg, '[1]', 'options must be a JSON object',
     'Write the options as {"learning_rate": 0.05, "iterations": 100, "mode": "reverse", "backend": "auto", '
     '"dtype": "float64", "tape": "auto"}.'),
    (api.gradient_descent_agg, '{"learning_rate": true}', 'option "learning_rate" must be a number, not true', None),
    (api.gradient_descent_agg, '{"iterations": 1.5}', 'option "iterations" must be an integer, not 1.5', None),
    (api.gradient_descent_agg, '{"iterations": 2147483648}',
     'option "iterations" must be an integer, not 2147483648', None),
    (api.gradient_descent_agg, '{"iterations": -1}', 'iterations must be 0 or more, not -1', None),
    (api.gradient_agg, '{"mode": 1}', 'option "mode" must be a string, not 1', None),
    (api.gradient_agg, '{"backend": "fortran"}', 'unknown backend "fortran"', None),
    (api.gradient_agg, '{"tape": "tiled"}', 'unknown tape "tiled"', "tape is 'auto', 'store', 'recompute' or "
                                                                    "'reversible'."),
    (api.gradient_agg, '{"mode": "forward", "tape": "store"}', 'tape "store" is not available in mode "forward"',
     None),
])
def test_an_aggregates_bad_options_are_refused(plpy, aggregate, options, message, hint):
    error = fails(aggregate, packed(plpy, 'SELECT pgad.pack(x, y) FROM points'), ['x', 'y'], LINEAR, json.dumps(W),
                  options)
    assert (error.sqlstate, error.message) == ('22023', message)
    assert hint is None or error.hint == hint


def test_an_aggregates_options_default_to_the_functions_arguments(plpy):
    rows, weights = packed(plpy, 'SELECT pgad.pack(x, y) FROM points'), json.dumps(W)
    assert api.gradient_descent_agg(rows, ['x', 'y'], LINEAR, weights) == \
        api.gradient_descent_agg(rows, ['x', 'y'], LINEAR, weights, '{"learning_rate": 0.05, "iterations": 100}') == \
        api.gradient_descent(LINEAR, 'points', weights)


def test_lambda_columns_finds_each_column_by_name_or_gives_the_functions_error(plpy):
    names, types = ['t', 'y', 'x'], ['text', 'numeric', 'smallint']
    assert api.lambda_columns(LINEAR, names, types) == [3, 2]
    assert api.lambda_columns('λ(d, w) w.a', names, types) == []
    error = fails(api.lambda_columns, 'λ(d, w) d.z', names, types)
    assert (error.sqlstate, error.message, error.detail) == \
        ('42703', 'column "z" does not exist in the data', 'The data has columns: "t", "y", "x".')
    error = fails(api.lambda_columns, 'λ(d, w) d.t', names, types)
    assert (error.sqlstate, error.message) == ('42804', 'column "t" is of type text, not a number')


# --- the loader's and the API's edges (mutation survivors) ---
WIDE = 100  # columns: one pgad.pack of PACK_COLUMNS (99) and one of the rest, and the count of all rows


@pytest.fixture
def wide(plpy):
    """A table of 6 rows and 100 float8 columns v0 … v99, v<k> of row g = 1000 g + k; row 3 has NULL in v5 (the
    first pack's), row 4 in v99 (the second's): the rows with no NULL are 1, 2, 5 and 6."""
    columns = ', '.join(f"CASE WHEN (g, {k}) IN ((3, 5), (4, 99)) THEN NULL ELSE 1000 * g + {k} END::float8 AS v{k}"
                        for k in range(WIDE))
    plpy.execute(f'CREATE TEMP TABLE wide AS SELECT g, {columns} FROM generate_series(1, 6) AS g')
    return [f'v{k}' for k in range(WIDE)]


WIDE_ROWS = [1, 2, 5, 6]


def values(*numbers):
    """numbers as pgad.pack stores them: native float8."""
    return np.array(numbers, dtype=np.float64).tobytes()


def test_more_than_99_columns_load_in_several_packs(plpy, wide):
    """The rows with a NULL in any column are skipped in every pack; the count of all rows gives the skipped."""
    notice = 'skipped 2 of 6 rows with NULL in "v5" (1 row), "v99" (1 row)'  # the columns that have one
    table = loader.load('wide', wide)
    assert (table.rows, table.skipped) == (4, 2)
    assert [column.tolist() for column in table.columns] == [[1000.0 * g + k for g in WIDE_ROWS] for k in range(WIDE)]
    assert plpy.notices() == [notice]
    # in chunks of 2 rows (ordered by g): the second chunk, rows 3 and 4, has no row with no NULL
    chunked = loader.load('SELECT * FROM wide ORDER BY g', wide, 2)
    assert (chunked.rows, chunked.skipped) == (4, 2)
    order = np.argsort(chunked.columns[0])
    assert [column[order].tolist() for column in chunked.columns] == [[1000.0 * g + k for g in WIDE_ROWS]
                                                                      for k in range(WIDE)]
    assert plpy.notices() == [notice] * 2
    total = ' + '.join(f'd.{name}' for name in wide)
    assert api.loss(f'λ(d, w) w.a*({total})', 'wide', '{"a": 1}') == sum(1000 * g * WIDE + 4950 for g in WIDE_ROWS) / 4


def test_unpack_reads_each_pack_and_refuses_packs_of_different_row_counts():
    """100 columns: p0 packs 99 of them, p1 the last; the rows skipped are the count of all rows less those packed."""
    first = loader.HEADER.pack(loader.MAGIC, 99, 2, 0) + np.arange(2.0 * 99).tobytes()
    second = loader.HEADER.pack(loader.MAGIC, 1, 2, 0) + values(-1, -2)
    columns, rows, skipped = loader.unpack({'p0': first, 'p1': second, 'total': 5}, 100)
    assert ([c.tolist() for c in columns], rows, skipped) == ([[2.0 * k, 2.0 * k + 1] for k in range(99)] +
                                                              [[-1, -2]], 2, 3)
    with pytest.raises(PgadError) as caught:
        loader.unpack({'p0': first, 'p1': loader.HEADER.pack(loader.MAGIC, 1, 3, 0) + values(1, 2, 3), 'total': 3},
                      100)
    assert (caught.value.sqlstate, caught.value.message, caught.value.detail) == (
        'XX000', 'pgad.pack returned a malformed result', '3 rows in one part and 2 in another.')


@pytest.mark.parametrize('packed, detail', [
    (loader.HEADER.pack(0x12345678, 2, 1, 0) + values(1, 2), '40 bytes, header (305419896, 2, 1, 0), for 2 columns.'),
    (loader.HEADER.pack(loader.MAGIC, 1, 2, 0) + values(1, 2),
     f'40 bytes, header ({loader.MAGIC}, 1, 2, 0), for 2 columns.'),
    (loader.HEADER.pack(loader.MAGIC, 2, 1, 0) + values(1, 2, 3),
     f'48 bytes, header ({loader.MAGIC}, 2, 1, 0), for 2 columns.'),
    (loader.HEADER.pack(loader.MAGIC, 2, 2, 7) + values(1, 2, 3),
     f'48 bytes, header ({loader.MAGIC}, 2, 2, 7), for 2 columns.'),
], ids=['magic', 'columns', 'too long', 'too short'])
def test_read_refuses_bytes_that_are_not_a_pack_of_its_columns(packed, detail):
    """A wrong magic, a wrong number of columns (the length right for the columns asked for), too many bytes, too
    few: each is an internal error, with the bytes' header in DETAIL."""
    with pytest.raises(PgadError) as caught:
        loader.read(packed, 2)
    assert (caught.value.sqlstate, caught.value.message, caught.value.detail) == (
        'XX000', 'pgad.pack returned a malformed result', detail)


def test_read_gives_the_columns_of_a_pack_or_of_no_row():
    columns, rows, skipped = loader.read(loader.HEADER.pack(loader.MAGIC, 2, 3, 4) + values(1, 2, 3, 4, 5, 6), 2)
    assert ([c.tolist() for c in columns], rows, skipped) == ([[1, 2, 3], [4, 5, 6]], 3, 4)
    assert all(c.dtype == np.float64 for c in columns)
    columns, rows, skipped = loader.read(None, 2)  # pgad.pack of no row at all is NULL
    assert ([c.tolist() for c in columns], rows, skipped) == ([[], []], 0, 0)


def test_no_row_loads_as_empty_columns(plpy):
    """A table with no row (pgad.pack gives NULL), and the bytes of an aggregate's group that read no row at all."""
    for table in (loader.load('empty', ['x', 'y']),
                  loader.packed(loader.HEADER.pack(loader.MAGIC, 0, 0, 2), [], ['x', 'y'])):
        assert ([c.tolist() for c in table.columns], table.rows) == ([[], []], 0)


def test_a_chunked_load_skips_rows_with_null_in_every_chunk(plpy, xy):
    table = loader.load('with_nulls', ['x', 'y'], 7)
    assert (table.rows, table.skipped) == (50, NULL_ROWS)
    order = np.argsort(table.columns[0])
    assert np.array_equal(table.columns[0][order], xy[0]) and np.array_equal(table.columns[1][order], xy[1])
    assert plpy.notices() == [f'skipped {NULL_ROWS} of {50 + NULL_ROWS} rows with NULL in "x" (3 rows), "y" (3 rows)']


def test_a_load_past_1_gb_in_one_value_is_packed_in_chunks_of_256_mb(plpy, xy, monkeypatch):
    """When the one aggregate fails with 54000 (pgad.pack's error past 1 GB), the load packs the rows in chunks of
    256 MB: 16777216 rows of 2 columns, here all in one chunk."""
    execute = plpy.execute

    def too_large(query, *args):
        if isinstance(query, str) and query.startswith('SELECT pgad.pack(') and 'pgad_chunk' not in query:
            raise plpy.SPIError('pgad cannot pack more than 67108864 rows of 2 columns in one value', '54000')
        return execute(query, *args)
    monkeypatch.setattr(plpy, 'execute', too_large)
    plpy.messages.clear()
    table = loader.load('with_nulls', ['x', 'y'])
    assert (table.rows, table.skipped) == (50, NULL_ROWS)
    order = np.argsort(table.columns[0])
    assert np.array_equal(table.columns[0][order], xy[0]) and np.array_equal(table.columns[1][order], xy[1])
    assert [(' 16777216 AS pgad_chunk' in sql, rows) for sql, rows in chunk_queries(plpy)] == [(True, 1)]
    assert [text for level, text in plpy.messages if level == 'DEBUG'] == [
        'pgad: loaded 50 rows of 2 columns in 1 part']


def test_a_sum_that_overflows_over_the_rows_names_the_weight(plpy):
    """Every row's derivative is finite (1e308), their sum is not: no row is to blame, the error names the weight."""
    data = 'SELECT 1e308::float8 AS x FROM pg_catalog.generate_series(1, 2)'
    for call in (api.gradient, lambda *a: api.gradient_descent(*a, 0.1, 3)):
        error = fails(call, 'λ(d, w) w.a*d.x', data, '{"a": 0}')
        assert (error.sqlstate, error.message, error.hint) == (
            '22003', 'the gradient by "a" is infinite at the starting weights',
            'Check that the lambda is defined on every row (ln and sqrt of the data, division).')


def test_a_cancel_stops_the_pass_over_more_rows_than_a_kernel_call_takes(plpy, monkeypatch):
    """Past descent.CHUNK_ROWS rows the kernel runs a chunk at a time, the server checking for a cancel between
    chunks: in loss, gradient and gradient_descent alike."""
    plpy.execute(f'CREATE TEMP TABLE many AS SELECT g::float8 AS x FROM generate_series(1, {descent.CHUNK_ROWS + 1}) '
                 'AS g')
    load = loader.load

    def loaded(*args, **kwargs):  # the server cancels once the rows are loaded
        table = load(*args, **kwargs)
        patch.setattr(server, 'check_interrupts', cancel)
        return table

    def cancel():
        raise Interrupted('57014', 'canceling statement due to user request')
    for call in (api.loss, api.gradient, lambda *a: api.gradient_descent(*a, 0.1, 1)):
        with monkeypatch.context() as patch:
            patch.setattr(loader, 'load', loaded)
            error = fails(call, 'λ(d, w) (w.a*d.x)^2', 'many', '{"a": 1}')
        assert (error.sqlstate, error.message) == ('57014', 'canceling statement due to user request')


def test_a_long_descent_reports_its_progress(plpy, xy, monkeypatch):
    """Every second (here 10 s pass at each clock reading) a NOTICE gives the iteration, the loss at its start, the
    seconds since the start and the rows a second."""
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(descent, 'time', SimpleNamespace(monotonic=lambda: next(clock)))
    api.gradient_descent(LINEAR, 'points', json.dumps(W), 0.1, 2)
    first = numpy_descent(*xy, list(W.values()), 0.1, 1)
    rows = len(xy[0])
    assert plpy.notices() == [f'iteration 1 of 2, loss {mse(*xy, **W):.6g}, 10.0 s, {rows / 10:.0f} rows/s',
                              f'iteration 2 of 2, loss {mse(*xy, *first):.6g}, 20.0 s, {rows / 10:.0f} rows/s']


def test_a_lambda_past_the_limits_is_reported_before_the_weights(plpy):
    """The lambda (19 nodes) is parsed within pgad.max_lambda_nodes before the weights (not an object) are read."""
    plpy.conn.execute('SET pgad.max_lambda_nodes = 16')
    error = fails(api.loss, 'λ(d, w) (w.a*d.x + w.b - d.y)^2 + (w.b*d.y + w.a*w.a - d.x*d.x)^3 + sin(w.b)', 'points',
                  '[]')
    assert (error.sqlstate, error.message) == ('54001', 'lambda is too large: more than 16 expression nodes with its '
                                                        'derivatives')


@pytest.mark.parametrize('sqlstate, reported', [('42703', '42703'), (None, '42601')])
def test_the_data_querys_error_as_plpython_raises_it(plpy, monkeypatch, sqlstate, reported):
    """PL/Python's SPIError keeps DETAIL and HINT in .spidata (plpy_client's too): the data query's error is
    reported with its SQLSTATE (42601 if it has none) and message, with the query in DETAIL."""
    def describe(sql):
        raise plpy.SPIError('column "z" does not exist', sqlstate)
    monkeypatch.setattr(server, 'describe', describe)
    error = fails(api.loss, LINEAR, 'SELECT 1 AS x, 2 AS y', json.dumps(W))
    assert (error.sqlstate, error.message, error.detail) == (reported, 'column "z" does not exist',
                                                             'The data query: SELECT 1 AS x, 2 AS y')
