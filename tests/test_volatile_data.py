"""Data queries whose rows change between executions never crash the server (issue 34, item 1).

A function runs its data query more than once: loader.lengths measures the arrays, categorical.expand reads the
categories, and the load reads the rows. A volatile query (random(), a sequence, a function with a counter,
clock_timestamp(), a set-returning function) can give other rows each time, so the native load (extension/load.c)
checks every row it reads itself, in C: until 0.12.0 an array that was empty only at load time made the next row's
copy read through a NULL pointer, and every session restarted. The loads that pgad.pack packs (chunked, or without
pgad.so) read an array's elements through pgad._element (extension/element.c), which checks each array the same way:
until it did, a subscript read the wrong elements, or none, and the call gave a wrong number.

The fuzzer builds such queries over every column kind the native load, pgad.pack and the aggregates take, with
edge values (empty, NULL, 2-D and shifted arrays, arrays of another length, NULL elements, NaN and infinities, no
rows), runs them through pgad.loss, gradient, gradient_descent, train (with group_by too, through pgad.pack), loss
and train again with pgad.load_chunk_rows set (pgad.pack reads the arrays there, through pgad._element) and the
aggregates, and asserts that each ends in a number or a PostgreSQL error with a SQLSTATE other than XX000, that
the session goes on, and that the server never restarts.
"""
import random
import time

import psycopg
import pytest

from conftest import error_of

SEED = 20261126
CASES = 600          # about 20 s on a 2-core VM
SECONDS = 60         # the fuzzer starts no case past this, whatever CASES says
ISSUE = ("SELECT pgad.loss('λ(d, w) sum(w.a * d.v)', $$SELECT CASE WHEN i = 1 AND {cond} THEN '{{}}'::float8[] "
         "ELSE ARRAY[1, 2]::float8[] END AS v FROM generate_series(1, 2) AS i{source}$$, '{{\"a\": [1, 1]}}')")
SETUP = """
CREATE SEQUENCE pgad_fuzz_seq;
CREATE SEQUENCE pgad_issue_seq;
CREATE FUNCTION bump() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS pgad_counter (n bigint);
    UPDATE pgad_counter SET n = pgad_counter.n + 1 RETURNING pgad_counter.n INTO n;
    IF n IS NULL THEN
        INSERT INTO pgad_counter VALUES (1);
        n := 1;
    END IF;
    RETURN n;
END $$;
CREATE FUNCTION some_rows(n bigint) RETURNS SETOF bigint LANGUAGE sql VOLATILE AS
    $$ SELECT g FROM generate_series(1, n) AS g $$;
"""

NUMBERS = ('smallint', 'integer', 'bigint', 'real', 'double precision', 'numeric')
FLOATS = ('real', 'double precision', 'numeric')


def number_edges(kind):
    edges = ['NULL', '1e4']
    if kind in FLOATS:
        edges += ["'NaN'", "'Infinity'", "'-Infinity'"]
    if kind == 'numeric':
        edges += ['1e400']  # past float8: an overflow error
    if kind == 'smallint':
        edges += ['32767']
    return [f'({e})::{kind}' for e in edges]


def array_edges(kind):
    edges = ["'{}'", 'NULL', 'ARRAY[i, NULL]', 'ARRAY[[i, 1], [1, 1]]', "'[0:1]={1,2}'", "'[2:3]={1,2}'",
             'ARRAY[i, 1, 1]', 'ARRAY[i]', 'ARRAY[[i], [1]]']
    if kind in FLOATS:
        edges += ["ARRAY['NaN', 'Infinity']"]
    return [f'({e})::{kind}[]' for e in edges]


# Each kind of column: (name, its good value in row i, its edge values, the model that reads it, its weights).
KINDS = ([('x', f'(i % 3 + 1)::{k}', number_edges(k), 'w.a * d.x', '{"a": 0.5}') for k in NUMBERS] +
         [('flag', '(i % 2 = 0)', ['NULL::boolean'], 'CASE WHEN d.flag THEN w.a ELSE w.b END',
           '{"a": 0.5, "b": 0.25}'),
          ('r', "(ARRAY['north', 'south'])[i % 2 + 1]", ['NULL::text', "'west'", "'zone ' || i", "''"],
           'w.r[d.r]', '{"r": {}}')] +
         [('v', f'ARRAY[i % 3 + 1, 1]::{k}[]', array_edges(k), 'sum(w.a * d.v)', '{"a": [0.5, 0.25]}')
          for k in NUMBERS] +
         [('v', 'ARRAY[i % 3 + 1, 1]::float8[]', array_edges('double precision'), 'w.b * d.z + sum(w.a * d.v)',
           '{"a": [0.5, 0.25], "b": 0.125}')])  # an array beside a number column

# Where the edge value appears: only in some executions of the query (or some rows), by each volatile source.
# {row} is the row it may appear in; e.n is the query's own number (one per execution).
SOURCES = {
    'random': ('random() < 0.4', ''),
    'sequence': ('e.n % 2 = 0 AND i = {row}', ", (SELECT nextval('pgad_fuzz_seq') AS n) AS e"),
    'counter': ('e.n % 2 = 1 AND i = {row}', ', (SELECT bump() AS n) AS e'),
    'clock': ("pg_catalog.date_part('microseconds', clock_timestamp())::int % 3 = 0", ''),
}
# How many rows: fixed, by the sequence (none in one execution of three), or by a set-returning function.
ROWS = {
    'fixed': 'generate_series(1, 4) AS i',
    'sequence': "generate_series(1, (nextval('pgad_fuzz_seq') % 3) * 2) AS i",
    'function': 'some_rows(CASE WHEN random() < 0.2 THEN 0 ELSE 3 + bump() % 2 END) AS i',
}


def data_query(kind, edge, source, rows, row):
    name, good, _, _, _ = kind
    cond, join = SOURCES[source]
    return (f'SELECT CASE WHEN {cond.format(row=row)} THEN {edge} ELSE {good} END AS {name}, '
            f'(i % 2)::float8 AS y, i % 2 AS g, i::float8 AS z FROM {ROWS[rows]}{join}')


FUNCTIONS = ('loss', 'gradient', 'gradient_descent', 'train', 'train_group_by', 'train_validation', 'loss_agg',
             'gradient_agg', 'gradient_descent_agg', 'gradient_agg_group_by', 'loss_chunked', 'train_chunked')
CHUNKED_LOADS = 'SET pgad.load_chunk_rows = 2'  # the *_chunked functions' loads: pgad.pack, two rows a chunk


def statement(function, kind, query, case):
    """(the SQL of one call of function over the data query, its parameters)."""
    _, _, _, model, weights = kind
    loss = f'λ(d, w) ({model} - d.y)^2'
    function = function.removesuffix('_chunked')  # the same call; the test SETs pgad.load_chunk_rows around it
    if function == 'loss':
        return 'SELECT pgad.loss(%s, %s, %s)', (loss, query, weights)
    if function == 'gradient':
        return 'SELECT pgad.gradient(%s, %s, %s)', (loss, query, weights)
    if function == 'gradient_descent':
        return 'SELECT pgad.gradient_descent(%s, %s, %s, iterations => 3)', (loss, query, weights)
    if function.startswith('train'):  # group_by packs with pgad.pack; a validation query is loaded too
        more = {'train': '', 'train_group_by': ", group_by => 'g'", 'train_validation': ', validation => %s'}[function]
        return (f"SELECT pgad.train(%s, %s, 'squared', %s, %s, iterations => 3{more})",
                (f'volatile_{case}', f'λ(d, w) {model}', query, weights) + (query,) * bool(more.endswith('%s')))
    query = query.replace('%', '%%')  # spliced into the SQL, beside psycopg's placeholders
    options = "" if function == 'loss_agg' else ", '{\"iterations\": 3}'" * (function == 'gradient_descent_agg')
    if function == 'gradient_agg_group_by':
        return (f'SELECT pgad.gradient_agg(%s, %s, t) FROM ({query}) AS t GROUP BY t.g', (loss, weights))
    return f'SELECT pgad.{function}(%s, %s, t{options}) FROM ({query}) AS t', (loss, weights)


@pytest.fixture(scope='module', autouse=True)
def functions(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(SETUP)


@pytest.fixture
def started(db):
    return db.execute('SELECT pg_postmaster_start_time()').fetchone()[0]


def server_still_up(cluster, dbname, started):
    """A fresh connection works, and the postmaster has not restarted (a crashed backend restarts them all)."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as fresh:
        assert fresh.execute('SELECT pg_postmaster_start_time()').fetchone()[0] == started


def outcome(db, sql, params):
    """'ok', or the SQLSTATE of the error the call ends in (the test fails on a lost connection)."""
    try:
        db.execute(sql, params).fetchall()
        return 'ok'
    except psycopg.OperationalError:
        raise
    except psycopg.Error as e:
        return e.diag.sqlstate


# --- the issue's reproduction -----------------------------------------------------------------------------------

@pytest.mark.parametrize('restart', [1, 2, 3])
def test_an_array_empty_only_when_the_load_reads_it_is_an_error_not_a_crash(cluster, dbname, db, started, restart):
    """The issue's query, its first row's array empty in every second execution (a sequence), whichever execution
    the load is: the load refuses the row with the message loader.lengths gives (0.12.0: SIGSEGV, every session
    restarted, every time the load was an even execution)."""
    db.execute(f'ALTER SEQUENCE pgad_issue_seq RESTART WITH {restart}')
    sql = ISSUE.format(cond='e.n % 2 = 0', source=", (SELECT nextval('pgad_issue_seq') AS n) AS e")
    try:
        assert db.execute(sql).fetchone()[0] == 3.0  # the load saw the arrays lengths() saw
    except psycopg.errors.ArraySubscriptError as e:
        assert e.diag.message_primary == 'column "v" has an empty array in row 1 of the data'
    assert db.execute('SELECT 1').fetchone()[0] == 1
    server_still_up(cluster, dbname, started)


def test_the_issues_random_query_never_crashes(cluster, dbname, db, started):
    """The issue's own query, random() < 0.5 in the first row: each of 16 seeds gives 3 or the empty array's
    error, and both come up."""
    found = set()
    for seed in range(16):
        db.execute('SELECT setseed(%s)', (seed / 16,))
        found.add(outcome(db, ISSUE.format(cond='random() < 0.5', source=''), None))
    assert found == {'ok', '2202E'}
    server_still_up(cluster, dbname, started)


# --- the load checks the rows it reads, whatever loader.lengths saw ----------------------------------------------

LOAD_NATIVELY = """
CREATE OR REPLACE FUNCTION load_v(data text, width int) RETURNS text[] LANGUAGE plpython3u AS $$
import plpy
from pgad import loader
elements = {f'v[{k}]': ('v', k) for k in range(1, width + 1)}
try:
    table = loader.load_natively(loader.native_loader(), data, list(elements), elements, {}, False)
except plpy.SPIError as e:
    return [e.sqlstate, e.args[0], e.spidata[1]]
return ['ok', str(table.rows), str(table.skipped)]
$$;
"""


@pytest.mark.parametrize('second, error', [
    ("'{}'", ['2202E', 'column "v" has an empty array in row 2 of the data', None]),
    ('ARRAY[[1, 2], [3, 4]]', ['2202E', 'column "v" has a 2-dimensional array in row 2 of the data',
                               'pgad reads a one-dimensional array as a vector.']),
    ("'[0:1]={1,2}'", ['2202E', 'column "v" has an array that starts at index 0 in row 2 of the data',
                       'pgad reads arrays indexed from 1.']),
    ('ARRAY[1, 2, 3]', ['2202E', 'column "v" has arrays of different lengths',
                        "The lambda reads arrays of 2 elements, the length pgad found in the data; row 2's has 3."]),
    ('ARRAY[1]', ['2202E', 'column "v" has arrays of different lengths',
                  "The lambda reads arrays of 2 elements, the length pgad found in the data; row 2's has 1."]),
    ('NULL', ['ok', '2', '1']),
    ('ARRAY[1, NULL]', ['ok', '2', '1']),
])
@pytest.mark.parametrize('first', ['ARRAY[1, 2]', "'{}'"])
def test_the_load_checks_each_array_it_reads(cluster, dbname, db, started, first, second, error):
    """The native load called on rows that loader.lengths never measured: every array must be one-dimensional
    from 1 and of the length the lambda reads, an empty first array included (0.12.0 read it as a number column's
    and crashed on the next row); a NULL array or element skips the row."""
    db.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT 1 AS x', '{\"a\": 1}')")  # pgad's Python imported
    db.execute(LOAD_NATIVELY)
    rows = f'VALUES (1, ARRAY[1, 2]::float8[]), (2, ({second})::float8[]), (3, ARRAY[5, 6]::float8[])'
    if first != 'ARRAY[1, 2]':
        rows = f"VALUES (0, ({first})::float8[]), " + rows[len('VALUES '):]
        error = ['2202E', 'column "v" has an empty array in row 1 of the data', None]
    found = db.execute('SELECT load_v(%s, 2)', (f'SELECT column2 AS v FROM ({rows}) AS t(column1, column2)',)
                       ).fetchone()[0]
    assert found == error
    assert db.execute('SELECT 1').fetchone()[0] == 1
    server_still_up(cluster, dbname, started)


# --- pgad.pack's loads check the rows they read too ---------------------------------------------------------------
# Chunked loads (pgad.load_chunk_rows) and loads without pgad.so's native load pack the rows with pgad.pack, which
# reads an array column's elements through pgad._element (extension/element.c). Until it did, a subscript read
# them: the wrong element of an array from index 0, the first elements of a longer array, and NULL (the row skipped)
# from a shorter, 2-D or empty one, each a number. pgad.pack's query cannot count its rows (parallel workers, hashed
# chunks), so its errors say "a row" where the native load's name it.

def odd_arrays(n):
    """(the SQL of an array that the lambda, reading arrays of n elements, must not read; what the load then gives:
    the error's SQLSTATE, message and detail, or 'ok' and the rows loaded and skipped of the three). The array from
    index 0 has n + 1 elements, so that a subscript would read n of them, the wrong ones."""
    return [
        ("'{}'::float8[]", ['2202E', 'column "v" has an empty array in a row of the data', None]),
        (f'array_fill(1::float8, ARRAY[2, {n}])', ['2202E', 'column "v" has a 2-dimensional array in a row of the '
                                                   'data', 'pgad reads a one-dimensional array as a vector.']),
        (f'array_fill(2::float8, ARRAY[{n + 1}], ARRAY[0])', ['2202E', 'column "v" has an array that starts at index 0 '
                                                          'in a row of the data', 'pgad reads arrays indexed from 1.']),
        (f'array_fill(2::float8, ARRAY[{n + 1}])', ['2202E', 'column "v" has arrays of different lengths',
                                                   f'The lambda reads arrays of {n} elements, the length pgad found '
                                                   f"in the data; a row's has {n + 1}."]),
        (f'array_fill(2::float8, ARRAY[{n - 1}])', ['2202E', 'column "v" has arrays of different lengths',
                                                   f'The lambda reads arrays of {n} elements, the length pgad found '
                                                   f"in the data; a row's has {n - 1}."]),
        ('NULL::float8[]', ['ok', '2', '1']),
        (f'array_append(array_fill(2::float8, ARRAY[{n - 1}]), NULL)', ['ok', '2', '1']),
    ]


LOAD_PACKED = """
CREATE OR REPLACE FUNCTION load_packed(data text, width int, chunk_rows int) RETURNS text[] LANGUAGE plpython3u AS $$
import plpy
from pgad import loader
elements = {f'v[{k}]': ('v', k) for k in range(1, width + 1)}
try:
    table = loader.load(data, list(elements), chunk_rows, elements=elements, packed=True)
except plpy.SPIError as e:
    return [e.sqlstate, e.args[0], e.spidata[1]]
return ['ok', str(table.rows), str(table.skipped)]
$$;
"""


@pytest.mark.parametrize('width, second, error', [(n, a, e) for n in (2, 100) for a, e in odd_arrays(n)])
@pytest.mark.parametrize('chunk_rows', [0, 1])
def test_pgad_packs_loads_check_each_array_they_read(cluster, dbname, db, started, width, second, error, chunk_rows):
    """loader.load through pgad.pack, in one part or a row a chunk, on rows that loader.lengths never measured: the
    second row's array must be one-dimensional from 1 and of the length the lambda reads, else SQLSTATE 2202E with
    the native load's message; a NULL array or element skips the row. Arrays of 100 elements are packed by two
    aggregates, each over the rows with no NULL (loader.aggregate)."""
    db.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT 1 AS x', '{\"a\": 1}')")  # pgad's Python imported
    db.execute(LOAD_PACKED)
    good = f'array_fill(1::float8, ARRAY[{width}])'
    rows = f'VALUES (1, {good}), (2, {second}), (3, {good})'
    found = db.execute('SELECT load_packed(%s, %s, %s)',
                       (f'SELECT column2 AS v FROM ({rows}) AS t(column1, column2)', width, chunk_rows)).fetchone()[0]
    assert found == error
    assert db.execute('SELECT 1').fetchone()[0] == 1
    server_still_up(cluster, dbname, started)


CHUNKED = ("SELECT CASE WHEN e.n > 1 AND i = 2 THEN {second} ELSE ARRAY[i, 1]::float8[] END AS v, i::float8 AS y "
           "FROM generate_series(1, 3) AS i, (SELECT nextval('pgad_pack_seq') AS n) AS e")


@pytest.mark.parametrize('second, error', odd_arrays(2))
@pytest.mark.parametrize('function', ['loss', 'gradient', 'train'])
def test_a_chunked_load_refuses_an_array_that_changed_since_pgad_measured_it(db, second, error, function):
    """pgad.loss, gradient and train with pgad.load_chunk_rows set (a superuser's SET), over data whose second
    row's array changes shape from the query's second execution on (a sequence): loader.lengths, the first, sees
    arrays of 2 in every row; the chunked load that follows gets SQLSTATE 2202E, not a number (0.12.0: the second
    row's elements from index 1, the first two of a longer array, or the row skipped). A NULL array or element still
    skips the row, and the call gives its number."""
    db.execute('CREATE SEQUENCE IF NOT EXISTS pgad_pack_seq')
    db.execute('ALTER SEQUENCE pgad_pack_seq RESTART')
    db.execute('SET pgad.load_chunk_rows = 2')
    data = CHUNKED.format(second=second)
    sql = {'loss': "SELECT pgad.loss('λ(d, w) sum(w.a * d.v)', %s, '{\"a\": [1, 1]}')",
           'gradient': "SELECT pgad.gradient('λ(d, w) sum(w.a * d.v)', %s, '{\"a\": [1, 1]}')",
           'train': "SELECT pgad.train('chunked', 'λ(d, w) sum(w.a * d.v)', 'squared', %s, '{\"a\": [0, 0]}', "
                    "iterations => 2)"}[function]
    if error[0] == 'ok':
        found = db.execute(sql, (data,)).fetchone()[0]
        if function == 'loss':
            assert found == 3.0  # rows 1 and 3, (1 + 1) and (3 + 1), the second skipped
        assert db.execute("SELECT nextval('pgad_pack_seq')").fetchone()[0] > 2  # the load was not the first run
    else:
        found = error_of(db, sql, (data,))
        assert [found.sqlstate, found.message_primary, found.message_detail] == error
        assert found.message_hint == ('Every row\'s "v" must be a one-dimensional array of the same length: filter '
                                      'or pad the rows that differ in the data query.')
    db.execute('RESET pgad.load_chunk_rows')


def test_the_element_reader_alone(db):
    """pgad._element on its own: element k of an array of any element type (a smallint, a numeric: by value and by
    reference), NULL for a NULL array or element (STRICT, and the element's NULL), 2202E naming the column for an
    array of another shape, and 22023 for an element outside the length it is told, which no array can have."""
    rows = db.execute("SELECT pgad._element(ARRAY[1, 2]::int2[], 2, 2, 'v'), pgad._element(ARRAY[1.5, 2]::numeric[], "
                      "1, 2, 'v'), pgad._element(ARRAY[1, NULL]::float8[], 2, 2, 'v'), "
                      "pgad._element(NULL::float8[], 1, 2, 'v')").fetchone()
    assert rows == (2, 1.5, None, None)
    found = error_of(db, "SELECT pgad._element(ARRAY[1, 2, 3]::float8[], 1, 2, 'a \"b\"')")
    assert (found.sqlstate, found.message_primary, found.message_hint) == \
        ('2202E', 'column "a "b"" has arrays of different lengths', 'Every row\'s "a ""b""" must be a one-dimensional '
                                                                    'array of the same length: filter or pad the rows '
                                                                    'that differ in the data query.')
    for k, length in [(0, 2), (3, 2), (1, 0), (1, -1)]:
        assert error_of(db, "SELECT pgad._element(ARRAY[1, 2]::float8[], %s, %s, 'v')", (k, length)).sqlstate == '22023'


def test_group_by_reads_no_array_on_pgad_packs_path(db):
    """pgad.train's group_by, whose load packs each group with pgad.pack, takes no model with vectors: refused
    (0A000) before any load, so an array that changes at load time never reaches pgad.pack there (checked here
    so that a change to that rule meets the tests above)."""
    db.execute('CREATE SEQUENCE IF NOT EXISTS pgad_pack_seq')
    db.execute('ALTER SEQUENCE pgad_pack_seq RESTART')
    data = CHUNKED.format(second="'[0:2]={9,2,1}'::float8[]").replace('AS y', 'AS y, i % 2 AS g')
    found = error_of(db, "SELECT pgad.train('grouped', 'λ(d, w) sum(w.a * d.v)', 'squared', %s, '{\"a\": [0, 0]}', "
                         "group_by => 'g')", (data,))
    assert (found.sqlstate, found.message_primary) == \
        ('0A000', 'pgad.train takes no group_by for a model with vectors')


# --- the fuzzer -------------------------------------------------------------------------------------------------

def test_data_that_changes_between_executions_never_crashes_the_server(cluster, dbname, db, started):
    """CASES calls, each a random column kind, edge value, volatile source and function (SEED): each gives a number
    or an error with a SQLSTATE that is not XX000, the session goes on, a fresh connection works and the postmaster
    never restarts. Every kind, source and function comes up (asserted), and both outcomes do."""
    rng = random.Random(SEED)
    seen, outcomes = set(), {}
    deadline = time.monotonic() + SECONDS
    for case in range(CASES):
        if time.monotonic() > deadline:
            break
        kind = KINDS[case % len(KINDS)]
        function = FUNCTIONS[case % len(FUNCTIONS)]
        source = rng.choice(sorted(SOURCES))
        rows = rng.choice(sorted(ROWS))
        edge = rng.choice(kind[2])
        query = data_query(kind, edge, source, rows, rng.randint(1, 3))
        sql, params = statement(function, kind, query, case)
        db.execute('SELECT setseed(%s)', (rng.random() * 2 - 1,))
        db.execute(CHUNKED_LOADS if function.endswith('_chunked') else 'RESET pgad.load_chunk_rows')
        found = outcome(db, sql, params)
        assert found not in ('XX000', None), (found, sql, params)
        assert db.execute('SELECT 1').fetchone()[0] == 1, (sql, params)
        server_still_up(cluster, dbname, started)
        seen |= {kind[0] + kind[1], source, rows, function}
        outcomes[found] = outcomes.get(found, 0) + 1
    assert case >= len(KINDS) * 3, 'the fuzzer ran too few cases in its time'
    assert {k[0] + k[1] for k in KINDS} <= seen and set(SOURCES) <= seen and set(ROWS) <= seen
    assert set(FUNCTIONS) <= seen
    assert 'ok' in outcomes and len(outcomes) > 2, outcomes


# --- the aggregates refuse a column name the row has twice, as pgad.loss does -------------------------------------

@pytest.mark.parametrize('aggregate', ['loss_agg', 'gradient_agg', 'gradient_descent_agg'])
def test_the_aggregates_refuse_a_column_the_row_has_twice(db, aggregate):
    """pgad.loss refuses data with two columns of the name the lambda reads (42702, PostgreSQL's own message);
    the aggregates read the first of them (0.12.0), and now refuse it the same way. A name the lambda does not read
    may repeat, as it may in pgad.loss's data."""
    expected = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT 1 AS x, 2 AS x', '{\"a\": 1}')")
    found = error_of(db, f"SELECT pgad.{aggregate}('λ(d, w) w.a*d.x', '{{\"a\": 1}}', t) "
                         'FROM (SELECT 1 AS x, 2 AS x) AS t')
    assert (found.sqlstate, found.message_primary) == (expected.sqlstate, expected.message_primary) == \
        ('42702', 'column reference "x" is ambiguous')
    assert db.execute(f"SELECT pgad.{aggregate}('λ(d, w) w.a*d.x', '{{\"a\": 1}}', t) IS NOT NULL FROM "
                      '(SELECT 1 AS x, 2 AS y, 3 AS y) AS t').fetchone()[0]
