"""Training on a table sharded over postgres_fdw servers (pgad/shards.py), on real servers: the session's cluster is
the coordinator, and three shard clusters of their own hold the foreign partitions (a fourth, started and stopped
in one test, goes away mid-training).

The coordinator's table `sharded` is partitioned by `part`: part 0 is a local partition, parts 1–3 foreign tables on
the servers shard1–shard3 (shard3's table is empty); `everything` holds the same rows in one local table, the single
server that every sharded result must equal (1e-10 relative: only the order of the sums differs)."""
import re
import signal
import threading
import time

import numpy as np
import psycopg
import pytest

from conftest import error_of, new_database
from pgad import __version__, shards
from pgad.throwaway import Cluster

LINE = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
START = '{"a": 0, "b": 0}'
RELATIVE = 1e-10  # the sums of the same rows in another order


def rows_of(part, n, offset):
    """n rows of part: y = 2x + 1 and a wobble, deterministic; every 7th y NULL."""
    return [(float(k), None if k % 7 == 3 else 2.0 * k + 1 + np.sin(k), part)
            for k in np.arange(offset, offset + n) / 10.0]


DATA = {0: rows_of(0, 40, 0), 1: rows_of(1, 300, 40), 2: rows_of(2, 200, 340), 3: []}


def connect(cluster, dbname='test'):
    return psycopg.connect(cluster.conninfo(dbname), autocommit=True)


def start_shard(rows, table='pts', pgad=True):
    """A shard cluster whose database `test` holds `rows` in `table` (x, y, part), with pgad installed unless not."""
    shard = Cluster()
    with connect(shard) as db:
        if pgad:
            db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute(f'CREATE TABLE {table} (x float8, y float8, part int)')
        with db.cursor() as cur:
            cur.executemany(f'INSERT INTO {table} VALUES (%s, %s, %s)', rows)
    return shard


def add_server(db, name, cluster, dbname='test'):
    db.execute(f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
               f"port '{cluster.settings['port']}', dbname '{dbname}')")
    db.execute(f"CREATE USER MAPPING FOR PUBLIC SERVER {name} OPTIONS (user 'postgres')")


@pytest.fixture(scope='module')
def shard_clusters():
    clusters = []
    threads = [threading.Thread(target=lambda k=k: clusters.append((k, start_shard(DATA[k])))) for k in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield dict(clusters)
    for _, cluster in clusters:
        cluster.stop()


@pytest.fixture(scope='module')
def coordinator(cluster, shard_clusters):
    name = new_database(cluster, 'coordinator')
    with connect(cluster, name) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('CREATE EXTENSION postgres_fdw')
        db.execute('CREATE EXTENSION dblink')
        db.execute('CREATE TABLE sharded (x float8, y float8, part int) PARTITION BY LIST (part)')
        db.execute('CREATE TABLE sharded_here PARTITION OF sharded FOR VALUES IN (0)')
        for k, shard in shard_clusters.items():
            add_server(db, f'shard{k}', shard)
            db.execute(f"CREATE FOREIGN TABLE sharded_{k} PARTITION OF sharded FOR VALUES IN ({k}) "
                       f"SERVER shard{k} OPTIONS (table_name 'pts')")
        db.execute('CREATE TABLE everything (x float8, y float8, part int)')
        with db.cursor() as cur:
            cur.executemany('INSERT INTO sharded_here VALUES (%s, %s, %s)', DATA[0])
            cur.executemany('INSERT INTO everything VALUES (%s, %s, %s)', [r for k in DATA for r in DATA[k]])
    return name


@pytest.fixture
def db(cluster, coordinator):
    with connect(cluster, coordinator) as conn:
        yield conn


def fit(db, data, learning_rate=0.001, iterations=50, loss=LINE, weights=START):
    return db.execute('SELECT weights, loss, iterations FROM pgad.gradient_descent(%s, %s, %s, %s, %s)',
                      (loss, data, weights, learning_rate, iterations)).fetchone()


def close(a, b):
    """a and b (numbers, or dicts of numbers) agree to RELATIVE."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            close(a[k], b[k])
    else:
        assert a == pytest.approx(b, rel=RELATIVE, abs=1e-300)


def test_gradient_descent_on_shards_is_the_single_server_result(db):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    sharded, single = fit(db, 'sharded'), fit(db, 'everything')
    close(sharded[0], single[0])
    close(sharded[1], single[1])
    assert sharded[2] == single[2] == 50
    assert single[0] != {'a': 0, 'b': 0}


def test_loss_and_gradient_on_shards(db):
    for function in ('loss', 'gradient'):
        sharded, single = (db.execute(f'SELECT pgad.{function}(%s, %s, %s)', (LINE, data, '{"a": 1.5, "b": -2}'))
                           .fetchone()[0] for data in ('sharded', 'everything'))
        close(sharded, single)


@pytest.mark.parametrize('optimizer', ['gd', 'momentum', 'adam', 'lbfgs'])
def test_train_on_shards_is_the_single_server_result(db, optimizer):
    models = {}
    rate = '' if optimizer == 'lbfgs' else 'learning_rate => 0.001, '  # lbfgs takes none (22023)
    for data in ('sharded', 'everything'):
        models[data] = db.execute(
            "SELECT weights, final_loss, iterations, rows, read_from::text[] FROM pgad.train(%s, "
            f"'λ(d, w) w.a*d.x + w.b', 'squared', %s, %s, {rate}iterations => 20, optimizer => %s, "
            "batch_size => 100000)",
            (f'm_{optimizer}_{data}', data, START, optimizer)).fetchone()
        assert data in models[data][4]  # what the training read, rows pulled or summed where they are
    rows = [r for k in DATA for r in DATA[k] if r[1] is not None]
    assert models['sharded'][3] == models['everything'][3] == len(rows)
    if optimizer != 'lbfgs':  # a fixed number of steps (tolerance 0): the sums of the same rows in another order
        close(models['sharded'][0], models['everything'][0])
        close(models['sharded'][1], models['everything'][1])
        assert models['sharded'][2] == models['everything'][2] == 20
        return
    # L-BFGS stops on its own where no step lowers the objective: at the optimum, to the precision of the sums, so
    # where it stops depends on their rounding (5 iterations on shards and 7 on one server without AVX-512), not
    # what it stops at. Both reach the least-squares optimum (numpy's lstsq) before the 20 iterations allowed: the
    # weights to 1e-6 relative, the loss, flat there, to 1e-10.
    x = np.array([[r[0], 1.0] for r in rows])
    optimum = np.linalg.lstsq(x, np.array([r[1] for r in rows]), rcond=None)[0]
    least = float(np.mean((x @ optimum - np.array([r[1] for r in rows])) ** 2))
    for weights, loss, iterations, _, _ in models.values():
        assert [weights['a'], weights['b']] == pytest.approx(optimum, rel=1e-6)
        assert loss == pytest.approx(least, rel=1e-10)
        assert iterations < 20
    assert db.execute("SELECT pgad_models.\"m_gd_sharded\"(2.0)").fetchone()[0] is not None


def test_a_model_trained_where_the_rows_are_sharded_gets_no_explain_function(db):
    """Its baseline would be the local partitions' means (docs/sql.md, Explanations): none, and a NOTICE says why;
    the same model on a query over the table, whose rows are pulled, gets one."""
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    for name, data in (('why_sharded', 'sharded'), ('why_pulled', 'SELECT * FROM sharded')):
        db.execute(f"SELECT pgad.train(%s, 'λ(d, w) w.a*d.x + w.b', 'squared', %s, '{START}', optimizer => 'lbfgs')",
                   (name, data))
    assert 'model "why_sharded" gets no pgad_models."why_sharded_explain" function: its rows are sharded, and the ' \
           'training rows\' means would be the local partitions\'' in notices
    explain = "SELECT proname FROM pg_proc WHERE proname LIKE 'why\\_%\\_explain'"
    assert db.execute(explain).fetchall() == [('why_pulled_explain',)]
    assert db.execute("SELECT name, options ? 'baseline' FROM pgad.models WHERE name LIKE 'why\\_%' ORDER BY name"
                      ).fetchall() == [('why_pulled', True), ('why_sharded', False)]


def test_momentum_and_adam_step_on_full_batches_where_the_rows_are_sharded(db):
    """batch_size is not used on shards: momentum's fit is the one with a batch larger than the data here."""
    sharded = db.execute("SELECT weights FROM pgad.train('mom_small', 'λ(d, w) w.a*d.x + w.b', 'squared', 'sharded', "
                         "%s, learning_rate => 0.001, iterations => 5, optimizer => 'momentum', batch_size => 16)",
                         (START,)).fetchone()[0]
    single = db.execute("SELECT weights FROM pgad.train('mom_full', 'λ(d, w) w.a*d.x + w.b', 'squared', 'everything', "
                        "%s, learning_rate => 0.001, iterations => 5, optimizer => 'momentum', batch_size => 100000)",
                        (START,)).fetchone()[0]
    close(sharded, single)


def test_sgd_is_refused_where_the_rows_are_sharded(db):
    e = error_of(db, "SELECT pgad.train('s', 'λ(d, w) w.a*d.x + w.b', 'squared', 'sharded', %s, optimizer => 'sgd')",
                 (START,))
    assert e.sqlstate == '0A000'
    assert e.message_primary == 'optimizer "sgd" cannot train where the rows are sharded'
    assert 'SELECT * FROM the table' in e.message_hint
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 's'").fetchone()[0] == 0


def test_a_query_over_the_sharded_table_pulls_its_rows(db):
    """The way to opt out: a query is loaded here, through postgres_fdw, with the same result."""
    close(fit(db, 'SELECT x, y FROM sharded')[0], fit(db, 'everything')[0])


def test_group_by_and_standardize_pull_the_rows(db):
    for extra in ("group_by => 'part'", 'standardize => true'):
        sharded = db.execute("SELECT group_key, weights FROM pgad.train('g', 'λ(d, w) w.a*d.x + w.b', 'squared', "
                             f"'sharded', %s, learning_rate => 0.001, iterations => 10, {extra}) ORDER BY 1",
                             (START,)).fetchall()
        single = db.execute("SELECT group_key, weights FROM pgad.train('g', 'λ(d, w) w.a*d.x + w.b', 'squared', "
                            f"'everything', %s, learning_rate => 0.001, iterations => 10, {extra}) ORDER BY 1",
                            (START,)).fetchall()
        assert [g for g, _ in sharded] == [g for g, _ in single]
        for (_, a), (_, b) in zip(sharded, single):
            close(a, b)


def test_a_categorical_weight_pulls_the_rows(db):
    """A categorical weight (by the integer column part) on a sharded table: its rows are pulled here, with the
    single server's result."""
    loss, start = 'λ(d, w) (w.p[d.part] + w.a*d.x - d.y)^2', '{"p": {}, "a": 0}'
    sharded, single = (fit(db, data, loss=loss, weights=start) for data in ('sharded', 'everything'))
    assert sorted(sharded[0]['p']) == ['0', '1', '2']
    close(sharded[0], single[0])


def test_a_foreign_table_alone_is_one_shard(db):
    db.execute("CREATE FOREIGN TABLE IF NOT EXISTS alone (x float8, y float8) SERVER shard1 OPTIONS (table_name 'pts')")
    db.execute('CREATE TABLE IF NOT EXISTS alone_here AS SELECT x, y FROM everything WHERE part = 1')
    close(fit(db, 'alone')[0], fit(db, 'alone_here')[0])


def test_explain_shows_where_the_rows_are_computed(db):
    detail = db.execute("SELECT detail FROM pgad.explain(%s, data => 'sharded') WHERE stage = 'data'",
                        (LINE,)).fetchone()[0]
    lines = detail.splitlines()
    assert lines[0] == 'here: public.sharded_here'
    assert lines[1] == 'shard server "shard1": public.sharded_1, as SELECT "x" AS "x", "y" AS "y" FROM "public"."pts"'
    assert len(lines) == 5 and lines[3].startswith('shard server "shard3"')
    sent, received = shards.round_bytes(2)
    assert f'at most {sent} bytes sent to each and {received} received from each (2 weights and 4 sums)' in lines[4]
    here = db.execute("SELECT detail FROM pgad.explain(%s, data => 'everything') WHERE stage = 'data'",
                      (LINE,)).fetchone()[0]
    assert here.startswith('here: the rows are loaded into this backend')


def test_the_training_reports_its_rounds_at_debug_level(db):
    messages = []
    db.add_notice_handler(lambda d: messages.append(d.message_primary))
    db.execute('SET client_min_messages = debug2')
    fit(db, 'sharded', iterations=10)
    db.execute('RESET client_min_messages')
    plan = [m for m in messages if m.startswith('pgad: training on')]
    assert plan == ['pgad: training on 3 shard servers: shard1 (public.sharded_1); shard2 (public.sharded_2); '
                    'shard3 (public.sharded_3); here: public.sharded_here']
    rounds = [m for m in messages if re.match(r'pgad: \d+ rounds', m)]
    assert len(rounds) == 1 and rounds[0].startswith('pgad: 11 rounds on 3 shard servers')
    per_round = int(re.search(r'\((\d+) a round a server\)', rounds[0]).group(1))
    assert per_round < sum(shards.round_bytes(2))  # O(weights): nothing of the 500 rows


def test_weights_are_sent_as_numbers_only():
    text = shards.array(np.array([1.5, -2e-300, 1e300, 0.1, -0.0, float('inf'), float('nan')]))
    assert re.fullmatch(r'\{[0-9.e+\-,a-zA-Z]*\}', text)
    assert set(re.findall('[a-zA-Z]+', text)) <= {'e', 'Infinity', 'NaN'}
    assert [float(v) for v in text[1:-1].replace('Infinity', 'inf').split(',')][:5] == [1.5, -2e-300, 1e300, 0.1, -0.0]


def test_injection_through_the_lambda_the_names_and_the_weights(cluster, db, shard_clusters):
    """A column, a weight and a remote table whose names are SQL: quoted everywhere, nothing else runs."""
    column, weight, table = "x'); DROP TABLE pts; --", "a'); DROP TABLE pts; --", 'we\'ird "t"; DROP TABLE pts'
    quoted = '"' + column.replace('"', '""') + '"'
    with connect(shard_clusters[2]) as shard:
        shard.execute(f'CREATE TABLE IF NOT EXISTS "{table.replace(chr(34), chr(34) * 2)}" ({quoted} float8, y float8)')
        shard.execute(f'TRUNCATE "{table.replace(chr(34), chr(34) * 2)}"')
        shard.execute(f'INSERT INTO "{table.replace(chr(34), chr(34) * 2)}" SELECT x, y FROM pts WHERE y IS NOT NULL')
    db.execute(f'CREATE TABLE IF NOT EXISTS odd ({quoted} float8, y float8, part int) PARTITION BY LIST (part)')
    db.execute('CREATE TABLE IF NOT EXISTS odd_here PARTITION OF odd FOR VALUES IN (0)')
    db.execute(f"CREATE FOREIGN TABLE IF NOT EXISTS odd_2 PARTITION OF odd FOR VALUES IN (2) SERVER shard2 "
               f"OPTIONS (table_name %s)" .replace('%s', "'" + table.replace("'", "''") + "'"))
    db.execute(f'CREATE TABLE IF NOT EXISTS odd_single AS SELECT x AS {quoted}, y FROM everything '
               'WHERE part = 2 AND y IS NOT NULL')
    loss = f'λ(d, w) (w."{weight}"*d.{quoted} + w.b - d.y)^2'
    weights = '{"' + weight.replace('"', '\\"') + '": 0, "b": 0}'
    sharded = fit(db, 'odd', loss=loss, weights=weights)
    single = fit(db, 'odd_single', loss=loss, weights=weights)
    close(sharded[0], single[0])
    assert sharded[0][weight] != 0
    with connect(shard_clusters[2]) as shard:
        assert shard.execute('SELECT count(*) FROM pts').fetchone()[0] == len(DATA[2])


def test_the_shard_keeps_its_columns_for_one_repeatable_read_read_only_transaction(shard_clusters):
    messages = []
    with connect(shard_clusters[1]) as shard:
        shard.add_notice_handler(lambda d: messages.append(d.message_primary))
        shard.execute('SET client_min_messages = debug2')
        call = "SELECT pgad.partial_sums(%s, 'SELECT x, y FROM pts', '{a,b}', '{1,2}')"
        for isolation, loads in (('REPEATABLE READ READ ONLY', 1), ('SERIALIZABLE READ ONLY', 1),
                                 ('READ COMMITTED', 2), ('REPEATABLE READ', 2)):
            messages.clear()
            shard.execute(f'BEGIN ISOLATION LEVEL {isolation}')
            first = shard.execute(call, (LINE,)).fetchone()[0]
            second = shard.execute(call, (LINE,)).fetchone()[0]
            shard.execute('COMMIT')
            assert first == second
            assert sum(m.startswith('pgad: loaded') for m in messages) == loads, isolation
        messages.clear()
        for _ in range(2):  # a second transaction loads again
            shard.execute('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
            shard.execute(call, (LINE,))
            shard.execute('COMMIT')
        assert sum(m.startswith('pgad: loaded') for m in messages) == 2
        rows, loss, *gradient = first
        x, y = np.array([(x, y) for x, y, _ in DATA[1] if y is not None]).T
        assert rows == len(x)
        assert loss == pytest.approx(np.sum((x + 2 - y) ** 2), rel=1e-12)
        assert gradient == pytest.approx([np.sum(2 * (x + 2 - y) * x), np.sum(2 * (x + 2 - y))], rel=1e-12)


def test_partial_sums_checks_its_arguments(shard_clusters):
    with connect(shard_clusters[1]) as shard:
        e = error_of(shard, "SELECT pgad.partial_sums(%s, 'pts', '{a}', '{1,2}')", (LINE,))
        assert (e.sqlstate, e.message_primary) == ('22023', '1 weight names for 2 weights')
        e = error_of(shard, "SELECT pgad.partial_sums(%s, 'pts', '{a,c}', '{1,2}')", (LINE,))
        assert (e.sqlstate, e.message_primary) == ('22023', 'weight "b" is not in the weights')
        empty = shard_clusters[3]
    with connect(empty) as shard:
        assert shard.execute("SELECT pgad.partial_sums(%s, 'pts', '{a,b}', '{1,2}')",
                             (LINE,)).fetchone()[0] == [0, 0, 0, 0]


def test_a_shard_without_pgad_is_named_before_any_training(cluster, db):
    bare = start_shard(DATA[1], pgad=False)
    try:
        with connect(bare) as shard:
            shard.execute('CREATE DATABASE old')
        with connect(bare, 'old') as shard:
            shard.execute("CREATE EXTENSION pgad VERSION '0.7.0' CASCADE")
            shard.execute('CREATE TABLE pts (x float8, y float8, part int)')
        db.execute('CREATE TABLE IF NOT EXISTS lacking (x float8, y float8, part int) PARTITION BY LIST (part)')
        db.execute('CREATE TABLE IF NOT EXISTS lacking_here PARTITION OF lacking FOR VALUES IN (0)')
        add_server(db, 'bare', bare)
        add_server(db, 'older', bare, 'old')
        db.execute("CREATE FOREIGN TABLE lacking_1 PARTITION OF lacking FOR VALUES IN (1) SERVER shard1 "
                   "OPTIONS (table_name 'pts')")
        db.execute("CREATE FOREIGN TABLE lacking_2 PARTITION OF lacking FOR VALUES IN (2) SERVER bare "
                   "OPTIONS (table_name 'pts')")
        messages = []
        db.add_notice_handler(lambda d: messages.append(d.message_primary))
        e = error_of(db, "SELECT * FROM pgad.train('kept', 'λ(d, w) w.a*d.x + w.b', 'squared', 'lacking', %s, "
                         "progress_every => 1)", (START,))
        assert e.sqlstate == '42704'
        assert e.message_primary == 'pgad is not installed on shard server "bare"'
        assert e.message_detail == 'Its partitions here: public.lacking_2.'
        assert 'CREATE EXTENSION pgad' in e.message_hint
        assert not [m for m in messages if 'iteration' in m]  # before any training
        db.execute('DROP FOREIGN TABLE lacking_2')
        db.execute("CREATE FOREIGN TABLE lacking_2 PARTITION OF lacking FOR VALUES IN (2) SERVER older "
                   "OPTIONS (table_name 'pts')")
        e = error_of(db, 'SELECT * FROM pgad.gradient_descent(%s, %s, %s)', (LINE, 'lacking', START))
        assert e.sqlstate == '0A000'
        assert e.message_primary == f'shard server "older" runs pgad 0.7.0, not {__version__} as here'
        assert db.execute('SELECT dblink_get_connections() IS NULL').fetchone()[0]
    finally:
        db.execute('DROP TABLE IF EXISTS lacking')
        bare.stop()


def test_a_shard_that_stops_mid_training_is_named_with_the_iteration(cluster, db):
    doomed = start_shard(DATA[1] * 20)
    db.execute('CREATE TABLE IF NOT EXISTS fragile (x float8, y float8, part int) PARTITION BY LIST (part)')
    db.execute('CREATE TABLE IF NOT EXISTS fragile_here PARTITION OF fragile FOR VALUES IN (0)')
    add_server(db, 'doomed', doomed)
    db.execute("CREATE FOREIGN TABLE fragile_1 PARTITION OF fragile FOR VALUES IN (1) SERVER doomed "
               "OPTIONS (table_name 'pts')")
    db.execute("SELECT pgad.train('kept', 'λ(d, w) w.a*d.x + w.b', 'squared', 'everything', %s, iterations => 3)",
               (START,))
    kept = db.execute("SELECT weights FROM pgad.models WHERE name = 'kept'").fetchone()[0]
    progress = []
    db.add_notice_handler(lambda d: progress.append(d.message_primary))
    def stop_once_training():
        while not any('iteration' in m for m in progress):
            time.sleep(0.05)
        doomed.stop(signal.SIGINT)  # a fast shutdown: its sessions end at once
    stopper = threading.Thread(target=stop_once_training)
    stopper.start()
    try:
        e = error_of(db, "SELECT * FROM pgad.train('kept', 'λ(d, w) w.a*d.x + w.b', 'squared', 'fragile', %s, "
                         "learning_rate => 1e-6, iterations => 1000000, progress_every => 1)", (START,))
    finally:
        stopper.join()
    assert re.fullmatch(r'shard server "doomed" failed at iteration \d+', e.message_primary), e.message_primary
    assert int(e.message_primary.split()[-1]) >= 2
    assert e.sqlstate.startswith(('08', '57')), e.sqlstate
    assert db.execute("SELECT weights FROM pgad.models WHERE name = 'kept'").fetchone()[0] == kept
    assert db.execute('SELECT dblink_get_connections() IS NULL').fetchone()[0]
    db.execute('DROP TABLE fragile')


@pytest.mark.parametrize('how', ['statement_timeout', 'pg_cancel_backend'])
def test_a_cancel_stops_the_shards_work_within_a_second(cluster, db, shard_clusters, how):
    """A shard whose data is a view that sleeps 10 ms a row: the first round loads for seconds, and the cancel of the
    coordinator's statement reaches it."""
    slow = shard_clusters[2]
    with connect(slow) as shard:
        shard.execute('CREATE OR REPLACE FUNCTION slowly(x float8) RETURNS float8 LANGUAGE sql VOLATILE '
                      'AS $$ SELECT pg_sleep(0.01); SELECT x $$')
        shard.execute('CREATE OR REPLACE VIEW slow AS SELECT slowly(x) AS x, y FROM pts')
    db.execute("CREATE FOREIGN TABLE IF NOT EXISTS sleepy (x float8, y float8) SERVER shard2 "
               "OPTIONS (table_name 'slow')")
    started = time.monotonic()
    if how == 'statement_timeout':
        db.execute("SET statement_timeout = '1s'")
    else:
        pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
        threading.Timer(1.0, lambda: connect(cluster).execute('SELECT pg_cancel_backend(%s)', (pid,))).start()
    try:
        e = error_of(db, 'SELECT * FROM pgad.gradient_descent(%s, %s, %s, 1e-6)', (LINE, 'sleepy', START))
    finally:
        db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014'
    assert time.monotonic() - started < 3
    deadline = time.monotonic() + 1.0
    with connect(slow) as shard:
        while shard.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'EXECUTE pgad_sums%%'"
                            ).fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shard.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'EXECUTE pgad_sums%%'"
                             ).fetchone()[0] == 0
    assert db.execute('SELECT dblink_get_connections() IS NULL').fetchone()[0]


def test_without_dblink_or_with_row_security_the_rows_are_pulled(db):
    single = fit(db, 'everything')[0]
    for change, why in (('DROP EXTENSION dblink', 'the dblink extension is not installed here'),
                        ('ALTER TABLE sharded ENABLE ROW LEVEL SECURITY', 'row-level security is enabled on it')):
        notices = []
        db.add_notice_handler(lambda d: notices.append(d.message_primary))
        db.execute('BEGIN')
        try:
            db.execute(change)
            close(fit(db, 'sharded')[0], single)
        finally:
            db.execute('ROLLBACK')
        assert f'relation "sharded" has postgres_fdw partitions, but {why} (CREATE EXTENSION dblink): their rows are ' \
               'pulled here' in notices or any(why in n for n in notices), notices
