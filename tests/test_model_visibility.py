"""Who reads a model (issue 34, item 4), against a real server: a model's rows hold the distinct values of its
category and group_by columns, with rows per group, so pgad.models shows them only to the role that trained it, the
roles with its privileges and the roles that may read every relation the training read (as pg_stats shows a
column's statistics); every pgad function that takes a model's name refuses the others with 42501, as it refuses a
model of no rows (42704) otherwise. alice trains on her tables; reader may SELECT sales, half may SELECT sales but
not regions, outsider may SELECT neither (docs/security.md, "Who reads a model")."""
import json

import psycopg
import pytest

from conftest import error_of, new_database

ALICE, READER, HALF, OUTSIDER, MEMBER = 'vis_alice', 'vis_reader', 'vis_half', 'vis_outsider', 'vis_member'
ROLES = (ALICE, READER, HALF, OUTSIDER, MEMBER)
MODEL = 'λ(d, w) w.region[d.region] + w.a*d.sqft'
START = '{"region": {}, "a": 0}'
SECRETS = {'crete', 'lapland', 'tasmania'}  # the region values: what a role without SELECT must not learn
JOINED = 'SELECT s.region, s.sqft, s.price, r.tier FROM vis.sales AS s JOIN vis.regions AS r USING (region)'


@pytest.fixture(scope='module', autouse=True)
def roles(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for role in ROLES:
            db.execute(f'DROP ROLE IF EXISTS {role}')
            db.execute(f'CREATE ROLE {role} LOGIN')
        db.execute(f'GRANT {ALICE} TO {MEMBER}')
        db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {ALICE}, {OUTSIDER}')
        db.execute(f'CREATE SCHEMA vis AUTHORIZATION {ALICE}')
        db.execute("CREATE TABLE public.mine AS SELECT * FROM (VALUES ('crete', 1.0::float8, 2.0::float8)) "
                   "AS v(region, sqft, price)")
        db.execute('GRANT SELECT ON public.mine TO PUBLIC')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('CREATE TABLE vis.sales (region text, part text, sqft float8, price float8)')
        alice.execute("INSERT INTO vis.sales SELECT (ARRAY['crete', 'lapland', 'tasmania'])[g % 3 + 1], "
                      "CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, g / 10.0, g % 3 + g / 20.0 "
                      "FROM generate_series(1, 60) AS g")
        alice.execute('CREATE TABLE vis.regions (region text, tier text)')
        alice.execute("INSERT INTO vis.regions VALUES ('crete', 'gold'), ('lapland', 'silver'), "
                      "('tasmania', 'gold')")
        alice.execute('GRANT USAGE ON SCHEMA vis TO PUBLIC')
        alice.execute(f'GRANT SELECT ON vis.sales TO {READER}, {HALF}')
        alice.execute(f'GRANT SELECT ON vis.regions TO {READER}')
        train(alice, 'by_region', 'vis.sales', group_by='part')
        train(alice, 'joined', JOINED, group_by='tier')
    yield
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('SELECT pgad.drop_model(name) FROM (SELECT DISTINCT name FROM pgad.models) AS m')
        db.execute('DROP TABLE public.mine')
        for role in ROLES:
            db.execute(f'DROP OWNED BY {role} CASCADE')
        for role in ROLES:
            db.execute(f'DROP ROLE {role}')


def train(db, name, data, **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, 'squared', %(data)s, %(start)s, "
                      f"label => 'price', optimizer => 'lbfgs', iterations => 20{args})",
                      dict(name=name, model=MODEL, data=data, start=START, **options)).fetchall()


def seen(cluster, dbname, role, name):
    """What role reads of model name in pgad.models: its group keys and the categories its weights name."""
    with psycopg.connect(cluster.conninfo(dbname, user=role), autocommit=True) as db:
        keys = db.execute('SELECT group_key::text FROM pgad.models WHERE name = %s', [name]).fetchall()
        cats = db.execute("SELECT DISTINCT jsonb_object_keys(weights->'region') FROM pgad.models WHERE name = %s",
                          [name]).fetchall()
    return {k for k, in keys}, {c for c, in cats}


def test_a_role_without_select_on_the_data_reads_no_row_of_its_model(cluster, dbname):
    assert seen(cluster, dbname, OUTSIDER, 'by_region') == (set(), set())
    with psycopg.connect(cluster.conninfo(dbname, user=OUTSIDER), autocommit=True) as db:
        assert db.execute('SELECT count(*) FROM pgad.models').fetchone()[0] == 0
        assert db.execute('SELECT count(*) FROM pgad.models WHERE group_key IS NOT NULL').fetchone()[0] == 0


def test_a_role_with_select_on_the_data_reads_its_model(cluster, dbname):
    keys, cats = seen(cluster, dbname, READER, 'by_region')
    assert keys == {'{"part": "a"}', '{"part": "b"}'} and cats == SECRETS
    with psycopg.connect(cluster.conninfo(dbname, user=READER), autocommit=True) as db:
        assert db.execute("SELECT read_from::text[] FROM pgad.models WHERE name = 'by_region' LIMIT 1").fetchone() \
            == (['vis.sales'],)


def test_the_trainer_and_its_members_read_its_model(cluster, dbname):
    for role in (ALICE, MEMBER):
        assert seen(cluster, dbname, role, 'joined')[1] == SECRETS


def test_a_model_of_a_join_is_hidden_from_a_role_that_may_read_one_of_its_tables(cluster, dbname):
    assert seen(cluster, dbname, HALF, 'joined') == (set(), set())
    assert seen(cluster, dbname, HALF, 'by_region')[1] == SECRETS  # the one table it may read
    keys, cats = seen(cluster, dbname, READER, 'joined')
    assert keys == {'{"tier": "gold"}', '{"tier": "silver"}'} and cats == SECRETS


@pytest.mark.parametrize('call', [
    "SELECT * FROM pgad.evaluate('{name}', 'public.mine')",
    "SELECT * FROM pgad.summary('{name}')",
    "SELECT * FROM pgad.forecast('{name}', 3)",
    "SELECT pgad.drop_model('{name}')",
    "SELECT * FROM pgad.train('{name}', 'λ(d, w) w.a*d.sqft', 'squared', 'public.mine', '{{\"a\": 0}}', "
    "label => 'price', optimizer => 'lbfgs', iterations => 5)",
])
def test_every_function_that_takes_a_model_name_refuses_a_role_that_may_not_read_its_data(cluster, dbname, call):
    """42501 naming the model and nothing of its rows, where a name of no model is 42704 (train: a new model)."""
    with psycopg.connect(cluster.conninfo(dbname, user=OUTSIDER), autocommit=True) as db:
        e = error_of(db, call.format(name='by_region'))
        assert e.sqlstate == '42501' and '"by_region"' in e.message_primary
        said = ' '.join(filter(None, [e.message_primary, e.message_detail, e.message_hint]))
        assert not any(secret in said for secret in SECRETS | {'"part"'})
        if 'train' not in call:
            assert error_of(db, call.format(name='no_such_model')).sqlstate == '42704'
    assert seen(cluster, dbname, READER, 'by_region')[1] == SECRETS  # nothing changed


def test_a_role_with_select_on_the_data_evaluates_the_model(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname, user=READER), autocommit=True) as db:
        metrics = {(k and json.dumps(k), m) for k, m, _ in
                   db.execute("SELECT * FROM pgad.evaluate('by_region', 'vis.sales')")}
    assert ('{"part": "a"}', 'rows') in metrics


def test_a_model_trained_through_a_function_is_hidden_from_a_role_that_may_not_read_what_it_read(cluster, dbname):
    """The function's own query reads vis.sales, which the plan of the data query does not show: its lock and its
    scan count do."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('CREATE FUNCTION vis.rows() RETURNS SETOF vis.sales LANGUAGE plpgsql STABLE '
                      'AS $$ BEGIN RETURN QUERY SELECT * FROM vis.sales; END $$')
        alice.execute('GRANT EXECUTE ON FUNCTION vis.rows() TO PUBLIC')
        train(alice, 'through_function', 'SELECT * FROM vis.rows()')
    try:
        assert seen(cluster, dbname, OUTSIDER, 'through_function') == (set(), set())
        assert seen(cluster, dbname, READER, 'through_function')[1] == SECRETS
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('through_function')")


def test_a_model_of_a_table_whose_rows_a_policy_hides_is_hidden_from_that_role(cluster, dbname):
    """reader may SELECT the table, but row-level security shows it the lapland rows alone: the model, trained on all
    of them by their owner, would show it the others' categories."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('CREATE TABLE vis.guarded AS SELECT * FROM vis.sales')
        alice.execute('ALTER TABLE vis.guarded ENABLE ROW LEVEL SECURITY')
        alice.execute("CREATE POLICY lapland ON vis.guarded USING (region = 'lapland')")
        alice.execute(f'GRANT SELECT ON vis.guarded TO {READER}')
        train(alice, 'guarded', 'vis.guarded')
    try:
        assert seen(cluster, dbname, READER, 'guarded') == (set(), set())
        assert seen(cluster, dbname, ALICE, 'guarded')[1] == SECRETS
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('guarded')")
            alice.execute('DROP TABLE vis.guarded')


def test_a_model_read_in_a_rolled_back_subtransaction_is_hidden(cluster, dbname):
    """A function that reads vis.sales in a block whose subtransaction rolls back (its lock goes with it) still counts
    as reading it: the transaction's scan counts keep it."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute("""CREATE FUNCTION vis.sneaky() RETURNS SETOF vis.sales LANGUAGE plpgsql AS $$
            DECLARE kept vis.sales[];
            BEGIN
              BEGIN
                kept := ARRAY(SELECT s FROM vis.sales AS s);
                RAISE EXCEPTION 'undo';
              EXCEPTION WHEN raise_exception THEN NULL;
              END;
              RETURN QUERY SELECT (k).* FROM unnest(kept) AS k;
            END $$""")
        alice.execute('GRANT EXECUTE ON FUNCTION vis.sneaky() TO PUBLIC')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:  # a fresh session
        train(alice, 'sneaky', 'SELECT * FROM vis.sneaky()')
    try:
        assert seen(cluster, dbname, OUTSIDER, 'sneaky') == (set(), set())
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('sneaky')")


def test_a_model_of_a_query_that_reads_no_table_is_read_by_all(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'no_table', "SELECT 'crete' AS region, x::float8 AS sqft, 2.0 * x AS price "
                                 "FROM generate_series(1, 5) AS x")
    try:
        assert seen(cluster, dbname, OUTSIDER, 'no_table')[1] == {'crete'}
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('no_table')")


ROW = ("INSERT INTO pgad.models (name, model, loss, weights, final_loss, loss_history, iterations, options, data, "
       "rows, training_time, scoring_function, trained_by) VALUES ('old', 'λ(d, w) w.a*d.x', 'squared', "
       "'{\"a\": 1}', 0, '{}', 1, '{}', 'vis.sales', 1, '1 s', 'pgad_models.old(pg_catalog.float8)', %s)")


def test_a_model_trained_before_0_13_0_is_read_by_its_role_alone_after_the_update(cluster):
    """0.12.0 recorded no relations: after ALTER EXTENSION pgad UPDATE its role reads the model, and a role with
    SELECT on its data does not, until it is trained again."""
    name = new_database(cluster, 'visibility_update')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute("CREATE EXTENSION pgad VERSION '0.12.0' CASCADE")
            db.execute(ROW, [ALICE])  # as 0.12.0's pgad.train left it
            db.execute('ALTER EXTENSION pgad UPDATE')
            for role, rows in ((ALICE, 1), (MEMBER, 1), (READER, 0), (OUTSIDER, 0)):
                with psycopg.connect(cluster.conninfo(name, user=role), autocommit=True) as other:
                    assert other.execute("SELECT count(*) FROM pgad.models WHERE name = 'old'").fetchone()[0] == rows
            assert db.execute('SELECT name FROM pgad.model_names').fetchall() == [('old',)]
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


def test_a_relation_only_renamed_or_dropped_in_the_training_transaction_is_not_what_it_read(cluster, dbname):
    """dbt's materialization renames the view it replaces, trains, commits and drops the old view: a relation the
    transaction only renamed is not one the model read, so the role that may read the data still reads the model
    (it would be no role's, the dropped relation being one no role may read)."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE)) as alice:
        alice.execute('CREATE TABLE vis.old_view AS SELECT 1 AS x')
        alice.commit()
        alice.execute('ALTER TABLE vis.old_view RENAME TO old_view_backup')
        train(alice, 'renamed', 'vis.sales')
        alice.commit()
        alice.execute('DROP TABLE vis.old_view_backup')
        alice.commit()
    try:
        assert seen(cluster, dbname, READER, 'renamed')[1] == SECRETS
        assert seen(cluster, dbname, OUTSIDER, 'renamed') == (set(), set())
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('renamed')")


def test_a_table_read_under_the_transactions_exclusive_lock_is_what_it_read(cluster, dbname):
    """LOCK TABLE takes an AccessExclusiveLock, which alone does not count as reading; the training's read of the
    table does (its own lock, and its scans)."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE)) as alice:
        alice.execute('LOCK TABLE vis.sales')
        train(alice, 'locked', 'vis.sales')
        alice.commit()
    try:
        assert seen(cluster, dbname, HALF, 'locked')[1] == SECRETS
        assert seen(cluster, dbname, OUTSIDER, 'locked') == (set(), set())
    finally:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute("SELECT pgad.drop_model('locked')")
