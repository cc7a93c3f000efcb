"""Versions of a model (issue 38, item 1), against a real server: each pgad.train of a name stores its next version
in pgad.model_versions with functions of its own (pgad_models."name@3"), the view pgad.models shows the deployed
one, pgad.deploy points pgad_models."name" at another in the caller's transaction (views follow), and
pgad.drop_model drops one version or all (docs/sql.md, "Versions")."""
import re
import threading

import psycopg
import pytest

from conftest import error_of, heard, new_database, restored

LINE = 'λ(d, w) w.a*d.x + w.b'
START = '{"a": 0, "b": 0}'


@pytest.fixture(scope='module', autouse=True)
def points(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        # y = 2x + 1 on the rows 1..40, y = 3x on the rows 41..80: two data sets, two lines
        db.execute('CREATE TABLE pts AS SELECT g::float8 AS x, (2*g + 1)::float8 AS y, g <= 40 AS first '
                   'FROM generate_series(1, 80) AS g')
        db.execute('UPDATE pts SET y = 3*x WHERE NOT first')
    yield


def train(db, name, data='SELECT x, y FROM pts WHERE first', **options):
    args = ''.join(f', {k} => %({k})s' + ('::text' if k == 'deploy' and isinstance(v, str) else '')
                   for k, v in options.items())
    return db.execute(f"SELECT version, deployed FROM pgad.train(%(name)s, %(model)s, 'squared', %(data)s, "
                      f"%(start)s, optimizer => 'lbfgs'{args})",
                      dict(name=name, model=LINE, data=data, start=START, **options)).fetchall()


def versions(db, name):
    return db.execute('SELECT version, deployed FROM pgad.model_versions WHERE name = %s ORDER BY version',
                      [name]).fetchall()


def score(db, name, x=10):
    return db.execute(f'SELECT pgad_models."{name}"(%s)', [x]).fetchone()[0]


def functions(db, name):
    return sorted(p for p, in db.execute(
        "SELECT p.proname FROM pg_proc AS p WHERE p.pronamespace = 'pgad_models'::regnamespace "
        "AND p.proname LIKE %s", [f'{name}%']).fetchall())


def test_each_training_is_a_new_version_and_the_deployed_one_scores(db):
    assert train(db, 'v_each') == [(1, True)]
    assert score(db, 'v_each') == pytest.approx(21)
    assert train(db, 'v_each', data='SELECT x, y FROM pts WHERE NOT first') == [(2, True)]
    assert versions(db, 'v_each') == [(1, False), (2, True)]
    assert score(db, 'v_each') == pytest.approx(30)
    assert db.execute("SELECT version FROM pgad.models WHERE name = 'v_each'").fetchall() == [(2,)]
    assert functions(db, 'v_each') == ['v_each', 'v_each@1', 'v_each@2', 'v_each_explain', 'v_each_explain@1',
                                       'v_each_explain@2']
    assert db.execute("SELECT pgad_models.\"v_each@1\"(10)").fetchone()[0] == pytest.approx(21)


def test_a_version_of_another_signature_records_it_and_replaces_the_deployed_functions(db):
    """The signature recorded (scoring_function, as psql writes it) is what a version's functions are found by; a
    deployment of a version of other arguments drops the deployed functions of the one before (no overload is left
    behind), both ways; read_from is the relation the training read."""
    train(db, 'v_two')
    db.execute("SELECT pgad.train('v_two', 'λ(d, w) w.a*d.x + w.b*d.z', 'squared', "
               "'SELECT x, 1.0::float8 AS z, y FROM pts WHERE first', '{\"a\": 0, \"b\": 0}', optimizer => 'lbfgs')")
    assert db.execute("SELECT version, scoring_function, read_from::text[] FROM pgad.model_versions "
                      "WHERE name = 'v_two' ORDER BY version").fetchall() == [
        (1, 'pgad_models.v_two(pg_catalog.float8)', ['pts']),
        (2, 'pgad_models.v_two(pg_catalog.float8, pg_catalog.float8)', ['pts'])]

    def arguments():
        return db.execute("SELECT array_agg(pronargs ORDER BY proname) FROM pg_proc WHERE proname IN ('v_two', "
                          "'v_two_explain') AND pronamespace = 'pgad_models'::regnamespace").fetchone()[0]
    assert arguments() == [2, 2] and db.execute('SELECT pgad_models.v_two(10, 1)').fetchone()[0] == pytest.approx(21)
    db.execute("SELECT pgad.deploy('v_two', 1)")
    assert arguments() == [1, 1] and score(db, 'v_two') == pytest.approx(21)
    db.execute("SELECT pgad.deploy('v_two', 2)")
    assert arguments() == [2, 2]
    db.execute('CREATE VIEW v_two_scores AS SELECT pgad_models.v_two(x, 1.0::float8) AS p FROM pts')
    try:
        assert full(error_of(db, "SELECT pgad.deploy('v_two', 1)")) == (
            '2BP01', 'cannot replace the scoring function of model "v_two": its arguments change, and other objects '
                     'depend on it',
            'The function was pgad_models.v_two(pg_catalog.float8, pg_catalog.float8) RETURNS double precision, now '
            'pgad_models."v_two"(pg_catalog.float8) RETURNS pg_catalog.float8. It is used by: rule _RETURN on view '
            'v_two_scores.',
            'Drop or change those objects, then train (or deploy) again.')
        assert arguments() == [2, 2] and versions(db, 'v_two') == [(1, False), (2, True)]
    finally:
        db.execute('DROP VIEW v_two_scores')
    db.execute("SELECT pgad.deploy('v_two', 1)")
    db.execute("SELECT pgad.drop_model('v_two', 2)")
    assert functions(db, 'v_two') == ['v_two', 'v_two@1', 'v_two_explain', 'v_two_explain@1']
    db.execute("SELECT pgad.drop_model('v_two')")
    assert functions(db, 'v_two') == []


def test_a_version_whose_own_function_is_gone_is_not_deployed(db):
    """A version whose own scoring function was dropped (by a superuser), or whose row records none, cannot be
    deployed: 55000 naming the function, and the deployed version stays."""
    train(db, 'v_gone')
    train(db, 'v_gone', data='SELECT x, y FROM pts WHERE NOT first')
    db.execute('DROP FUNCTION pgad_models."v_gone@1"(float8)')
    hint = 'Train the model again, and deploy that version.'
    assert full(error_of(db, "SELECT pgad.deploy('v_gone', 1)")) == (
        '55000', 'version 1 of model "v_gone" has no scoring function of its own',
        'pgad_models."v_gone@1" does not exist, or another role than "postgres" owns it.', hint)
    db.execute("UPDATE pgad.model_versions SET functions = '{}' WHERE name = 'v_gone' AND version = 1")
    assert full(error_of(db, "SELECT pgad.deploy('v_gone', 1)")) == (
        '55000', 'version 1 of model "v_gone" has no scoring function of its own',
        'Its rows record no function of its own.', hint)
    assert versions(db, 'v_gone') == [(1, False), (2, True)] and score(db, 'v_gone') == pytest.approx(30)


def test_a_retraining_whose_loss_has_no_probability_keeps_a_view_of_it(db):
    """A logistic model's probability function, which a view uses, is not dropped by a retraining with a loss that
    has none: 2BP01 in pgad's words, and nothing is stored."""
    data = 'SELECT x, (x > 20)::int::float8 AS y FROM pts WHERE first'
    db.execute("SELECT pgad.train('v_loss', 'λ(d, w) w.a*(d.x - 20.5)', 'logistic', %s, '{\"a\": 0}', "
               "iterations => 5)", [data])
    db.execute('CREATE VIEW v_loss_p AS SELECT pgad_models.v_loss_probability(x) AS p FROM pts')
    try:
        e = error_of(db, "SELECT pgad.train('v_loss', 'λ(d, w) w.a*d.x', 'squared', %s, '{\"a\": 0}')", [data])
        assert (e.sqlstate, e.message_primary) == (
            '2BP01', 'cannot replace the probability function of model "v_loss": the model\'s loss \'squared\' has '
                     'none, and other objects depend on it')
        assert e.message_detail == ('The function was pgad_models.v_loss_probability(pg_catalog.float8) RETURNS '
                                    'double precision, now none. It is used by: rule _RETURN on view v_loss_p.')
        assert versions(db, 'v_loss') == [(1, True)]
    finally:
        db.execute('DROP VIEW v_loss_p')


def test_deploy_false_stores_a_version_and_changes_no_function(db):
    train(db, 'v_quiet')
    db.execute('CREATE VIEW v_quiet_scores AS SELECT x, pgad_models.v_quiet(x) AS p FROM pts')
    try:
        assert train(db, 'v_quiet', data='SELECT x, y FROM pts WHERE NOT first', deploy=False) == [(2, False)]
        assert score(db, 'v_quiet') == pytest.approx(21)
        assert db.execute('SELECT p FROM v_quiet_scores WHERE x = 10').fetchone()[0] == pytest.approx(21)
        assert db.execute("SELECT version, deployed FROM pgad.deploy('v_quiet', 2)").fetchall() == [(2, True)]
        assert db.execute('SELECT p FROM v_quiet_scores WHERE x = 10').fetchone()[0] == pytest.approx(30)  # follows
        assert db.execute("SELECT version FROM pgad.deploy('v_quiet', strategy => 'previous')").fetchall() == [(1,)]
        assert db.execute('SELECT p FROM v_quiet_scores WHERE x = 10').fetchone()[0] == pytest.approx(21)
    finally:
        db.execute('DROP VIEW v_quiet_scores')


def test_a_first_training_without_deploy_makes_no_scoring_function(db):
    assert train(db, 'v_none', deploy=False) == [(1, False)]
    assert functions(db, 'v_none') == ['v_none@1', 'v_none_explain@1']
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'v_none'").fetchone()[0] == 0
    db.execute("SELECT pgad.deploy('v_none', 1)")
    assert score(db, 'v_none') == pytest.approx(21)


def test_the_strategies(db):
    train(db, 'v_pick', validation='SELECT x, y FROM pts WHERE first')  # 1: fits its validation rows
    train(db, 'v_pick', data='SELECT x, y FROM pts WHERE NOT first', validation='SELECT x, y FROM pts WHERE first')
    assert versions(db, 'v_pick') == [(1, False), (2, True)]
    assert db.execute("SELECT version FROM pgad.deploy('v_pick', strategy => 'best_validation')").fetchall() == [(1,)]
    assert score(db, 'v_pick') == pytest.approx(21)
    for named in (2, 1):  # a version named is deployed whatever its validation loss (if_better is pgad.train's)
        assert db.execute('SELECT version FROM pgad.deploy(%s, %s)', ['v_pick', named]).fetchall() == [(named,)]
    assert db.execute("SELECT version FROM pgad.deploy('v_pick', strategy => 'most_recent')").fetchall() == [(2,)]
    assert db.execute("SELECT version FROM pgad.deploy('v_pick', strategy => 'previous')").fetchall() == [(1,)]
    assert db.execute("SELECT version FROM pgad.deploy('v_pick', strategy => 'previous')").fetchall() == [(2,)]
    assert score(db, 'v_pick') == pytest.approx(30)


def test_previous_is_the_version_deployed_last_before_not_the_newest(db):
    for _ in range(3):
        train(db, 'v_order')
    for named in (1, 2):
        db.execute('SELECT pgad.deploy(%s, %s)', ['v_order', named])
    # deployed in the order 1, 2, 3, 1, 2: before 2, version 1 (version 3 is newer, and was deployed earlier)
    assert db.execute("SELECT version FROM pgad.deploy('v_order', strategy => 'previous')").fetchall() == [(1,)]
    assert db.execute("SELECT version FROM pgad.deploy('v_order', strategy => 'most_recent')").fetchall() == [(3,)]


def test_best_validation_takes_the_newest_of_equals(db):
    for _ in range(2):  # the same data, the same fit: the same validation loss
        train(db, 'v_tie', validation='SELECT x, y FROM pts WHERE NOT first')
    db.execute("SELECT pgad.deploy('v_tie', 1)")
    assert db.execute("SELECT version FROM pgad.deploy('v_tie', strategy => 'best_validation')").fetchall() == [(2,)]
    # if_better deploys a lower validation loss only: an equal one is not
    assert train(db, 'v_tie', validation='SELECT x, y FROM pts WHERE NOT first', deploy='if_better') == [(3, False)]


def test_if_better_deploys_only_a_lower_validation_loss(db):
    held, other = 'SELECT x, y FROM pts WHERE first', 'SELECT x, y FROM pts WHERE NOT first'
    assert train(db, 'v_better', data=other, validation=held) == [(1, True)]  # far from the validation rows
    assert train(db, 'v_better', validation=held, deploy='if_better') == [(2, True)]  # fits them
    with heard(db) as said:
        assert train(db, 'v_better', data=other, validation=held, deploy='if_better') == [(3, False)]
    assert score(db, 'v_better') == pytest.approx(21)
    # version 3 predicts 3x where y = 2x + 1: its validation loss is the mean of (x - 1)² over x = 1..40, 513.5
    notices = [n for n in said if 'is not deployed' in n]
    assert len(notices) == 1 and re.fullmatch(r'model "v_better": version 3 is not deployed: its validation loss '
                                              r"513\.5 is not lower than version 2's, \S+", notices[0]), notices


def test_dropping_a_version(db):
    train(db, 'v_drop')
    train(db, 'v_drop', data='SELECT x, y FROM pts WHERE NOT first')
    e = error_of(db, "SELECT pgad.drop_model('v_drop', 2)")
    assert e.sqlstate == '55006' and 'version 2 of model "v_drop" is deployed' in e.message_primary
    e = error_of(db, "SELECT pgad.drop_model('v_drop', 7)")
    assert e.sqlstate == '42704' and 'version 7 of model "v_drop" does not exist' in e.message_primary
    db.execute("SELECT pgad.drop_model('v_drop', 1)")
    assert versions(db, 'v_drop') == [(2, True)]
    assert functions(db, 'v_drop') == ['v_drop', 'v_drop@2', 'v_drop_explain', 'v_drop_explain@2']
    assert train(db, 'v_drop') == [(3, True)]  # a number is never given twice
    db.execute("SELECT pgad.drop_model('v_drop')")
    assert versions(db, 'v_drop') == [] and functions(db, 'v_drop') == []


def test_a_version_whose_function_a_view_uses_is_not_dropped(db):
    train(db, 'v_used')
    train(db, 'v_used')
    db.execute('CREATE VIEW v_used_first AS SELECT pgad_models."v_used@1"(1::float8) AS p')
    try:
        e = error_of(db, "SELECT pgad.drop_model('v_used', 1)")
        assert (e.sqlstate, e.message_primary) == (
            '2BP01', 'cannot drop model "v_used" because other objects depend on its scoring function')
        assert 'DROP VIEW v_used_first' in e.message_hint
        assert versions(db, 'v_used') == [(1, False), (2, True)]
    finally:
        db.execute('DROP VIEW v_used_first')


def test_keep_versions_drops_the_oldest_undeployed(db):
    db.execute('SET pgad.keep_versions = 2')
    try:
        for _ in range(3):
            train(db, 'v_keep')
        train(db, 'v_keep', deploy=False)
        db.execute("SELECT pgad.deploy('v_keep', 2)")
        train(db, 'v_keep', deploy=False)
    finally:
        db.execute('RESET pgad.keep_versions')
    assert versions(db, 'v_keep') == [(2, True), (4, False), (5, False)]
    assert functions(db, 'v_keep') == ['v_keep', 'v_keep@2', 'v_keep@4', 'v_keep@5', 'v_keep_explain',
                                       'v_keep_explain@2', 'v_keep_explain@4', 'v_keep_explain@5']
    assert score(db, 'v_keep') == pytest.approx(21)  # the deployed functions stay
    db.execute('CREATE VIEW v_keep_fifth AS SELECT pgad_models."v_keep@5"(1::float8) AS p')
    db.execute('SET pgad.keep_versions = 1')
    try:
        with heard(db) as said:
            train(db, 'v_keep', deploy=False)  # 4 and 6 past the newest one: 4 is dropped, 5 is used
            train(db, 'v_keep', deploy=False)  # 6 and 7: 6 is dropped with 4 gone, and 5 still kept
    finally:
        db.execute('RESET pgad.keep_versions')
        db.execute('DROP VIEW v_keep_fifth')
    assert versions(db, 'v_keep') == [(2, True), (5, False), (7, False)]
    kept = 'model "v_keep": version 5 is kept past pgad.keep_versions, since other objects use its functions ' \
           '(pgad_models."v_keep@5"(pg_catalog.float8))'
    assert [n for n in said if 'is kept past' in n] == [kept, kept]
    db.execute('SET pgad.keep_versions = 1')
    try:
        train(db, 'v_keep', deploy=False)  # 5 and 7 are dropped at once
    finally:
        db.execute('RESET pgad.keep_versions')
    assert versions(db, 'v_keep') == [(2, True), (8, False)]


def test_a_deployment_rolled_back_changes_nothing(db):
    train(db, 'v_tx')
    train(db, 'v_tx', data='SELECT x, y FROM pts WHERE NOT first')
    with db.transaction(force_rollback=True):
        db.execute("SELECT pgad.deploy('v_tx', 1)")
        assert score(db, 'v_tx') == pytest.approx(21)
    assert score(db, 'v_tx') == pytest.approx(30)
    assert versions(db, 'v_tx') == [(1, False), (2, True)]


def test_the_deployed_function_is_inlined(db):
    train(db, 'v_inline')
    train(db, 'v_inline')
    plan = '\n'.join(r for r, in db.execute('EXPLAIN VERBOSE SELECT pgad_models.v_inline(x) FROM pts').fetchall())
    assert 'v_inline' not in plan and 'x IS NULL' in plan


def full(e):
    return e.sqlstate, e.message_primary, e.message_detail, e.message_hint


LISTED = 'The versions of a model are listed in pgad.model_versions.'


def test_bad_deployments_are_refused(db):
    """Each error of pgad.deploy, pgad.drop_model and a version's rows, with its DETAIL and HINT; none changes a
    version."""
    train(db, 'v_bad')
    either = "Give version => 3, or strategy => 'best_validation', 'most_recent' or 'previous'."
    for sql, expected in [
            ("SELECT pgad.deploy('v_bad')", ('22023', 'pgad.deploy takes a version or a strategy, one of them',
                                             None, either)),
            ("SELECT pgad.deploy('v_bad', 1, 'previous')",
             ('22023', 'pgad.deploy takes a version or a strategy, one of them', None, either)),
            ("SELECT pgad.deploy('v_bad', strategy => 'newest')",
             ('22023', 'unknown deployment strategy "newest"', None,
              "The strategies are 'best_validation', 'most_recent' and 'previous' (or 'rollback').")),
            ("SELECT pgad.deploy('v_bad', strategy => 'previous')",
             ('55000', 'model "v_bad" has no version deployed before its deployed one', None,
              'Deploy a version by its number: pgad.deploy(name, version => 3).')),
            ("SELECT pgad.deploy('v_bad', strategy => 'best_validation')",
             ('55000', 'no version of model "v_bad" has a validation loss', None,
              'Train with validation => 0.2 (or a query) to compare versions.')),
            ("SELECT pgad.deploy('v_bad', 9)", ('42704', 'version 9 of model "v_bad" does not exist', None, LISTED)),
            ("SELECT pgad.deploy('v_nothing', 1)",
             ('42704', 'model "v_nothing" does not exist', None, 'The models are listed in pgad.models.')),
            ("SELECT pgad.deploy(NULL, 1)", ('22004', 'argument "name" of pgad.deploy must not be NULL', None, None)),
            ("SELECT pgad.drop_model('v_bad', 1)",
             ('55006', 'version 1 of model "v_bad" is deployed', 'pgad_models."v_bad" scores by it.',
              'Deploy another version first (pgad.deploy), or drop the whole model.')),
            ("SELECT pgad.drop_model('v_bad', 7)", ('42704', 'version 7 of model "v_bad" does not exist', None,
                                                    LISTED)),
            ("SELECT pgad.drop_model('v_nothing')",
             ('42704', 'model "v_nothing" does not exist', None, 'The models are listed in pgad.models.')),
            ("SELECT * FROM pgad.evaluate('v_bad', 'pts', 5)",
             ('42704', 'version 5 of model "v_bad" does not exist', None, LISTED)),
            ("SELECT * FROM pgad.evaluate('v_nothing', 'pts')",
             ('42704', 'model "v_nothing" does not exist', None, 'The models are listed in pgad.models.'))]:
        assert full(error_of(db, sql)) == expected, sql
    for sql, state, words in [
            ("SELECT pgad.train('v_bad', 'λ(d, w) w.a*d.x', 'squared', 'pts', '{\"a\": 0}', deploy => 'maybe')",
             '22023', 'invalid value for argument "deploy"'),
            ("SELECT pgad.train('v_bad', 'λ(d, w) w.a*d.x', 'squared', 'pts', '{\"a\": 0}', deploy => 'if_better')",
             '22023', 'compares validation losses')]:
        e = error_of(db, sql)
        assert (e.sqlstate, words in e.message_primary) == (state, True), (sql, e.message_primary)
    assert versions(db, 'v_bad') == [(1, True)]
    train(db, 'v_undeployed_bad', deploy=False)
    assert full(error_of(db, "SELECT * FROM pgad.evaluate('v_undeployed_bad', 'pts')")) == (
        '55000', 'model "v_undeployed_bad" has no deployed version', None,
        'Deploy one (pgad.deploy), or name a version.')
    assert full(error_of(db, "SELECT * FROM pgad.deploy('v_undeployed_bad', strategy => 'previous')")) == (
        '55000', 'model "v_undeployed_bad" has no version deployed before now', None,
        'Deploy a version by its number: pgad.deploy(name, version => 3).')


def test_two_sessions_deploying_at_once_take_turns(cluster, dbname, db):
    """pgad.deploy takes the writer's lock before it touches a function: two transactions deploying the same model
    at once run one after the other, never 'tuple concurrently updated' (XX000), and the deployed functions are the
    deployed version's."""
    train(db, 'v_race')
    train(db, 'v_race', data='SELECT x, y FROM pts WHERE NOT first')
    first = psycopg.connect(cluster.conninfo(dbname))
    second = psycopg.connect(cluster.conninfo(dbname))
    try:
        first.execute("SELECT pgad.deploy('v_race', 1)")
        errors = []

        def other():
            try:
                second.execute("SELECT pgad.deploy('v_race', 2)")
                second.commit()
            except psycopg.Error as e:
                errors.append(e)
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(1)
        assert thread.is_alive()  # waiting for the first's lock
        first.commit()
        thread.join(30)
        assert errors == []
    finally:
        first.close()
        second.close()
    assert versions(db, 'v_race') == [(1, False), (2, True)] and score(db, 'v_race') == pytest.approx(30)


def test_another_role_may_not_deploy_or_drop_a_version(cluster, dbname, db):
    db.execute('DROP ROLE IF EXISTS v_other')
    db.execute('CREATE ROLE v_other LOGIN')
    try:
        train(db, 'v_owned')
        train(db, 'v_owned')
        with psycopg.connect(cluster.conninfo(dbname, user='v_other'), autocommit=True) as other:
            replace = ('42501', 'model "v_owned" belongs to role "postgres"',
                       'A model belongs to the role that trained it first: only it, or a superuser, may replace it.',
                       'Train it under another name, or ask that role (or a superuser) to drop it.')
            drop = (*replace[:2], replace[2].replace('replace', 'drop'), None)
            for sql, expected in [("SELECT pgad.deploy('v_owned', 1)", replace),
                                  ("SELECT pgad.drop_model('v_owned', 1)", drop),
                                  ("SELECT pgad.drop_model('v_owned')", drop),
                                  ("SELECT pgad.deploy('v_owned', strategy => 'previous')", replace)]:
                assert full(error_of(other, sql)) == expected, sql
            assert full(error_of(other, "SELECT * FROM pgad.evaluate('v_owned', 'SELECT 1.0::float8 AS x')")) == (
                '42501', 'permission denied for model "v_owned"',
                'A model\'s rows are read by the role that trained it, the roles with its privileges, and the roles '
                'that may read every relation its training read (pgad.models.read_from).',
                'Ask for SELECT on the relations the model was trained on, or train a model of your own.')
            assert other.execute("SELECT count(*) FROM pgad.model_versions WHERE name = 'v_owned'").fetchone()[0] == 0
        assert versions(db, 'v_owned') == [(1, False), (2, True)]
    finally:
        db.execute('DROP OWNED BY v_other')
        db.execute('DROP ROLE v_other')


def test_a_model_with_versions_survives_pg_dump_and_restore(cluster, dbname, db):
    train(db, 'v_dump')
    train(db, 'v_dump', data='SELECT x, y FROM pts WHERE NOT first')
    with restored(cluster, dbname) as copy:
        assert versions(copy, 'v_dump') == [(1, False), (2, True)]
        assert score(copy, 'v_dump') == pytest.approx(30)
        copy.execute("SELECT pgad.deploy('v_dump', 1)")
        assert score(copy, 'v_dump') == pytest.approx(21)
        assert train(copy, 'v_dump') == [(3, True)]


# A logistic model as 0.16.0's pgad.train left it: its row, its scoring function and its probability function.
OLD = ["INSERT INTO pgad.models (name, model, loss, weights, final_loss, loss_history, iterations, options, data, "
       "rows, training_time, scoring_function, trained_by) VALUES ('old', 'λ(d, w) w.a*d.x + w.b', 'logistic', "
       "'{\"a\": 0.5, \"b\": -2}', 0, '{}', 1, '{}', 'pts', 9, '1 s', 'pgad_models.old(pg_catalog.float8)', "
       "'postgres')",
       "CREATE FUNCTION pgad_models.old(x pg_catalog.float8) RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE "
       "PARALLEL SAFE RETURN CASE WHEN x IS NULL THEN NULL ELSE 0.1234567890123456789::float8 * x - 2 END",
       "CREATE FUNCTION pgad_models.old_probability(x pg_catalog.float8) RETURNS pg_catalog.float8 LANGUAGE sql "
       "IMMUTABLE PARALLEL SAFE RETURN 0.5 + 0.5 * tanh(0.5 * (0.1234567890123456789::float8 * x - 2))"]


def test_a_model_trained_before_0_17_0_is_version_1_and_can_be_deployed_again(cluster):
    """After ALTER EXTENSION pgad UPDATE an existing model is its version 1, deployed, with copies of its functions
    under version 1's names (every float exactly): after a new version, strategy 'previous' brings it back."""
    name = new_database(cluster, 'versions_update')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute("CREATE EXTENSION pgad VERSION '0.16.0' CASCADE")
            db.execute('CREATE TABLE pts AS SELECT g::float8 AS x, (2*g + 1)::float8 AS y FROM generate_series(1, 9) g')
            for sql in OLD:
                db.execute(sql)
            before = db.execute('SELECT pgad_models.old(3), pgad_models.old_probability(3)').fetchone()
            db.execute('CREATE VIEW old_scores AS SELECT pgad_models.old_probability(x) AS p FROM pts')
            db.execute("SET extra_float_digits = 0")
            db.execute('ALTER EXTENSION pgad UPDATE')
            db.execute("RESET extra_float_digits")
            assert versions(db, 'old') == [(1, True)]
            db.execute("SELECT pgad.train('old', %s, 'logistic', 'SELECT x, (y > 12)::int AS y FROM pts', %s, "
                       "l2 => 0.1)", [LINE, START])
            assert versions(db, 'old') == [(1, False), (2, True)]
            assert db.execute('SELECT pgad_models.old(3)').fetchone()[0] != pytest.approx(before[0])
            db.execute("SELECT pgad.deploy('old', strategy => 'previous')")
            assert db.execute('SELECT pgad_models.old(3), pgad_models.old_probability(3)').fetchone() == before
            assert db.execute('SELECT count(*) FROM old_scores').fetchone()[0] == 9
            assert db.execute("SELECT count(*) FROM pg_depend WHERE deptype = 'e' AND objid IN (SELECT oid FROM pg_proc "
                              "WHERE pronamespace = 'pgad_models'::regnamespace)").fetchone()[0] == 0  # the model's
            db.execute('DROP VIEW old_scores')
            db.execute("SELECT pgad.drop_model('old')")
            assert functions(db, 'old') == []
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


def test_a_function_another_role_made_with_a_versions_name_blocks_nothing(cluster, dbname, db):
    """A role with CREATE on pgad_models makes pgad_models."v_squat@2"(float8) before the owner's second training
    (0.17.0 refused the training, 42501, until she dropped it): the version's own function takes another name, recorded
    in its rows, and hers is neither replaced nor called."""
    db.execute('DROP ROLE IF EXISTS v_squatter')
    db.execute('CREATE ROLE v_squatter LOGIN')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO v_squatter')
    try:
        train(db, 'v_squat')
        with psycopg.connect(cluster.conninfo(dbname, user='v_squatter'), autocommit=True) as other:
            other.execute('CREATE FUNCTION pgad_models."v_squat@2"(x float8) RETURNS float8 LANGUAGE sql RETURN 0')
        assert train(db, 'v_squat', data='SELECT x, y FROM pts WHERE NOT first') == [(2, True)]
        assert score(db, 'v_squat') == pytest.approx(30, abs=1e-6)  # y = 3x, lbfgs to 1e-6
        own = db.execute("SELECT functions->>'' FROM pgad.model_versions WHERE name = 'v_squat' AND version = 2")
        assert own.fetchone()[0] == 'v_squat@2~2'
        assert db.execute('SELECT pgad_models."v_squat@2"(10), pg_get_userbyid(p.proowner) FROM pg_proc AS p '
                          "WHERE p.proname = 'v_squat@2'").fetchone() == (0, 'v_squatter')  # hers, untouched
        db.execute("SELECT pgad.deploy('v_squat', strategy => 'previous')")
        assert score(db, 'v_squat') == pytest.approx(21, abs=1e-6)
    finally:
        db.execute('DROP OWNED BY v_squatter')
        db.execute('DROP ROLE v_squatter')


def test_evaluate_compares_a_new_version_with_the_deployed_one(db):
    train(db, 'v_eval')
    train(db, 'v_eval', data='SELECT x, y FROM pts WHERE NOT first', deploy=False)

    def rmse(*version):
        extra = ', %s' if version else ''
        return db.execute(f"SELECT value FROM pgad.evaluate('v_eval', 'SELECT x, y FROM pts WHERE NOT first'{extra}) "
                          "WHERE metric = 'rmse'", list(version)).fetchone()[0]
    x = list(range(41, 81))  # version 1 predicts 2x + 1 where y = 3x: its rmse is that of x - 1
    assert rmse() == pytest.approx((sum((v - 1) ** 2 for v in x) / len(x)) ** 0.5)
    assert rmse(1) == pytest.approx(rmse()) and rmse(2) == pytest.approx(0, abs=1e-6)
    e = error_of(db, "SELECT * FROM pgad.evaluate('v_eval', 'pts', 5)")
    assert e.sqlstate == '42704' and 'version 5 of model "v_eval" does not exist' in e.message_primary
    train(db, 'v_undeployed', deploy=False)
    e = error_of(db, "SELECT * FROM pgad.evaluate('v_undeployed', 'pts')")
    assert e.sqlstate == '55000' and 'has no deployed version' in e.message_primary


def test_a_superuser_deploys_another_roles_version_as_that_role(cluster, dbname, db):
    """A superuser may deploy any model's version: the deployed functions are made as the role that trained it
    (SET LOCAL ROLE for the moment), so that they call nothing of another role's and stay that role's, who deploys
    them again after; the superuser's role is as it was."""
    db.execute('DROP ROLE IF EXISTS v_alice')
    db.execute('CREATE ROLE v_alice LOGIN')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO v_alice')
    db.execute('GRANT SELECT ON pts TO v_alice')
    db.execute('GRANT CREATE ON SCHEMA public TO v_alice')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='v_alice'), autocommit=True) as alice:
            train(alice, 'v_hers')
            train(alice, 'v_hers', data='SELECT x, y FROM pts WHERE NOT first')
            assert db.execute("SELECT version FROM pgad.deploy('v_hers', 1)").fetchall() == [(1,)]
            assert db.execute('SELECT current_user, current_setting(%s)', ['role']).fetchone() == ('postgres', 'none')
            owners = db.execute("SELECT DISTINCT proowner::regrole::text FROM pg_proc "
                                "WHERE proname LIKE 'v_hers%'").fetchall()
            assert owners == [('v_alice',)] and score(db, 'v_hers') == pytest.approx(21)
            assert alice.execute("SELECT version FROM pgad.deploy('v_hers', 2)").fetchall() == [(2,)]
            assert score(db, 'v_hers') == pytest.approx(30)
            # the superuser's own version of her model: her deployed functions, which her view uses, stay hers
            alice.execute('CREATE VIEW v_her_scores AS SELECT pgad_models.v_hers(x) AS p FROM pts')
            e = error_of(db, "SELECT pgad.train('v_hers', %s, 'squared', 'pts', %s)", [LINE, START])
            assert (e.sqlstate, e.message_primary) == (
                '2BP01', 'cannot replace the scoring function of model "v_hers": it belongs to role "v_alice", and '
                         'would be replaced by one of role "postgres", and other objects depend on it')
            assert versions(db, 'v_hers') == [(1, False), (2, True)]
            alice.execute('DROP VIEW v_her_scores')
            db.execute("SELECT pgad.drop_model('v_hers')")
    finally:
        db.execute('DROP OWNED BY v_alice')
        db.execute('DROP ROLE v_alice')
