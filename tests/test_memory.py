"""pgad.memory_limit, against a real server (docs/security.md, "Bounded, cancellable work").

A call holds its data's packed rows (rows × columns × 8 bytes) up to four times over; data that would need more than
pgad.memory_limit stops while it is packed, with SQLSTATE 53200, and the session goes on. Only a superuser changes
the limit; by default it is a quarter of the machine's physical memory.
"""
import os

import psycopg
import pytest

from conftest import error_of

ROWS = 100_000                   # of x and y: 6.1 MB with the copies, past the 1 MB the tests set
FITS = 1024 * 1024 // (4 * 8 * 2)  # 16,384 rows of two columns: the most that 1 MB holds
LOSS = "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 0}')"
MESSAGE = 'the data needs 6.1 MB, more than pgad.memory_limit (1.0 MB)'
DETAIL = '100000 rows of 2 columns, 8 bytes a value, held up to 4 times over while the call loads and trains.'
HINT = ('Train on a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or have a superuser raise '
        'pgad.memory_limit.')
ROLE = 'pgad_memory_user'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f'CREATE TABLE big AS SELECT x::float8 AS x, (2*x)::float8 AS y, x % 10 AS g '
                   f'FROM generate_series(1, {ROWS}) AS x')
        # Row 50,000 divides by zero: a load that reads that far, rather than stopping at the limit, fails with 22012.
        db.execute('CREATE VIEW bomb AS SELECT x, 1 / (x - 50000) AS y FROM big')
        db.execute('CREATE TABLE wide AS SELECT ' + ', '.join(f'x AS c{k}' for k in range(100)) +
                   ' FROM generate_series(1, 330) AS x')
        db.execute(f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")


@pytest.fixture
def limited(db):
    """A superuser's session with pgad.memory_limit at 1 MB."""
    db.execute("SET pgad.memory_limit = '1MB'")
    return db


def test_the_default_is_a_quarter_of_physical_memory(db):
    db.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's library loaded: its settings defined
    quarter_kb = os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGESIZE') // 4 // 1024
    setting, unit, boot, context = db.execute("SELECT setting, unit, boot_val, context FROM pg_settings "
                                              "WHERE name = 'pgad.memory_limit'").fetchone()
    assert (int(setting), unit, int(boot), context) == (quarter_kb, 'kB', quarter_kb, 'superuser')


def test_data_past_the_limit_stops_with_53200_and_the_session_goes_on(limited):
    diag = error_of(limited, LOSS, ('big',))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail, diag.message_hint) == (
        '53200', MESSAGE, DETAIL, HINT)
    assert limited.execute(LOSS, ('SELECT * FROM big LIMIT 1000',)).fetchone()[0] > 0
    assert limited.execute('SHOW pgad.memory_limit').fetchone()[0] == '1MB'


@pytest.mark.parametrize('function', ["pgad.gradient('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 0}')",
                                      "pgad.gradient_descent('λ(d, w) (w.a*d.x - d.y)^2', %s, '{\"a\": 0}')",
                                      "pgad.train('memory_m', 'λ(d, w) w.a*d.x', 'squared', %s, '{\"a\": 0}')"])
def test_every_function_that_loads_applies_it(limited, function):
    diag = error_of(limited, f'SELECT {function}', ('big',))
    assert (diag.sqlstate, diag.message_primary) == ('53200', MESSAGE)
    assert limited.execute("SELECT count(*) FROM pgad.models WHERE name = 'memory_m'").fetchone()[0] == 0


def test_the_limit_is_exact_in_rows(limited):
    assert limited.execute(LOSS, (f'SELECT * FROM big LIMIT {FITS}',)).fetchone()[0] > 0
    diag = error_of(limited, LOSS, (f'SELECT * FROM big LIMIT {FITS + 1}',))
    assert diag.sqlstate == '53200' and diag.message_detail.startswith(f'{FITS + 1} rows of 2 columns')


def test_rows_with_null_are_not_counted(limited):
    query = f'SELECT x, CASE WHEN x > {FITS} THEN NULL ELSE y END AS y FROM big'
    assert limited.execute(LOSS, (query,)).fetchone()[0] > 0


def test_the_load_stops_at_the_limit_before_reading_the_rest(limited):
    """pgad.pack stops at row 16,385; the row that divides by zero is row 50,000."""
    for sql in ['SELECT pgad.pack(x::float8, y::float8) FROM bomb',
                "SELECT pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{\"a\": 0}', b) FROM bomb AS b"]:
        diag = error_of(limited, sql)
        assert diag.sqlstate == '53200', sql
        assert diag.message_primary == 'the data needs more than pgad.memory_limit (1.0 MB)'
        assert diag.message_detail.startswith(f'Packing stopped at row {FITS + 1} of 2 columns')
        assert diag.message_hint == HINT


def test_a_chunked_load_counts_all_its_chunks(limited):
    limited.execute('SET pgad.load_chunk_rows = 1000')  # 100 chunks, each well within the limit
    diag = error_of(limited, LOSS, ('big',))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == ('53200', MESSAGE, DETAIL)


def test_a_grouped_train_counts_all_its_groups(limited):
    """Ten groups of 10,000 rows: each fits in 1 MB, all of them do not."""
    diag = error_of(limited, "SELECT pgad.train('memory_g', 'λ(d, w) w.a*d.x', 'squared', 'big', '{\"a\": 0}', "
                             "group_by => 'g')")
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == ('53200', MESSAGE, DETAIL)
    assert limited.execute("SELECT count(*) FROM pgad.models WHERE name = 'memory_g'").fetchone()[0] == 0


def test_an_aggregate_bounds_each_group(limited):
    """The aggregates' groups are trained one at a time: each group's rows are what the limit bounds, where the
    groups come one at a time (sorted); grouped by hashing, every group's state is held at once, and what they
    hold together is charged (ten groups of 10,000 rows, 160 kB each with room for 16,384: past 1 MB)."""
    agg = "SELECT pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{\"a\": 0}', b) FROM big AS b"
    assert error_of(limited, agg).sqlstate == '53200'
    limited.execute('SET enable_hashagg = off')
    assert len(limited.execute(agg + ' GROUP BY g').fetchall()) == 10
    limited.execute('SET enable_hashagg = on')
    limited.execute('SET enable_sort = off')
    assert 'HashAggregate' in '\n'.join(r[0] for r in limited.execute('EXPLAIN ' + agg + ' GROUP BY g').fetchall())
    diag = error_of(limited, agg + ' GROUP BY g')
    assert diag.sqlstate == '53200' and diag.message_detail.startswith('Packing stopped with 10 groups held at once')


def test_a_lambda_of_more_than_99_columns_counts_its_rows_first(limited):
    """330 rows of 100 columns need 1,056,000 bytes: the first pgad.pack (99 columns) fits, the whole does not."""
    lam = 'λ(d, w) (' + ' + '.join(f'd.c{k}' for k in range(100)) + ' - w.a)^2'
    diag = error_of(limited, "SELECT pgad.loss(%s, 'wide', '{\"a\": 0}')", (lam,))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == (
        '53200', 'the data needs 1.0 MB, more than pgad.memory_limit (1.0 MB)',
        '330 rows of 100 columns, 8 bytes a value, held up to 4 times over while the call loads and trains.')
    assert limited.execute("SELECT pgad.loss(%s, 'SELECT * FROM wide LIMIT 327', '{\"a\": 0}')",
                           (lam,)).fetchone()[0] > 0


def test_parallel_workers_and_their_combine_are_bounded(limited):
    """At 4 MB (65,536 rows of two columns) each of three processes' third of the rows fits; their combine does not."""
    limited.execute("SET pgad.memory_limit = '4MB'")
    for setting in ['max_parallel_workers_per_gather = 2', 'parallel_setup_cost = 0', 'parallel_tuple_cost = 0',
                    'min_parallel_table_scan_size = 0']:
        limited.execute(f'SET {setting}')
    sql = 'SELECT length(pgad.pack(x, y)) FROM big'
    plan = '\n'.join(row[0] for row in limited.execute('EXPLAIN ' + sql).fetchall())
    assert 'Partial Aggregate' in plan and 'Workers Planned: 2' in plan
    diag = error_of(limited, sql)
    assert diag.sqlstate == '53200' and diag.message_primary == 'the data needs more than pgad.memory_limit (4.0 MB)'
    assert limited.execute(sql.replace('big', '(SELECT * FROM big LIMIT 65536) AS b')).fetchone()[0] == \
        24 + 8 * 2 * 65536
    grouped = sql + ' GROUP BY g'  # ten groups of 10,000 rows, which only the combine sees all of
    assert 'Finalize' in '\n'.join(row[0] for row in limited.execute('EXPLAIN ' + grouped).fetchall())
    assert error_of(limited, grouped).sqlstate == '53200'


def test_only_a_superuser_changes_it(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname, user=ROLE), autocommit=True) as user:
        user.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's library loaded: its settings defined
        for sql in ["SET pgad.memory_limit = '1TB'", f"ALTER ROLE {ROLE} SET pgad.memory_limit = '1TB'"]:
            assert error_of(user, sql).sqlstate == '42501'
