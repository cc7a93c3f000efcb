"""Models and the roles around them (issue 27, §3 and §4), against a real server: a scoring function runs no other
role's code and depends on nothing another role owns; pgad.train and pgad.drop_model drop or replace only the function
pgad created for the model; pgad.models is written by pgad alone, and a model's name belongs to the role that trained
it first. Each attack is made by an unprivileged role, mallory, against a superuser (or against alice)."""
import psycopg
import pytest

from conftest import error_of, new_database

MALLORY, ALICE = 'trust_mallory', 'trust_alice'
LINE = 'λ(d, w) w.a*d.x + w.b'
START = '{"a": 0, "b": 0}'


@pytest.fixture(scope='module', autouse=True)
def roles(cluster, dbname):
    """mallory, who owns schema mallory_s with a table of hers whose columns are of her types: domains whose CHECK
    calls her function spy, which counts its runs in her sequence ran (not undone by a rollback), says so in a NOTICE
    and tries to make her a superuser; alice, a role that trains models."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for role in (MALLORY, ALICE):
            db.execute(f'DROP ROLE IF EXISTS {role}')
            db.execute(f'CREATE ROLE {role} LOGIN')
        db.execute(f'CREATE SCHEMA mallory_s AUTHORIZATION {MALLORY}')
        db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {ALICE}')
    with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
        mallory.execute('CREATE SEQUENCE mallory_s.ran')
        mallory.execute(f"""CREATE FUNCTION mallory_s.spy(v text) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN
              PERFORM nextval('mallory_s.ran');
              RAISE NOTICE 'spy ran as %', current_user;
              BEGIN
                ALTER ROLE {MALLORY} SUPERUSER;
              EXCEPTION WHEN insufficient_privilege THEN NULL;
              END;
              RETURN true;
            END $$""")
        mallory.execute('CREATE DOMAIN mallory_s.region AS text CHECK (mallory_s.spy(VALUE))')
        mallory.execute('CREATE DOMAIN mallory_s.subregion AS mallory_s.region CHECK (mallory_s.spy(VALUE))')
        mallory.execute('CREATE DOMAIN mallory_s.code AS int4 CHECK (mallory_s.spy(VALUE::text))')
        mallory.execute('CREATE DOMAIN mallory_s.amount AS float8 CHECK (mallory_s.spy(VALUE::text))')
        mallory.execute("CREATE TYPE mallory_s.color AS ENUM ('red', 'green')")
        mallory.execute('CREATE TABLE mallory_s.shops (region mallory_s.region, subregion mallory_s.subregion, '
                        'code mallory_s.code, color mallory_s.color, amount mallory_s.amount, x float8, y float8)')
        mallory.execute("INSERT INTO mallory_s.shops SELECT r, r, g % 2, (ARRAY['red', 'green'])[g % 2 + 1]::"
                        "mallory_s.color, g, g, 2 * g + CASE r WHEN 'north' THEN 1 ELSE -1 END FROM "
                        "generate_series(1, 40) AS g, LATERAL (SELECT CASE g % 2 WHEN 0 THEN 'north' ELSE 'south' "
                        "END AS r) AS s")
        mallory.execute(f'GRANT USAGE ON SCHEMA mallory_s TO {ALICE}; GRANT SELECT ON mallory_s.shops TO {ALICE}')
    yield
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("SELECT pgad.drop_model(name) FROM (SELECT DISTINCT name FROM pgad.models) AS m")
        for role in (MALLORY, ALICE):
            db.execute(f'DROP OWNED BY {role} CASCADE')
            db.execute(f'DROP ROLE {role}')


def ran(db):
    """How often mallory's spy has run, and whether she is a superuser now."""
    return (db.execute('SELECT last_value, is_called FROM mallory_s.ran').fetchone(),
            db.execute('SELECT rolsuper FROM pg_roles WHERE rolname = %s', [MALLORY]).fetchone()[0])


def train(db, name, data='mallory_s.shops', model=LINE, **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, 'squared', %(data)s, %(start)s, "
                      f"optimizer => 'lbfgs', iterations => 20{args})",
                      dict(name=name, model=model, data=data, start=START, **options)).fetchall()


# §3: the scoring function runs nothing of another role's.

@pytest.mark.parametrize('column, base', [('region', 'pg_catalog.text'), ('subregion', 'pg_catalog.text'),
                                          ('code', 'pg_catalog.int4')])
def test_a_superuser_scores_by_a_domain_group_column_and_her_check_never_runs(db, column, base):
    """On 0.9.0 the scoring function took the group column as mallory's domain and compared it with literals cast
    to it: scoring, as a superuser, ran her CHECK, so her spy ran and made her a superuser. Now the function takes
    and compares the column as the domain's base type (a domain over a domain, too), and her code never runs."""
    before = ran(db)
    train(db, f'by_{column}', group_by=column)
    scored = db.execute(f'SELECT {column}::text, pgad_models.by_{column}({column}, x), y FROM mallory_s.shops '
                        'ORDER BY x').fetchall()
    assert all(abs(p - y) < 1e-6 for _, p, y in scored)
    literal = "'north'" if column != 'code' else '0'
    assert db.execute(f'SELECT pgad_models.by_{column}({literal}, 2)').fetchone()[0] == pytest.approx(5, abs=1e-6)
    db.execute(f'CREATE VIEW scored_{column} AS SELECT pgad_models.by_{column}({column}, x) AS p FROM mallory_s.shops')
    assert len(db.execute(f'SELECT * FROM scored_{column}').fetchall()) == 40
    db.execute(f'DROP VIEW scored_{column}')
    assert ran(db) == before  # her CHECK did not run, and she is no superuser
    signature = db.execute('SELECT DISTINCT scoring_function FROM pgad.models WHERE name = %s',
                           [f'by_{column}']).fetchone()[0]
    assert signature == f'pgad_models.by_{column}({base}, pg_catalog.float8)'


def test_a_domain_feature_column_runs_none_of_her_code(db):
    """A column the model reads, of her domain over float8: pgad refuses it (not a number type), or, cast in the
    data query, reads it as float8, and the scoring function takes a float8; neither training nor scoring runs her
    CHECK. (0.9.0 was safe here too: this guards it.)"""
    before = ran(db)
    e = error_of(db, "SELECT * FROM pgad.train('by_amount', 'λ(d, w) w.a*d.amount + w.b', 'squared', "
                     "'mallory_s.shops', %s, optimizer => 'lbfgs')", [START])
    assert e.sqlstate == '42804'
    train(db, 'by_amount', data='SELECT amount::float8 AS amount, y FROM mallory_s.shops',
          model='λ(d, w) w.a*d.amount + w.b')
    assert len(db.execute("SELECT pgad_models.by_amount(amount) FROM mallory_s.shops").fetchall()) == 40
    assert ran(db) == before


def test_an_enum_group_column_another_role_owns_is_refused(db):
    """Her enum has no code of hers, but a scoring function of that type would depend on it: on 0.9.0 she could
    DROP TYPE … CASCADE and take the superuser's model's function with it, and her implicit casts would take part
    in resolving its calls. Such a column is refused with a hint to cast it; cast in the data query, it trains."""
    e = error_of(db, "SELECT * FROM pgad.train('by_color', %s, 'squared', 'mallory_s.shops', %s, "
                     "optimizer => 'lbfgs', group_by => 'color')", [LINE, START])
    assert e.sqlstate == '0A000'
    assert e.message_primary == f'column "color" of group_by is of type mallory_s.color, which role "{MALLORY}" owns'
    assert 'color::text AS color' in e.message_hint
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'by_color'").fetchone()[0] == 0
    train(db, 'by_color', data='SELECT color::text AS color, x, y FROM mallory_s.shops', group_by='color')
    assert db.execute("SELECT pgad_models.by_color('red', 1) IS NOT NULL").fetchone()[0]


def test_a_model_per_group_of_her_domains_runs_none_of_their_checks(db):
    """group_by her domains with a categorical weight of her domain column: the load finds the groups and the
    categories as text, and casts them back to their base types (text, int4) to order, key and name them, so her
    CHECK never runs; the groups are GROUP BY's."""
    before = ran(db)
    db.execute("SELECT * FROM pgad.train('by_subregion_code', 'λ(d, w) w.c[d.code] + w.a*d.x', 'squared', "
               "'mallory_s.shops', '{\"c\": {}, \"a\": 0}', optimizer => 'lbfgs', iterations => 20, "
               "group_by => 'subregion, region')")
    assert ran(db) == before
    keys = [k for k, in db.execute("SELECT group_key::text FROM pgad.models WHERE name = 'by_subregion_code' "
                                   'ORDER BY 1')]
    assert keys == ['{"region": "north", "subregion": "north"}', '{"region": "south", "subregion": "south"}']


def test_a_scoring_function_depends_on_nothing_of_another_role(db, cluster, dbname):
    """Every object a scoring function depends on (its argument types, the functions and operators of its body) is
    built in, a superuser's, or the trainer's."""
    train(db, 'by_subregion_too', group_by='subregion,code')
    # the deployed function calls its version's own (versions, issue 38), whose body is the model
    for function, calls in (('pgad_models.by_subregion_too', ['function pgad_models."by_subregion_too@1"(text,integer,'
                                                               'double precision)']),
                            ('pgad_models."by_subregion_too@1"', [])):
        foreign = db.execute("""
            SELECT pg_describe_object(d.refclassid, d.refobjid, 0) FROM pg_depend AS d
            WHERE d.classid = 'pg_proc'::regclass AND d.objid = %s::regproc
              AND d.refclassid <> 'pg_namespace'::regclass""", [function]).fetchall()
        assert [f for f, in foreign] == calls  # nothing but its schema: every type and operator it uses is built in
    with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
        mallory.execute('DROP DOMAIN mallory_s.subregion CASCADE')  # would have dropped the function on 0.9.0
        mallory.execute('ALTER TABLE mallory_s.shops ADD COLUMN subregion mallory_s.region')
        mallory.execute('UPDATE mallory_s.shops SET subregion = region')
    assert db.execute("SELECT pgad_models.by_subregion_too('north', 0, 2)").fetchone()[0] == \
        pytest.approx(5, abs=1e-6)


# §3: only the function pgad created for the model is dropped or replaced.

def test_another_roles_overload_survives_retraining_and_drop_model(db, cluster, dbname):
    """mallory, granted CREATE on pgad_models too, adds an overload to alice's model. On 0.9.0 alice's retraining
    with other arguments and her drop_model tried to drop every function of that name, hers among them (refused,
    which locked alice out), and a superuser's dropped it. Now only the function the model's rows record goes."""
    db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {MALLORY}')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice, \
                psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
            train(alice, 'alices')
            mallory.execute('CREATE FUNCTION pgad_models.alices(integer) RETURNS float8 LANGUAGE sql '
                            'RETURN 666')
            train(alice, 'alices', group_by='region')  # other arguments: her old function goes, not mallory's
            assert alice.execute("SELECT pgad_models.alices('north', 2)").fetchone()[0] == pytest.approx(5, abs=1e-6)
            train(db, 'alices', group_by='code')       # a superuser replaces alice's model
            db.execute("SELECT pgad.drop_model('alices')")
            train(alice, 'alices')
            alice.execute("SELECT pgad.drop_model('alices')")
        functions = db.execute("SELECT oid::regprocedure::text, proowner::regrole::text FROM pg_proc "
                               "WHERE proname = 'alices'").fetchall()
        assert functions == [('pgad_models.alices(integer)', MALLORY)]
    finally:
        db.execute('DROP FUNCTION IF EXISTS pgad_models.alices(integer)')
        db.execute(f'REVOKE CREATE ON SCHEMA pgad_models FROM {MALLORY}')


def test_a_function_another_role_made_first_with_the_models_signature_is_refused(db, cluster, dbname):
    """mallory makes pgad_models.future(float8) before a superuser trains model "future" of one float8 argument.
    On 0.9.0 CREATE OR REPLACE gave it the superuser's body and left mallory its owner, free to replace the body
    with code that every later caller runs. Now the training is refused, and her function is left as it was."""
    db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {MALLORY}')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
            mallory.execute('CREATE FUNCTION pgad_models.future(float8) RETURNS float8 LANGUAGE sql RETURN 666')
        e = error_of(db, "SELECT * FROM pgad.train('future', %s, 'squared', 'mallory_s.shops', %s, "
                         "optimizer => 'lbfgs')", [LINE, START])
        assert e.sqlstate == '42501'
        assert e.message_primary == f'function pgad_models.future(pg_catalog.float8) exists and belongs to role ' \
                                    f'"{MALLORY}"'
        assert (e.message_detail, e.message_hint) == (
            'pgad.train did not create it for model "future", and would replace its body but not its owner.',
            'Train the model under another name, or ask that role (or a superuser) to drop the function.')
        assert db.execute("SELECT pgad_models.future(1)").fetchone()[0] == 666
        assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'future'").fetchone()[0] == 0
    finally:
        db.execute('DROP FUNCTION IF EXISTS pgad_models.future(float8)')
        db.execute(f'REVOKE CREATE ON SCHEMA pgad_models FROM {MALLORY}')


# §4: pgad.models is written by pgad alone.

ROW = ("INSERT INTO pgad.models (name, model, loss, weights, final_loss, loss_history, iterations, options, data, "
       "rows, training_time, scoring_function{by}) VALUES (%s, 'λ(d, w) w.a', 'squared', '{{\"a\": 666}}', 0, '{{}}', "
       "1, '{{}}', 'x', 1, '1s', 'pgad_models.x(pg_catalog.float8)'{value})")


@pytest.mark.parametrize('statement', [ROW.format(by='', value=''), ROW.format(by=', trained_by', value=', %s'),
                                       "UPDATE pgad.models SET weights = '{\"a\": 666}' WHERE name = %s",
                                       "DELETE FROM pgad.models WHERE name = %s"])
def test_no_role_writes_the_catalog_directly(db, cluster, dbname, statement):
    """On 0.9.0 any role could INSERT rows under another's model name (row level security checked trained_by only):
    forged weights that queries of pgad.models return, a name claimed in advance, and the owner locked out of
    retraining and dropping. Now no role but the extension's owner has INSERT, UPDATE or DELETE."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'alice_owns')
    with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
        args = ['alice_owns'] + ([ALICE] if statement.count('%s') == 2 else [])
        assert error_of(mallory, statement, args).sqlstate == '42501'
        args = ['claimed'] + ([MALLORY] if statement.count('%s') == 2 else [])
        assert error_of(mallory, statement, args).sqlstate == '42501'
    assert db.execute("SELECT DISTINCT trained_by::text FROM pgad.models WHERE name = 'alice_owns'").fetchall() == \
        [(ALICE,)]
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'claimed')  # no name was claimed in advance
        alice.execute("SELECT pgad.drop_model('claimed')")
        alice.execute("SELECT pgad.drop_model('alice_owns')")


def test_the_writer_writes_nothing_when_called_directly(db, cluster, dbname):
    """pgad._write_models, the catalog's one writer (SECURITY DEFINER), takes no argument: it writes what pgad.train
    or pgad.drop_model left for it in the same call, and called any other way (directly, or from a function in
    the data query of a training) finds nothing to write and refuses."""
    with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
        e = error_of(mallory, 'SELECT * FROM pgad._write_models()')
        assert e.sqlstate == '42501'
        assert e.message_primary.endswith('permission denied for function pgad._write_models')  # plpy.Error: …
    e = error_of(db, 'SELECT * FROM pgad._write_models()')  # a superuser's too
    assert e.sqlstate == '42501'
    db.execute('CREATE FUNCTION public.writes() RETURNS boolean LANGUAGE plpgsql AS $$ '
               'BEGIN PERFORM pgad._write_models(); RETURN true; END $$')
    try:
        e = error_of(db, "SELECT * FROM pgad.train('inside', %s, 'squared', 'SELECT x, y FROM mallory_s.shops "
                         "WHERE public.writes()', %s, optimizer => 'lbfgs')", [LINE, START])
        assert e.sqlstate == '42501' and 'pgad._write_models' in e.message_primary
    finally:
        db.execute('DROP FUNCTION public.writes()')
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'inside'").fetchone()[0] == 0


def test_a_name_belongs_to_the_role_that_trained_it_first(db, cluster, dbname):
    """Another role's pgad.train and pgad.drop_model of alice's model are 42501 naming alice; a superuser may
    replace and drop anyone's, and the model is then the superuser's."""
    db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {MALLORY}')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
            train(alice, 'first')
        with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
            e = error_of(mallory, "SELECT * FROM pgad.train('first', %s, 'squared', 'mallory_s.shops', %s, "
                                  "optimizer => 'lbfgs')", [LINE, START])
            assert e.sqlstate == '42501' and e.message_primary == f'model "first" belongs to role "{ALICE}"'
            e = error_of(mallory, "SELECT pgad.drop_model('first')")
            assert e.sqlstate == '42501' and e.message_primary == f'model "first" belongs to role "{ALICE}"'
        train(db, 'first', group_by='region')
        assert db.execute("SELECT DISTINCT trained_by::text FROM pgad.models WHERE name = 'first'").fetchall() == \
            [('postgres',)]
        assert db.execute("SELECT proowner::regrole::text FROM pg_proc WHERE proname = 'first'").fetchall() == \
            [('postgres',)]
        db.execute("SELECT pgad.drop_model('first')")
    finally:
        db.execute(f'REVOKE CREATE ON SCHEMA pgad_models FROM {MALLORY}')


def test_an_update_from_0_9_0_takes_the_writes_away_and_warns_of_what_they_left(cluster):
    """ALTER EXTENSION pgad UPDATE from 0.9.0: a WARNING names each model with rows of several roles (forged while
    any role could INSERT) and each scoring function that takes a domain; afterwards mallory writes nothing, and a
    superuser drops the models, a forged row naming no function among them. (pgad's Python is 0.10.0's already, so
    the 0.9.0 state is written by hand: alice's model as 0.9.0's pgad.train left it, mallory's rows as she could.)"""
    name = new_database(cluster, 'trust_update')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute("CREATE EXTENSION pgad VERSION '0.9.0' CASCADE")
            db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {ALICE}')
            db.execute(f'CREATE SCHEMA mallory_s AUTHORIZATION {MALLORY}')
            with psycopg.connect(cluster.conninfo(name, user=MALLORY), autocommit=True) as mallory:
                mallory.execute('CREATE DOMAIN mallory_s.region AS text')
                mallory.execute(f'GRANT USAGE ON SCHEMA mallory_s TO {ALICE}')
            with psycopg.connect(cluster.conninfo(name, user=ALICE), autocommit=True) as alice:
                alice.execute("CREATE FUNCTION pgad_models.alices(mallory_s.region, pg_catalog.float8) RETURNS "
                              "pg_catalog.float8 LANGUAGE sql IMMUTABLE RETURN CASE WHEN $1 OPERATOR(pg_catalog.=) "
                              "'north'::mallory_s.region THEN $2 END")
                alice.execute(ROW.format(by=', group_key', value=', \'{"region": "north"}\'').replace(
                    "'pgad_models.x(pg_catalog.float8)'", "'pgad_models.alices(mallory_s.region, pg_catalog.float8)'"),
                    ['alices'])
            with psycopg.connect(cluster.conninfo(name, user=MALLORY), autocommit=True) as mallory:
                mallory.execute(ROW.format(by=', group_key', value=', \'{"region": "west"}\''), ['alices'])
                mallory.execute(ROW.format(by='', value='').replace("'pgad_models.x(pg_catalog.float8)'", "'('"),
                                ['forged'])
            warnings = []
            db.add_notice_handler(lambda n: warnings.append(n.message_primary))
            db.execute('ALTER EXTENSION pgad UPDATE')
            assert sorted(warnings) == [f'model "alices" has rows trained by several roles: {ALICE}, {MALLORY}',
                                        'the scoring function of model "alices" takes a domain']
            with psycopg.connect(cluster.conninfo(name, user=MALLORY), autocommit=True) as mallory:
                assert error_of(mallory, ROW.format(by='', value=''), ['more']).sqlstate == '42501'
                assert error_of(mallory, "DELETE FROM pgad.models WHERE name = 'forged'").sqlstate == '42501'
                mallory.execute("SELECT pgad.drop_model('forged')")  # her own row: she may drop it
            db.execute("SELECT pgad.drop_model('alices')")
            assert db.execute('SELECT count(*) FROM pgad.models').fetchone()[0] == 0
            assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'alices'").fetchone()[0] == 0
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


def test_two_first_trainings_of_one_name_at_once_leave_it_to_one_role(db, cluster, dbname):
    """alice's training of a new name is not committed yet when mallory's of the same name (other arguments) ends:
    the writer waits for alice's, then finds the name hers and refuses mallory's, rather than leaving rows of two
    roles under one name (read committed, as pgad.train runs by default)."""
    import threading
    db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {MALLORY}')
    errors = []
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE)) as alice:
            train(alice, 'raced')  # its transaction stays open, holding the writer's lock

            def mallory_trains():
                with psycopg.connect(cluster.conninfo(dbname, user=MALLORY), autocommit=True) as mallory:
                    errors.append(error_of(mallory, "SELECT * FROM pgad.train('raced', %s, 'squared', "
                                                    "'mallory_s.shops', %s, optimizer => 'lbfgs', group_by => 'code')",
                                           [LINE, START]))
            racer = threading.Thread(target=mallory_trains)
            racer.start()
            racer.join(3)
            assert racer.is_alive()  # waiting for alice's transaction
            alice.commit()
            racer.join(60)
        assert errors[0].sqlstate == '42501'
        assert errors[0].message_primary == f'model "raced" belongs to role "{ALICE}"'
        assert db.execute("SELECT DISTINCT trained_by::text FROM pgad.models WHERE name = 'raced'").fetchall() == \
            [(ALICE,)]
        assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'raced'").fetchone()[0] == 1
        db.execute("SELECT pgad.drop_model('raced')")
    finally:
        db.execute(f'REVOKE CREATE ON SCHEMA pgad_models FROM {MALLORY}')


@pytest.mark.parametrize('isolation', ['repeatable read', 'serializable'])
def test_two_first_trainings_of_one_name_under_one_snapshot_leave_it_to_one_role(db, cluster, dbname, isolation):
    """mallory's transaction took its snapshot before alice's first training of a new name committed: her own
    training of that name (other arguments) sees no row of it even after the writer's lock, and would commit beside
    alice's; it fails with 40001 instead, and the name stays alice's (issue 34)."""
    db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {MALLORY}')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=MALLORY)) as mallory:
            mallory.execute(f'SET TRANSACTION ISOLATION LEVEL {isolation}')
            mallory.execute('SELECT count(*) FROM pgad.models')  # the snapshot
            with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
                train(alice, 'raced_snapshot')
            e = error_of(mallory, "SELECT * FROM pgad.train('raced_snapshot', %s, 'squared', 'mallory_s.shops', %s, "
                                  "optimizer => 'lbfgs', group_by => 'code')", [LINE, START])
            assert e.sqlstate == '40001'
            assert e.message_primary == 'model "raced_snapshot" was written by another transaction since this one ' \
                                        'began'
            assert (e.message_detail, e.message_hint) == (
                'Under repeatable read or serializable, a transaction sees pgad.models as it was when the transaction '
                'began, and another transaction has trained or dropped the model since.', 'Run the transaction again.')
            mallory.rollback()
        assert db.execute("SELECT DISTINCT trained_by::text FROM pgad.models WHERE name = 'raced_snapshot'") \
            .fetchall() == [(ALICE,)]
        assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'raced_snapshot'").fetchone()[0] == 1
        db.execute("SELECT pgad.drop_model('raced_snapshot')")
    finally:
        db.execute(f'REVOKE CREATE ON SCHEMA pgad_models FROM {MALLORY}')


def test_a_retraining_under_a_snapshot_older_than_anothers_is_40001_in_pgads_words(db, cluster, dbname):
    """alice retrains her model while her other session's repeatable-read transaction, begun before, retrains it too:
    the second's delete of the rows the first replaced is PostgreSQL's serialization failure, said as pgad's."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        train(alice, 'retrained')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user=ALICE)) as second:
            second.execute('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ')
            second.execute('SELECT count(*) FROM pgad.models')
            with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as first:
                train(first, 'retrained')
            e = error_of(second, "SELECT * FROM pgad.train('retrained', %s, 'squared', 'mallory_s.shops', %s, "
                                 "optimizer => 'lbfgs')", [LINE, START])
            assert (e.sqlstate, e.message_hint) == ('40001', 'Run the transaction again.')
            second.rollback()
    finally:
        db.execute("SELECT pgad.drop_model('retrained')")
