"""The aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg against the real server: the
functions' numbers over the same rows, with WHERE, JOIN, GROUP BY, GROUPING SETS, FILTER and windows, in parallel
plans; NULLs, empty groups, every numeric column type; each bad input's error; a cancel in parallel mode."""
import json

import psycopg
import pytest

from conftest import error_of

LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
START = '{"a": 0.5, "b": -0.25}'
PARALLEL = ['SET parallel_setup_cost = 0', 'SET parallel_tuple_cost = 0', 'SET min_parallel_table_scan_size = 0',
            'SET max_parallel_workers_per_gather = 2']


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE sales AS SELECT (ARRAY['north', 'south', 'east'])[1 + g % 3] AS region, "
                   "2025 + g % 2 AS year, (g / 100.0)::float8 AS x, "
                   "(2 * g / 100.0 + 1 + (g % 3) + 0.1 * sin(g))::numeric(12, 6) AS y "
                   "FROM generate_series(1, 3000) AS g")
        db.execute("ANALYZE sales")
        db.execute("CREATE TABLE mixed (region int, s smallint, i int, b bigint, r real, n numeric, f float8, "
                   "t text, dropped int)")
        db.execute("INSERT INTO mixed SELECT g % 2, g, g * 3, g * 5, g / 4.0, g / 3.0, g / 7.0, 'row ' || g, g "
                   "FROM generate_series(1, 60) AS g")
        db.execute("ALTER TABLE mixed DROP COLUMN dropped")
        db.execute("ANALYZE mixed")
        db.execute("CREATE TABLE typed AS SELECT g % 2 AS region, g::int2 AS s, g * 3 AS i, g::int8 * 5 AS b, "
                   "(g / 4.0)::real AS r, CASE WHEN g % 7 = 0 THEN NULL ELSE g / 3.0 END AS n "
                   "FROM generate_series(1, 3000) AS g")
        db.execute("ANALYZE typed")
        db.execute("CREATE TABLE starts (region text PRIMARY KEY, weights jsonb)")
        db.execute("""INSERT INTO starts VALUES ('north', '{"a": 1, "b": 0}'), ('south', '{"a": 0, "b": 1}')""")


def rows(db, sql, params=None):
    return db.execute(sql, params).fetchall()


def scalar(db, sql, params=None):
    return db.execute(sql, params).fetchone()[0]


def close(got, want, rel=1e-12):
    """got and want (numbers, or dicts of numbers) agree to rel."""
    if isinstance(want, dict):
        return set(got) == set(want) and all(close(got[k], want[k], rel) for k in want)
    return got == pytest.approx(want, rel=rel, abs=1e-300)


# --- the functions' numbers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize('mode, backend', [('reverse', 'llvm'), ('forward', 'python'), ('reverse', 'python')])
def test_each_group_gets_the_functions_numbers(db, mode, backend):
    options = json.dumps({'mode': mode, 'backend': backend})
    got = rows(db, 'SELECT region, pgad.loss_agg(%s, %s, t), pgad.gradient_agg(%s, %s, t, %s) '
                   'FROM sales AS t WHERE year = 2026 GROUP BY region ORDER BY region',
               (LINEAR, START, LINEAR, START, options))
    assert [r[0] for r in got] == ['east', 'north', 'south']
    for region, loss, gradient in got:
        data = f"SELECT * FROM sales WHERE year = 2026 AND region = '{region}'"
        assert close(loss, scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, START)))
        assert close(gradient, scalar(db, 'SELECT pgad.gradient(%s, %s, %s, %s, %s)',
                                      (LINEAR, data, START, mode, backend)))


def test_one_model_per_group_is_the_functions_fit(db):
    options = '{"learning_rate": 0.0005, "iterations": 300, "mode": "forward", "backend": "llvm"}'
    got = rows(db, 'SELECT region, (f).weights, (f).loss, (f).iterations FROM (SELECT region, '
                   'pgad.gradient_descent_agg(%s, %s, t, %s) AS f FROM sales AS t GROUP BY region) AS fits '
                   'ORDER BY region', (LINEAR, START, options))
    for region, weights, loss, iterations in got:
        want = rows(db, 'SELECT * FROM pgad.gradient_descent(%s, %s, %s, 0.0005, 300, \'forward\', \'llvm\')',
                    (LINEAR, f"SELECT * FROM sales WHERE region = '{region}'", START))[0]
        assert close(weights, want[0]) and close(loss, want[1]) and iterations == want[2] == 300
    defaults = rows(db, 'SELECT (pgad.gradient_descent_agg(%s, %s, t)).* FROM sales AS t', (LINEAR, START))[0]
    want = rows(db, 'SELECT * FROM pgad.gradient_descent(%s, \'sales\', %s)', (LINEAR, START))[0]
    # 1e-12 relative, not the same bits: the aggregate's packed rows may be summed in another order
    assert close(defaults[0], want[0]) and close(defaults[1], want[1]) and defaults[2] == want[2] == 100


def test_every_numeric_column_type_is_read_as_its_float8_cast(db):
    lam = 'λ(d, w) (w.a*d.s + w.b*d.i - d.b)^2 + w.a*d.r + w.b*d.n*d.f'
    got = rows(db, 'SELECT region, pgad.gradient_agg(%s, %s, m) FROM mixed AS m GROUP BY region ORDER BY 1',
               (lam, START))
    for region, gradient in got:
        assert close(gradient, scalar(db, 'SELECT pgad.gradient(%s, %s, %s)',
                                      (lam, f'SELECT * FROM mixed WHERE region = {region}', START)))


def test_a_subquery_row_a_join_and_a_filter(db):
    """A subquery's row (an anonymous record type), per-group starting weights from a join, FILTER."""
    got = rows(db, 'SELECT s.region, pgad.gradient_agg(%s, st.weights, q) FILTER (WHERE q.x > 10) '
                   'FROM (SELECT region, x, y FROM sales) AS q JOIN starts AS st ON st.region = q.region '
                   'JOIN (VALUES (1)) AS one(k) ON true JOIN starts AS s ON s.region = q.region '
                   'GROUP BY s.region, st.weights ORDER BY 1', (LINEAR,))
    assert [r[0] for r in got] == ['north', 'south']
    for region, gradient in got:
        start = scalar(db, 'SELECT weights FROM starts WHERE region = %s', (region,))
        want = scalar(db, 'SELECT pgad.gradient(%s, %s, %s)',
                      (LINEAR, f"SELECT * FROM sales WHERE x > 10 AND region = '{region}'", json.dumps(start)))
        assert close(gradient, want)


def test_grouping_sets_give_each_set_its_rows(db):
    got = rows(db, 'SELECT region, year, pgad.loss_agg(%s, %s, t) FROM sales AS t '
                   'GROUP BY GROUPING SETS ((region), (year), ()) ORDER BY 1, 2', (LINEAR, START))
    assert len(got) == 3 + 2 + 1
    for region, year, loss in got:
        where = ' AND '.join([f"region = '{region}'"] * (region is not None) + [f'year = {year}'] * (year is not None))
        data = 'SELECT * FROM sales' + (f' WHERE {where}' if where else '')
        assert close(loss, scalar(db, 'SELECT pgad.loss(%s, %s, %s)', (LINEAR, data, START)))


def test_as_a_window_function_each_frame_gets_its_rows(db):
    got = rows(db, 'SELECT k, pgad.loss_agg(\'λ(d, w) (w.a - d.v)^2\', \'{"a": 0}\', t) OVER (ORDER BY k) '
                   'FROM (VALUES (1, 1.0), (2, 3.0), (3, 5.0)) AS t(k, v) ORDER BY k')
    assert got == [(1, 1.0), (2, 5.0), (3, 35 / 3)]


def test_a_lambda_reading_no_column_counts_the_rows(db):
    assert scalar(db, 'SELECT pgad.loss_agg(\'λ(d, w) (w.a - 3)^2\', \'{"a": 1}\', t) FROM sales AS t') == 4.0


def test_many_groups_with_their_own_lambdas(db):
    """Hashed grouping interleaves the groups' rows, and with them the groups' lambdas."""
    got = rows(db, 'SELECT lam, pgad.loss_agg(lam, %s, t) FROM sales AS t, '
                   "(VALUES ('λ(d, w) (w.a*d.x - d.y)^2'), ('λ(d, w) (w.b - d.x)^2')) AS l(lam) "
                   'GROUP BY lam ORDER BY lam', (START,))
    for lam, loss in got:
        assert close(loss, scalar(db, 'SELECT pgad.loss(%s, \'sales\', %s)', (lam, START)))


def test_more_columns_than_one_pack_takes(db):
    names = [f'c{k}' for k in range(120)]
    db.execute('DROP TABLE IF EXISTS wide')
    db.execute(f'CREATE TABLE wide AS SELECT {", ".join(f"g + {k} AS {c}" for k, c in enumerate(names))} '
               'FROM generate_series(1, 5) AS g')
    lam = 'λ(d, w) w.a*(' + ' + '.join(f'd.{c}' for c in names) + ')'
    assert scalar(db, 'SELECT pgad.loss_agg(%s, \'{"a": 1}\', t) FROM wide AS t', (lam,)) == \
        scalar(db, 'SELECT pgad.loss(%s, \'wide\', \'{"a": 1}\')', (lam,))


# --- parallel plans -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('leader', ['on', 'off'])
def test_a_parallel_plan_gives_the_serial_answer(db, leader):
    query = ('SELECT region, pgad.loss_agg(%s, %s, t), pgad.gradient_agg(%s, %s, t), '
             '(pgad.gradient_descent_agg(%s, %s, t, \'{"iterations": 20, "learning_rate": 0.01}\')).weights '
             'FROM sales AS t GROUP BY region ORDER BY region')
    params = (LINEAR, START) * 3
    serial = rows(db, query, params)
    for setting in PARALLEL + [f'SET parallel_leader_participation = {leader}']:
        db.execute(setting)
    plan = '\n'.join(r[0] for r in rows(db, 'EXPLAIN (COSTS OFF) ' + query, params))
    assert 'Gather' in plan and 'Partial' in plan and 'Finalize' in plan
    parallel = rows(db, query, params)
    assert [r[0] for r in parallel] == [r[0] for r in serial]
    for got, want in zip(parallel, serial):  # the rows arrive in another order: sums differ in the last bits
        assert close(got[1], want[1], 1e-9) and close(got[2], want[2], 1e-9) and close(got[3], want[3], 1e-9)


def test_a_cancel_stops_training_in_a_parallel_plan(db):
    for setting in PARALLEL:
        db.execute(setting)
    db.execute("SET statement_timeout = '1s'")
    diag = error_of(db, 'SELECT region, pgad.gradient_descent_agg(%s, %s, t, %s) FROM sales AS t GROUP BY region',
                    (LINEAR, START, '{"iterations": 100000000, "learning_rate": 1e-9}'))
    assert diag.sqlstate == '57014' and diag.message_primary == 'canceling statement due to statement timeout'
    db.execute('RESET statement_timeout')
    assert scalar(db, 'SELECT 1') == 1


# --- NULLs and empty groups -----------------------------------------------------------------------------------------
def test_null_rows_are_skipped_counted_and_noticed(db):
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    got = scalar(db, 'SELECT pgad.gradient_agg(%s, %s, t) FROM (VALUES (1.0, 2.0), (NULL, 1.0), (2.0, NULL), '
                     '(3.0, 7.0)) AS t(x, y)', (LINEAR, START))
    assert close(got, scalar(db, 'SELECT pgad.gradient(%s, \'VALUES (1.0, 2.0), (3.0, 7.0)\', %s)',
                             ('λ(d, w) (w.a*d.column1 + w.b - d.column2)^2', START)))
    assert notices == ['skipped 2 of 4 rows with NULL in "x", "y"']  # the functions' NOTICE


def test_an_outer_joins_missing_rows_are_skipped(db):
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    got = rows(db, 'SELECT keys.k AS k, pgad.loss_agg(\'λ(d, w) (w.a - d.v)^2\', \'{"a": 0}\', t) FROM '
                   '(VALUES (1), (2)) AS keys(k) LEFT JOIN (VALUES (1, 2.0), (1, 4.0)) AS t(k, v) ON t.k = keys.k '
                   'GROUP BY keys.k ORDER BY 1')
    assert got == [(1, 10.0), (2, None)] and notices == ['skipped 1 of 1 rows with NULL in "v"']


def test_an_empty_group_gives_null(db):
    assert rows(db, 'SELECT pgad.loss_agg(%s, %s, t), pgad.gradient_agg(%s, %s, t), '
                    'pgad.gradient_descent_agg(%s, %s, t) FROM sales AS t WHERE false',
                (LINEAR, START) * 3) == [(None, None, None)]
    assert rows(db, 'SELECT region, pgad.loss_agg(%s, %s, t) FILTER (WHERE region = \'north\') FROM sales AS t '
                    'GROUP BY region ORDER BY region', (LINEAR, START))[0] == ('east', None)


def test_a_null_loss_or_weights_is_ignored(db):
    got = scalar(db, 'SELECT pgad.loss_agg(l, w, t) FROM (VALUES (%s, %s::jsonb, 1.0, 3.0), (NULL, %s, 1.0, 9.0), '
                     '(%s, NULL, 1.0, 9.0)) AS t(l, w, x, y)', (LINEAR, START, START, LINEAR))
    assert close(got, (0.5 - 0.25 - 3) ** 2)
    assert scalar(db, 'SELECT pgad.loss_agg(NULL, %s, t) FROM sales AS t', (START,)) is None


# --- bad input: the functions' errors -------------------------------------------------------------------------------
@pytest.mark.parametrize('sql, sqlstate, message', [
    ("SELECT pgad.loss_agg('λ(d, w) d.z', '{}', t) FROM sales AS t", '42703', 'column "z" does not exist in the data'),
    ("SELECT pgad.loss_agg('λ(d, w) d.t', '{}', m) FROM mixed AS m", '42804',
     'column "t" is of type text, not a number'),
    ("SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '{}', t) FROM sales AS t", '22023', 'weight "a" is not in the weights'),
    ("SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '[1]', t) FROM sales AS t", '22023',
     'weights must be a JSON object of numbers'),
    ("SELECT pgad.loss_agg('λ(d, w) w.a*', '{\"a\": 1}', t) FROM sales AS t", '42601', None),
    ("SELECT pgad.gradient_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t, '{\"rate\": 1}') FROM sales AS t", '22023',
     'unknown option "rate" of pgad.gradient_agg'),
    ("SELECT pgad.gradient_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t, '{\"mode\": \"sideways\"}') FROM sales AS t",
     '22023', 'unknown mode "sideways"'),
    ("SELECT pgad.gradient_descent_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t, '{\"iterations\": \"10\"}') "
     "FROM sales AS t", '22023', 'option "iterations" must be an integer, not "10"'),
    ("SELECT pgad.gradient_descent_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t, '{\"learning_rate\": -1}') "
     "FROM sales AS t", '22023', 'learning_rate must be a positive number, not -1'),
    ("SELECT pgad.gradient_descent_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t, '[]') FROM sales AS t", '22023',
     'options must be a JSON object'),
    ("SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '{\"a\": 1}', t.x) FROM sales AS t", '42804',
     'the row argument of pgad.loss_agg is of type double precision, not a row'),
    ("SELECT pgad.loss_agg(CASE WHEN x < 1 THEN 'λ(d, w) d.x' ELSE 'λ(d, w) d.y' END, '{}', t) FROM sales AS t",
     '22023', 'the loss of pgad.loss_agg differs between rows of the same group'),
    ("SELECT pgad.loss_agg('λ(d, w) w.a*d.x', pg_catalog.jsonb_build_object('a', x), t) FROM sales AS t", '22023',
     'the weights of pgad.loss_agg differ between rows of the same group'),
])
def test_bad_input_gets_the_functions_error(db, sql, sqlstate, message):
    diag = error_of(db, sql)
    assert diag.sqlstate == sqlstate and (message is None or diag.message_primary == message)
    assert diag.context is None or 'Traceback' not in diag.context


def test_a_missing_column_names_the_data_columns(db):
    diag = error_of(db, "SELECT pgad.loss_agg('λ(d, w) d.X', '{}', q) FROM (SELECT region, x AS \"X\" FROM sales) q")
    assert diag.message_primary == 'column "x" does not exist in the data'
    assert diag.message_detail == 'The data has columns: "region", "X".' and 'd."Name"' in diag.message_hint


def test_the_same_errors_in_a_parallel_worker(db):
    for setting in PARALLEL + ['SET parallel_leader_participation = off']:
        db.execute(setting)
    diag = error_of(db, "SELECT pgad.loss_agg('λ(d, w) d.z', '{}', t) FROM sales AS t")
    assert diag.sqlstate == '42703' and diag.message_primary == 'column "z" does not exist in the data'


def test_a_loss_and_weights_from_columns_cross_from_parallel_workers(db):
    """Values read from a table (short varlena headers) in the state that workers serialise."""
    db.execute('DROP TABLE IF EXISTS modelled')
    db.execute('CREATE TABLE modelled AS SELECT *, %s::text AS loss, %s::jsonb AS weights FROM sales', (LINEAR, START))
    db.execute('ANALYZE modelled')
    query = 'SELECT pgad.gradient_agg(t.loss, t.weights, t) FROM modelled AS t WHERE t.x > 1'
    serial = scalar(db, query)
    for setting in PARALLEL + ['SET parallel_leader_participation = off']:
        db.execute(setting)
    assert 'Partial' in '\n'.join(r[0] for r in rows(db, 'EXPLAIN (COSTS OFF) ' + query))
    assert close(scalar(db, query), serial, 1e-9)
    assert close(serial, scalar(db, 'SELECT pgad.gradient(%s, \'SELECT * FROM sales WHERE x > 1\', %s)',
                                (LINEAR, START)))


def test_a_parallel_aggregate_after_an_implementation_ran_before_pgad_so_was_loaded(cluster, dbname):
    """A superuser's direct call of an implementation runs pgad's Python before pgad.so is loaded (and fails: pgad's
    settings are not defined yet); the aggregate that follows must still find pgad.so's doors."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        assert error_of(db, "SELECT * FROM pgad._derivatives('λ(d, w) w.a*2', NULL, NULL)").sqlstate == '42704'
        assert rows(db, "SELECT * FROM pgad.derivatives('λ(d, w) w.a*2')") == [('a', '2')]
        for setting in PARALLEL + ['SET parallel_leader_participation = off']:
            db.execute(setting)
        assert scalar(db, 'SELECT pgad.loss_agg(%s, %s, t) FROM sales AS t', (LINEAR, START)) > 0


@pytest.mark.parametrize('query', [
    # no column read: states of no column cross from the workers
    "SELECT region, pgad.loss_agg('λ(d, w) (w.a - 3)^2', '{\"a\": 1}', t) FROM sales AS t GROUP BY region",
    # whole rows NULL (an outer join's missing side) and a group whose every row is skipped
    "SELECT s.x > 28, pgad.gradient_agg('λ(d, w) (w.a*d.x + w.b - d.y)^2', '{\"a\": 1, \"b\": 0}', t) "
    "FROM sales AS s LEFT JOIN (SELECT * FROM sales WHERE x > 29) AS t ON t.x = s.x GROUP BY s.x > 28",
    # every numeric type, and NULLs in some rows
    "SELECT m.region, pgad.gradient_agg('λ(d, w) (w.a*d.s + w.b*d.i - d.b)^2 + w.a*d.r*d.n', "
    "'{\"a\": 1, \"b\": 0}', m) FROM typed AS m GROUP BY m.region",
])
def test_the_edges_of_the_state_cross_from_parallel_workers(db, query):
    serial = sorted(rows(db, query), key=str)
    for setting in PARALLEL + ['SET parallel_leader_participation = off']:
        db.execute(setting)
    assert 'Partial' in '\n'.join(r[0] for r in rows(db, 'EXPLAIN (COSTS OFF) ' + query))
    parallel = sorted(rows(db, query), key=str)
    assert [r[0] for r in parallel] == [r[0] for r in serial]
    for got, want in zip(parallel, serial):
        assert (got[1] is None and want[1] is None) or close(got[1], want[1], 1e-9)
