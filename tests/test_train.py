"""pgad.train, pgad.models, the scoring functions in pgad_models and pgad.drop_model, against a real server."""
import json
import subprocess

import numpy as np
import psycopg
import pytest

from conftest import error_of, new_database

LINEAR = 'λ(d, w) w.a*d.sqft + w.b*d.rooms + w.c'
REGIONS = {'north': 30.0, 'south': -20.0, 'east': 5.0}


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE houses AS SELECT g AS id, (ARRAY['north', 'south', 'east'])[g % 3 + 1] AS region, "
                   "(0.5 + (g * 37 % 100) / 40.0)::float8 AS sqft, (1 + g * 7 % 5)::int AS rooms FROM "
                   "generate_series(1, 300) AS g")
        db.execute("ALTER TABLE houses ADD COLUMN price float8")
        db.execute("UPDATE houses SET price = 100*sqft + 20*rooms + 7 + 0.5*sin(id) + CASE region WHEN 'north' THEN "
                   "30 WHEN 'south' THEN -20 ELSE 5 END")
        db.execute("CREATE TABLE labels AS SELECT g AS id, (g % 97) / 30.0 - 1.6 AS x1, (g * 13 % 89) / 25.0 - 1.7 "
                   "AS x2, (CASE WHEN sin(g * 1.3) + (g % 97) / 30.0 - 1.0 > 0 THEN 1 ELSE 0 END)::float8 AS y "
                   "FROM generate_series(1, 400) AS g")


def houses(db, where=''):
    rows = db.execute(f'SELECT sqft, rooms, price, region FROM houses {where} ORDER BY id').fetchall()
    return np.array([r[:3] for r in rows], dtype=float), [r[3] for r in rows]


def lstsq(data):
    a = np.column_stack([data[:, 0], data[:, 1], np.ones(len(data))])
    return np.linalg.lstsq(a, data[:, 2], rcond=None)[0]


def train(db, name, model=LINEAR, loss='squared', data='houses', weights='{"a": 0, "b": 0, "c": 0}', **options):
    args = ', '.join(f'{k} => %({k})s' for k in options)
    return db.execute(f"SELECT * FROM pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, %(weights)s"
                      f"{', ' + args if args else ''})",
                      dict(name=name, model=model, loss=loss, data=data, weights=weights, **options)).fetchall()


def model_rows(db, name):
    return db.execute('SELECT group_key, weights, final_loss, iterations, loss_history, rows, scoring_function '
                      'FROM pgad.models WHERE name = %s ORDER BY group_key::text', [name]).fetchall()


def test_train_stores_a_model_and_scores_it_in_sql(db):
    [row] = train(db, 'prices', label='price', optimizer='lbfgs', iterations=200)
    data, _ = houses(db)
    expected = lstsq(data)
    [(key, weights, loss, iterations, history, rows, function)] = model_rows(db, 'prices')
    assert key is None and rows == 300 and function == 'pgad_models.prices(pg_catalog.float8, pg_catalog.float8)'
    # the least-squares optimum, to 1e-6 (lbfgs stops at machine precision on this smooth convex loss)
    assert [weights[k] for k in 'abc'] == pytest.approx(expected, abs=1e-6)
    assert len(history) == iterations and history[-1] == pytest.approx(loss, rel=1e-9)
    assert loss == pytest.approx(np.mean((data[:, :2] @ expected[:2] + expected[2] - data[:, 2]) ** 2), rel=1e-9)
    scored = db.execute('SELECT pgad_models.prices(sqft, rooms), %s*sqft + %s*rooms + %s FROM houses',
                        [weights['a'], weights['b'], weights['c']]).fetchall()
    assert all(s == pytest.approx(h, rel=1e-14) for s, h in scored)
    kind = db.execute("SELECT provolatile, proparallel, l.lanname, pg_get_function_arguments(p.oid) FROM pg_proc p "
                      "JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = 'pgad_models.prices'::regproc").fetchone()
    assert kind == ('i', 's', 'sql', 'sqft double precision, rooms double precision')
    assert row[0] == 'prices'


def test_the_scoring_function_takes_the_columns_in_order_of_first_appearance_and_is_inlined(db):
    train(db, 'order', model='λ(d, w) w.b*d.rooms + w.a*d.sqft + w.c', label='price', optimizer='lbfgs')
    assert db.execute("SELECT pg_get_function_arguments('pgad_models.order'::regproc)").fetchone()[0] == \
        'rooms double precision, sqft double precision'
    plan = '\n'.join(r[0] for r in db.execute('EXPLAIN VERBOSE SELECT pgad_models."order"(rooms, sqft) FROM houses'))
    assert 'pgad_models' not in plan and 'rooms' in plan  # the body, not a call


def test_a_boolean_column_is_a_boolean_argument_of_the_scoring_function(db):
    """A model that reads a column where PostgreSQL takes a boolean trains on it (the loader's 1 or 0) and is scored
    with the boolean itself."""
    data = 'SELECT sqft, price, rooms > 2 AS big FROM houses'
    train(db, 'flagged', model='λ(d, w) CASE WHEN d.big THEN w.a ELSE w.b END*d.sqft + w.c', data=data,
          label='price', optimizer='lbfgs', iterations=200)
    assert db.execute("SELECT pg_get_function_arguments('pgad_models.flagged'::regproc)").fetchone()[0] == \
        'big boolean, sqft double precision'
    [(_, weights, *_)] = model_rows(db, 'flagged')
    scored = db.execute(f'SELECT pgad_models.flagged(big, sqft), CASE WHEN big THEN %s ELSE %s END*sqft + %s '
                        f'FROM ({data}) AS d', [weights['a'], weights['b'], weights['c']]).fetchall()
    assert all(s == pytest.approx(h, rel=1e-14) for s, h in scored)
    assert weights['a'] != pytest.approx(weights['b'], rel=1e-3)  # the flag splits the rows


@pytest.mark.parametrize('loss, lambda_loss, label_column', [
    ('squared', '(p - d.price)^2', 'price'),
    ('absolute', 'abs(p - d.price)', 'price'),
    ('logistic', 'ln(1 + exp(p)) - d.y*p', 'y'),
    ('hinge', 'greatest(0, 1 - d.y*p)', 'y'),
])
def test_each_named_loss_is_the_lambda_it_stands_for(db, loss, lambda_loss, label_column):
    data = 'houses' if label_column == 'price' else "SELECT x1 AS sqft, x2 AS rooms, 2*y - 1 AS y FROM labels" \
        if loss == 'hinge' else 'SELECT x1 AS sqft, x2 AS rooms, y FROM labels'
    options = dict(optimizer='gd', learning_rate=0.001 if label_column == 'price' else 0.1, iterations=30)
    [named] = train(db, f'named_{loss}', loss=loss, data=data, label=label_column, **options)
    [by_lambda] = train(db, f'lambda_{loss}', loss=f'λ(p, d) {lambda_loss}', data=data, **options)
    assert named[4] == pytest.approx(by_lambda[4], rel=1e-9, abs=1e-12)  # same objective, written two ways


def test_train_matches_gradient_descent_on_the_objective(db):
    [row] = train(db, 'as_gd', label='price', optimizer='gd', learning_rate=0.01, iterations=50)
    weights, loss, _ = db.execute(
        "SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.sqft + w.b*d.rooms + w.c - d.price)^2', 'houses', "
        "'{\"a\": 0, \"b\": 0, \"c\": 0}', 0.01, 50)").fetchone()
    assert row[4] == weights and row[5] == loss  # bit for bit: the same kernel, the same steps


def test_retraining_replaces_the_model_and_keeps_views_working(db):
    train(db, 'retrained', label='price', optimizer='lbfgs', data='SELECT * FROM houses WHERE region = \'north\'')
    oid = db.execute("SELECT 'pgad_models.retrained'::regproc::oid").fetchone()[0]
    db.execute('CREATE VIEW scored AS SELECT id, pgad_models.retrained(sqft, rooms) AS p FROM houses')
    before = db.execute('SELECT p FROM scored WHERE id = 3').fetchone()[0]
    train(db, 'retrained', label='price', optimizer='lbfgs', data='SELECT * FROM houses WHERE region = \'south\'')
    assert len(model_rows(db, 'retrained')) == 1
    assert db.execute("SELECT 'pgad_models.retrained'::regproc::oid").fetchone()[0] == oid
    after = db.execute('SELECT p FROM scored WHERE id = 3').fetchone()[0]
    assert after == pytest.approx(before - 50, abs=0.5)  # north's offset 30, south's -20
    # new arguments would drop the function the view uses: refused, and the model stays as it was
    e = error_of(db, "SELECT pgad.train('retrained', 'λ(d, w) w.a*d.sqft + w.c', 'squared', 'houses', "
                     "'{\"a\": 0, \"c\": 0}', label => 'price')")
    assert e.sqlstate == '2BP01' and 'view scored' in e.message_detail
    assert db.execute('SELECT p FROM scored WHERE id = 3').fetchone()[0] == after
    db.execute('DROP VIEW scored')
    train(db, 'retrained', model='λ(d, w) w.a*d.sqft + w.c', label='price', weights='{"a": 0, "c": 0}',
          optimizer='lbfgs')
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'retrained'").fetchone()[0] == 1
    assert db.execute("SELECT pg_get_function_arguments('pgad_models.retrained'::regproc)").fetchone()[0] == \
        'sqft double precision'


# Retraining under the same name with the same argument types but another result (a number, then a vector) or other
# argument names: CREATE OR REPLACE cannot change those (42P13), so the old function is dropped and the new created,
# in the caller's transaction, unless another object depends on it.
VECTOR = 'λ(d, w) w.m @ [d.sqft, d.rooms] + w.c'
VECTOR_WEIGHTS = '{"m": [[0, 0], [0, 0]], "c": [0, 0]}'
VECTOR_LOSS = 'λ(p, d) (p[1] - d.price)^2 + (p[2] - d.rooms)^2'


def number(db, name, **options):
    train(db, name, label='price', optimizer='lbfgs', **options)
    w = model_rows(db, name)[0][1]
    return lambda sqft, rooms: w['a'] * sqft + w['b'] * rooms + w['c']


def vector(db, name, **options):
    train(db, name, model=VECTOR, loss=VECTOR_LOSS, weights=VECTOR_WEIGHTS, optimizer='lbfgs', **options)
    w = model_rows(db, name)[0][1]
    return lambda sqft, rooms: list(np.array(w['m']) @ [sqft, rooms] + w['c'])


def scored(db, name):
    return db.execute(f'SELECT pgad_models.{name}(2.5, 3)').fetchone()[0]


def result_type(db, name):
    return db.execute("SELECT string_agg(prorettype::regtype::text, ', ') FROM pg_proc WHERE proname = %s",
                      [name]).fetchone()[0]


def test_retraining_a_number_model_as_a_vector_model_and_back_replaces_the_function(db):
    """On 0.12.0 the second training was 42P13 "cannot change return type of existing function": the model could
    not be retrained under its name."""
    expected = number(db, 'reshaped')
    assert scored(db, 'reshaped') == pytest.approx(expected(2.5, 3), rel=1e-12)
    expected = vector(db, 'reshaped')
    assert result_type(db, 'reshaped') == 'double precision[]'
    assert scored(db, 'reshaped') == pytest.approx(expected(2.5, 3), rel=1e-12)
    expected = number(db, 'reshaped')
    assert result_type(db, 'reshaped') == 'double precision'
    assert scored(db, 'reshaped') == pytest.approx(expected(2.5, 3), rel=1e-12)
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'reshaped'").fetchone()[0] == 1


@pytest.mark.parametrize('group_by', [None, 'region'])
def test_retraining_with_renamed_arguments_replaces_the_function(db, group_by):
    """λ(d, w) w.a*d.sqft + w.c, then w.a*d.rooms + w.c: both take one float8 (after the group column), named sqft,
    then rooms (42P13 "cannot change name of input parameter" on 0.12.0). A model with vectors takes no group_by."""
    name, grouped = f'renamed_{group_by or "alone"}', dict(group_by=group_by) if group_by else {}
    for column in ('sqft', 'rooms'):
        train(db, name, model=f'λ(d, w) w.a*d.{column} + w.c', weights='{"a": 0, "c": 0}', label='price',
              optimizer='lbfgs', **grouped)
    key, w = model_rows(db, name)[0][:2]
    assert db.execute(f"SELECT pg_get_function_arguments('pgad_models.{name}'::regproc)").fetchone()[0] == \
        ('region text, ' if group_by else '') + 'rooms double precision'
    group = [key['region']] if group_by else []
    assert db.execute(f'SELECT pgad_models.{name}({"%s, " * len(group)}rooms => 3)', group).fetchone()[0] == \
        pytest.approx(3 * w['a'] + w['c'], rel=1e-12)


def test_a_view_stops_a_retraining_that_changes_the_result_type_and_changes_nothing(db):
    expected = number(db, 'viewed_number')
    oid = db.execute("SELECT 'pgad_models.viewed_number'::regproc::oid").fetchone()[0]
    before = model_rows(db, 'viewed_number')
    db.execute('CREATE VIEW viewed_numbers AS SELECT id, pgad_models.viewed_number(sqft, rooms) AS p FROM houses')
    try:
        e = error_of(db, "SELECT pgad.train('viewed_number', %s, %s, 'houses', %s)",
                     [VECTOR, VECTOR_LOSS, VECTOR_WEIGHTS])
        assert (e.sqlstate, e.message_primary) == (
            '2BP01', 'cannot replace the scoring function of model "viewed_number": its result changes from double '
                     'precision to double precision[], and other objects depend on it')
        assert 'view viewed_numbers' in e.message_detail and 'Drop or change those objects' in e.message_hint
        assert db.execute("SELECT 'pgad_models.viewed_number'::regproc::oid").fetchone()[0] == oid
        assert model_rows(db, 'viewed_number') == before
        assert result_type(db, 'viewed_number') == 'double precision'
        assert db.execute('SELECT p FROM viewed_numbers WHERE id = 3').fetchone()[0] == pytest.approx(
            expected(*db.execute('SELECT sqft, rooms FROM houses WHERE id = 3').fetchone()), rel=1e-12)
    finally:
        db.execute('DROP VIEW viewed_numbers')
    vector(db, 'viewed_number')  # the view gone, the retraining goes through
    assert result_type(db, 'viewed_number') == 'double precision[]'


def test_a_function_pgad_did_not_create_is_never_dropped_for_a_new_result_type(db):
    """The caller's own pgad_models.mine(sqft float8, rooms float8) RETURNS text: CREATE OR REPLACE cannot give it
    the model's result, and pgad drops only what it created: a clear 42P13, and the function stays."""
    db.execute('CREATE FUNCTION pgad_models.mine(sqft float8, rooms float8) RETURNS text LANGUAGE sql '
               "RETURN 'my own'")
    try:
        e = error_of(db, "SELECT pgad.train('mine', %s, 'squared', 'houses', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                         "label => 'price')", [LINEAR])
        assert (e.sqlstate, e.message_primary) == (
            '42P13', 'function pgad_models.mine(pg_catalog.float8, pg_catalog.float8) exists, and pgad.train did not '
                     'create it for model "mine"')
        assert (e.message_detail, e.message_hint) == (
            'The scoring function would replace it, but its result changes from text to double precision, which '
            'CREATE OR REPLACE cannot change; pgad.train drops only the functions it created.',
            'Drop the function (DROP FUNCTION pgad_models.mine(pg_catalog.float8, pg_catalog.float8)), or train the '
            'model under another name.')
        assert db.execute('SELECT pgad_models.mine(1, 2)').fetchone()[0] == 'my own'
        assert model_rows(db, 'mine') == []
    finally:
        db.execute('DROP FUNCTION pgad_models.mine(float8, float8)')
    db.execute('CREATE FUNCTION pgad_models.mine_explain(sqft float8, rooms float8) RETURNS text LANGUAGE sql '
               "RETURN 'my own'")
    try:  # so with a function of the name of the model's explain function
        e = error_of(db, "SELECT pgad.train('mine', %s, 'squared', 'houses', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                         "label => 'price')", [LINEAR])
        assert (e.sqlstate, e.message_detail) == (
            '42P13', 'The explain function would replace it, but its result changes from text to jsonb, which CREATE OR '
                     'REPLACE cannot change; pgad.train drops only the functions it created.')
        assert model_rows(db, 'mine') == []
    finally:
        db.execute('DROP FUNCTION pgad_models.mine_explain(float8, float8)')


def test_a_failed_training_leaves_the_old_model_as_it_was(db):
    train(db, 'kept', label='price', optimizer='lbfgs')
    stored = model_rows(db, 'kept')
    e = error_of(db, "SELECT pgad.train('kept', %s, 'squared', 'houses', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                     "learning_rate => 10, label => 'price')", [LINEAR])
    assert e.sqlstate == '22003' and 'diverged' in e.message_primary
    assert model_rows(db, 'kept') == stored
    assert db.execute('SELECT pgad_models.kept(1, 1)').fetchone()[0] == pytest.approx(127 + 5, abs=30)


def test_one_model_per_group(db):
    stored = train(db, 'by_region', label='price', optimizer='lbfgs', group_by='region')
    assert len(stored) == 3
    for key, weights, *_ in model_rows(db, 'by_region'):
        data, _ = houses(db, f"WHERE region = '{key['region']}'")
        assert [weights[k] for k in 'abc'] == pytest.approx(lstsq(data), abs=1e-6)
    assert db.execute("SELECT pg_get_function_arguments('pgad_models.by_region'::regproc)").fetchone()[0] == \
        'region text, sqft double precision, rooms double precision'
    worst = db.execute("SELECT max(abs(pgad_models.by_region(region, sqft, rooms) - price)) FROM houses").fetchone()[0]
    assert worst < 1.0  # the noise is 0.5·sin
    assert db.execute("SELECT pgad_models.by_region('west', 1, 1)").fetchone()[0] is None  # a group not seen


def test_groups_of_several_columns_with_nulls_and_quotes(db):
    db.execute("CREATE TABLE odd AS SELECT x::float8 AS x, 3*x + k AS y, CASE WHEN k = 0 THEN NULL ELSE "
               "'it''s \\ ' || k END AS tag, k % 2 AS parity, k FROM generate_series(1, 20) AS x, "
               "generate_series(0, 2) AS k")
    train(db, 'odd', model='λ(d, w) w.a*d.x + w.b + 0*d.k', weights='{"a": 0, "b": 0}', data='odd',
          optimizer='lbfgs', group_by='tag, parity')
    keys = [k for k, *_ in model_rows(db, 'odd')]
    assert {'tag': None, 'parity': 0} in keys and {'tag': "it's \\ 1", 'parity': 1} in keys
    assert db.execute("SELECT pg_get_function_arguments('pgad_models.odd'::regproc)").fetchone()[0] == \
        'tag text, parity integer, x double precision, k double precision'
    scored = db.execute('SELECT pgad_models.odd(tag, parity, x, k) - y FROM odd').fetchall()
    assert max(abs(s) for s, in scored) < 1e-6


def test_sgd_with_a_seed_gives_the_same_weights_twice(db):
    options = dict(label='price', optimizer='sgd', batch_size=16, seed=42, learning_rate=0.001, iterations=5)
    first = train(db, 'sgd_a', **options)[0][4]
    second = train(db, 'sgd_b', **options)[0][4]
    other = train(db, 'sgd_c', **{**options, 'seed': 43})[0][4]
    assert first == second and first != other


def test_tolerance_stops_early_and_the_history_has_one_loss_per_iteration(db):
    [row] = train(db, 'tolerant', label='price', optimizer='adam', learning_rate=0.5, iterations=5000,
                  batch_size=1000, tolerance=1e-9)
    (_, _, loss, iterations, history, _, _), = model_rows(db, 'tolerant')
    assert iterations < 5000 and len(history) == iterations and history[-1] == pytest.approx(loss)


def test_l2_regularises_the_weights_named(db):
    lam = 0.5
    train(db, 'ridge', label='price', optimizer='lbfgs', l2=lam, regularize='["a", "b"]', iterations=500)
    data, _ = houses(db)
    n = len(data)
    a = np.column_stack([data[:, 0], data[:, 1], np.ones(n)])
    # mean((a w - y)^2) + lam (w_a^2 + w_b^2): (aᵀa/n + lam·P) w = aᵀy/n, P = diag(1, 1, 0)
    expected = np.linalg.solve(a.T @ a / n + lam * np.diag([1, 1, 0]), a.T @ data[:, 2] / n)
    (_, weights, *_), = model_rows(db, 'ridge')
    assert [weights[k] for k in 'abc'] == pytest.approx(expected, abs=1e-6)


def test_standardize_returns_weights_in_the_original_units(db):
    db.execute('CREATE TABLE scaled AS SELECT 1000 + 500*x AS big, 0.001*x*x AS tiny, 3 + 0.002*(1000 + 500*x) '
               '- 4000*(0.001*x*x) AS y FROM generate_series(0, 1, 0.01) AS x')
    train(db, 'standard', model='λ(d, w) w.a*d.big + w.b*d.tiny + w.c', data='scaled', optimizer='gd',
          learning_rate=0.3, iterations=3000, standardize=True)
    (_, weights, *_), = model_rows(db, 'standard')
    assert [weights[k] for k in 'abc'] == pytest.approx([0.002, -4000, 3], rel=1e-6)
    e = error_of(db, "SELECT pgad.train('unstandard', 'λ(d, w) w.a*d.big^2 + w.c', 'squared', 'scaled', "
                     "'{\"a\": 0, \"c\": 0}', standardize => true)")
    assert e.sqlstate == '0A000' and '"big"' in e.message_primary


def test_progress_is_reported_every_progress_every_iterations(db):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    train(db, 'noisy', label='price', optimizer='gd', learning_rate=0.001, iterations=30, progress_every=10)
    progress = [n for n in notices if n.startswith('model "noisy": iteration ')]
    assert len(progress) == 3 and progress[0].startswith('model "noisy": iteration 10 of 30, loss ')
    assert progress[0].endswith(' rows/s')
    notices.clear()
    db.execute('SET client_min_messages = warning')
    train(db, 'quiet', label='price', optimizer='gd', learning_rate=0.001, iterations=30, progress_every=10)
    db.execute('RESET client_min_messages')
    shown = [n for n in notices if 'publishes values of the data' not in n]  # that is test_published_values.py's
    assert shown == ['model "quiet": optimizer "gd" did not converge in its 30 iterations: its gradient measure '
                     f'{shown[0].split("measure ")[1].split(" ")[0]} is above the criterion\'s bound']  # a WARNING


def test_the_catalog_records_how_and_by_whom(db):
    train(db, 'recorded', label='price', optimizer='lbfgs', iterations=7)
    row = db.execute("SELECT model, loss, options, data, trained_by, training_time > '0', trained_at <= now() + "
                     "'1 minute' FROM pgad.models WHERE name = 'recorded'").fetchone()
    assert row[:2] == (LINEAR, 'squared') and row[2]['optimizer'] == 'lbfgs' and row[2]['iterations'] == 7
    assert row[2]['learning_rate'] == 0.05 and row[3] == 'houses' and row[4] == 'postgres' and row[5] and row[6]


def test_drop_model_drops_the_rows_and_the_function(db):
    train(db, 'dropped', label='price', optimizer='lbfgs', group_by='region')
    db.execute("SELECT pgad.drop_model('dropped')")
    assert model_rows(db, 'dropped') == []
    assert db.execute("SELECT to_regproc('pgad_models.dropped')").fetchone()[0] is None
    e = error_of(db, "SELECT pgad.drop_model('dropped')")
    assert e.sqlstate == '42704' and e.message_primary == 'model "dropped" does not exist'


BAD = [
    (dict(optimizer='irls'), '22023', 'unknown optimizer "irls"'),
    (dict(loss='quadratic'), '22023', 'unknown loss "quadratic"'),
    (dict(batch_size=0), '22023', 'batch_size must be a positive integer, not 0'),
    (dict(group_by='regoin'), '42703', 'column "regoin" of group_by does not exist in the data'),
    (dict(name=''), '42602', 'invalid model name ""'),
    (dict(name='x' * 64), '42602', 'invalid model name'),
    (dict(label='cost'), '42703', 'the label column "cost" is not in the data'),
    (dict(loss='λ(p, d) (p - d.price)^2 + w.a'), '42P01', '"w" is not the data row "d"'),
    (dict(l2=-1), '22023', 'l2 must be 0 or a positive number, not -1'),
    (dict(regularize='["z"]'), '22023', 'weight "z" of regularize is not a weight of the model'),
    (dict(seed=-1), '22023', 'seed must be 0 or a positive number, not -1'),
    (dict(name=None), '22004', 'argument "name" of pgad.train must not be NULL'),
    (dict(optimizer='lbfgs', l1=0.1), '22023', 'optimizer "lbfgs" does not take l1'),
]


@pytest.mark.parametrize('change, sqlstate, words', BAD)
def test_bad_input_is_a_clear_error_and_stores_nothing(db, change, sqlstate, words):
    args = dict(name='bad', model=LINEAR, loss='squared', data='houses', weights='{"a": 0, "b": 0, "c": 0}',
                label='price')
    args.update(change)
    e = error_of(db, 'SELECT * FROM pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, %(weights)s, ' +
                 ', '.join(f'{k} => %({k})s' for k in args if k not in ('name', 'model', 'loss', 'data', 'weights')) +
                 ')', args)
    assert e.sqlstate == sqlstate and words in e.message_primary
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'bad'").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'bad'").fetchone()[0] == 0


def test_a_name_is_quoted_never_spliced(db):
    name = 'x"(); DROP TABLE houses; --'
    train(db, name, label='price', optimizer='lbfgs', iterations=5)
    assert db.execute('SELECT count(*) FROM houses').fetchone()[0] == 300
    assert db.execute('SELECT pgad_models."x""(); DROP TABLE houses; --"(1, 2) IS NOT NULL').fetchone()[0]
    db.execute('SELECT pgad.drop_model(%s)', [name])


def test_roles_need_create_on_pgad_models_and_keep_their_own_models(db, cluster, dbname):
    db.execute('DROP ROLE IF EXISTS analyst; CREATE ROLE analyst LOGIN; GRANT SELECT ON houses TO analyst')
    db.execute('DROP ROLE IF EXISTS other; CREATE ROLE other LOGIN; GRANT SELECT ON houses TO other')
    with psycopg.connect(cluster.conninfo(dbname, user='analyst'), autocommit=True) as analyst:
        e = error_of(analyst, "SELECT pgad.train('mine', %s, 'squared', 'houses', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                              "label => 'price')", [LINEAR])
        assert e.sqlstate == '42501' and e.message_primary == 'permission denied for schema pgad_models'
        assert 'GRANT CREATE ON SCHEMA pgad_models' in e.message_hint
        db.execute('GRANT CREATE ON SCHEMA pgad_models TO analyst, other')
        train(analyst, 'mine', label='price', optimizer='lbfgs', iterations=5)
        assert analyst.execute("SELECT trained_by FROM pgad.models WHERE name = 'mine'").fetchone()[0] == 'analyst'
    with psycopg.connect(cluster.conninfo(dbname, user='other'), autocommit=True) as other:
        e = error_of(other, "SELECT pgad.train('mine', %s, 'squared', 'houses', '{\"a\": 0, \"b\": 0, \"c\": 0}', "
                            "label => 'price')", [LINEAR])
        assert e.sqlstate == '42501' and e.message_primary == 'model "mine" belongs to role "analyst"'
        assert error_of(other, "SELECT pgad.drop_model('mine')").sqlstate == '42501'
        assert error_of(other, "DELETE FROM pgad.models WHERE name = 'mine'").sqlstate == '42501'  # pgad writes it
        assert other.execute("SELECT pgad_models.mine(1, 1) IS NOT NULL").fetchone()[0]  # anyone may score
    db.execute("SELECT pgad.drop_model('mine')")  # a superuser may drop any
    db.execute('REVOKE ALL ON SCHEMA pgad_models FROM analyst, other; REVOKE ALL ON houses FROM analyst, other; '
               'DROP ROLE analyst; DROP ROLE other')


def test_training_and_scoring_under_a_hostile_search_path(db):
    db.execute('CREATE SCHEMA IF NOT EXISTS evil')
    db.execute('CREATE FUNCTION evil.float8mul(float8, float8) RETURNS float8 LANGUAGE sql AS $$ SELECT 0::float8 $$')
    db.execute('CREATE OPERATOR evil.* (FUNCTION = evil.float8mul, LEFTARG = float8, RIGHTARG = float8)')
    db.execute('CREATE FUNCTION evil.exp(float8) RETURNS float8 LANGUAGE sql AS $$ SELECT 0::float8 $$')
    train(db, 'guarded', model='λ(d, w) sigmoid(w.a*d.x1 + w.b*d.x2 + w.c)', loss='logistic',
          data='labels', weights='{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs', iterations=5)
    clean = db.execute('SELECT pgad_models.guarded(x1, x2) FROM labels ORDER BY id').fetchall()
    db.execute('SET search_path = evil, pg_catalog, public')
    try:
        assert db.execute('SELECT pgad_models.guarded(x1, x2) FROM labels ORDER BY id').fetchall() == clean
        train(db, 'guarded', model='λ(d, w) sigmoid(w.a*d.x1 + w.b*d.x2 + w.c)', loss='logistic',
              data='labels', weights='{"a": 0, "b": 0, "c": 0}', optimizer='lbfgs', iterations=5)
        assert db.execute('SELECT pgad_models.guarded(x1, x2) FROM labels ORDER BY id').fetchall() == clean
    finally:
        db.execute('RESET search_path')
        db.execute('DROP SCHEMA evil CASCADE')


def test_pg_dump_and_restore_keep_the_models(db, cluster, dbname):
    train(db, 'dumped', label='price', optimizer='lbfgs', group_by='region')
    before = db.execute("SELECT pgad_models.dumped(region, sqft, rooms) FROM houses ORDER BY id").fetchall()
    port = str(cluster.settings['port'])
    dump = subprocess.run(['pg_dump', '-h', '127.0.0.1', '-p', port, '-U', 'postgres', '-d', dbname],
                          capture_output=True, text=True, check=True).stdout
    restored = new_database(cluster, 'restored')
    subprocess.run(['psql', '-h', '127.0.0.1', '-p', port, '-U', 'postgres', '-d', restored, '-v', 'ON_ERROR_STOP=1',
                    '-q'], input=dump, capture_output=True, text=True, check=True)
    with psycopg.connect(cluster.conninfo(restored), autocommit=True) as copy:
        assert copy.execute("SELECT pgad_models.dumped(region, sqft, rooms) FROM houses ORDER BY id").fetchall() \
            == before
        assert copy.execute("SELECT count(*) FROM pgad.models WHERE name = 'dumped'").fetchone()[0] == 3
        copy.execute("SELECT pgad.drop_model('dumped')")
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE {restored} WITH (FORCE)')


def test_statement_timeout_stops_training_and_stores_nothing(db):
    """A mini-batch of one row is 200,000 kernel calls an epoch: the loop checks for interrupts between them."""
    db.execute('CREATE TABLE IF NOT EXISTS many AS SELECT random() AS x, random() AS y FROM generate_series(1, 200000)')
    db.execute("SET statement_timeout = '1s'")
    try:
        e = error_of(db, "SELECT pgad.train('slow', 'λ(d, w) w.a*d.x + w.b + w.c*sin(d.x)', 'squared', 'many', "
                         "'{\"a\": 0, \"b\": 0, \"c\": 0}', optimizer => 'sgd', batch_size => 1, "
                         "iterations => 100000000, learning_rate => 1e-9)")
    finally:
        db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014' and e.message_primary == 'canceling statement due to statement timeout'
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'slow'").fetchone()[0] == 0
    assert db.execute("SELECT to_regproc('pgad_models.slow')").fetchone()[0] is None


# --- a model with no weight to fit (issue 34, item 5a) ---------------------------------------------------------------
# A model that reads no weight (R's glm fits y ~ 0 + offset(x)) has nothing to fit: every optimizer gives the
# objective at it, 0 iterations, the weights given back as they came; it was XX000 "need at least one array to
# concatenate". Weights given but not read by the model are the same case.
FIXED = 'λ(d, w) (100*d.sqft - d.price)^2'


def fixed_loss(db):
    """The mean squared error of the prediction 100·sqft, computed by PostgreSQL."""
    return db.execute('SELECT avg((100 * sqft - price)^2) FROM houses').fetchone()[0]


@pytest.mark.parametrize('weights', ['{}', '{"a": 0.5}'])
@pytest.mark.parametrize('optimizer', ['gd', 'sgd', 'momentum', 'adam', 'lbfgs', 'newton'])
def test_a_model_with_no_weight_to_fit_is_its_loss(db, optimizer, weights):
    name = f'fixed_{optimizer}'
    rate = {} if optimizer in ('lbfgs', 'newton') else dict(learning_rate=0.01)  # they take none (22023)
    train(db, name, 'λ(d, w) 100*d.sqft', weights=weights, label='price', optimizer=optimizer, **rate)
    [(_, fitted, loss, iterations, history, rows, _)] = model_rows(db, name)
    assert (fitted, iterations, history, rows) == (json.loads(weights), 0, [], 300)
    assert loss == pytest.approx(fixed_loss(db), rel=1e-12)
    assert db.execute(f'SELECT pgad_models.{name}(2.5), pgad_models.{name}(NULL)').fetchone() == (250.0, None)
    metrics = dict(db.execute(f"SELECT metric, value FROM pgad.evaluate('{name}', 'houses')").fetchall())
    assert metrics['mse'] == pytest.approx(fixed_loss(db), rel=1e-12) and metrics['rows'] == 300
    if optimizer == 'gd':  # no coefficient: summary's table, like the Hessian, has a row per weight the model reads
        assert db.execute(f"SELECT count(*) FROM pgad.summary('{name}')").fetchone()[0] == 0


@pytest.mark.parametrize('weights', ['{}', '{"a": 0.5}'])
def test_the_functions_and_aggregates_of_a_lambda_with_no_weight(db, weights):
    expected, kept = fixed_loss(db), json.loads(weights)
    assert db.execute("SELECT pgad.loss(%s, 'houses', %s)", (FIXED, weights)).fetchone()[0] == \
        pytest.approx(expected, rel=1e-12)
    assert db.execute("SELECT pgad.gradient(%s, 'houses', %s)", (FIXED, weights)).fetchone()[0] == \
        {k: 0 for k in kept}
    assert db.execute("SELECT pgad.hessian(%s, 'houses', %s)", (FIXED, weights)).fetchone()[0] == {}
    fitted, loss, iterations = db.execute("SELECT (f).weights, (f).loss, (f).iterations FROM "
                                          "pgad.gradient_descent(%s, 'houses', %s) AS f", (FIXED, weights)).fetchone()
    assert (fitted, iterations) == (kept, 0) and loss == pytest.approx(expected, rel=1e-12)
    agg = db.execute('SELECT pgad.loss_agg(%s, %s, t), pgad.gradient_agg(%s, %s, t), '
                     '(pgad.gradient_descent_agg(%s, %s, t)).iterations FROM houses AS t',
                     (FIXED, weights) * 3).fetchone()
    assert agg[0] == pytest.approx(expected, rel=1e-12) and agg[1:] == ({k: 0 for k in kept}, 0)
