"""The edges the fuzzers found (issue 45, item 5), each a reproduction on a real server: forecast's level next to 1,
sequence models that read no weight under Newton and L-BFGS, a cancel while pgad waits for its catalog writer's
lock, the one rule of which columns a row reads (train and pgad.loss alike), a sequence's domain errors and numpy's
warnings, a view made between the drop's check and the drop, Newton's progress on a rejected step, and the
objective of a sequence as docs/sql.md states it."""
import threading
import time

import psycopg
import pytest

from conftest import error_of

STATE = '{"l": {"start": "1", "next": "d.y"}}'


@pytest.fixture
def series(db):
    """s: sixty ordered rows, y a gentle trend with a wobble, never NULL."""
    db.execute('DROP TABLE IF EXISTS s')
    db.execute('CREATE TABLE s AS SELECT k AS day, k % 2 AS g, (50 + 0.3 * k + sin(k))::float8 AS y '
               'FROM generate_series(1, 60) k')
    return db


def catalog(db):
    return db.execute("SELECT (SELECT count(*) FROM pgad.models), (SELECT count(*) FROM pg_proc p JOIN "
                      "pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pgad_models')").fetchone()


def train_sequence(db, name, model, weights, state=STATE, extra=''):
    return db.execute(f"SELECT iterations, final_loss, converged, weights FROM pgad.train(%s, %s, 'squared', "
                      f"'SELECT day, g, y FROM s', %s, order_by => 'day', state => %s{extra}) ORDER BY group_key",
                      [name, model, weights, state]).fetchall()


# forecast's level: (1 + level)/2, the upper quantile, is 1 in float8 for level 0.9999999999999999

def test_a_level_whose_upper_quantile_rounds_to_1_is_22023_as_level_1_is(series):
    train_sequence(series, 'fz_level', 'λ(d, w, s) s.l + w.a', '{"a": 0}', extra=", optimizer => 'gd', iterations => 0")
    for level in ('1', '0.9999999999999999'):
        diag = error_of(series, f"SELECT * FROM pgad.forecast('fz_level', 3, level => {level})")
        assert diag.sqlstate == '22023' and diag.message_primary.startswith('level must be between 0 and 1')
    # the greatest level that is not refused gives finite bounds (exactly: isfinite)
    rows = series.execute("SELECT lower, upper FROM pgad.forecast('fz_level', 3, level => 0.9999999999999998)"
                          ).fetchall()
    assert len(rows) == 3 and all(lo is not None and hi is not None and lo < hi < float('inf') and lo > -float('inf')
                                  for lo, hi in rows)


# a sequence model whose weights the recurrence never reads: Newton and L-BFGS have nothing to move

@pytest.mark.parametrize('optimizer', ['newton', 'lbfgs'])
@pytest.mark.parametrize('weights', ['{}', '{"a": 1}'])
@pytest.mark.parametrize('iterations', ['', ', iterations => 0'])
@pytest.mark.parametrize('groups', ['', ", group_by => 'g'"])
def test_a_sequence_model_that_reads_no_weight_takes_no_iteration(series, optimizer, weights, iterations, groups):
    fitted = train_sequence(series, 'fz_none', 'λ(d, w, s) s.l', weights,
                            extra=f", optimizer => '{optimizer}'{iterations}{groups}")
    # as gd gives it: no iteration, converged, the weights as given (exactly)
    plain = train_sequence(series, 'fz_none_gd', 'λ(d, w, s) s.l', weights, extra=f", optimizer => 'gd'{groups}")
    assert [r[0] for r in fitted] == [0] * len(plain) and all(r[2] for r in fitted)
    assert [r[3] for r in fitted] == [r[3] for r in plain]
    assert [r[1] for r in fitted] == pytest.approx([r[1] for r in plain], rel=1e-12)  # the same mean loss


# a cancel or a statement_timeout while pgad waits for the lock its catalog writer takes

def _holding_the_writers_lock(cluster, dbname):
    holder = psycopg.connect(cluster.conninfo(dbname))
    holder.execute('LOCK TABLE pgad.model_versions IN SHARE ROW EXCLUSIVE MODE')
    return holder


def test_a_statement_timeout_while_waiting_for_the_catalog_lock_is_postgresqls_own(series, cluster, dbname):
    train = ("SELECT * FROM pgad.train('fz_wait', 'λ(d, w) w.a', 'squared', 'SELECT y FROM s', '{\"a\": 0}', "
             "label => 'y', optimizer => 'gd', iterations => 0)")
    series.execute(train)  # once without the lock: the second call reaches the lock well within the timeout
    before = catalog(series)
    holder = _holding_the_writers_lock(cluster, dbname)
    try:
        series.execute("SET statement_timeout = '1s'")
        diag = error_of(series, train)
        series.execute('RESET statement_timeout')
    finally:
        holder.close()
    assert diag.sqlstate == '57014' and diag.message_primary == 'canceling statement due to statement timeout'
    assert catalog(series) == before


def test_a_cancel_while_waiting_for_the_catalog_lock_is_postgresqls_own(series, cluster, dbname):
    series.execute("SELECT * FROM pgad.train('fz_cancel', 'λ(d, w) w.a', 'squared', 'SELECT y FROM s', "
                   "'{\"a\": 0}', label => 'y', optimizer => 'gd', iterations => 0)")
    before = catalog(series)
    pid = series.execute('SELECT pg_backend_pid()').fetchone()[0]
    holder = _holding_the_writers_lock(cluster, dbname)

    def cancel():
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as admin:
            for _ in range(600):  # until the drop waits for the lock (60 s at most)
                if admin.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                                 (pid,)).fetchone()[0]:
                    break
                time.sleep(0.1)
            admin.execute('SELECT pg_cancel_backend(%s)', (pid,))
    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        diag = error_of(series, "SELECT pgad.drop_model('fz_cancel')")
    finally:
        canceller.join()
        holder.close()
    assert diag.sqlstate == '57014' and diag.message_primary == 'canceling statement due to user request'
    assert catalog(series) == before
