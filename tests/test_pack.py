"""pgad.pack, the native packing aggregate (extension/pack.c), at its edges, against the real server: NULLs, empty
input, one row, the growth of its state, NaN and infinities bit for bit, GROUP BY, window frames, parallel plans,
bad arguments; and the loader over every numeric column type and past the 99 columns one pack takes."""
import struct

import numpy as np
import psycopg
import pytest

from conftest import error_of

HEADER = struct.Struct('=IIqq')  # magic, columns, rows packed, rows skipped for a NULL
MAGIC = 0x4b504750


def unpack(packed):
    """(columns as arrays, rows skipped) of pgad.pack's bytea, checking its header and length."""
    magic, columns, rows, skipped = HEADER.unpack_from(packed)
    assert magic == MAGIC and len(packed) == HEADER.size + 8 * columns * rows
    flat = np.frombuffer(packed, np.float64, offset=HEADER.size)
    return [flat[k * rows:(k + 1) * rows] for k in range(columns)], skipped


def packed(db, sql, params=None):
    value = db.execute(sql, params).fetchone()[0]
    return None if value is None else unpack(value)


def test_rows_with_a_null_in_any_column_are_skipped_and_counted(db):
    columns, skipped = packed(db, 'SELECT pgad.pack(x, y, z) FROM (VALUES (1::float8, 2::float8, 3::float8), '
                                  '(NULL, 5, 6), (7, NULL, 9), (10, 11, NULL), (NULL, NULL, NULL), (13, 14, 15)) '
                                  'AS t(x, y, z)')
    assert [c.tolist() for c in columns] == [[1, 13], [2, 14], [3, 15]] and skipped == 4


def test_only_nulls_give_no_rows_and_their_count(db):
    columns, skipped = packed(db, 'SELECT pgad.pack(x, y) FROM (VALUES (NULL::float8, 1::float8), (2, NULL)) AS t(x, y)')
    assert [c.tolist() for c in columns] == [[], []] and skipped == 2


def test_no_rows_give_null(db):
    assert packed(db, 'SELECT pgad.pack(x) FROM (VALUES (1::float8)) AS t(x) WHERE false') is None


def test_one_row(db):
    columns, skipped = packed(db, 'SELECT pgad.pack(1.5::float8, -2::float8)')
    assert [c.tolist() for c in columns] == [[1.5], [-2.0]] and skipped == 0


@pytest.mark.parametrize('rows', [255, 256, 257, 512, 513, 100_000])
def test_the_state_grows_past_its_first_capacity_keeping_every_value_in_order(db, rows):
    """The state starts with room for 256 rows and doubles: each column is moved once per doubling."""
    columns, skipped = packed(db, 'SELECT pgad.pack(i::float8, -i::float8, (i * 0.5)::float8) '
                                  'FROM pg_catalog.generate_series(1, %s) AS i', (rows,))
    i = np.arange(1, rows + 1, dtype=np.float64)
    assert np.array_equal(columns[0], i) and np.array_equal(columns[1], -i) and np.array_equal(columns[2], i * 0.5)
    assert skipped == 0


def test_nan_infinities_and_extremes_pass_bit_for_bit(db):
    values = [float('nan'), float('inf'), float('-inf'), -0.0, 5e-324, 1.7976931348623157e308, -1e-300]
    columns, _ = packed(db, 'SELECT pgad.pack(v) FROM pg_catalog.unnest(%s::float8[]) WITH ORDINALITY AS t(v, k)',
                        (values,))
    assert columns[0].tobytes() == np.array(values).tobytes()


def test_one_state_per_group(db):
    rows = db.execute('SELECT g, pgad.pack(i::float8) FROM pg_catalog.generate_series(1, 1000) AS i, '
                      'LATERAL (SELECT i % 3 AS g) AS s GROUP BY g ORDER BY g').fetchall()
    for g, value in rows:
        columns, _ = unpack(value)
        assert sorted(columns[0].tolist()) == [i for i in range(1, 1001) if i % 3 == g]


def test_a_window_frame_packs_its_rows(db):
    """In a window, the final function runs once per row on a state that keeps growing: it leaves it as it was."""
    frames = [unpack(v)[0][0].tolist() for v, in db.execute(
        'SELECT pgad.pack(i::float8) OVER (ORDER BY i) FROM pg_catalog.generate_series(1, 300) AS i').fetchall()]
    assert frames == [list(range(1, n + 1)) for n in range(1, 301)]


def test_99_columns_and_not_100(db):
    args = ', '.join(f'{k}::float8' for k in range(99))
    columns, _ = packed(db, f'SELECT pgad.pack({args})')
    assert [c.tolist() for c in columns] == [[k] for k in range(99)]
    assert error_of(db, f'SELECT pgad.pack({args}, 99::float8)').sqlstate == '54023'  # too many arguments


@pytest.mark.parametrize('call, message', [
    ('pgad.pack(1)', 'argument 1 of pgad.pack is of type integer, not double precision'),
    ('pgad.pack(1::float8, 2::numeric)', 'argument 2 of pgad.pack is of type numeric, not double precision'),
    ("pgad.pack('1')", 'argument 1 of pgad.pack is of type unknown, not double precision'),
    ('pgad.pack(VARIADIC ARRAY[1::float8])', 'pgad.pack takes its columns as arguments, not as a VARIADIC array'),
])
def test_arguments_that_are_not_float8_are_refused(db, call, message):
    diag = error_of(db, f'SELECT {call}')
    assert (diag.sqlstate, diag.message_primary) == ('42804', message)


def test_no_sql_call_reaches_the_support_functions(db):
    """Their state is of type internal, which no SQL value has: not even a superuser can call them (PUBLIC may not
    execute them either), so only an aggregate hands them a state."""
    for call in ['pgad._pack_step(NULL, 1::float8)', 'pgad._pack_combine(NULL, NULL)', 'pgad._pack_bytes(NULL)',
                 "pgad._pack_deserialize('\\x00'::bytea, NULL)"]:
        assert error_of(db, f'SELECT {call}').sqlstate == '42883', call


PARALLEL = ['SET parallel_setup_cost = 0', 'SET parallel_tuple_cost = 0', 'SET min_parallel_table_scan_size = 0',
            'SET max_parallel_workers_per_gather = 2', 'SET parallel_leader_participation = off']


@pytest.fixture(scope='module')
def spread(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE spread AS SELECT i::float8 AS x, CASE WHEN i %% 7 = 0 THEN NULL ELSE -i END::float8 '
                   'AS y, i %% 4 AS g FROM pg_catalog.generate_series(1, %s) AS i', (200_000,))
        db.execute('VACUUM ANALYZE spread')
    return 'spread'


def test_a_parallel_plan_packs_the_same_rows(db, spread):
    """Workers pack partial states, serialise them, and the leader combines them: the same rows (in another order)
    and the same count of skipped ones as the serial plan."""
    serial, serial_skipped = packed(db, 'SELECT pgad.pack(x, y) FROM spread')
    for setting in PARALLEL:
        db.execute(setting)
    plan = '\n'.join(r for r, in db.execute('EXPLAIN SELECT pgad.pack(x, y) FROM spread').fetchall())
    assert 'Gather' in plan and 'Partial Aggregate' in plan
    parallel, parallel_skipped = packed(db, 'SELECT pgad.pack(x, y) FROM spread')
    assert parallel_skipped == serial_skipped == 200_000 // 7
    order = np.argsort(parallel[0])
    assert np.array_equal(parallel[0][order], serial[0]) and np.array_equal(parallel[1][order], serial[1])


def test_a_parallel_grouped_plan_packs_each_group(db, spread):
    for setting in PARALLEL:
        db.execute(setting)
    db.execute('SET enable_hashagg = off')
    plan = '\n'.join(r for r, in db.execute('EXPLAIN SELECT g, pgad.pack(x) FROM spread GROUP BY g').fetchall())
    assert 'Partial' in plan
    for g, value in db.execute('SELECT g, pgad.pack(x, y) FROM spread GROUP BY g').fetchall():
        columns, skipped = unpack(value)
        expected = [i for i in range(1, 200_001) if i % 4 == g]
        assert sorted(columns[0].tolist()) == [i for i in expected if i % 7] and skipped == sum(1 for i in expected
                                                                                                if i % 7 == 0)


def test_pgad_loss_in_a_parallel_plan_is_the_serial_loss(db, spread):
    loss = "SELECT pgad.loss('λ(d, w) (w.a*d.x + d.y)^2', 'spread', '{\"a\": 1.5}')"
    serial = db.execute(loss).fetchone()[0]
    for setting in PARALLEL:
        db.execute(setting)
    assert db.execute(loss).fetchone()[0] == pytest.approx(serial, rel=1e-12)


# --- the loader over pgad.pack ---------------------------------------------------------------------------------
def test_every_numeric_column_type_loads_as_float8(db):
    db.execute('CREATE TABLE typed AS SELECT i::smallint AS s, (i * 1000)::integer AS n, (i::bigint << 40) AS b, '
               '(i / 4.0)::real AS r, (i / 3.0)::numeric AS m, (i / 7.0)::float8 AS f '
               'FROM pg_catalog.generate_series(1, 20) AS i')
    lam = 'λ(d, w) d.s + d.n + d.b + d.r + d.m + d.f'
    got = db.execute(f"SELECT pgad.loss('{lam}', 'typed', '{{}}')").fetchone()[0]
    expected = db.execute('SELECT avg(s::float8 + n::float8 + b::float8 + r::float8 + m::float8 + f) FROM typed')
    assert got == pytest.approx(expected.fetchone()[0], rel=1e-15)


def test_a_lambda_reading_more_columns_than_one_pack_takes(db):
    """130 columns: two pgad.pack aggregates over the rows with no NULL; a row with a NULL in either part is
    skipped by both, and counted once."""
    n = 130
    cols = ', '.join(f'(i * {k + 1})::float8 AS c{k}' for k in range(n))
    db.execute(f'CREATE TABLE wide AS SELECT {cols} FROM pg_catalog.generate_series(1, 10) AS i')
    db.execute('UPDATE wide SET c3 = NULL WHERE c0 = 2')
    db.execute('UPDATE wide SET c120 = NULL WHERE c0 = 5')
    lam = 'λ(d, w) ' + ' + '.join(f'w.a*d.c{k}' for k in range(n))
    got = db.execute(f"SELECT pgad.loss('{lam}', 'wide', '{{\"a\": 1}}')").fetchone()[0]
    rows = [i for i in range(1, 11) if i not in (2, 5)]
    assert got == pytest.approx(sum(i * n * (n + 1) / 2 for i in rows) / len(rows), rel=1e-14)
    gradient = db.execute(f"SELECT pgad.gradient('{lam}', 'wide', '{{\"a\": 1}}')").fetchone()[0]
    assert gradient['a'] == pytest.approx(got, rel=1e-14)
