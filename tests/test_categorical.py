"""Categorical features: a weight indexed by a text, varchar, enum, boolean or integer column (pgad/categorical.py),
through SQL against a real server: gradients against finite differences and against the same model one-hot encoded
as float columns, every backend and both modes against each other, training against numpy's least squares on the
one-hot design, the scoring function's CASE, group_by, hostile category values, and the refusals."""
import json

import numpy as np
import psycopg
import pytest

from conftest import error_of, new_database

REGIONS = ['east', 'north', 'south', "o'hare \\ $$x$$"]


@pytest.fixture(scope='module')
def houses(dbname, cluster):
    """A table of 60 houses: a text region (one of them hostile), an enum, a boolean, an integer, sqft and price."""
    rng = np.random.default_rng(7)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        db.execute('CREATE TABLE houses (region text, mood mood, garden boolean, floors int, sqft float8, '
                   'price float8)')
        effect = {'east': 1.0, 'north': -2.0, 'south': 0.5, REGIONS[3]: 3.0}
        rows = []
        for k in range(60):
            r = REGIONS[k % 4]
            m = ['sad', 'ok', 'happy'][k % 3]
            g = bool(k % 2)
            f = 1 + k % 5
            x = float(rng.normal())
            rows.append((r, m, g, f, x, effect[r] + 0.5 * x + (m == 'happy') * 0.7 + g * 0.3 + 0.1 * f
                         + float(rng.normal()) * 0.1))
        with db.cursor() as cur:
            cur.executemany('INSERT INTO houses VALUES (%s, %s, %s, %s, %s, %s)', rows)
    return rows


def fetch(db, sql, params=None):
    return db.execute(sql, params).fetchone()[0]


def one_hot(rows, column, keys):
    return np.array([[float(r[column] == k) for k in keys] for r in rows])


def test_gradient_matches_one_hot_model(db, houses):
    """The gradient of a categorical weight is the gradient of the same model on one-hot float columns."""
    loss = 'λ(d, w) (w.region[d.region] + w.a*d.sqft - d.price)^2'
    start = {'region': {'north': 0.5, 'south': -0.25}, 'a': 0.3}
    got = json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text', (loss, 'houses', json.dumps(start))))
    keys = sorted(REGIONS)  # text's order in the test's collation is the categories' order (C or en_US)
    assert set(got['region']) == set(REGIONS)
    X = one_hot(houses, 0, keys)
    b = np.array([start['region'].get(k, 0.0) for k in keys])
    x = np.array([r[4] for r in houses])
    y = np.array([r[5] for r in houses])
    resid = X @ b + 0.3 * x - y
    want = 2 * X.T @ resid / len(y)
    for k, key in enumerate(keys):
        assert got['region'][key] == pytest.approx(want[k], rel=1e-12, abs=1e-12)
    assert got['a'] == pytest.approx(float(2 * x @ resid / len(y)), rel=1e-12)


def lstsq_fit(rows, columns):
    """The least-squares coefficients of price on the one-hot designs of columns ((index, keys), …) and sqft."""
    X = np.hstack([one_hot(rows, c, keys) for c, keys in columns] + [np.array([[r[4]] for r in rows])])
    y = np.array([r[5] for r in rows])
    return np.linalg.lstsq(X, y, rcond=None)[0]


@pytest.mark.parametrize('column, index, keys', [
    ('region', 0, sorted(REGIONS)), ('mood', 1, ['sad', 'ok', 'happy']), ('garden', 2, [False, True]),
    ('floors', 3, [1, 2, 3, 4, 5])])
def test_train_matches_least_squares(db, houses, column, index, keys):
    """pgad.train with a category of each kind reaches the one-hot least squares solution; the stored weights are an
    object by category (the column's text), the scoring function gives the fitted prediction."""
    name = f'cat_{column}'
    db.execute("SELECT pgad.train(%s, %s, 'squared', 'houses', %s, label => 'price', optimizer => 'lbfgs', "
               'iterations => 500, tolerance => 1e-14)',
               (name, f'λ(d, w) w.c[d.{column}] + w.a*d.sqft', json.dumps({'c': {}, 'a': 0})))
    weights = json.loads(fetch(db, 'SELECT weights::text FROM pgad.models WHERE name = %s', (name,)))
    want = lstsq_fit(houses, [(index, keys)])
    text = [str(k).lower() if isinstance(k, bool) else str(k) for k in keys]
    assert sorted(weights['c']) == sorted(text)  # jsonb orders an object's keys its own way
    np.testing.assert_allclose([weights['c'][t] for t in text] + [weights['a']], want, rtol=1e-6, atol=1e-7)
    got = db.execute(f'SELECT pgad_models.{name}(h.{column}, h.sqft) FROM houses AS h').fetchall()
    np.testing.assert_allclose([g for g, in got], [want[keys.index(r[index])] + want[-1] * r[4] for r in houses],
                               rtol=1e-6, atol=1e-7)


LOSS = 'λ(d, w) (w.region[d.region] + w.m[d.mood] * d.sqft + w.a*d.sqft - d.price)^2'
START = {'region': {'north': 0.5, 'east': -0.2}, 'm': {'ok': 0.1}, 'a': 0.3}


def flat(weights):
    """The weights jsonb as {name or 'weight[category]': number}."""
    return {f'{n}[{k}]' if isinstance(v, dict) else n: x for n, v in weights.items()
            for k, x in (v.items() if isinstance(v, dict) else [(None, v)])}


def nested(values):
    out = {}
    for name, x in values.items():
        if '[' in name:
            n, k = name.split('[', 1)
            out.setdefault(n, {})[k[:-1]] = x
        else:
            out[name] = x
    return out


def test_gradient_matches_finite_differences(db, houses):
    """Each entry of each categorical weight's gradient against central differences of pgad.loss (rel 1e-6)."""
    got = flat(json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text', (LOSS, 'houses', json.dumps(START)))))
    base = {**flat({'region': dict.fromkeys(REGIONS, 0.0), 'm': dict.fromkeys(['sad', 'ok', 'happy'], 0.0)}),
            **flat(START)}
    assert set(got) == set(base)
    h = 1e-5
    for name in base:
        up, down = dict(base), dict(base)
        up[name] += h
        down[name] -= h
        f = [fetch(db, 'SELECT pgad.loss(%s, %s, %s)', (LOSS, 'houses', json.dumps(nested(v)))) for v in (up, down)]
        assert got[name] == pytest.approx((f[0] - f[1]) / (2 * h), rel=1e-6, abs=1e-8), name


@pytest.mark.parametrize('mode, backend', [('forward', 'llvm'), ('reverse', 'python'), ('forward', 'python'),
                                           ('reverse', 'cuda')])
def test_modes_and_backends_agree(db, houses, mode, backend):
    """Forward and reverse mode, the llvm, python and cuda backends: the same gradient (rel 1e-12)."""
    want = flat(json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text', (LOSS, 'houses', json.dumps(START)))))
    got = flat(json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s, mode => %s, backend => %s)::text',
                                (LOSS, 'houses', json.dumps(START), mode, backend))))
    assert set(got) == set(want)
    for name in want:
        assert got[name] == pytest.approx(want[name], rel=1e-12, abs=1e-14), name


def test_many_categories_scatter_add(db):
    """400 categories: the llvm backend's loop kernel (a gather forward, a scatter-add over the categories backwards)
    gives the one-hot gradient, as the python backend's unrolled program does."""
    db.execute('CREATE TABLE many AS SELECT (k % 400)::text AS c, (k % 7)::float8 AS x, (k % 11)::float8 AS y '
               'FROM pg_catalog.generate_series(1, 2000) AS k')
    loss = 'λ(d, w) (w.c[d.c] + w.a * d.x - d.y)^2'
    start = json.dumps({'c': {'5': 1.0}, 'a': 0.5})
    rows = db.execute('SELECT c, x, y FROM many').fetchall()
    keys = sorted({r[0] for r in rows})  # text order: the categories' order does not matter to the gradient
    b = {k: 0.0 for k in keys}
    b['5'] = 1.0
    resid = {}
    for c, x, y in rows:
        resid[c] = resid.get(c, 0.0) + 2 * (b[c] + 0.5 * x - y) / len(rows)
    for backend in ('llvm', 'python'):
        got = json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s, backend => %s)::text',
                               (loss, 'many', start, backend)))
        assert len(got['c']) == 400
        for k in keys:
            assert got['c'][k] == pytest.approx(resid[k], rel=1e-12, abs=1e-15), (backend, k)


def test_scoring_function_case(db, houses):
    """The scoring function codes the category by a CASE over its quoted values: a value never seen in training
    contributes 0, NULL gives NULL, a hostile value is one more literal; PostgreSQL inlines the function."""
    db.execute("SELECT pgad.train('cat_score', 'λ(d, w) w.r[d.region] + w.a*d.sqft', 'squared', 'houses', "
               "'{\"r\": {}, \"a\": 0}', label => 'price', optimizer => 'lbfgs', iterations => 300)")
    weights = json.loads(fetch(db, "SELECT weights::text FROM pgad.models WHERE name = 'cat_score'"))
    for region in REGIONS:
        assert fetch(db, 'SELECT pgad_models.cat_score(%s, 2)', (region,)) == pytest.approx(
            weights['r'][region] + 2 * weights['a'], rel=1e-12)
    assert fetch(db, "SELECT pgad_models.cat_score('west', 2)") == pytest.approx(2 * weights['a'], rel=1e-12)
    assert fetch(db, "SELECT pgad_models.cat_score(NULL, 2)") is None
    # the deployed version's own function (pgad_models.cat_score calls it)
    body = fetch(db, "SELECT pg_get_functiondef(format('pgad_models.%I', name || '@' || version)::regproc) "
                     "FROM pgad.models WHERE name = 'cat_score'")
    assert "o''hare" in body and body.count('CASE') >= 2
    plan = '\n'.join(r[0] for r in db.execute(
        'EXPLAIN (VERBOSE) SELECT pgad_models.cat_score(h.region, h.sqft) FROM houses AS h').fetchall())
    assert 'cat_score' not in plan and 'CASE' in plan  # inlined


def test_group_by_with_category(db, houses):
    """group_by and a categorical weight: each group's fit is the least squares fit of its own rows; the categories
    are the whole data's, a group that lacks one keeps its starting value."""
    db.execute("SELECT pgad.train('cat_groups', 'λ(d, w) w.r[d.region] + w.a*d.sqft', 'squared', 'houses', "
               "'{\"r\": {}, \"a\": 0}', label => 'price', optimizer => 'lbfgs', iterations => 500, "
               "tolerance => 1e-14, group_by => 'garden')")
    for garden in (False, True):
        part = [r for r in houses if r[2] == garden]
        weights = json.loads(fetch(db, "SELECT weights::text FROM pgad.models WHERE name = 'cat_groups' "
                                       "AND group_key->>'garden' = %s", (str(garden).lower(),)))
        keys = sorted({r[0] for r in part})
        want = lstsq_fit(part, [(0, keys)])
        np.testing.assert_allclose([weights['r'][k] for k in keys] + [weights['a']], want, rtol=1e-6, atol=1e-7)
        got = fetch(db, 'SELECT pgad_models.cat_groups(%s, %s, 1.5)', (garden, part[0][0]))
        assert got == pytest.approx(want[keys.index(part[0][0])] + 1.5 * want[-1], rel=1e-6)


def test_null_category_skips_the_row(db, houses):
    db.execute("CREATE TABLE some_nulls AS SELECT CASE WHEN sqft > 1 THEN NULL ELSE region END AS region, sqft, "
               "price FROM houses")
    skipped = fetch(db, 'SELECT pg_catalog.count(*) FROM some_nulls WHERE region IS NULL')
    assert skipped > 0
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    got = json.loads(fetch(db, "SELECT pgad.gradient('λ(d, w) (w.r[d.region] - d.price)^2', 'some_nulls', "
                               "'{\"r\": {}}')::text"))
    assert 'null' not in got['r'] and len(got['r']) == 4
    assert any(f'skipped {skipped} of 60 rows' in n for n in notices)


def test_gradient_descent_returns_an_object(db, houses):
    weights, loss, _ = db.execute("SELECT * FROM pgad.gradient_descent('λ(d, w) (w.r[d.region] - d.price)^2', "
                                  "'houses', '{\"r\": {\"north\": 1}}', learning_rate => 0.5, iterations => 200)"
                                  ).fetchone()
    means = {k: np.mean([r[5] for r in houses if r[0] == k]) for k in REGIONS}
    for k in REGIONS:
        assert weights['r'][k] == pytest.approx(means[k], rel=1e-6)


def test_an_enum_another_role_owns_is_refused(db, cluster, dbname):
    """A scoring function compares the category as its type: an enum of another role (not a superuser, not the
    trainer) is refused before training, as a group column of such a type is; cast in the data query, it trains."""
    db.execute('DROP ROLE IF EXISTS cat_owner; CREATE ROLE cat_owner LOGIN; CREATE SCHEMA cat_s AUTHORIZATION cat_owner')
    with psycopg.connect(cluster.conninfo(dbname, user='cat_owner'), autocommit=True) as owner:
        owner.execute("CREATE TYPE cat_s.color AS ENUM ('red', 'blue')")
        owner.execute("CREATE TABLE cat_s.shops AS SELECT (CASE WHEN k % 2 = 0 THEN 'red' ELSE 'blue' END)::cat_s.color "
                      "AS color, k::float8 AS y FROM generate_series(1, 10) AS k")
        owner.execute('GRANT USAGE ON SCHEMA cat_s TO PUBLIC; GRANT SELECT ON cat_s.shops TO PUBLIC')
    e = error_of(db, "SELECT pgad.train('by_color_cat', 'λ(d, w) w.c[d.color]', 'squared', 'cat_s.shops', "
                     "'{\"c\": {}}', optimizer => 'lbfgs')")
    assert e.sqlstate == '0A000'
    assert e.message_primary == ('column "color" of a categorical weight is of type cat_s.color, which role '
                                 '"cat_owner" owns')
    assert 'color::text AS color' in e.message_hint
    assert fetch(db, "SELECT count(*) FROM pg_proc WHERE proname = 'by_color_cat'") == 0
    db.execute("SELECT pgad.train('by_color_cat', 'λ(d, w) w.c[d.color]', 'squared', "
               "'SELECT color::text AS color, y FROM cat_s.shops', '{\"c\": {}}', optimizer => 'lbfgs')")
    assert fetch(db, "SELECT pgad_models.by_color_cat('red')") == pytest.approx(6.0, rel=1e-6)


def test_too_many_categories_are_refused(db, cluster):
    """Past pgad.max_lambda_nodes / 10 categories: 54000, before any program is built."""
    name = new_database(cluster)
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as other:
        other.execute('CREATE EXTENSION pgad CASCADE')
        other.execute('SET pgad.max_lambda_nodes = 100')
        e = error_of(other, "SELECT pgad.gradient('λ(d, w) w.c[d.c]', 'SELECT (k % 11)::text AS c FROM "
                            "generate_series(1, 50) AS k', '{\"c\": {}}')")
        assert e.sqlstate == '54000'
        assert e.message_primary == 'column "c" has more than 10 categories, the most a categorical weight takes'
        assert (e.message_detail, e.message_hint) == (
            'The limit is pgad.max_lambda_nodes / 10.',
            'Group rare values into one category in the data query, or have a superuser raise pgad.max_lambda_nodes.')
        assert other.execute("SELECT pgad.gradient('λ(d, w) w.c[d.c]', 'SELECT (k % 10)::text AS c FROM "
                             "generate_series(1, 50) AS k', '{\"c\": {}}')").fetchone()[0] is not None


@pytest.mark.parametrize('sql, sqlstate, message', [
    ("SELECT pgad.gradient('λ(d, w) w.r[d.region] + d.region', 'houses', '{\"r\": {}}')", '0A000',
     'column "region" indexes a categorical weight and cannot be read as a number'),
    ("SELECT pgad.gradient('λ(d, w) w.r * d.sqft', 'houses', '{\"r\": {}}')", '0A000',
     'weight "r" is categorical and must be indexed by a column'),
    ("SELECT pgad.gradient('λ(d, w) w.r[d.nope] + w.a*d.sqft', 'houses', '{\"r\": {}, \"a\": 0}')", '42703',
     'column "nope" does not exist in the data'),
    ("SELECT pgad.gradient('λ(d, w) w.r[d.sqft]', 'houses', '{\"r\": {}}')", '42804',
     'column "sqft" is of type pg_catalog.float8, which cannot index a categorical weight'),
    ("SELECT pgad.gradient('λ(d, w) w.r[d.mood]', 'houses', '{\"r\": {\"angry\": 1}}')", '22P02',
     'invalid input value for enum mood: "angry"'),
    ("SELECT pgad.loss_agg('λ(d, w) (w.r[d.region] - d.price)^2', '{\"r\": {}}', h) FROM houses AS h", '0A000',
     'the aggregates take no categorical weight'),
])
def test_refusals(db, houses, sql, sqlstate, message):
    e = error_of(db, sql)
    assert (e.sqlstate, e.message_primary) == (sqlstate, message)


def test_an_aggregate_names_a_categorical_weight_of_an_integer_column(db, houses):
    """An integer column passes the aggregates' check of what they pack (numbers): what they refuse then is the
    weight's JSON object, which the DETAIL names (categorical.expand without data)."""
    e = error_of(db, "SELECT pgad.loss_agg('λ(d, w) (w.f[d.floors] - d.price)^2', '{\"f\": {}}', h) FROM houses AS h")
    assert (e.sqlstate, e.message_primary, e.message_detail) == (
        '0A000', 'the aggregates take no categorical weight', 'Weight "f" is a JSON object, a categorical weight.')


def test_a_categorical_weight_beside_an_array_column(db, houses):
    """The other columns of a lambda with a categorical weight may be arrays of numbers: the loss of
    w.r[d.region] + w.v @ d.x is the one-hot model's, by hand (rel 1e-12)."""
    start = {'r': {'north': 0.5, 'east': -0.25}, 'v': [0.3, -0.1]}
    got = fetch(db, "SELECT pgad.loss('λ(d, w) (w.r[d.region] + w.v @ d.x - d.price)^2', "
                    "'SELECT region, ARRAY[sqft, floors]::float8[] AS x, price FROM houses', %s)",
                (json.dumps(start),))
    want = np.mean([(start['r'].get(r[0], 0.0) + 0.3 * r[4] - 0.1 * r[3] - r[5]) ** 2 for r in houses])
    assert got == pytest.approx(want, rel=1e-12)


def test_the_categories_are_bounded_by_the_memory_limit(db, cluster):
    """1,100 categories take 1,100 × 1 kB, past pgad.memory_limit's 1 MB: 53200 before anything is loaded; 1,024 fit
    exactly."""
    name = new_database(cluster)
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as other:
        other.execute('CREATE EXTENSION pgad CASCADE')
        other.execute("SET pgad.max_lambda_nodes = 100000")
        other.execute("SET pgad.memory_limit = '1MB'")
        query = "SELECT pgad.loss('λ(d, w) w.c[d.c]', 'SELECT (k %% %s)::text AS c FROM generate_series(1, 3000) AS k', " \
                "'{\"c\": {}}')"
        e = error_of(other, query % 1100)
        assert (e.sqlstate, e.message_primary, e.message_hint) == (
            '53200', 'the categories of column "c" need 1.1 MB, more than pgad.memory_limit (1.0 MB)',
            'Group rare values into one category in the data query, or have a superuser raise pgad.memory_limit.')
        assert other.execute(query % 1024).fetchone()[0] == 0.0


def test_a_categorical_column_of_nulls_is_refused(db, houses):
    e = error_of(db, "SELECT pgad.loss('λ(d, w) w.r[d.region] + w.a*d.sqft', "
                     "'SELECT NULL::text AS region, sqft FROM houses', '{\"r\": {}, \"a\": 0}')")
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22000', 'every row of the data has NULL in column "region", which the lambda reads',
        'data must have at least one row to average the loss over.')


def test_a_column_that_cannot_index_names_the_cast(db, houses):
    e = error_of(db, "SELECT pgad.gradient('λ(d, w) w.r[d.sqft]', 'houses', '{\"r\": {}}')")
    assert e.message_hint == ('A category is text, varchar, an enum, boolean or an integer: cast the column in the '
                              'data query ("sqft"::text AS "sqft").')


def test_a_text_column_read_as_a_number_names_the_categorical_form(db, houses):
    e = error_of(db, "SELECT pgad.gradient('λ(d, w) w.a*d.region', 'houses', '{\"a\": 0}')")
    assert e.sqlstate == '42804'
    assert '"region"::float8 AS "region"' in e.message_hint
    assert 'w.region[d.region] with "region": {}' in e.message_hint


def test_same_loss_and_gradient_as_the_one_hot_lambda(db, houses):
    """The categorical model and the same model written over one-hot float columns: the same loss and gradient."""
    keys = sorted(REGIONS)
    quoted = ["'" + key.replace("'", "''") + "'" for key in keys]  # standard_conforming_strings: \\ is itself
    data = 'SELECT ' + ', '.join(f'(region = {q})::int::float8 AS h{k}' for k, q in enumerate(quoted)) + \
        ', sqft, price FROM houses'
    one_hot_loss = 'λ(d, w) (' + ' + '.join(f'w.r{k}*d.h{k}' for k in range(len(keys))) + ' + w.a*d.sqft - d.price)^2'
    start = {'region': {'north': 0.5, 'east': -0.2}, 'a': 0.3}
    hot_start = {f'r{k}': start['region'].get(key, 0.0) for k, key in enumerate(keys)} | {'a': 0.3}
    loss = 'λ(d, w) (w.region[d.region] + w.a*d.sqft - d.price)^2'
    assert fetch(db, 'SELECT pgad.loss(%s, %s, %s)', (loss, 'houses', json.dumps(start))) == pytest.approx(
        fetch(db, 'SELECT pgad.loss(%s, %s, %s)', (one_hot_loss, data, json.dumps(hot_start))), rel=1e-14)
    got = json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text', (loss, 'houses', json.dumps(start))))
    want = json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text', (one_hot_loss, data, json.dumps(hot_start))))
    for k, key in enumerate(keys):
        assert got['region'][key] == pytest.approx(want[f'r{k}'], rel=1e-13, abs=1e-15)
    assert got['a'] == pytest.approx(want['a'], rel=1e-13)


def test_derivatives_explain_and_unread_weights(db, houses):
    """pgad.derivatives prints a categorical weight's derivative (its categories from the data, or those listed);
    pgad.explain takes the listed ones and refuses data; a categorical weight the lambda does not read comes back
    with a 0 by each of its categories."""
    loss = 'λ(d, w) (w.r[d.region] - d.price)^2'
    printed = db.execute("SELECT * FROM pgad.derivatives(%s, '{\"r\": {}}', 'houses')", (loss,)).fetchall()
    assert printed == [('r', 'CASE WHEN [1, 2, 3, 4] = d.region THEN 2*(w.r[d.region] - d.price) ELSE 0 END')]
    e = error_of(db, "SELECT * FROM pgad.derivatives(%s, '{\"r\": {}}')", (loss,))
    assert (e.sqlstate, e.message_primary) == ('22023', 'weight "r" is categorical and lists no category')
    assert fetch(db, "SELECT count(*) FROM pgad.explain(%s, weights => '{\"r\": {\"a\": 0}}')", (loss,)) > 0
    e = error_of(db, "SELECT * FROM pgad.explain(%s, data => 'houses', weights => '{\"r\": {}}')", (loss,))
    assert (e.sqlstate, e.message_primary) == ('0A000', 'pgad.explain takes no data with a categorical weight')
    got = json.loads(fetch(db, "SELECT pgad.gradient('λ(d, w) (w.a - d.price)^2', 'houses', "
                               "'{\"a\": 0, \"r\": {\"x\": 1}}')::text"))
    assert got['r'] == {'x': 0.0}


@pytest.mark.parametrize('backend, tape', [('llvm', 'auto'), ('llvm', 'store'), ('llvm', 'recompute'),
                                           ('python', 'auto')])
def test_code_zero_is_a_category_never_trained(backend, tape):
    """Code 0 (loader.category_code with unseen, for scoring stored weights on new data) contributes 0 in every kernel:
    the unrolled chain ends in code·0, the loop kernel's index gives 0 for a categorical column."""
    from pgad import backends, loader, program
    from pgad.lang import vectors
    prog = program.build('λ(d, w) w.c[d.c] + w.a*d.x', ('c', 'a'), shapes=vectors.Shapes((('c', (3,)),), (), ('c',)),
                         tape=tape)
    codes, x = np.array([0.0, 1, 2, 3, 0]), np.array([1.0, 2, 3, 4, 5])
    sums = backends.compile(prog, backend)([codes, x], 5, np.array([10.0, 20, 30, 0.5]))
    assert sums[0] == pytest.approx(10 + 20 + 30 + 0.5 * 15, rel=1e-14)
    np.testing.assert_allclose(sums[1:], [1, 1, 1, 15], rtol=1e-14)
    assert 'COALESCE(' in loader.category_code('c', ['a'], unseen=True)  # a keyword: there is no pg_catalog.coalesce
    assert program.categorical_names('region', ['north', "o'x"]) == ['region[north]', "region[o'x]"]


def test_hostile_names_and_listed_values(db, houses):
    """A category column whose name holds quotes and $$, and a listed value that is SQL: each stays a name or a
    literal (the listed value is kept, its derivative 0, and the scoring function compares it as a literal)."""
    db.execute('CREATE TABLE odd AS SELECT region AS "we""ird $$", price FROM houses')
    hostile = "x'); DROP TABLE houses; --"
    start = json.dumps({'r': {hostile: 1.5}})
    got = json.loads(fetch(db, 'SELECT pgad.gradient(%s, %s, %s)::text',
                           ('λ(d, w) (w.r[d."we""ird $$"] - d.price)^2', 'odd', start)))
    assert got['r'][hostile] == 0.0 and set(got['r']) == {*REGIONS, hostile}
    db.execute("SELECT pgad.train('odd_names', 'λ(d, w) w.r[d.\"we\"\"ird $$\"]', 'squared', 'odd', %s, "
               "label => 'price', optimizer => 'lbfgs', iterations => 100)", (start,))
    assert fetch(db, 'SELECT pgad_models.odd_names(%s)', (hostile,)) == pytest.approx(1.5, rel=1e-12)
    assert fetch(db, "SELECT pgad_models.odd_names('nowhere')") == 0.0
    assert fetch(db, 'SELECT count(*) FROM houses') == 60
