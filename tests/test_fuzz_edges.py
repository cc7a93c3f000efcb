"""The edges the fuzzers found (issue 45, item 5), each a reproduction on a real server: forecast's level next to 1,
sequence models that read no weight under Newton and L-BFGS, a cancel while pgad waits for its catalog writer's
lock, the one rule of which columns a row reads (train and pgad.loss alike), a sequence's domain errors and numpy's
warnings, a view made between the drop's check and the drop, Newton's progress on a rejected step, and the
objective of a sequence as docs/sql.md states it."""
import pathlib
import re
import threading
import time

import psycopg
import pytest

from conftest import error_of

STATE = '{"l": {"start": "1", "next": "d.y"}}'
ROOT = pathlib.Path(__file__).parent.parent


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


# which columns a row reads: those its texts name (docs/sql.md), in pgad.train as in pgad.loss, even where the DAG
# folds the use away

FOLDED = 'CASE WHEN d.x >= 0 THEN 0 ELSE 0 END'


@pytest.fixture
def holes(db):
    """h: thirty rows, x NULL in every third."""
    db.execute('DROP TABLE IF EXISTS h')
    db.execute('CREATE TABLE h AS SELECT k AS day, CASE WHEN k % 3 = 0 THEN NULL ELSE k END::float8 AS x, '
               '(0.5 * k + sin(k))::float8 AS y FROM generate_series(1, 30) k')
    return db


@pytest.mark.parametrize('model, loss', [(f'λ(d, w) w.a + {FOLDED}', 'squared'),
                                         ('λ(d, w) w.a', f'λ(p, d) (p - d.y)^2 + {FOLDED}')])
def test_train_skips_the_rows_pgad_loss_skips_where_a_read_column_is_folded_away(holes, model, loss):
    rows, final = holes.execute("SELECT rows, final_loss FROM pgad.train('fz_null', %s, %s, 'SELECT x, y FROM h', "
                                "'{\"a\": 1}', label => 'y', optimizer => 'gd', iterations => 0)",
                                [model, loss]).fetchone()
    expected = holes.execute(f"SELECT pgad.loss('λ(d, w) (w.a + {FOLDED} - d.y)^2', 'SELECT x, y FROM h', "
                             "'{\"a\": 1}')").fetchone()[0]
    assert rows == 20  # the 10 rows with NULL x skipped, exactly
    assert final == pytest.approx(expected, rel=1e-12)  # the same objective: the mean over the same rows
    evaluated = dict(holes.execute("SELECT metric, value FROM pgad.evaluate('fz_null', 'SELECT x, y FROM h')"
                                   ).fetchall())
    assert evaluated['rows'] == 20 and evaluated['skipped_rows'] == 10  # exactly


def test_a_sequence_model_skips_the_rows_with_null_in_a_column_whose_use_is_folded_away(holes):
    rows = holes.execute(f"SELECT rows FROM pgad.train('fz_null_seq', 'λ(d, w, s) s.l + {FOLDED}', 'squared', "
                         "'SELECT day, x, y FROM h', '{\"a\": 1}', order_by => 'day', "
                         "state => '{\"l\": {\"start\": \"w.a\", \"next\": \"d.y\"}}', optimizer => 'gd', "
                         "iterations => 0)").fetchone()[0]
    # the scoring function takes x and gives NULL for a NULL x: training skipped those rows too (exactly 10)
    assert rows == 20
    assert holes.execute('SELECT pgad_models.fz_null_seq(NULL, 1) IS NULL').fetchone()[0]


# a sequence's domain error names the expression, as every other lambda's; numpy's warnings stay inside

@pytest.mark.parametrize('optimizer', ['gd', 'lbfgs', 'newton'])
@pytest.mark.parametrize('model, state, shown', [
    ('λ(d, w, s) ln(s.l - 5) + w.a', STATE, 'ln(s.l - 5) = NaN where s.l = 1'),
    ('λ(d, w, s) s.l + w.a', '{"l": {"start": "1", "next": "ln(s.l - 5)"}}', 'ln(s.l - 5) = NaN where s.l = 1'),
    ('λ(d, w, s) s.l + w.a', '{"l": {"start": "ln(w.a - 2)", "next": "d.y"}}', 'ln(w.a - 2) = NaN where w.a = 1')])
def test_a_sequences_domain_error_is_postgresqls_naming_the_expression(series, optimizer, model, state, shown):
    before = catalog(series)
    diag = error_of(series, "SELECT * FROM pgad.train('fz_domain', %s, 'squared', 'SELECT day, y FROM s', "
                            "'{\"a\": 1}', order_by => 'day', state => %s, optimizer => %s)", [model, state, optimizer])
    assert diag.sqlstate == '2201E' and diag.message_primary == 'cannot take logarithm of a negative number'
    assert diag.message_detail == f'The lambda computes {shown}, at the starting weights.'
    assert catalog(series) == before


def test_a_nan_in_a_sequences_data_names_its_row_in_its_group(series):
    series.execute('DROP TABLE IF EXISTS nan_day')
    series.execute("CREATE TABLE nan_day AS SELECT k AS day, k % 2 AS g, CASE WHEN k = 17 THEN 'NaN'::float8 "
                   "ELSE k END AS y FROM generate_series(1, 30) k")
    diag = error_of(series, "SELECT * FROM pgad.train('fz_nan', 'λ(d, w, s) s.l + w.a', 'squared', "
                            "'SELECT day, g, y FROM nan_day', '{\"a\": 1}', order_by => 'day', state => %s, "
                            "group_by => 'g')", [STATE])
    assert diag.sqlstate == '22000' and diag.message_primary == 'column "y" of the data is NaN'
    # day 17 is the ninth row of group 1 (days 1, 3, …, 17), exactly
    assert diag.message_detail == ('Row 9 of the rows of model "fz_nan", group {"g": 1} in order_by\'s order (without '
                                   'NULL in a column read) has y = NaN.')


def test_numpys_floating_point_warnings_do_not_reach_the_client(series):
    said = []
    series.add_notice_handler(lambda notice: said.append((notice.severity_nonlocalized, notice.message_primary)))
    diag = error_of(series, "SELECT * FROM pgad.train('fz_overflow', 'λ(d, w, s) s.l * w.a', 'squared', "
                            "'SELECT day, y FROM s', '{\"a\": 1e300}', order_by => 'day', "
                            "state => '{\"l\": {\"start\": \"1\", \"next\": \"s.l * 1e300 + d.y\"}}')")
    assert diag.sqlstate == '22003' and diag.message_primary == 'value out of range: overflow'
    assert diag.message_detail.startswith('The lambda computes (s.l*w.a - d.y)^2 = Infinity')
    assert not [message for severity, message in said if severity == 'WARNING']  # exactly none


# a view made between pgad's check of what uses a deployed function and its DROP: an event trigger makes one on the
# model's _explain function as the scoring function is dropped, within the same deployment

def test_a_view_made_after_the_check_of_a_functions_users_is_pgads_2bp01(series):
    train = ("SELECT count(*) FROM pgad.train('fz_view', %s, 'squared', 'SELECT y, y AS x, y AS z FROM s', "
             "'{\"a\": 0}', label => 'y', optimizer => 'gd', iterations => 0)")
    series.execute(train, ['λ(d, w) w.a*d.x'])
    series.execute("CREATE FUNCTION fz_make_view() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "IF pg_catalog.to_regclass('fz_late') IS NULL THEN CREATE VIEW fz_late AS SELECT "
                   "pgad_models.fz_view_explain(x) AS e FROM (VALUES (1.0::float8)) AS t(x); END IF; END $$")
    series.execute("CREATE EVENT TRIGGER fz_late ON ddl_command_end WHEN TAG IN ('DROP FUNCTION') "
                   "EXECUTE FUNCTION fz_make_view()")
    try:
        before = catalog(series)
        diag = error_of(series, train, ['λ(d, w) w.a*d.z'])  # an argument renamed: both functions are dropped
    finally:
        series.execute('DROP EVENT TRIGGER fz_late')
        series.execute('DROP FUNCTION fz_make_view()')
    assert diag.sqlstate == '2BP01'
    assert diag.message_primary == ('cannot replace the explain function of model "fz_view": its arguments are '
                                    'renamed from "x" to "z", and other objects depend on it')
    assert diag.message_detail == (  # as the check names it
        'The function was pgad_models.fz_view_explain(pg_catalog.float8) RETURNS jsonb, now '
        'pgad_models."fz_view_explain"(pg_catalog.float8) RETURNS pg_catalog.jsonb. It is used by: rule _RETURN on '
        'view fz_late.')
    assert diag.message_hint == 'Drop or change those objects, then train (or deploy) again.'
    assert catalog(series) == before and series.execute("SELECT to_regclass('fz_late')").fetchone() == (None,)


# the progress NOTICE of an iteration whose trial step is rejected: the objective at the weights kept, never nan.
# From a = 0.9999999999999999 every step towards 3 crosses into the CASE's other branch (the loss rises by 10,000) or
# rounds to no step at all: no step of the line search is taken.

@pytest.mark.parametrize('optimizer', ['newton', 'lbfgs'])
def test_the_progress_of_a_rejected_step_says_the_loss_kept(db, optimizer):
    db.execute('DROP TABLE IF EXISTS flat3')
    db.execute('CREATE TABLE flat3 AS SELECT k AS day, 3::float8 AS y FROM generate_series(1, 10) k')
    said = []
    db.add_notice_handler(lambda notice: said.append(notice.message_primary))
    iterations, final = db.execute(
        "SELECT iterations, final_loss FROM pgad.train('fz_rejected', 'λ(d, w, s) w.a + CASE WHEN w.a < 1 THEN 0 "
        "ELSE 100 END + s.l', 'squared', 'SELECT day, y FROM flat3', '{\"a\": 0.9999999999999999}', "
        "order_by => 'day', state => '{\"l\": {\"start\": \"0\", \"next\": \"0\"}}', optimizer => %s, "
        "progress_every => 1)", [optimizer]).fetchone()
    assert iterations == 0 and final == pytest.approx(4, rel=1e-12)  # (0.9999999999999999 - 3)^2, no step taken
    progress = [m for m in said if 'iteration 1 of' in m]
    assert len(progress) == 1 and ', loss 4, ' in progress[0], progress  # the loss kept, as %.6g prints it


# a sequence's objective is the mean over its rows, as docs/sql.md says

def test_a_sequences_final_loss_is_the_mean_over_its_rows_as_the_docs_say(series):
    ses = '{"l": {"start": "w.l0", "next": "s.l + w.alpha*(d.y - s.l)"}}'
    final, = train_sequence(series, 'fz_mean', 'λ(d, w, s) s.l', '{"alpha": 0.5, "l0": 50}', state=ses,
                            extra=", optimizer => 'gd', iterations => 0")
    level, errors = 50.0, []
    for y, in series.execute('SELECT y FROM s ORDER BY day'):
        errors.append((y - level) ** 2)
        level += 0.5 * (y - level)
    assert final[1] == pytest.approx(sum(errors) / len(errors), rel=1e-12)  # the mean of the 60 rows' losses
    text = (ROOT / 'docs' / 'sql.md').read_text()
    section = text[text.index('## Sequences: order_by and state'):]
    objective = re.search(r'The objective is the loss of the prediction against the label,\s+(\S+)', section)
    assert objective.group(1) == 'averaged' and 'summed along the rows' not in section


def test_a_view_made_after_the_check_of_an_old_versions_users_keeps_that_version(series):
    """pgad.train drops the versions past pgad.keep_versions: a view on one that an event trigger makes as its first
    function is dropped (after pgad found none) keeps the version, as the check would, and the training goes on."""
    train = ("SELECT count(*) FROM pgad.train('fz_prune', 'λ(d, w) w.a*d.x', 'squared', 'SELECT y, y AS x FROM s', "
             "'{\"a\": 0}', label => 'y', optimizer => 'gd', iterations => 0, deploy => %s)")
    series.execute(train, [True])   # version 1, deployed
    series.execute(train, [False])  # version 2
    series.execute("SET pgad.keep_versions = 1")
    series.execute("CREATE FUNCTION fz_use_version() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN "
                   "IF pg_catalog.to_regclass('fz_old') IS NULL THEN IF pg_catalog.to_regprocedure("
                   "'pgad_models.\"fz_prune_explain@2\"(float8)') IS NOT NULL THEN CREATE VIEW fz_old AS SELECT "
                   "pgad_models.\"fz_prune_explain@2\"(1.0::float8) AS e; ELSE CREATE VIEW fz_old AS SELECT "
                   "pgad_models.\"fz_prune@2\"(1.0::float8) AS e; END IF; END IF; END $$")
    series.execute("CREATE EVENT TRIGGER fz_old ON ddl_command_end WHEN TAG IN ('DROP FUNCTION') "
                   "EXECUTE FUNCTION fz_use_version()")
    said = []
    series.add_notice_handler(lambda notice: said.append(notice.message_primary))
    try:
        series.execute(train, [False])  # version 3: version 2 is past keep_versions
    finally:
        series.execute('DROP EVENT TRIGGER fz_old')
        series.execute('DROP FUNCTION fz_use_version()')
        series.execute('RESET pgad.keep_versions')
    assert series.execute("SELECT array_agg(version ORDER BY version) FROM pgad.model_versions "
                          "WHERE name = 'fz_prune'").fetchone()[0] == [1, 2, 3]
    kept = ('model "fz_prune": version 2 is kept past pgad.keep_versions, since other objects use its functions '
            '(pgad_models."fz_prune@2"(pg_catalog.float8), pgad_models."fz_prune_explain@2"(pg_catalog.float8))')
    assert [m for m in said if 'is kept past' in m] == [kept], said
