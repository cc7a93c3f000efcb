"""Names another role can squat (issue 45, item 3), against a real server: a model's name never holds '@', a
version's own functions take names no function has (recorded in the version's rows, `functions`), a function that
would make a call of a model's deployed function ambiguous is refused in pgad's words, and the update from 0.16.0
copies each model's functions whatever another role made and however long its name (docs/security.md)."""
import psycopg
import pytest

from conftest import error_of, new_database

LINE = 'λ(d, w) w.a*d.x + w.b'
START = '{"a": 0, "b": 0}'


@pytest.fixture(scope='module', autouse=True)
def points(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE sq_pts AS SELECT g::float8 AS x, (2*g + 1)::float8 AS y, g <= 40 AS first '
                   'FROM generate_series(1, 80) AS g')
        db.execute('UPDATE sq_pts SET y = 3*x WHERE NOT first')
        db.execute('GRANT SELECT ON sq_pts TO PUBLIC')
    yield


@pytest.fixture
def squatter(cluster, dbname, db):
    """A connection as a role with CREATE on pgad_models, whose objects go with it."""
    db.execute('DROP ROLE IF EXISTS sq_bob')
    db.execute('CREATE ROLE sq_bob LOGIN')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO sq_bob')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='sq_bob'), autocommit=True) as bob:
            yield bob
    finally:
        db.execute('DROP OWNED BY sq_bob')
        db.execute('DROP ROLE sq_bob')


def train(db, name, data='SELECT x, y FROM sq_pts WHERE first', loss='squared'):
    return db.execute(f"SELECT version, deployed FROM pgad.train(%s, %s, %s, %s, %s, optimizer => 'lbfgs')",
                      [name, LINE, loss, data, START]).fetchall()


def score(db, name, x=10):
    return db.execute('SELECT pgad_models.' + db.execute('SELECT quote_ident(%s)', [name]).fetchone()[0] + '(%s)',
                      [x]).fetchone()[0]


def own(db, name, version, suffix=''):
    return db.execute('SELECT functions->>%s FROM pgad.model_versions WHERE name = %s AND version = %s',
                      [suffix, name, version]).fetchone()[0]


def owner_of(db, proname):
    return [r for r, in db.execute("SELECT pg_get_userbyid(proowner)::text FROM pg_proc WHERE proname = %s "
                                   "AND pronamespace = 'pgad_models'::regnamespace", [proname]).fetchall()]


def test_a_new_model_name_holding_an_at_sign_is_refused(squatter, db):
    """bob trains "sq_m@2" with alice's column types: in 0.17.0 its scoring function took the name of alice's
    version 2 of sq_m (her training then failed, 42501, until he dropped it); "sq_new@1" blocked a first training,
    "sq_m_explain@2" the explain function. Refused, 42602, naming the character; nothing is stored."""
    train(db, 'sq_m')
    for name in ('sq_m@2', 'sq_new@1', 'sq_m_explain@2', '@'):
        e = error_of(squatter, "SELECT pgad.train(%s, %s, 'squared', 'sq_pts', %s)", [name, LINE, START])
        assert e.sqlstate == '42602' and e.message_primary == f'invalid model name "{name}": it holds "@"'
        assert e.message_detail == ('A version\'s own functions are named with "@" and its number '
                                    '(pgad_models."m@2"): a model of a name that holds "@" could take or block them.')
        assert e.message_hint == 'Train the model under a name without "@".'
        assert db.execute('SELECT count(*) FROM pgad.model_versions WHERE name = %s', [name]).fetchone()[0] == 0
    assert train(db, 'sq_m', data='SELECT x, y FROM sq_pts WHERE NOT first') == [(2, True)]
    assert train(db, 'sq_new') == [(1, True)]
    assert owner_of(db, 'sq_m@2') == ['postgres'] and owner_of(db, 'sq_m_explain@2') == ['postgres']


def test_a_default_overload_of_a_versions_name_blocks_nothing(squatter, db):
    """bob makes pgad_models."sq_d@2"(x float8, z int DEFAULT 0), and its "~2" and explain likes, before alice's
    second training, and "sq_first@1"(…, DEFAULT) before her first: in 0.17.0 a call of her version's function was
    PostgreSQL's 42725 `is not unique`, and the training failed. Each takes a name no function has; his stay his."""
    train(db, 'sq_d')
    for proname in ('sq_d@2', 'sq_d@2~2', 'sq_d_explain@2', 'sq_first@1', 'sq_first_explain@1'):
        squatter.execute(f'CREATE FUNCTION pgad_models."{proname}"(x float8, z int DEFAULT 0) RETURNS float8 '
                         'LANGUAGE sql RETURN -1')
    assert train(db, 'sq_d', data='SELECT x, y FROM sq_pts WHERE NOT first') == [(2, True)]
    assert score(db, 'sq_d') == pytest.approx(30, abs=1e-6)  # y = 3x, lbfgs to 1e-6
    assert (own(db, 'sq_d', 2), own(db, 'sq_d', 2, 'explain')) == ('sq_d@2~3', 'sq_d_explain@2~2')
    assert train(db, 'sq_first') == [(1, True)] and score(db, 'sq_first') == pytest.approx(21, abs=1e-6)
    db.execute("SELECT pgad.deploy('sq_d', version => 1)")
    assert score(db, 'sq_d') == pytest.approx(21, abs=1e-6)
    db.execute("SELECT pgad.deploy('sq_d', version => 2)")
    assert db.execute("SELECT pgad_models.sq_d_explain(10) ? 'x'").fetchone()[0]
    assert owner_of(db, 'sq_d@2') == ['sq_bob'] and owner_of(db, 'sq_first_explain@1') == ['sq_bob']
    db.execute("SELECT pgad.drop_model('sq_d')")
    db.execute("SELECT pgad.drop_model('sq_first')")
    assert owner_of(db, 'sq_d@2~2') == ['sq_bob']  # only the model's own functions go with it


def test_a_default_overload_of_a_deployed_name_is_refused_in_pgads_words(squatter, db):
    """bob makes pgad_models."sq_p"(x float8, z int DEFAULT 0) before alice's first training of sq_p: every call of
    her scoring function would be PostgreSQL's 42725, and 0.17.0 stored the model. pgad refuses, naming his function
    and him, and stores nothing; so with "sq_q_explain"(…, DEFAULT) made after her first training, for the next."""
    squatter.execute('CREATE FUNCTION pgad_models.sq_p(x float8, z int DEFAULT 0) RETURNS float8 LANGUAGE sql '
                     'RETURN -1')
    e = error_of(db, "SELECT pgad.train('sq_p', %s, 'squared', 'sq_pts', %s)", [LINE, START])
    assert e.sqlstate == '42501' and e.message_primary == (
        'function pgad_models.sq_p(double precision,integer) of role "sq_bob" makes calls of '
        'pgad_models.sq_p(pg_catalog.float8) ambiguous')
    assert 'DROP FUNCTION pgad_models.sq_p(double precision,integer)' in e.message_hint
    assert e.message_detail == ('It takes the arguments of model "sq_p"\'s function and more, with defaults: '
                                'PostgreSQL could not tell which of the two a call means.')
    assert db.execute("SELECT count(*) FROM pgad.model_versions WHERE name = 'sq_p'").fetchone()[0] == 0
    assert owner_of(db, 'sq_p') == ['sq_bob'] and owner_of(db, 'sq_p@1') == []
    train(db, 'sq_q')
    squatter.execute('CREATE FUNCTION pgad_models.sq_q_explain(x float8, z int DEFAULT 0) RETURNS jsonb '
                     "LANGUAGE sql RETURN '{}'::jsonb")
    e = error_of(db, "SELECT pgad.train('sq_q', %s, 'squared', 'sq_pts', %s)", [LINE, START])
    assert e.sqlstate == '42501' and 'of role "sq_bob" makes calls of pgad_models.sq_q_explain(' in e.message_primary
    assert db.execute("SELECT max(version) FROM pgad.model_versions WHERE name = 'sq_q'").fetchone()[0] == 1


def test_an_old_versions_function_made_ambiguous_since_is_refused_in_pgads_words(squatter, db):
    """bob makes "sq_o@1"(x float8, z int DEFAULT 0) after alice's version 1 of sq_o took "sq_o@1"(float8): a
    deployment of version 1 was PostgreSQL's 42725 `is not unique`. It is pgad's 42501 naming his function and him,
    and the deployed version 2 still scores."""
    train(db, 'sq_o')
    train(db, 'sq_o', data='SELECT x, y FROM sq_pts WHERE NOT first')
    squatter.execute('CREATE FUNCTION pgad_models."sq_o@1"(x float8, z int DEFAULT 0) RETURNS float8 LANGUAGE sql '
                     'RETURN -1')
    e = error_of(db, "SELECT pgad.deploy('sq_o', version => 1)")
    assert e.sqlstate == '42501' and e.message_primary == (
        'function pgad_models."sq_o@1"(double precision,integer) of role "sq_bob" makes calls of '
        'pgad_models."sq_o@1"(pg_catalog.float8) ambiguous')
    assert (e.message_detail, e.message_hint) == (
        'It takes the arguments of model "sq_o"\'s function and more, with defaults: PostgreSQL could not tell which '
        'of the two a call means.',
        'Ask role "sq_bob" (or a superuser) to drop it (DROP FUNCTION pgad_models."sq_o@1"(double precision,integer)), '
        'or train the model under another name.')
    assert score(db, 'sq_o') == pytest.approx(30, abs=1e-6)  # y = 3x, lbfgs to 1e-6
    squatter.execute('DROP FUNCTION pgad_models."sq_o@1"(float8, int)')
    db.execute("SELECT pgad.deploy('sq_o', version => 1)")
    assert score(db, 'sq_o') == pytest.approx(21, abs=1e-6)


# Models as 0.16.0's pgad.train left them (a row each, and its functions, as test_versions.py's OLD): a logistic
# one, whose "sq_old@1" and "sq_old_probability@1" another role made first (one of them with a DEFAULT argument), a
# model named with '@' that another role trained (its "@"-name is kept), and three whose names are 60, 62 (in
# two-byte characters) and 63 bytes long.
LONG = ['l' * 60, 'é' * 31, 'm' * 63]


def old_model(db, name, loss, owner, extras=()):
    quoted = db.execute('SELECT quote_ident(%s)', [name]).fetchone()[0]
    db.execute("INSERT INTO pgad.models (name, model, loss, weights, final_loss, loss_history, iterations, options, "
               "data, rows, training_time, scoring_function, trained_by) VALUES (%s, %s, %s, "
               "'{\"a\": 0.5, \"b\": -2}', 0, '{}', 1, '{}', 'sq_pts', 9, '1 s', %s, %s)",
               [name, LINE, loss, f'pgad_models.{quoted}(pg_catalog.float8)', owner])
    for proname, body in [(name, '0.1234567890123456789::float8 * x - 2'), *extras]:
        db.execute(f'CREATE FUNCTION pgad_models.{db.execute("SELECT quote_ident(%s)", [proname]).fetchone()[0]}'
                   f'(x pg_catalog.float8) RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE '
                   f'RETURN {body}')
        db.execute(f'ALTER FUNCTION pgad_models.{db.execute("SELECT quote_ident(%s)", [proname]).fetchone()[0]}'
                   f'(pg_catalog.float8) OWNER TO {owner}')


def test_the_update_from_0_16_0_copies_squatted_and_long_names(cluster):
    """ALTER EXTENSION pgad UPDATE from 0.16.0 failed for the whole database (42723) where another role had made a
    function of a version-1 name; a model of 62 or 63 bytes got no version-1 copy, and from 56 bytes none could be
    trained again. Now every model is its version 1 with copies of its own, and each trains and rolls back."""
    name = new_database(cluster, 'squat_update')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute('DROP ROLE IF EXISTS sq_carol')
            db.execute('CREATE ROLE sq_carol LOGIN')
            db.execute("CREATE EXTENSION pgad VERSION '0.16.0' CASCADE")
            db.execute('GRANT CREATE ON SCHEMA pgad_models TO sq_carol')
            db.execute('CREATE TABLE sq_pts AS SELECT g::float8 AS x, (2*g + 1)::float8 AS y '
                       'FROM generate_series(1, 9) AS g')
            db.execute('GRANT SELECT ON sq_pts TO PUBLIC')
            old_model(db, 'sq_old', 'logistic', 'postgres',
                      [('sq_old_probability', '0.5 + 0.5 * tanh(0.5 * (0.1234567890123456789::float8 * x - 2))')])
            old_model(db, 'sq_old@2', 'squared', 'sq_carol')
            for long in LONG:
                old_model(db, long, 'squared', 'postgres')
            with psycopg.connect(cluster.conninfo(name, user='sq_carol'), autocommit=True) as carol:
                carol.execute('CREATE FUNCTION pgad_models."sq_old@1"(x float8) RETURNS float8 LANGUAGE sql RETURN -1')
                carol.execute('CREATE FUNCTION pgad_models."sq_old_probability@1"(x float8, z int DEFAULT 0) '
                              'RETURNS float8 LANGUAGE sql RETURN -1')
            before = db.execute('SELECT pgad_models.sq_old(3), pgad_models.sq_old_probability(3)').fetchone()
            db.execute('ALTER EXTENSION pgad UPDATE')
            copies = dict(db.execute("SELECT name, functions FROM pgad.model_versions").fetchall())
            assert copies['sq_old'] == {'': 'sq_old@1~2', 'probability': 'sq_old_probability@1~2'}
            assert copies['sq_old@2'] == {'': 'sq_old@2@1'}
            assert copies[LONG[0]] == {'': LONG[0] + '@1'}
            assert copies[LONG[1]] == {'': 'é' * 30 + '@1'} and copies[LONG[2]] == {'': 'm' * 61 + '@1'}
            assert owner_of(db, 'sq_old@1') == ['sq_carol'] and owner_of(db, 'sq_old@2@1') == ['sq_carol']
            db.execute("SELECT pgad.train('sq_old', %s, 'logistic', 'SELECT x, (y > 12)::int AS y FROM sq_pts', %s, "
                       "l2 => 0.1)", [LINE, START])
            db.execute("SELECT pgad.deploy('sq_old', strategy => 'previous')")
            assert db.execute('SELECT pgad_models.sq_old(3), pgad_models.sq_old_probability(3)').fetchone() == before
            for long in LONG:
                assert train(db, long, data='sq_pts') == [(2, True)]
                assert score(db, long) == pytest.approx(21, abs=1e-6)  # y = 2x + 1, lbfgs to 1e-6
                db.execute("SELECT pgad.deploy(%s, strategy => 'previous')", [long])
                assert score(db, long) == pytest.approx(0.1234567890123456789 * 10 - 2, rel=1e-15)  # copied exactly
            with psycopg.connect(cluster.conninfo(name, user='sq_carol'), autocommit=True) as carol:
                assert train(carol, 'sq_old@2', data='sq_pts') == [(2, True)]  # her "@"-name is hers still
                assert score(carol, 'sq_old@2') == pytest.approx(21, abs=1e-6)
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
            admin.execute('DROP ROLE IF EXISTS sq_carol')
