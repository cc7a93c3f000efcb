"""The native load (extension/load.c, pgad/loader.py's load_natively), against a real server.

The functions load their data with pgad_load: the loader's query through SPI into a DestReceiver that appends each
row's float8 values to one mapped array per column, which numpy wraps without a copy. These tests hold it to what
the packing aggregate gives (bit for bit, for every column type the loader accepts), to its edges (NULLs, zero rows,
an error halfway, a cancel, pgad.memory_limit, a role's privileges) and to its memory (returned, nothing left
unclaimed). A key column (extension/keys.c) is coded in the load's own pass, in the order the rows first show its
keys, against numpy and against the keys' query of a load that is not native (200,000 keys, non-ASCII and empty
ones, NULL), within pgad.memory_limit (53200 naming the column), and cancelled within a second.
"""
import json
import struct
import threading
import time

import numpy as np
import psycopg
import pytest

from conftest import error_of, heard, settings

ROLE = 'pgad_native_load_user'
HINT = ('Train on a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or have a superuser raise '
        'pgad.memory_limit.')
ROWS = 2000
# Every column type the loader accepts: the six numeric types, booleans, a categorical text, arrays of each number.
TYPES = ('s smallint', 'i integer', 'b bigint', 'r real', 'd double precision', 'n numeric', 'flag boolean',
         'cat text', 'sa smallint[]', 'ia integer[]', 'ba bigint[]', 'ra real[]', 'da double precision[]',
         'na numeric[]')
LOAD_BOTH = """
CREATE FUNCTION load_both(data text, columns text[], booleans text[], elements jsonb, categories jsonb)
RETURNS jsonb LANGUAGE plpython3u AS $$
import json
import numpy as np
from pgad import loader
cols = [loader.Column(c, boolean=True) if c in booleans else c for c in columns]
els = {k: tuple(v) for k, v in json.loads(elements).items()}
cats = json.loads(categories)
native = loader.load(data, cols, elements=els, categories=cats)
packed = loader.load(data, cols, elements=els, categories=cats, packed=True)
return json.dumps({
    'native': [type(c.base).__name__ for c in native.columns],
    'same': len(native.columns) == len(packed.columns) and all(
        a.dtype == b.dtype == np.float64 and a.tobytes() == b.tobytes() for a, b in zip(native.columns, packed.columns)),
    'rows': [native.rows, packed.rows], 'skipped': [native.skipped, packed.skipped],
    'sums': [float(np.sum(c)) for c in native.columns]})
$$;
CREATE FUNCTION unclaimed() RETURNS int LANGUAGE plpython3u AS $$
from pgad import loader
return loader.native_loader().pgad_load_unclaimed()
$$;
GRANT EXECUTE ON FUNCTION unclaimed() TO PUBLIC;
CREATE FUNCTION odd_arrays(data text) RETURNS text[] LANGUAGE plpython3u AS $$
import plpy
from pgad import loader
try:
    loader.load_natively(loader.native_loader(), data, ['v[1]', 'v[2]'], {'v[1]': ('v', 1), 'v[2]': ('v', 2)}, {}, False)
except plpy.SPIError as e:
    return [e.sqlstate, e.args[0], e.spidata[1]]
$$;
CREATE FUNCTION load_keys(data text, columns text[], keys text[], packed boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpython3u AS $$
import json
from pgad import loader
t = loader.load(data, columns, keys=keys, packed=packed)
return json.dumps({'rows': t.rows, 'skipped': t.skipped, 'keys': t.keys, 'native': type(t.columns[0].base).__name__,
                   'columns': [c.tolist() for c in t.columns]})
$$;
CREATE FUNCTION keys_error(data text, columns text[], keys text[]) RETURNS text[] LANGUAGE plpython3u AS $$
import plpy
from pgad import loader
try:
    loader.load_natively(loader.native_loader(), data, columns, {}, {}, False, keys=keys)
except plpy.SPIError as e:
    return [e.sqlstate, e.args[0], e.spidata[1], e.spidata[2]]
$$;
CREATE FUNCTION native_error(data text, columns text[]) RETURNS text[] LANGUAGE plpython3u AS $$
import plpy
from pgad import loader
try:
    loader.load_natively(loader.native_loader(), data, columns, {}, {}, False)
except plpy.SPIError as e:
    return [e.sqlstate, e.args[0], e.spidata[1], e.spidata[2]]
$$;
"""


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f'CREATE TABLE every_type ({", ".join(TYPES)})')
        db.execute(f"""INSERT INTO every_type SELECT
            (g % 300 - 150)::smallint, g * 7919 % 100003 - 50000, g::bigint * 1000000007 % 9007199254740993,
            (g / 7.0)::real, g / 3.0 + 1e-9 * g, (g::numeric / 7 + 0.123456789012345678901234567890)::numeric,
            g % 3 = 0, CASE g % 4 WHEN 0 THEN 'north' WHEN 1 THEN 'south' WHEN 2 THEN 'east' ELSE 'west' END,
            ARRAY[g % 100, -g % 50, 7]::smallint[], ARRAY[g, 2 * g, 3 * g, 4 * g]::integer[],
            ARRAY[g::bigint * 123456789012, 1]::bigint[], ARRAY[g / 3.0, g / 9.0, 1.5]::real[],
            ARRAY[g / 11.0, sqrt(g)]::float8[], ARRAY[g::numeric / 13 + 0.1111111111111111111111, 1.25]::numeric[]
            FROM generate_series(1, {ROWS}) AS g""")
        db.execute('CREATE TABLE with_nulls AS SELECT g::float8 AS x, CASE WHEN g % 40 = 0 THEN NULL ELSE 2 * g END '
                   'AS y, CASE WHEN g % 50 = 0 THEN NULL ELSE ARRAY[g, g + 1] END AS v, '
                   'CASE WHEN g % 70 = 0 THEN ARRAY[g, NULL] ELSE ARRAY[g, g] END AS w '
                   'FROM generate_series(1, 1000) AS g')
        db.execute('CREATE TABLE wide AS SELECT ' + ', '.join(f'(x * {k + 1})::float8 AS c{k}' for k in range(150)) +
                   ' FROM generate_series(1, 500) AS x')
        db.execute('CREATE TABLE pts AS SELECT g::float8 AS x, (3 * g + 1)::float8 AS y FROM generate_series(1, 200000) '
                   'AS g')
        db.execute("CREATE FUNCTION slow(x float8) RETURNS float8 LANGUAGE plpgsql AS "
                   "$$ BEGIN PERFORM pg_sleep(0.001); RETURN x; END $$")
        db.execute('CREATE TABLE secret AS SELECT 42.0::float8 AS v')
        db.execute('CREATE TABLE open_data AS SELECT g::float8 AS x FROM generate_series(1, 1000) AS g')
        db.execute("CREATE FUNCTION peek(x float8) RETURNS float8 LANGUAGE plpgsql AS "
                   "$$ BEGIN RETURN x + (SELECT v FROM secret); END $$")
        db.execute(f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        db.execute(f'GRANT SELECT ON open_data TO {ROLE}')
        db.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's Python on sys.path, for the functions below
        db.execute(LOAD_BOTH)


@pytest.fixture
def py(db):
    """db, in a session whose PL/Python has imported pgad (load_both and unclaimed import it)."""
    db.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT 1 AS x', '{\"a\": 1}')")
    return db


def load_both(db, data, columns, booleans=(), elements=None, categories=None):
    return db.execute('SELECT load_both(%s, %s, %s, %s, %s)',
                      (data, list(columns), list(booleans), json.dumps(elements or {}),
                       json.dumps(categories or {}))).fetchone()[0]


def same(found, rows, skipped=0):
    assert found['same'], found
    assert set(found['native']) == {'Mapped'}, found  # the native path, not the aggregate's
    assert found['rows'] == [rows, rows] and found['skipped'] == [skipped, skipped]


@pytest.mark.parametrize('column', ['s', 'i', 'b', 'r', 'd', 'n'])
def test_each_numeric_type_loads_as_pgad_pack_loads_it(py, column):
    same(load_both(py, 'every_type', [column]), ROWS)


def test_booleans_and_categories_load_as_pgad_pack_loads_them(py):
    found = load_both(py, 'SELECT * FROM every_type', ['d', 'flag', 'cat'], booleans=['flag'],
                      categories={'cat': ['north', 'south', 'east']})
    same(found, ROWS - ROWS // 4, ROWS // 4)  # 'west' is no category: those rows are skipped
    assert found['sums'][1] == sum(1 for g in range(1, ROWS + 1) if g % 3 == 0 and g % 4 != 3)


@pytest.mark.parametrize('column, length', [('sa', 3), ('ia', 4), ('ba', 2), ('ra', 3), ('da', 2), ('na', 2)])
def test_each_array_type_loads_as_its_subscripts_do(py, column, length):
    elements = {f'{column}[{k}]': [column, k] for k in range(1, length + 1)}
    names = ['d'] + list(elements)[::-1] + [f'{column}[1]']  # any order, an element twice, beside a number
    same(load_both(py, 'every_type', names, elements=elements), ROWS)


def test_more_than_99_columns_load_in_one_query(py):
    same(load_both(py, 'wide', [f'c{k}' for k in range(150)]), 500)


def test_rows_with_a_null_number_array_or_element_are_skipped(py):
    elements = {'v[1]': ['v', 1], 'v[2]': ['v', 2], 'w[2]': ['w', 2]}
    found = load_both(py, 'with_nulls', ['x', 'y', 'v[1]', 'v[2]', 'w[2]'], elements=elements)
    skipped = sum(1 for g in range(1, 1001) if g % 40 == 0 or g % 50 == 0 or g % 70 == 0)
    same(found, 1000 - skipped, skipped)


def test_an_array_of_another_length_is_named_as_lengths_names_it(py):
    """lengths() checks every row's array before the load; should a row differ in the load itself (the data
    changed between the two queries), the load stops with the error lengths() gives, naming the row
    (tests/test_volatile_data.py has the other shapes)."""
    found = py.execute('SELECT odd_arrays(%s)', ('SELECT ARRAY[1, g]::float8[] AS v FROM generate_series(1, 3) AS g '
                                                 'UNION ALL SELECT ARRAY[1, 2, 3]',)).fetchone()[0]
    assert found == ['2202E', 'column "v" has arrays of different lengths',
                     "The lambda reads arrays of 2 elements, the length pgad found in the data; row 4's has 3."]


def test_zero_rows_give_empty_columns(py):
    same(load_both(py, 'SELECT * FROM every_type WHERE false', ['d', 'i']), 0)


def test_skipped_rows_are_counted_in_a_notice(db):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    got = db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'with_nulls', '{\"a\": 2}')").fetchone()[0]
    assert got == pytest.approx(db.execute('SELECT avg((2*x - y)^2) FROM with_nulls').fetchone()[0], rel=1e-12)
    assert notices == ['skipped 25 of 1000 rows with NULL in "y" (25 rows)']


def test_a_data_query_that_fails_halfway_gives_its_error_and_the_session_goes_on(py):
    db = py
    data = 'SELECT g::float8 AS x, 1.0 / (g - 500) AS y FROM generate_series(1, 1000) AS g'
    for _ in range(2):  # the native load's own error, caught in Python as plpy.execute's would be
        assert db.execute('SELECT native_error(%s, %s)', (data, ['x', 'y'])).fetchone()[0] == [
            '22012', 'division by zero', None, None]
    assert db.execute('SELECT unclaimed()').fetchone()[0] == 0
    for _ in range(2):
        diag = error_of(db, "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 2}')", (data,))
        assert (diag.sqlstate, diag.message_primary) == ('22012', 'division by zero')
    assert db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'with_nulls', '{\"a\": 3}')").fetchone()[0] > 0
    with db.transaction():  # inside a transaction too: the load's subtransaction is rolled back, not the caller's
        db.execute('CREATE TEMP TABLE kept (k int)')
        db.execute('INSERT INTO kept VALUES (1)')
        with pytest.raises(psycopg.errors.DivisionByZero):
            with db.transaction():
                db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 2}')", (data,))
        assert db.execute('SELECT count(*) FROM kept').fetchone()[0] == 1


def test_an_error_keeps_its_detail_and_hint(py):
    db = py
    db.execute("CREATE OR REPLACE FUNCTION complain(x float8) RETURNS float8 LANGUAGE plpgsql AS $$ BEGIN "
               "IF x > 10 THEN RAISE EXCEPTION USING MESSAGE = 'too big', ERRCODE = '22023', DETAIL = 'x is ' || x, "
               "HINT = 'smaller'; END IF; RETURN x; END $$")
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT complain(g) AS x FROM generate_series(1, 20) AS g', "
                        "'{\"a\": 2}')")
    assert (diag.sqlstate, diag.message_primary, diag.message_detail, diag.message_hint) == (
        '22023', 'too big', 'x is 11', 'smaller')
    assert db.execute('SELECT native_error(%s, %s)', ('SELECT complain(g) AS x FROM generate_series(1, 20) AS g',
                                                     ['x'])).fetchone()[0] == ['22023', 'too big', 'x is 11', 'smaller']


def cancel_after(cluster, dbname, pid, seconds):
    def run():
        time.sleep(seconds)
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
            other.execute('SELECT pg_cancel_backend(%s)', (pid,))
        cancelled.append(time.monotonic())
    cancelled = []
    thread = threading.Thread(target=run)
    thread.start()
    return thread, cancelled


SLOW = "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'SELECT slow(x) AS x, y FROM pts', '{\"a\": 2}')"


def test_a_cancel_stops_the_load_within_a_second(cluster, dbname, py):
    db = py
    """200,000 rows at a millisecond each: 200 s to load; cancelled after 1.5 s."""
    db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'SELECT slow(x) AS x, y FROM pts LIMIT 3', '{\"a\": 2}')")
    pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
    thread, cancelled = cancel_after(cluster, dbname, pid, 1.5)
    diag = error_of(db, SLOW)
    stopped = time.monotonic()
    thread.join()
    assert (diag.sqlstate, diag.message_primary) == ('57014', 'canceling statement due to user request')
    assert stopped - cancelled[0] < 2.0  # within a second, with a margin for this shared machine
    thread, cancelled = cancel_after(cluster, dbname, pid, 1.5)  # the native load's own error, as Python sees it
    found = db.execute('SELECT native_error(%s, %s)', ('SELECT slow(x) AS x, y FROM pts', ['x', 'y'])).fetchone()[0]
    stopped = time.monotonic()
    thread.join()
    assert found == ['57014', 'canceling statement due to user request', None, None]
    assert stopped - cancelled[0] < 2.0
    assert db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'pts', '{\"a\": 3}')").fetchone()[0] > 0


def test_statement_timeout_stops_the_load(py):
    db = py
    db.execute("SET statement_timeout = '1s'")
    try:
        start = time.monotonic()
        diag = error_of(db, SLOW)
        assert time.monotonic() - start < 3.0
        start = time.monotonic()
        found = db.execute('SELECT native_error(%s, %s)', ('SELECT slow(x) AS x, y FROM pts', ['x', 'y'])).fetchone()[0]
        assert time.monotonic() - start < 3.0
    finally:
        db.execute('RESET statement_timeout')
    assert (diag.sqlstate, diag.message_primary) == ('57014', 'canceling statement due to statement timeout')
    assert found == ['57014', 'canceling statement due to statement timeout', None, None]


def test_data_past_pgad_memory_limit_stops_with_the_loaders_message(db):
    db.execute("SET pgad.memory_limit = '1MB'")
    try:
        diag = error_of(db, "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'pts', '{\"a\": 2}')")
    finally:
        db.execute('RESET pgad.memory_limit')
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == (
        '53200', 'the data needs 12 MB, more than pgad.memory_limit (1.0 MB)',
        '200000 rows of 2 columns, 8 bytes a value, held up to 4 times over while the call loads and trains.')


def test_the_load_stops_at_pgad_memory_limit_before_reading_the_rest(py):
    """Row 150,000 divides by zero; 1 MB holds 16,384 rows of two columns (4 copies): the load stops at the next."""
    py.execute("SET pgad.memory_limit = '1MB'")
    try:
        found = py.execute('SELECT native_error(%s, %s)', ('SELECT x, 1 / (x - 150000) AS y FROM pts',
                                                          ['x', 'y'])).fetchone()[0]
    finally:
        py.execute('RESET pgad.memory_limit')
    assert found == ['53200', 'the data needs more than pgad.memory_limit (1.0 MB)',
                     'Packing stopped at row 16385 of 2 columns, 8 bytes a value, held up to 4 times over while a call '
                     'loads and trains.', HINT]


def test_a_role_cannot_load_what_it_may_not_read(cluster, dbname, db):
    """The data query calls a function that reads a table the role may not: only the load runs it (the loader's
    other queries read no row), and it fails with 42501, the secret nowhere in the error, nothing left behind."""
    with psycopg.connect(cluster.conninfo(dbname, user=ROLE), autocommit=True) as user:
        diag = error_of(user, "SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT peek(x) AS x FROM open_data', '{\"a\": 1}')")
        assert (diag.sqlstate, diag.message_primary) == ('42501', 'permission denied for table secret')
        assert '42' not in ' '.join(filter(None, (diag.message_detail, diag.message_hint)))
        assert user.execute('SELECT unclaimed()').fetchone()[0] == 0
        assert user.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'open_data', '{\"a\": 1}')").fetchone()[0] == 500.5


def resident_kb(pid):
    with open(f'/proc/{pid}/status') as status:
        return next(int(line.split()[1]) for line in status if line.startswith('VmRSS:'))


def test_the_memory_of_a_load_is_returned(py):
    """20 loads of 200,000 rows of two columns (3.2 MB each), 20 that fail halfway and 20 stopped by the limit:
    the backend's resident memory does not grow by what they loaded, and no load is left unclaimed."""
    pid = py.execute('SELECT pg_backend_pid()').fetchone()[0]
    loss = "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 2}')"
    failing = 'SELECT x, 1 / (x - 150000) AS y FROM pts'
    py.execute(loss, ('pts',))
    error_of(py, loss, (failing,))
    start = resident_kb(pid)
    for _ in range(20):
        py.execute(loss, ('pts',))
        error_of(py, loss, (failing,))
        py.execute("SET pgad.memory_limit = '2MB'")
        assert error_of(py, loss, ('pts',)).sqlstate == '53200'
        py.execute('RESET pgad.memory_limit')
    grown = resident_kb(pid) - start
    assert grown < 16 * 1024, f'{grown} kB'
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


AGG = "SELECT pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{\"a\": 2}', t) FROM with_nulls AS t"


def test_an_aggregates_rows_reach_numpy_copied_once(py):
    """The final function copies the state's rows into a load, which numpy wraps, rather than into a bytea that
    PL/Python copies again into Python bytes; the result is the same, and no load is left unclaimed."""
    messages = []
    py.add_notice_handler(lambda d: messages.append(d.message_primary))
    py.execute('SET client_min_messages = debug2')
    try:
        got = py.execute(AGG).fetchone()[0]
    finally:
        py.execute('RESET client_min_messages')
    assert "pgad: loaded 975 rows of 2 columns in 1 part, from the aggregate's state" in messages
    assert got == pytest.approx(py.execute('SELECT avg((2*x - y)^2) FROM with_nulls').fetchone()[0], rel=1e-12)
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


def test_a_bytea_naming_no_load_is_refused(py):
    """Only this backend's loads not yet claimed can be named (a superuser calling the implementation directly)."""
    forged = struct.pack('=IIqqQ', 0x4c504750, 1, 3, 0, 12345)
    diag = error_of(py, "SELECT pgad._loss_agg(%s, ARRAY['x'], 'λ(d, w) w.a*d.x', '{\"a\": 1}', NULL)", (forged,))
    assert diag.sqlstate == 'XX000'  # called directly, not through pgad_call: PL/Python's own form of the error
    assert diag.message_primary == 'plpy.Error: pgad.pack returned a malformed result'
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


# --- key columns (extension/keys.c) -------------------------------------------------------------------------------
ODD_KEYS = ("SELECT * FROM (VALUES ('b', 1.0), ('a', 2), (NULL, 3), ('b', 4), ('é', NULL), ('日本', 5), ('', 6), "
            "('é', 7), ('a', 8)) AS v(k, x)")


def load_keys(db, data, columns, keys, packed=False):
    return db.execute('SELECT load_keys(%s, %s, %s, %s)', (data, list(columns), list(keys), packed)).fetchone()[0]


def test_a_key_column_is_coded_in_the_order_its_keys_first_come(py):
    """Codes 1, 2, … as the rows first show each key; a NULL key skips the row, and a row skipped for a NULL
    elsewhere adds no key ('é' first comes in row 5, whose x is NULL): non-ASCII and empty keys are keys."""
    got = load_keys(py, ODD_KEYS, ['x', 'k'], ['k'])
    assert got['native'] == 'Mapped'
    assert got['keys'] == {'k': ['b', 'a', '日本', '', 'é']}
    assert got['columns'] == [[1, 2, 4, 5, 6, 7, 8], [1, 2, 1, 3, 4, 5, 2]]
    assert (got['rows'], got['skipped']) == (7, 2)
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


def test_a_key_column_loads_as_the_keys_query_codes_it(py):
    """Each row's key by its code is the same natively and where the keys are read first by a query (pgad.pack's
    path): whatever numbers the codes are, the keys behind them agree; integers and booleans are keys as their text."""
    data = ('SELECT g::float8 AS x, (g * 7919 % 1000)::text AS t, g % 37 - 18 AS i, g % 3 = 0 AS flag '
            'FROM generate_series(1, 5000) AS g')
    for column in ('t', 'i', 'flag'):
        native = load_keys(py, data, ['x', column], [column])
        packed = load_keys(py, data, ['x', column], [column], packed=True)
        assert native['native'] == 'Mapped' and packed['native'] != 'Mapped'
        assert native['columns'][0] == packed['columns'][0]
        assert sorted(native['keys'][column]) == sorted(packed['keys'][column])
        assert [native['keys'][column][int(c) - 1] for c in native['columns'][1]] == \
            [packed['keys'][column][int(c) - 1] for c in packed['columns'][1]]


def test_200000_keys_load_in_one_pass_and_their_codes_are_numpys(py):
    data = ('SELECT pg_catalog.md5((g % 200000)::text) AS k, g::float8 AS x '
            'FROM generate_series(1, 300000) AS g ORDER BY pg_catalog.hashint4(g), g')
    rows = [k for k, in py.execute(f'SELECT k FROM ({data}) AS d').fetchall()]
    got = load_keys(py, data, ['k', 'x'], ['k'])
    keys, codes = np.array(got['keys']['k']), np.array(got['columns'][0], dtype=np.int64)
    assert got['rows'] == 300000 and len(keys) == 200000
    np.testing.assert_array_equal(keys[codes - 1], np.array(rows))
    _, first = np.unique(np.array(rows), return_index=True)  # the keys in the order the rows first show them
    np.testing.assert_array_equal(keys, np.array(rows)[np.sort(first)])


def test_keys_past_pgad_memory_limit_stop_the_load_naming_the_column(py):
    """100,000 keys of 32 bytes: 130 bytes each (their text twice and 64 bytes) and 64 a row (2 columns, 4 copies)
    against 1 MB: the load stops at the key that passes it, row 5,406, and frees what it had."""
    with settings(py, {'pgad.memory_limit': '1MB'}):
        found = py.execute('SELECT keys_error(%s, %s, %s)', (
            'SELECT pg_catalog.md5(g::text) AS user_id, g::float8 AS x FROM generate_series(1, 100000) AS g',
            ['x', 'user_id'], ['user_id'])).fetchone()[0]
    assert found[0] == '53200'
    assert found[1] == 'the keys of column "user_id" need 1.0 MB with the rows, more than pgad.memory_limit (1.0 MB)'
    assert found[2].startswith('Loading stopped at row 5406, the column\'s key 5406: the keys take 0.7 MB')
    assert 'Group rare keys into one' in found[3]
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


def test_a_cancel_stops_a_keyed_load_within_a_second(cluster, dbname, py):
    """Nine million distinct keys streamed by a nested loop (tens of seconds to load, the hash growing to 16M
    slots): cancelled after 1.5 s."""
    data = ('SELECT pg_catalog.md5((a * 3000 + b)::text) AS k, a::float8 AS x FROM generate_series(1, 3000) AS a, '
            'generate_series(1, 3000) AS b')
    pid = py.execute('SELECT pg_backend_pid()').fetchone()[0]
    thread, cancelled = cancel_after(cluster, dbname, pid, 1.5)
    found = py.execute('SELECT keys_error(%s, %s, %s)', (data, ['x', 'k'], ['k'])).fetchone()[0]
    stopped = time.monotonic()
    thread.join()
    assert found == ['57014', 'canceling statement due to user request', None, None]
    assert stopped - cancelled[0] < 2.0
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


def test_the_keys_memory_is_returned(py):
    """20 loads of 100,000 keys, and 20 stopped by the limit: the backend's resident memory does not grow by them."""
    pid = py.execute('SELECT pg_backend_pid()').fetchone()[0]
    data = 'SELECT pg_catalog.md5(g::text) AS k, g::float8 AS x FROM generate_series(1, 100000) AS g'
    py.execute('SELECT load_keys(%s, %s, %s) IS NULL', (data, ['x', 'k'], ['k']))
    start = resident_kb(pid)
    for _ in range(20):
        py.execute('SELECT load_keys(%s, %s, %s) IS NULL', (data, ['x', 'k'], ['k']))
        with settings(py, {'pgad.memory_limit': '2MB'}):
            assert py.execute('SELECT keys_error(%s, %s, %s)', (data, ['x', 'k'], ['k'])).fetchone()[0][0] == '53200'
    grown = resident_kb(pid) - start
    assert grown < 16 * 1024, f'{grown} kB'
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0


RAW_LOAD = """
import ctypes
from pgad import loader
lib = loader.native_loader()
n = len(attributes)
load = lib.pgad_load(query.encode(), n, (ctypes.c_int * n)(*attributes), (ctypes.c_int * n)(*indexes),
                     (ctypes.c_int * n)(*[0] * n), 0)
lib.pgad_load_claim(load)
try:
    result = load.contents
    sqlstate = ''.join(chr(((result.sqlerrcode >> 6 * k) & 0x3F) + ord('0')) for k in range(5))
    return [sqlstate, (result.message or b'').decode(), str(bool(result.keys))]
finally:
    lib.pgad_load_done(load, 0)
"""


@pytest.mark.parametrize('query, attributes, indexes, expected', [
    ('SELECT 1.0::float8 AS k', [0], [-1], ['42804', "column \"k\" of pgad's load is of type double precision, "
                                                    'not text']),
    ('SELECT 1.0::float8 AS k', [0], [-2], ['22023', "pgad's load cannot read its column 0: element -2 of arrays "
                                                    'of 0']),
    ("SELECT 'a'::text AS k", [0, 0], [-1, -1],
     ['22023', "pgad's load cannot read its column 1: a key column read twice, or with no room for its keys"]),
    ("SELECT 'a'::text AS k, 1.0::float8 AS x", [0, 1], [-1, 0], ['00000', '']),
])
def test_the_load_checks_a_key_column_in_c(py, query, attributes, indexes, expected):
    """pgad_load trusts no key column Python names: it must be text in the plan, read by one column of the load."""
    py.execute('CREATE OR REPLACE FUNCTION raw_load(query text, attributes int[], indexes int[]) RETURNS text[] '
               f'LANGUAGE plpython3u AS $${RAW_LOAD}$$')
    found = py.execute('SELECT raw_load(%s, %s, %s)', (query, attributes, indexes)).fetchone()[0]
    assert found[:2] == expected
    assert found[2] == str(expected[0] == '00000')  # the keys are there only for a load that did not fail
    assert py.execute('SELECT unclaimed()').fetchone()[0] == 0
