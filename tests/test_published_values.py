"""What a model's functions publish of its data to a role that may not read it (issue 45, item 4), against a real
server: the bodies of a model's functions are in pg_proc, which every role that may connect reads, and beside the
weights they hold values of the data (group values, categories, imputed values, class names, training means). alice
trains on her tables, which bob may not SELECT; bob reads pg_proc (pg_get_functiondef). pgad.publish_data_values
says what alice's training does: 'warn' (the default) one WARNING naming the values, 'on' nothing, 'off' 42501
before anything is stored (docs/security.md, "What a scoring function publishes")."""

import psycopg
import pytest

from conftest import error_of

ALICE, BOB = 'pub_alice', 'pub_bob'
REGIONS = ['crete-secret', 'lapland-secret', 'tasmania-secret']  # a categorical weight's column's values
PARTS = ['north-secret', 'south-secret']  # the group column's values
SPECIES = ['setosa-secret', 'versicolor-secret', 'virginica-secret']  # the label's classes
MEDIAN = 105.0  # the median of sqft's 39 values 100.25, 100.5, …, 109.75: its 20th
LINEAR = 'λ(d, w) w.a*d.sqft + w.b'
PUBLISHES = 'publishes values of the data'


@pytest.fixture(scope='module', autouse=True)
def roles(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for role in (ALICE, BOB):
            db.execute(f'DROP ROLE IF EXISTS {role}')
            db.execute(f'CREATE ROLE {role} LOGIN')
        db.execute(f'GRANT CREATE ON SCHEMA pgad_models TO {ALICE}')
        db.execute(f'CREATE SCHEMA pub AUTHORIZATION {ALICE}')
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as alice:
        alice.execute('GRANT USAGE ON SCHEMA pub TO PUBLIC')
        alice.execute('CREATE TABLE pub.houses (part text, region text, species text, sqft float8, x1 float8, '
                      'x2 float8, price float8)')
        alice.execute('INSERT INTO pub.houses SELECT (%s::text[])[g %% 2 + 1], (%s::text[])[g %% 3 + 1], '
                      '(%s::text[])[(g / 15) %% 3 + 1], CASE WHEN g < 40 THEN 100 + g * 0.25 END, '
                      '(g / 15) %% 3 + sin(g), (g / 15) %% 3 * cos(g), g %% 3 + g / 20.0 '
                      'FROM generate_series(1, 45) AS g', [PARTS, REGIONS, SPECIES])
        alice.execute('CREATE TABLE pub.open (sqft float8, price float8)')
        alice.execute('INSERT INTO pub.open SELECT g, 2 * g + 1 FROM generate_series(1, 20) AS g')
        alice.execute('GRANT SELECT ON pub.open TO PUBLIC')
    yield
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('SELECT pgad.drop_model(name) FROM (SELECT DISTINCT name FROM pgad.model_versions '
                   "WHERE name LIKE 'pub%') AS m")
        for role in (ALICE, BOB):
            db.execute(f'DROP OWNED BY {role} CASCADE')
            db.execute(f'DROP ROLE {role}')


@pytest.fixture
def alice(cluster, dbname):
    """alice's connection, with the WARNINGs it gets in .warnings ((message, detail, hint) each)."""
    with psycopg.connect(cluster.conninfo(dbname, user=ALICE), autocommit=True) as conn:
        conn.warnings = []
        conn.add_notice_handler(lambda d: conn.warnings.append((d.message_primary, d.message_detail, d.message_hint))
                                if d.severity_nonlocalized == 'WARNING' else None)
        yield conn


def train(db, name, model=LINEAR, weights='{"a": 0, "b": 0}', loss='squared', label='price', setting=None,
          **options):
    """alice's pgad.train of pub.houses, under pgad.publish_data_values = setting (the default when None)."""
    if setting is not None:
        db.execute(f'SET pgad.publish_data_values = {setting}')
    options.setdefault('data', 'pub.houses')
    args = ''.join(f', {k} => %({k})s' for k in options)
    try:
        return db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, %(loss)s, weights => %(weights)s, "
                          f"label => %(label)s, optimizer => 'lbfgs', iterations => 30{args})",
                          dict(name=name, model=model, weights=weights, loss=loss, label=label,
                               **options)).fetchall()
    finally:
        if setting is not None:
            db.execute('RESET pgad.publish_data_values')


def read_by_bob(cluster, dbname, name):
    """The text of every function of model `name` as bob, who may not SELECT pub.houses, reads it in pg_proc."""
    with psycopg.connect(cluster.conninfo(dbname, user=BOB), autocommit=True) as bob:
        assert error_of(bob, 'SELECT * FROM pub.houses').sqlstate == '42501'  # bob may not read the data
        rows = bob.execute("SELECT pg_catalog.pg_get_functiondef(p.oid) FROM pg_catalog.pg_proc AS p "
                           "WHERE p.pronamespace = 'pgad_models'::regnamespace AND "
                           "(p.proname = %s OR p.proname LIKE %s)", [name, f'{name}@%']).fetchall()
        rows += bob.execute("SELECT pg_catalog.pg_get_functiondef(p.oid) FROM pg_catalog.pg_proc AS p "
                            "WHERE p.pronamespace = 'pgad_models'::regnamespace AND p.proname LIKE %s",
                            [f'{name}\\_%']).fetchall()
    return '\n'.join(text for text, in rows)


def shown(db, x):
    """A float8 as pg_get_functiondef shows it: '105'::double precision for the 105.0 pgad wrote."""
    return f"'{db.execute('SELECT %s::float8::text', [x]).fetchone()[0]}'::double precision"


def published(db):
    """alice's WARNINGs that say a model publishes values of the data."""
    return [w for w in db.warnings if PUBLISHES in w[0]]


def stored(cluster, dbname, name):
    """The versions of model `name` and its functions in pg_proc, as a superuser counts them."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        return (db.execute('SELECT count(*) FROM pgad.model_versions WHERE name = %s', [name]).fetchone()[0],
                db.execute("SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'pgad_models'::regnamespace "
                           "AND (proname = %s OR proname LIKE %s)", [name, f'{name}\\_%']).fetchone()[0])


def check_each_setting(cluster, dbname, alice, name, phrase, secrets, **options):
    """The three settings for one kind of value: 'warn' trains with one WARNING holding phrase, and bob reads every
    secret in pg_proc; 'on' the same without the WARNING; 'off' is 42501 naming it, and stores nothing."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        train(alice, name, setting='off', **options)
    assert phrase in refused.value.diag.message_primary
    assert 'would publish values of the data' in refused.value.diag.message_primary
    assert 'pub.houses' in refused.value.diag.message_detail
    assert 'pgad.publish_data_values' in refused.value.diag.message_hint
    assert stored(cluster, dbname, name) == (0, 0)  # nothing stored: no version, no function
    assert not published(alice)
    train(alice, name, **options)  # the default: warn
    warned = published(alice)
    assert len(warned) == 1, warned  # one WARNING a training, whatever its groups
    message, detail, hint = warned[0]
    assert message.startswith(f'model "{name}" publishes values of the data in its functions\' bodies: ')
    assert phrase in message
    assert 'pg_proc' in detail and 'pub.houses' in detail
    assert "pgad.publish_data_values to 'on'" in hint and 'REVOKE CONNECT' in hint
    text = read_by_bob(cluster, dbname, name)
    assert all(s in text for s in secrets), (secrets, text[:2000])
    alice.warnings.clear()
    train(alice, name, setting='on', **options)
    assert not published(alice)
    assert all(s in read_by_bob(cluster, dbname, name) for s in secrets)


def test_the_imputed_value_of_a_column(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_imputed', 'the imputed value of "sqft" in every function',
                       [shown(alice, MEDIAN)], impute='{"sqft": "median"}')


def test_the_class_names_of_a_label(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_classes',
                       'the class names of "species" in "pub_classes_class", "pub_classes_explain"',
                       [f"'{s}'::text" for s in SPECIES], model='λ(d, w) w.W @ [d.x1, d.x2] + w.c',
                       weights='{"W": {}, "c": {}}', loss='softmax', label='species')


def test_the_training_means_in_explain(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_means', 'the training means of "x1", "x2" in "pub_means_explain"',
                       [], model='λ(d, w) w.a*d.x1 + w.b*d.x2', weights='{"a": 0, "b": 0}',
                       data='SELECT x1, x2, price FROM pub.houses')
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        means = db.execute("SELECT options->'baseline' FROM pgad.models WHERE name = 'pub_means'").fetchone()[0]
        exact = db.execute('SELECT avg(x1), avg(x2) FROM pub.houses').fetchone()
    assert means['x1'] == pytest.approx(exact[0], rel=1e-12) and means['x2'] == pytest.approx(exact[1], rel=1e-12)
    text = read_by_bob(cluster, dbname, 'pub_means')
    assert shown(alice, means['x1']) in text and shown(alice, means['x2']) in text  # exactly the stored means


def test_the_categories_of_a_categorical_weight(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_cats', 'the categories of "region" in every function',
                       [f"'{r}'::text" for r in REGIONS], model='λ(d, w) w.r[d.region] + w.a*d.x1',
                       weights='{"r": {}, "a": 0}')


def test_the_group_values_of_a_grouped_model(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_groups', 'the group values of "part" in every function',
                       [f"'{p}'::text" for p in PARTS], model='λ(d, w) w.a*d.x1 + w.b', group_by='part')


def test_a_sequence_models_group_values(cluster, dbname, alice):
    check_each_setting(cluster, dbname, alice, 'pub_seq', 'the group values of "part" in every function',
                       [f"'{p}'::text" for p in PARTS], model='λ(d, w, s) s.level', weights='{"alpha": 0.5, "l0": 0}',
                       group_by='part', data='SELECT part, x1 AS price, sqft FROM pub.houses WHERE sqft IS NOT NULL',
                       order_by='sqft', state='{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.price - '
                                               's.level)"}}')


def test_data_public_may_read_trains_without_a_word_under_every_setting(cluster, dbname, alice):
    for setting in ('off', 'warn', 'on'):
        train(alice, 'pub_open', data='pub.open', setting=setting, impute='{"sqft": "mean"}')
    assert not published(alice)
    assert stored(cluster, dbname, 'pub_open')[0] == 3


def test_a_table_public_reads_through_a_policy_is_not_public(cluster, dbname, alice):
    """PUBLIC may SELECT the table, but row-level security hides rows from other roles: their values are not
    public either."""
    alice.execute('CREATE TABLE pub.policed AS SELECT * FROM pub.open')
    alice.execute('GRANT SELECT ON pub.policed TO PUBLIC')
    alice.execute('ALTER TABLE pub.policed ENABLE ROW LEVEL SECURITY')
    alice.execute("CREATE POLICY mine ON pub.policed USING (current_user = 'pub_alice')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        train(alice, 'pub_policed', data='pub.policed', setting='off')
    assert 'pub.policed' in refused.value.diag.message_detail
    train(alice, 'pub_policed', data='pub.policed')
    assert len(published(alice)) == 1


def test_one_warning_for_a_tune_and_off_refuses_it(cluster, dbname, alice):
    tune = ("SELECT * FROM pgad.tune('pub_tuned', %s, 'squared', 'pub.houses', '{\"a\": 0, \"b\": 0}', "
            "grid => '{\"l2\": [0, 0.01, 0.1]}', validation => 0.3, seed => 1, "
            "options => '{\"label\": \"price\", \"impute\": {\"sqft\": \"median\"}}')")
    alice.execute('SET pgad.publish_data_values = off')
    try:
        assert error_of(alice, tune, [LINEAR]).sqlstate == '42501'  # the first trial's refusal ends the tune
    finally:
        alice.execute('RESET pgad.publish_data_values')
    assert stored(cluster, dbname, 'pub_tuned') == (0, 0)
    trials = alice.execute(tune, [LINEAR]).fetchall()
    assert len(trials) == 3 and all(t[-1] is None for t in trials)
    warned = published(alice)
    assert len(warned) == 1, warned  # one WARNING for the tune, not one a trial
    assert 'the imputed value of "sqft"' in warned[0][0]


def test_any_role_sets_it_to_warn_on_or_off(cluster, dbname, alice):
    alice.execute("SELECT pgad.loss('λ(d, w) d.x', 'SELECT 1.0::float8 AS x', '{}')")  # pgad's library loaded
    assert alice.execute('SHOW pgad.publish_data_values').fetchone()[0] == 'warn'
    for value in ('on', 'off', 'warn'):
        alice.execute(f'SET pgad.publish_data_values = {value}')
        assert alice.execute('SHOW pgad.publish_data_values').fetchone()[0] == value
    assert error_of(alice, 'SET pgad.publish_data_values = maybe').sqlstate == '22023'
    alice.execute('RESET pgad.publish_data_values')
