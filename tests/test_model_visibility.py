"""Who reads a model (issue 34, item 4), against a real server: a model's rows hold the distinct values of its
category and group_by columns, with rows per group, so pgad.models shows them only to the role that trained it, the
roles with its privileges and the roles that may read every relation the training read (as pg_stats shows a
column's statistics); every pgad function that takes a model's name refuses the others with 42501, as it refuses a
model of no rows (42704) otherwise. alice trains on her tables; reader may SELECT sales, half may SELECT sales but
not regions, outsider may SELECT neither (docs/security.md, "Who reads a model"). bob keeps a copy of sales in a
schema of his that no other role may use, vis_hidden, and shares it through vis_shared (issue 45, item 2)."""
import json

import psycopg
import pytest

from conftest import error_of, new_database

ALICE, READER, HALF, OUTSIDER, MEMBER = 'vis_alice', 'vis_reader', 'vis_half', 'vis_outsider', 'vis_member'
BOB = 'vis_bob'
ROLES = (ALICE, READER, HALF, OUTSIDER, MEMBER, BOB)
MODEL = 'λ(d, w) w.region[d.region] + w.a*d.sqft'
START = '{"region": {}, "a": 0}'
SECRETS = {'crete', 'lapland', 'tasmania'}  # the region values: what a role without SELECT must not learn
JOINED = 'SELECT s.region, s.sqft, s.price, r.tier FROM vis.sales AS s JOIN vis.regions AS r USING (region)'
ROWS = ("SELECT (ARRAY['crete', 'lapland', 'tasmania'])[g % 3 + 1] AS region, "
        "CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END AS part, g / 10.0 AS sqft, g % 3 + g / 20.0 AS price "
        "FROM generate_series(1, 60) AS g")


@pytest.fixture(scope='module', autouse=True)
def roles(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for role in ROLES:
            db.execute(f'DROP ROLE IF EXISTS {role}')
            db.execute(f'CREATE ROLE {role} LOGIN')
        db.execute(f'GRANT {ALICE} TO {MEMBER}')
        db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {ALICE}, {OUTSIDER}')
        db.execute(f'CREATE SCHEMA vis AUTHORIZATION {ALICE}')
        db.execute(f'CREATE SCHEMA vis_hidden AUTHORIZATION {BOB}')  # no other role may use it
        db.execute(f'CREATE SCHEMA vis_shared AUTHORIZATION {BOB}')
        db.execute('GRANT USAGE ON SCHEMA vis_shared TO PUBLIC')
        db.execute("CREATE TABLE public.mine AS SELECT * FROM (VALUES ('crete', 1.0::float8, 2.0::float8)) "
                   "AS v(region, sqft, price)")
        db.execute('GRANT SELECT ON public.mine TO PUBLIC')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('CREATE TABLE vis.sales (region text, part text, sqft float8, price float8)')
        alice.execute(f'INSERT INTO vis.sales {ROWS}')
        alice.execute('CREATE TABLE vis.regions (region text, tier text)')
        alice.execute("INSERT INTO vis.regions VALUES ('crete', 'gold'), ('lapland', 'silver'), "
                      "('tasmania', 'gold')")
        alice.execute('GRANT USAGE ON SCHEMA vis TO PUBLIC')
        alice.execute(f'GRANT SELECT ON vis.sales TO {READER}, {HALF}')
        alice.execute(f'GRANT SELECT ON vis.regions TO {READER}')
        train(alice, 'by_region', 'vis.sales', group_by='part')
        train(alice, 'joined', JOINED, group_by='tier')
    with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
        bob.execute(f'CREATE TABLE vis_hidden.sales AS {ROWS}')
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


def read_from(cluster, dbname, name):
    """The relations each row of model name records, as a superuser names them, in alphabetical order."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        found = db.execute('SELECT read_from::text[] FROM pgad.model_versions WHERE name = %s', [name])
        return {tuple(sorted(r)) for r, in found}


def drop(cluster, dbname, name):
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('SELECT pgad.drop_model(%s)', [name])


def literal_train(name, data):
    """train's call as text, for a message of several statements (which takes no parameters)."""
    return (f"SELECT * FROM pgad.train('{name}', '{MODEL}', 'squared', '{data}', '{START}', label => 'price', "
            "optimizer => 'lbfgs', iterations => 20)")


@pytest.mark.parametrize('usage', [False, True])
def test_what_another_role_read_on_the_connection_before_is_not_what_the_training_read(cluster, dbname, usage):
    """A pooler's connection, or SET ROLE: bob reads his table in the transaction just before alice's training, and
    his scan counts are still pending (the backend reports them at most once a second, when idle: none of that here,
    the statements going in one message). Her training read vis.sales alone, whether or not she may use bob's
    schema: it trains (0.17.0: 42501 permission denied for schema vis_hidden, or with USAGE a model recording bob's
    table, which hid it from reader and told alice what bob read)."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        if usage:
            db.execute(f'GRANT USAGE ON SCHEMA vis_hidden TO {ALICE}')
        try:
            db.execute(f'SET ROLE {BOB}; SELECT count(*) FROM vis_hidden.sales; COMMIT; SET ROLE {ALICE}; '
                       + literal_train('pooled', 'vis.sales'))
            db.execute('RESET ROLE')
        finally:
            db.execute(f'REVOKE USAGE ON SCHEMA vis_hidden FROM {ALICE}')
    try:
        assert read_from(cluster, dbname, 'pooled') == {('vis.sales',)}
        assert seen(cluster, dbname, READER, 'pooled')[1] == SECRETS
        assert seen(cluster, dbname, OUTSIDER, 'pooled') == (set(), set())
    finally:
        drop(cluster, dbname, 'pooled')


def test_what_the_transaction_read_before_the_training_is_not_what_it_read(cluster, dbname):
    """In the training's own transaction, bob's read (SET ROLE) and alice's read of vis.regions before it (the
    transaction still holds their locks) are not what the training read; vis.sales, which she read before too, is
    (its scans in the training are its own)."""
    with psycopg.connect(cluster.conninfo(dbname)) as db:
        db.execute(f'SET ROLE {BOB}')
        db.execute('SELECT count(*) FROM vis_hidden.sales')
        db.execute(f'SET ROLE {ALICE}')
        db.execute('SELECT count(*) FROM vis.regions, vis.sales')
        train(db, 'same_transaction', 'vis.sales')
        db.commit()
    try:
        assert read_from(cluster, dbname, 'same_transaction') == {('vis.sales',)}
        assert seen(cluster, dbname, HALF, 'same_transaction')[1] == SECRETS  # may SELECT sales, not regions
        assert seen(cluster, dbname, OUTSIDER, 'same_transaction') == (set(), set())
    finally:
        drop(cluster, dbname, 'same_transaction')


def test_a_view_over_a_schema_the_trainer_may_not_use_is_what_the_training_read(cluster, dbname):
    """bob's view over his vis_hidden.sales, which alice and reader may SELECT: PostgreSQL checks the view's table as
    bob, the view as its reader, so the training read the view, and the roles that may SELECT it read the model
    (0.17.0: 42501 permission denied for schema vis_hidden, in pgad.train and pgad.deploy). A security_invoker view
    is checked as its reader, its table too: a role that may SELECT the view alone does not read that model."""
    with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
        bob.execute('CREATE VIEW vis_shared.sales AS SELECT * FROM vis_hidden.sales')
        bob.execute(f'GRANT SELECT ON vis_shared.sales TO {ALICE}, {READER}')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('CREATE VIEW vis.invoker WITH (security_invoker) AS SELECT * FROM vis.sales')
        alice.execute(f'GRANT SELECT ON vis.invoker TO {HALF}, {OUTSIDER}')
        train(alice, 'through_view', 'vis_shared.sales', group_by='part')
        assert alice.execute("SELECT count(*) FROM pgad.deploy('through_view', 1)").fetchone() == (2,)
        train(alice, 'through_invoker', 'vis.invoker')
    try:
        assert read_from(cluster, dbname, 'through_view') == {('vis_shared.sales',)}
        keys, cats = seen(cluster, dbname, READER, 'through_view')
        assert keys == {'{"part": "a"}', '{"part": "b"}'} and cats == SECRETS
        for role in (HALF, OUTSIDER):  # no SELECT on the view
            assert seen(cluster, dbname, role, 'through_view') == (set(), set())
        assert read_from(cluster, dbname, 'through_invoker') == {('vis.invoker', 'vis.sales')}
        assert seen(cluster, dbname, HALF, 'through_invoker')[1] == SECRETS
        assert seen(cluster, dbname, OUTSIDER, 'through_invoker') == (set(), set())
    finally:
        drop(cluster, dbname, 'through_view')
        drop(cluster, dbname, 'through_invoker')
        with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
            bob.execute('DROP VIEW vis_shared.sales')
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            alice.execute('DROP VIEW vis.invoker')


def test_a_view_whose_rows_a_policy_picks_by_reader_records_its_table(cluster, dbname):
    """bob's table under a policy forced on its owner that shows each role its own rows (current_user is the view's
    reader): through his view alice reads hers, which reader, who may SELECT the view, must not learn from her
    model. The table whose policy filters what bob reads is what the training read too."""
    with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
        bob.execute(f"CREATE TABLE vis_hidden.owned AS SELECT s.*, '{ALICE}'::name AS who FROM vis_hidden.sales AS s")
        bob.execute('ALTER TABLE vis_hidden.owned ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY')
        bob.execute('CREATE POLICY own ON vis_hidden.owned USING (who = current_user)')
        bob.execute('CREATE VIEW vis_shared.owned AS SELECT region, part, sqft, price FROM vis_hidden.owned')
        bob.execute(f'GRANT SELECT ON vis_shared.owned TO {ALICE}, {READER}')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'owned', 'vis_shared.owned')
    try:
        assert read_from(cluster, dbname, 'owned') == {('vis_hidden.owned', 'vis_shared.owned')}
        assert seen(cluster, dbname, READER, 'owned') == (set(), set())
        assert seen(cluster, dbname, ALICE, 'owned')[1] == SECRETS
    finally:
        drop(cluster, dbname, 'owned')
        with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
            bob.execute('DROP VIEW vis_shared.owned')
            bob.execute('DROP TABLE vis_hidden.owned')


def test_a_security_definer_function_over_a_schema_the_trainer_may_not_use_records_what_it_read(cluster, dbname):
    """bob's SECURITY DEFINER function reads his vis_hidden.sales, which alice may not: her training through it
    trains (0.17.0: 42501 permission denied for schema vis_hidden), and records the table the function read as bob.
    read_from holds relations, and EXECUTE on a function is no SELECT on one: reader, who may call the function,
    does not read the model; bob, who may read the table, does."""
    with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
        bob.execute('CREATE FUNCTION vis_shared.sales() RETURNS TABLE (region text, part text, sqft numeric, '
                    'price numeric) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog '
                    'AS $$ SELECT region, part, sqft, price FROM vis_hidden.sales $$')
        bob.execute('REVOKE EXECUTE ON FUNCTION vis_shared.sales() FROM PUBLIC')
        bob.execute(f'GRANT EXECUTE ON FUNCTION vis_shared.sales() TO {ALICE}, {READER}')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'through_definer', 'SELECT * FROM vis_shared.sales()')
        assert alice.execute("SELECT count(*) FROM pgad.deploy('through_definer', 1)").fetchone() == (1,)
    try:
        assert read_from(cluster, dbname, 'through_definer') == {('vis_hidden.sales',)}
        assert seen(cluster, dbname, BOB, 'through_definer')[1] == SECRETS
        for role in (READER, OUTSIDER):
            assert seen(cluster, dbname, role, 'through_definer') == (set(), set())
    finally:
        drop(cluster, dbname, 'through_definer')
        with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
            bob.execute('DROP FUNCTION vis_shared.sales()')
