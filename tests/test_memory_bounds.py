"""Memory bounded by what a call uses (docs/security.md, "Bounded, cancellable work"), against a real server.

Weights the lambda does not read are given back as they came and cost what their text does, never a program's or
a kernel's worth per element; a weights jsonb past pgad.memory_limit is refused (53200) before it is parsed. The
packing aggregates charge every state for the room it reserves and for being a group at all, so many small groups,
or many tiny chunks, stop at the limit; and the chunk size is the DBA's setting. Vector operations over long array
columns or large weights (outer, @, [...], a broadcast) and forward mode's tangents stop with 54001 before they
allocate what their shapes would make.

Peaks are the backend's: VmHWM in /proc/<pid>/status, reset to the resident size first (clear_refs), after a small
call of the same kind (imports, first plans and compiled kernels are not the call's), as bench/memory.py measures."""
import json
import time

import psycopg
import pytest

from conftest import error_of

ROLE = 'pgad_bounds_user'
LOSS = "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'SELECT x, y FROM pts', %s)"
MB = 1 << 20


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f"DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        db.execute('CREATE TABLE pts AS SELECT x::float8 AS x, (2 * x + 1)::float8 AS y, x AS g '
                   'FROM generate_series(1, 10000) AS x')
        db.execute('ANALYZE pts')
        db.execute('CREATE VIEW few AS SELECT x, y FROM pts WHERE x <= 3')
        db.execute(f'GRANT SELECT ON pts TO {ROLE}')
        # Weights as stored jsonb, so that PostgreSQL's own reading of a literal is not in the call's peak.
        db.execute('CREATE TABLE starts (name text, weights jsonb)')
        db.execute("INSERT INTO starts VALUES ('small', %s)", (json.dumps({'a': 0.5, 'unused': [0.25] * 10}),))
        db.execute("INSERT INTO starts VALUES ('vector', %s), ('matrix', %s)",
                   (json.dumps({'a': 0.5, 'unused': [0.25] * 1_000_000}),
                    json.dumps({'a': 0.5, 'unused': [[0.25] * 1000 for _ in range(1000)]})))


def resident(pid, key):
    with open(f'/proc/{pid}/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(key))


def peak_of(db, sql, small, params=None, timed=False):
    """(the error's diag or None, how far the backend's resident memory peaked above where it started, how much more
    it holds after, and where timed, the seconds sql took) of sql, after the statement small (the same call on a few
    rows or numbers) warmed the backend."""
    pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
    db.execute(small, params)
    try:
        with open(f'/proc/{pid}/clear_refs', 'w') as refs:
            refs.write('5')  # VmHWM back to VmRSS
    except OSError:
        pytest.skip('cannot reset the server process\'s peak (run as the server\'s OS user)')
    start, began = resident(pid, 'VmRSS'), time.monotonic()
    try:
        db.execute(sql, params)
        diag = None
    except psycopg.Error as e:
        diag = e.diag
    took = time.monotonic() - began
    found = diag, resident(pid, 'VmHWM') - start, resident(pid, 'VmRSS') - start
    return (*found, took) if timed else found


# --- weights ------------------------------------------------------------------------------------------------------
def test_weights_the_lambda_does_not_read_come_back_as_they_came(db):
    weights = json.dumps({'a': 1.0, 'b': 3.0, 'v': [1.5, -2.0], 'm': [[1, 2], [3, 4]]})
    lam = 'λ(d, w) (w.a*d.x - d.y)^2'
    data = 'few'
    gradient = db.execute('SELECT pgad.gradient(%s, %s, %s)', (lam, data, weights)).fetchone()[0]
    assert {k: gradient[k] for k in ('b', 'v', 'm')} == {'b': 0, 'v': [0, 0], 'm': [[0, 0], [0, 0]]}
    assert gradient['a'] == pytest.approx(2 * sum((x - 2 * x - 1) * x for x in (1, 2, 3)) / 3, rel=1e-12)
    fitted = db.execute('SELECT (pgad.gradient_descent(%s, %s, %s, iterations => 3)).weights',
                        (lam, data, weights)).fetchone()[0]
    assert {k: fitted[k] for k in ('b', 'v', 'm')} == {'b': 3.0, 'v': [1.5, -2.0], 'm': [[1, 2], [3, 4]]}
    assert fitted['a'] != 1.0
    db.execute("SELECT pgad.train('bounds_unread', 'λ(d, w) w.a*d.x', 'squared', %s, %s, iterations => 3)",
               (data, weights))
    stored = db.execute("SELECT weights FROM pgad.models WHERE name = 'bounds_unread'").fetchone()[0]
    assert {k: stored[k] for k in ('b', 'v', 'm')} == {'b': 3.0, 'v': [1.5, -2.0], 'm': [[1, 2], [3, 4]]}
    assert db.execute("SELECT weight, derivative FROM pgad.derivatives('λ(d, w) w.a*d.x', '{\"a\": 0, \"z\": 1}')"
                      ).fetchall() == [('a', 'd.x'), ('z', '0')]
    assert db.execute("SELECT pgad.gradient_agg(%s, %s, p) FROM few AS p", (lam, weights)
                      ).fetchone()[0] == gradient


@pytest.mark.parametrize('call', [
    LOSS,
    "SELECT pgad.gradient('λ(d, w) w.a*d.x', 'few', %s)",
    "SELECT pgad.gradient_descent('λ(d, w) w.a*d.x', 'few', %s)",
    "SELECT pgad.train('bounds_m', 'λ(d, w) w.a*d.x', 'squared', 'few', %s)",
    "SELECT pgad.loss_agg('λ(d, w) w.a*d.x', %s, p) FROM few AS p",
    "SELECT pgad.gradient_agg('λ(d, w) w.a*d.x', %s, p) FROM few AS p",
    "SELECT pgad.gradient_descent_agg('λ(d, w) w.a*d.x', %s, p) FROM few AS p",
    "SELECT * FROM pgad.derivatives('λ(d, w) w.a*d.x', %s)",
    "SELECT * FROM pgad.explain('λ(d, w) w.a*d.x', weights => %s)"])
def test_weights_past_the_limit_stop_with_53200(db, call):
    """5,000 numbers no lambda reads: 5,001 numbers at most (one more than the commas) and 2 weights, 1.5 MB."""
    db.execute("SET pgad.memory_limit = '1MB'")
    diag = error_of(db, call, (json.dumps({'a': 0, 'b': [0.0] * 5000}),))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail, diag.message_hint) == (
        '53200', 'the weights need 1.5 MB, more than pgad.memory_limit (1.0 MB)',
        'The weights jsonb holds up to 5001 numbers of 2 weights, 320 bytes a number and 384 a weight while the call '
        'reads them, uses them and gives them back.',
        'Give only the weights the lambda reads, or have a superuser raise pgad.memory_limit.')
    assert db.execute(call, (json.dumps({'a': 0, 'b': [0.0] * 1000}),)).fetchone() is not None


START = "(SELECT weights FROM starts WHERE name = '{}')"


def test_partial_sums_of_names_the_lambda_does_not_read(db):
    """pgad.partial_sums (a shard's round) takes the weight vector's names: one the lambda does not read has the
    derivative 0 and costs no program; too many are refused as weights are."""
    call = "SELECT pgad.partial_sums('λ(d, w) (w.a*d.x - d.y)^2', 'few', %s, %s)"
    rows, loss, *gradient = db.execute(call, (['z', 'a', 'q'], [5.0, 1.0, 7.0])).fetchone()[0]
    assert (rows, gradient[0], gradient[2]) == (3, 0, 0)
    assert [loss, gradient[1]] == pytest.approx([sum((x - 2 * x - 1) ** 2 for x in (1, 2, 3)),
                                                 sum(2 * (x - 2 * x - 1) * x for x in (1, 2, 3))], rel=1e-12)
    db.execute("SET pgad.memory_limit = '1MB'")
    names = ['a'] + [f'u{k}' for k in range(2000)]
    diag = error_of(db, call, (names, [0.0] * len(names)))
    assert (diag.sqlstate, diag.message_primary) == ('53200', 'the weights need 1.3 MB, more than pgad.memory_limit '
                                                              '(1.0 MB)')


@pytest.mark.parametrize('call, what', [
    ("SELECT pgad.gradient_agg('λ(d, w) w.a*d.x', '{\"a\": 0}', p, %s) FROM few AS p", 'options'),
    ("SELECT pgad.train('bounds_r', 'λ(d, w) w.a*d.x', 'squared', 'few', '{\"a\": 0}', l2 => 0.1, regularize => %s)",
     'regularize'),
    ("SELECT pgad.init_weights(%s)", 'shapes')])
def test_every_jsonb_argument_is_charged_before_it_is_parsed(db, call, what):
    """The aggregates' options, pgad.train's regularize and pgad.init_weights' shapes, as the weights."""
    db.execute("SET pgad.memory_limit = '1MB'")
    text = json.dumps({'mode': [0] * 5000} if what != 'regularize' else ['a'] * 5000)
    diag = error_of(db, call, (text,))
    assert (diag.sqlstate, diag.message_primary) == ('53200', f'the {what} need 1.5 MB, more than pgad.memory_limit '
                                                              '(1.0 MB)')


@pytest.mark.parametrize('shape', ['vector', 'matrix'])
@pytest.mark.parametrize('call', [LOSS, "SELECT pgad.gradient('λ(d, w) (w.a*d.x - d.y)^2', 'few', %s) IS NULL"])
def test_unread_weights_cost_their_text_not_a_program(db, shape, call):
    """A million numbers the lambda does not read, as a vector or a 1000×1000 matrix, from a table: the call's peak
    is PostgreSQL's text of them, Python's numbers, one float64 array and the result (measured: 100 and 125 bytes
    a number); and nothing of them stays. Before, they cost a program and a kernel per element: 2.9 kB and 220
    bytes a number, 2.4 GB and 110 MB of which stayed after the call."""
    db.execute('SET max_parallel_workers_per_gather = 0')
    diag, peak, after = peak_of(db, call.replace('%s', START.format(shape)),
                                call.replace('%s', START.format('small')))
    assert diag is None
    assert peak < 170 * 1_000_000, f'{peak / MB:.0f} MB'
    assert after < 80 * 1_000_000, f'{after / MB:.0f} MB'


def test_weights_past_the_limit_are_refused_before_they_are_parsed(db):
    """At a 64 MB limit, a million numbers (305 MB charged) are refused before Python parses them: the call stays
    within the limit (PostgreSQL's text of the jsonb and PL/Python's string of it, about 50 MB, are all it took)."""
    db.execute("SET pgad.memory_limit = '64MB'")
    diag, peak, _ = peak_of(db, LOSS.replace('%s', START.format('vector')), LOSS.replace('%s', START.format('small')))
    assert (diag.sqlstate, diag.message_primary) == (
        '53200', 'the weights need 305 MB, more than pgad.memory_limit (64 MB)')
    assert peak < 64 * MB, f'{peak / MB:.0f} MB'


# --- groups and chunks --------------------------------------------------------------------------------------------
def test_a_plain_role_cannot_make_the_chunks_tiny(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname, user=ROLE), autocommit=True) as user:
        user.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's library loaded: its settings defined
        assert error_of(user, 'SET pgad.load_chunk_rows = 1').sqlstate == '42501'


def test_one_row_chunks_stop_at_the_limit(db):
    """10,000 rows of two columns (640 kB charged 4 times over) fit in 1 MB; 10,000 chunks of one row do not."""
    db.execute("SET pgad.memory_limit = '1MB'")
    assert db.execute(LOSS, ('{"a": 0}',)).fetchone()[0] > 0
    db.execute('SET pgad.load_chunk_rows = 1')
    diag, peak, _ = peak_of(db, LOSS, LOSS.replace('FROM pts', 'FROM pts WHERE x <= 10'), ('{"a": 0}',))
    assert diag.sqlstate == '53200'
    assert peak < 4 * MB, f'{peak / MB:.1f} MB'


def test_one_row_groups_of_pgad_pack_are_charged_their_room(db):
    """10,000 groups of one row: 320 kB of rows, but each group's state and its row in the result cost more."""
    db.execute("SET pgad.memory_limit = '1MB'")
    db.execute('SET enable_sort = off')
    sql = 'SELECT sum(length(p)) FROM (SELECT pgad.pack(x) AS p FROM pts GROUP BY g) AS s'
    assert 'HashAggregate' in '\n'.join(r[0] for r in db.execute('EXPLAIN ' + sql).fetchall())
    diag, peak, _ = peak_of(db, sql, sql.replace('FROM pts', 'FROM pts WHERE x <= 10'))
    assert diag.sqlstate == '53200' and diag.message_detail.startswith('Packing stopped at row ')
    assert ', in group ' in diag.message_detail
    assert peak < 4 * MB, f'{peak / MB:.1f} MB'
    assert db.execute(sql.replace('FROM pts', 'FROM pts WHERE x <= 100')).fetchone()[0] == 100 * (24 + 8)


def test_an_aggregates_groups_held_at_once_are_charged_together(db):
    """A plain role under a 1 MB limit: grouped by hashing, 10,000 groups' states are held at once (53200);
    sorted, one group at a time, the same query fits."""
    db.execute("SET pgad.memory_limit = '1MB'")
    db.execute(f'SET ROLE {ROLE}')
    db.execute('SET enable_sort = off')
    sql = ("SELECT sum(l) FROM (SELECT pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{\"a\": 0}', p) AS l "
           "FROM pts AS p GROUP BY g) AS s")
    diag, peak, _ = peak_of(db, sql, sql.replace('FROM pts', 'FROM (SELECT * FROM pts WHERE x <= 10)'))
    assert diag.sqlstate == '53200' and diag.message_detail.startswith('Packing stopped with ')
    assert peak < 4 * MB, f'{peak / MB:.1f} MB'
    db.execute('SET enable_sort = on')
    db.execute('SET enable_hashagg = off')
    assert db.execute(sql).fetchone()[0] > 0


def test_a_grouped_train_of_one_row_groups_stops_at_the_limit(db):
    db.execute("SET pgad.memory_limit = '1MB'")
    train = "SELECT pgad.train('{}', 'λ(d, w) w.a*d.x', 'squared', '{}', '{{\"a\": 0}}', group_by => 'g')"
    diag, peak, _ = peak_of(db, train.format('bounds_g', 'pts'),
                            train.format('bounds_small', 'SELECT * FROM pts WHERE x <= 10'))
    assert diag.sqlstate == '53200'
    assert peak < 4 * MB, f'{peak / MB:.1f} MB'
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'bounds_g'").fetchone()[0] == 0


def test_a_grouped_train_is_charged_for_its_groups(db):
    """10,000 groups of one row load within 64 MB, but a model of them (a fit, a row of pgad.models and a branch of
    the scoring function each, about 32 kB a group) does not fit: 53200 before anything is trained or stored."""
    db.execute("SET pgad.memory_limit = '64MB'")
    train = "SELECT pgad.train('{}', 'λ(d, w) w.a*d.x', 'squared', '{}', '{{\"a\": 0}}', group_by => 'g')"
    diag, peak, _ = peak_of(db, train.format('bounds_groups', 'pts'),
                            train.format('bounds_few', 'SELECT * FROM pts WHERE x <= 10'))
    assert (diag.sqlstate, diag.message_primary, diag.message_detail) == (
        '53200', "the model's groups need 312 MB, more than pgad.memory_limit (64 MB)",
        '10000 groups, 32 kB each for its fit, its row of pgad.models and its branch of the scoring function.')
    assert peak < 64 * MB, f'{peak / MB:.1f} MB'
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'bounds_groups'").fetchone()[0] == 0


# --- vectors and matrices: the shapes' product is bounded before anything is built --------------------------------
# issue 34, item 3: outer(d.v, d.v) of a 20,000-element column allocated an object array of 400 million elements
# (28 s, 3.2 GB resident) before the first node was counted against pgad.max_lambda_nodes.
SHAPED = [
    'λ(d, w) w.a * sum(outer(d.v, d.v))',
    'λ(d, w) sum(d.v @ outer(d.v, d.v)) * w.a',
    'λ(d, w) w.a * sum(transpose([d.v]) @ [d.v])',            # @ of a 20,000×1 and a 1×20,000 matrix
    'λ(d, w) w.a * sum(outer(d.v, d.v) * 2)',                 # elementwise, broadcast over the product
    'λ(d, w) w.a * sum([' + ', '.join(['d.v'] * 2000) + '])',   # a 2,000×n matrix of one vector
]


@pytest.fixture(scope='module')
def wide(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE wide AS SELECT array_fill(0.5::float8, ARRAY[20000]) AS v20, '
                   'array_fill(0.5::float8, ARRAY[100000]) AS v100, 1.0::float8 AS y FROM generate_series(1, 2)')
        db.execute('CREATE TABLE shaped (name text, weights jsonb)')
        db.execute("INSERT INTO shaped VALUES ('vector', %s), ('matrix', %s), ('small', %s), ('small matrix', %s), "
                   "('vector 2000', %s)", (json.dumps({'u': [0.5] * 20000}), json.dumps({'m': [[0.5] * 20000]}),
                                           json.dumps({'u': [0.5] * 3}), json.dumps({'m': [[0.5] * 3]}),
                                           json.dumps({'u': [0.5] * 2000})))


@pytest.mark.parametrize('length', [20000, 100000])
@pytest.mark.parametrize('lam', SHAPED)
@pytest.mark.parametrize('function', ['loss', 'gradient', 'hessian'])
def test_vector_operations_of_long_array_columns_stop_before_they_allocate(db, wide, lam, length, function):
    """Each stops with 54001 well within a second (3 s for a loaded VM) and a few MB; the old code allocated the
    whole product first (an array of length² elements: 3.2 GB at 20,000)."""
    db.execute("SET pgad.memory_limit = '20MB'")
    call = f"SELECT pgad.{function}('{{}}', 'SELECT {{}} AS v FROM wide', '{{{{\"a\": 1}}}}')"
    diag, peak, held, took = peak_of(db, call.format(lam, f'v{length // 1000}'), call.format(SHAPED[0], 'v20[1:3]'),
                                     timed=True)
    assert diag is not None and (diag.sqlstate, diag.message_detail) == (
        '54001', 'The limit, pgad.max_lambda_nodes, is 100000.'), diag and diag.message_primary
    assert diag.message_primary.startswith('lambda is too large: ')
    assert took < 3, f'{took:.1f} s'
    assert peak < 32 * MB and held < 32 * MB, f'{peak / MB:.1f} MB, {held / MB:.1f} MB held'


@pytest.mark.parametrize('lam, weights', [
    ('λ(d, w) d.y * sum(outer(w.u, w.u))', 'vector'),
    ('λ(d, w) d.y * sum(transpose([w.u]) @ [w.u])', 'vector'),
    ('λ(d, w) d.y * sum(transpose(w.m) @ w.m)', 'matrix'),        # a 20,000×1 matrix by a 1×20,000 one
    ('λ(d, w) d.y * sum(outer(w.m[1], w.m[1]))', 'matrix'),
])
@pytest.mark.parametrize('function', ['loss', 'gradient', 'gradient_descent'])
def test_vector_operations_of_large_declared_weights_stop_before_they_allocate(db, wide, lam, weights, function):
    db.execute("SET pgad.memory_limit = '20MB'")
    call = f"SELECT pgad.{function}(%s, 'SELECT y FROM wide', weights) IS NULL FROM shaped WHERE name = '{{}}'"
    small = call.format('small' if weights == 'vector' else 'small matrix')
    diag, peak, held, took = peak_of(db, call.format(weights), small, (lam,), timed=True)
    assert diag is not None and diag.sqlstate == '54001', diag and diag.message_primary
    assert took < 3, f'{took:.1f} s'
    assert peak < 32 * MB and held < 32 * MB, f'{peak / MB:.1f} MB, {held / MB:.1f} MB held'


def test_a_product_within_the_bound_still_unrolls(db, wide):
    """The bound is the shapes' product, not a guess that refuses what fits: a 100×100 outer product of a column
    (10,000 products and their sum) runs, and its loss is the sum of every product."""
    got = db.execute("SELECT pgad.loss('λ(d, w) w.a * sum(outer(d.v, d.v))', 'SELECT v20[1:100] AS v FROM wide', "
                     "'{\"a\": 1}')").fetchone()[0]
    assert got == pytest.approx(100 * 100 * 0.25, rel=1e-12)


def test_forward_mode_tangents_stop_before_they_grow_with_weights_times_nodes(db, wide):
    """sum(w.u) + d.v copies sum(w.u)'s tangent, an entry per weight, into each of the vector's elements: 2,000
    weights and a 2,000-element column are 10,000 nodes, but 4 million tangent entries (the old code took minutes and
    hundreds of MB). Past 4 entries per node of pgad.max_lambda_nodes: 54001, at once."""
    db.execute("SET pgad.memory_limit = '20MB'")
    call = ("SELECT pgad.gradient('λ(d, w) sum(sum(w.u) + d.v)', 'SELECT v20[1:{}] AS v FROM wide', weights, "
            "mode => 'forward') IS NULL FROM shaped WHERE name = '{}'")
    diag, peak, held, took = peak_of(db, call.format(2000, 'vector 2000'), call.format(3, 'small'), timed=True)
    assert diag is not None and diag.sqlstate == '54001', diag and diag.message_primary
    assert diag.message_primary == 'lambda is too large for forward mode: its tangents hold more than 400000 entries'
    assert diag.message_hint == "Use mode => 'reverse', or a smaller lambda."
    assert took < 3, f'{took:.1f} s'
    assert peak < 32 * MB and held < 32 * MB, f'{peak / MB:.1f} MB, {held / MB:.1f} MB held'
    assert db.execute(call.format(3, 'small')).fetchone() == (False,)  # the same lambda, small: its gradient
