"""The keys of categorical weights and a label's classes are found in the load's own pass (issue 48 §2): one query
reads the data of every function that takes a categorical weight or a label of classes (categorical.preload), the
categories and classes then put in the type's order by one query over the keys, not the data (categorical.type_order)
— the order PostgreSQL's own ORDER BY gives them, whatever order the rows come in. Against a real server: a sequence
that each row of the data advances counts the passes; the answers are those of the load by pgad.pack, whose keys are
read by a query of their own first (pgad.load_chunk_rows set), and of numpy."""
import json
import sys

import numpy as np
import psycopg
import pytest

from conftest import error_of, heard, settings
from pgad import categorical, server
from plpy_client import Plpy

N = 300
MOODS = ('sad', 'ok', 'happy')  # the enum's order: not the text's


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    rng = np.random.default_rng(11)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TYPE feeling AS ENUM ('sad', 'ok', 'happy')")
        db.execute('CREATE TABLE visits (id int, region text, mood feeling, floor int, x float8, y float8, '
                   'bought int, kind text)')
        with db.cursor().copy('COPY visits FROM STDIN') as copy:
            for i in range(N):
                region = ['b', 'B', 'a', 'é', 'A'][i % 5]
                mood = MOODS[(i * 7) % 3]
                floor = [10, 9, 2, -1][i % 4]
                x = float(rng.normal())
                y = {'a': 1.0, 'A': -1.0, 'b': 0.5, 'B': 2.0, 'é': -0.5}[region] + 0.3 * x + float(rng.normal()) * 0.2
                bought = int(y + float(rng.normal()) > 0.8)
                copy.write_row((i, region, mood, floor, x, y, bought, ['x', 'y', 'z'][(i * 5 + int(x > 0)) % 3]))
        db.execute('CREATE SEQUENCE passes')


def passes(db, sql, params=None):
    """How many times the statement reads the rows of the data (DATA, which advances the sequence once a row)."""
    db.execute("SELECT pg_catalog.setval('passes', 1, false)")
    db.execute(sql, params)
    last, called = db.execute('SELECT last_value, is_called FROM passes').fetchone()
    return last / N if called else 0


DATA = "SELECT *, pg_catalog.nextval('passes') AS n FROM visits"
LOSS = 'λ(d, w) (w.r[d.region] + w.m[d.mood] + w.f[d.floor] + w.a*d.x - d.y)^2'
START = json.dumps({'r': {}, 'm': {}, 'f': {}, 'a': 0.1})


@pytest.mark.parametrize('sql', [
    'SELECT pgad.loss(%(loss)s, %(data)s, %(start)s)',
    'SELECT pgad.gradient(%(loss)s, %(data)s, %(start)s)',
    "SELECT pgad.gradient(%(loss)s, %(data)s, %(start)s, 'forward', 'python')",
    'SELECT pgad.hessian(%(loss)s, %(data)s, %(start)s)',
    'SELECT pgad.gradient_descent(%(loss)s, %(data)s, %(start)s, 0.1, 3)',
    "SELECT pgad.train('once_squared', 'λ(d, w) w.r[d.region] + w.m[d.mood] + w.f[d.floor] + w.a*d.x', 'squared', "
    "%(data)s, %(start)s)",
    "SELECT pgad.train('once_softmax', 'λ(d, w) w.w @ [d.x, d.y] + w.b', 'softmax', %(data)s, "
    "'{\"w\": {}, \"b\": {}}', label => 'kind')",
    "SELECT pgad.train('once_mood', 'λ(d, w) w.a * d.x + w.b', 'logistic', "
    "'SELECT *, pg_catalog.nextval(''passes'') AS n, (CASE WHEN bought = 1 THEN ''happy'' ELSE ''sad'' END)::feeling "
    "AS label FROM visits', '{\"a\": 0, \"b\": 0}', label => 'label')",
    "SELECT pgad.train('once_bought', 'λ(d, w) w.r[d.region] + w.a * d.x', 'logistic', %(data)s, %(start2)s, "
    "label => 'bought')",
])
def test_one_query_reads_the_data(db, sql):
    """Every function that takes a categorical weight, or trains on a label of classes (text, an enum, an integer
    of 0 and 1), reads the data once: the keys are found as it loads."""
    assert passes(db, sql, dict(loss=LOSS, data=DATA, start=START, start2='{"r": {}, "a": 0}')) == 1


def gradient(db, loss=LOSS, data='visits', start=START):
    return json.loads(db.execute('SELECT pgad.gradient(%s, %s, %s)::text', (loss, data, start)).fetchone()[0])


def test_the_load_by_pgad_pack_gives_the_same_gradient(db):
    """pgad.pack's load (chunked), whose keys are read first by a query a column in the type's order, and the native
    load, which finds them as it reads the rows and orders them after: the same categories, the same gradient."""
    native = gradient(db)
    with settings(db, {'pgad.load_chunk_rows': 7}):
        packed = gradient(db)
    assert set(native) == set(packed) == {'r', 'm', 'f', 'a'}
    for name in ('r', 'm', 'f'):
        assert set(native[name]) == set(packed[name])
        for key, value in native[name].items():
            assert value == pytest.approx(packed[name][key], rel=1e-12, abs=1e-15)
    assert native['a'] == pytest.approx(packed['a'], rel=1e-12)


def test_the_gradient_is_numpys_whatever_order_the_rows_come_in(db):
    rows = db.execute('SELECT region, mood::text, floor, x, y FROM visits').fetchall()
    w = {'r': {'a': 0.5, 'é': -1.0}, 'm': {'happy': 0.25}, 'f': {'10': 1.0}, 'a': 0.1}
    residual = np.array([w['r'].get(r, 0.0) + w['m'].get(m, 0.0) + w['f'].get(str(f), 0.0) + 0.1 * x - y
                         for r, m, f, x, y in rows])
    for order in ('x', 'x DESC', 'region, mood DESC'):
        got = gradient(db, data=f'SELECT * FROM visits ORDER BY {order}', start=json.dumps(w))
        for name, column in (('r', 0), ('m', 1), ('f', 2)):
            for key, value in got[name].items():
                rows_of = np.array([str(row[column]) == key for row in rows])
                assert value == pytest.approx(2 * residual[rows_of].sum() / N, rel=1e-11, abs=1e-14)
        x = np.array([row[3] for row in rows])
        assert got['a'] == pytest.approx(2 * residual @ x / N, rel=1e-11)


@pytest.mark.parametrize('label, cast', [('floor', 'integer'), ('mood', 'feeling'), ('region', 'text')])
def test_the_classes_are_in_the_order_of_order_by(db, label, cast):
    """A label's classes, found by the load in the order the rows show them, are stored in the order ORDER BY gives
    (an integer's as numbers, an enum's declared order, a text's collation), with rows in the opposite order."""
    db.execute(f"SELECT pgad.train('order_{label}', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', "
               f"'SELECT * FROM visits ORDER BY {label} DESC', '{{\"w\": {{}}, \"b\": {{}}}}', label => '{label}', "
               "iterations => 2)")
    stored = db.execute("SELECT options->'classes' FROM pgad.models WHERE name = %s", [f'order_{label}']).fetchone()[0]
    expected = [str(v) for v, in db.execute(f'SELECT DISTINCT {label}::{cast} FROM visits ORDER BY 1')]
    assert stored == expected


def test_a_volatile_query_gives_its_categories_and_its_rows_from_one_run(db):
    """The categories and the rows come from the same run of the data query: a query whose rows differ each run (a
    random category) skips no row for a category the load did not know."""
    data = ('SELECT (pg_catalog.random() * 40)::int::text AS c, 1.0::float8 AS y '
            'FROM pg_catalog.generate_series(1, 2000)')
    with heard(db) as said:
        got = db.execute("SELECT pgad.loss('λ(d, w) (w.c[d.c] - d.y)^2', %s, '{\"c\": {}}')", [data]).fetchone()[0]
    assert got == 1.0 and said == []


def test_a_row_skipped_for_a_null_elsewhere_gives_no_category(db):
    """A category whose every row has NULL in another column the lambda reads is no category of the call; where no
    row is left, the error says a column the lambda reads is NULL in every row, not the categorical column."""
    data = "SELECT region, CASE WHEN region = 'é' THEN NULL ELSE x END AS x, y FROM visits"
    got = gradient(db, 'λ(d, w) (w.r[d.region] + w.a*d.x - d.y)^2', data, '{"r": {}, "a": 0}')
    assert set(got['r']) == {'a', 'A', 'b', 'B'}
    e = error_of(db, "SELECT pgad.gradient('λ(d, w) (w.r[d.region] + w.a*d.x - d.y)^2', "
                     "'SELECT region, NULL::float8 AS x, y FROM visits', '{\"r\": {}, \"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == (
        '22000', f'every row of the data has NULL in a column the lambda reads ({N} rows)')


def test_a_category_listed_beside_the_datas_keeps_its_start(db):
    """A category the weights list and the data lacks follows the data's: its value as given, its gradient 0."""
    got = gradient(db, 'λ(d, w) (w.r[d.region] - d.y)^2', 'visits', '{"r": {"zz": 3.5, "a": 1}}')
    assert got['r']['zz'] == 0.0 and set(got['r']) == {'a', 'A', 'b', 'B', 'é', 'zz'}


def test_citext_categories_equal_by_the_type_are_one(db):
    """citext's 'Ann' is 'ann': the load tells the keys apart by their text, one query over the keys groups them."""
    db.execute('CREATE EXTENSION IF NOT EXISTS citext')
    data = ("SELECT k::citext AS k, y FROM (VALUES ('Ann', 1.0), ('bob', 2.0), ('ann', 3.0), ('ANN', 4.0), "
            "('Bob', 6.0)) AS v(k, y)")
    got = gradient(db, 'λ(d, w) (w.c[d.k] - d.y)^2', data, '{"c": {}}')
    assert len(got['c']) == 2
    by_key = {k.lower(): v for k, v in got['c'].items()}
    assert by_key == {'ann': pytest.approx(-2 * 8 / 5), 'bob': pytest.approx(-2 * 8 / 5)}


GROUPED_DATA = ("SELECT region, x, y, kind, nextval('passes') AS n, "
                "CASE WHEN id %% 7 = 0 THEN NULL ELSE (ARRAY[1.0, 1.00, 2.5, 2.50, -0.0])[1 + id %% 5]::numeric END "
                "AS g, CASE WHEN id %% 11 = 0 THEN NULL ELSE (ARRAY['p', 'P', 'q'])[1 + id %% 3] END AS h, "
                "CASE WHEN id %% 3 = 0 AND id %% 5 = 4 THEN NULL ELSE x END AS xn FROM visits")


def stored(db, name):
    """{each group's (g, h): its weights} of a model: g as a number (which of numeric's equal 1.0 and 1.00 a GROUP BY
    shows is its own choice)."""
    return {(key['g'] if key['g'] is None else float(key['g']), key['h']): weights for key, weights in db.execute(
        'SELECT group_key, weights FROM pgad.models WHERE name = %s', [name])}


@pytest.mark.parametrize('model, loss, start, label', [
    ('λ(d, w) w.r[d.region] + w.a*d.{x}', 'squared', '{"r": {}, "a": 0}', 'y'),
    ('λ(d, w) w.w @ [d.{x}] + w.b', 'softmax', '{"w": {}, "b": {}}', 'kind'),
])
@pytest.mark.parametrize('x, reads', [('x', 1), ('xn', 2)])
def test_a_model_per_group_reads_the_data_once_and_fits_as_group_by_query(db, model, loss, start, label, x, reads):
    """group_by with a categorical weight or a label of classes: one query reads the data, the groups split out of
    it (numeric's 1.0 and 1.00 one group, -0 and 0 one, NULL a group of its own, last), and one more counts each
    group's NULLs where rows were skipped for one, for the NOTICEs (as before); each group's fit is the one pgad.pack's
    GROUP BY load gives (pgad.load_chunk_rows set: the categories read first), to 1e-9, with the same NOTICEs."""
    model = model.replace('{x}', x)
    loss_name = f'{loss}_{x}'
    sql = ('SELECT count(*) FROM pgad.train(%s, %s, %s, %s, %s, label => %s, group_by => \'g, h\', '
           "optimizer => 'lbfgs', iterations => 200)")
    with heard(db) as said:
        assert passes(db, sql, [f'one_{loss_name}', model, loss, GROUPED_DATA.replace('%%', '%'), start, label]) == \
            reads
    with settings(db, {'pgad.load_chunk_rows': 50}), heard(db) as said_before:
        db.execute(sql, [f'two_{loss_name}', model, loss, GROUPED_DATA.replace('%%', '%'), start, label])
    one, two = stored(db, f'one_{loss_name}'), stored(db, f'two_{loss_name}')
    assert set(one) == set(two) and (None, None) in one and (1.0, 'p') in one
    models = db.execute('SELECT count(*) FROM pgad.models WHERE name = %s', [f'one_{loss_name}']).fetchone()[0]
    assert models == len(one)  # 1.0 and 1.00 one group, -0.0 and 0 one
    for key in one:
        a, b = one[key], two[key]
        assert a.keys() == b.keys()
        for name in a:
            got, want = (np.array(list(v.values()) if isinstance(v, dict) else v, dtype=float)
                         for v in (a[name], b[name]))
            if isinstance(a[name], dict):
                assert list(a[name]) == list(b[name])
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    # the same NOTICEs (a group whose every row was skipped comes last)
    assert sorted(m.replace('two_', 'one_') for m in said_before) == sorted(said)
    assert (x == 'xn') == any('skipped' in m for m in said)


@pytest.fixture
def plpy(cluster, dbname, monkeypatch):
    """pgad's own code in the test process, its queries through plpy over psycopg (plpy_client)."""
    p = Plpy(cluster.conninfo(dbname))
    monkeypatch.setitem(sys.modules, 'plpy', p)
    monkeypatch.setattr(server, '_check', None)
    yield p
    p.close()


@pytest.mark.parametrize('kind, keys, expected', [
    ('pg_catalog.int4', ['10', '9', '-1', '2'], ['-1', '2', '9', '10']),
    ('public.feeling', ['happy', 'sad', 'ok'], ['sad', 'ok', 'happy']),
    ('pg_catalog.bool', ['true', 'false'], ['false', 'true']),
    ('pg_catalog.numeric', ['10.5', '9', '1e2'], ['9', '10.5', '1e2']),
    ('pg_catalog.text', ['a'], ['a']),
])
def test_type_order_is_order_bys(plpy, kind, keys, expected):
    """The keys in the type's order (numbers by value, an enum's declared order), as ORDER BY gives them."""
    assert [keys[k] for k in categorical.type_order(keys, kind)] == expected


def test_type_order_of_text_is_the_collations(plpy):
    keys = ['b', 'B', 'a', 'é', 'A', '']
    want = [r['k'] for r in server.query('SELECT k FROM pg_catalog.unnest($1::pg_catalog.text[]) AS k ORDER BY k',
                                         [keys], ['pg_catalog.text[]'])]
    assert [keys[k] for k in categorical.type_order(keys, 'pg_catalog.text')] == want


def test_group_codes_order_the_values_null_last_and_equal_values_as_one(plpy):
    """A group column's keys as the load wrote them ('v' and the text, '' for NULL), in the order the rows showed
    them: the codes of ORDER BY's order, NULL last, numeric's equal values one code (the first in text order)."""
    keys = ['v2.50', '', 'v1.0', 'v2.5', 'v-3', 'v1.00']
    codes = np.array([1, 2, 3, 4, 5, 6, 3, 2, 1], dtype=float)
    got, values, lookup = categorical.group_codes(codes, keys, 'pg_catalog.numeric')
    assert values == ['-3', '1.0', '2.5', None]
    assert got.tolist() == [3, 4, 2, 3, 1, 2, 2, 4, 3]
    assert lookup == {'v2.50': 3, '': 4, 'v1.0': 2, 'v2.5': 3, 'v-3': 1, 'v1.00': 2}
    got, values, lookup = categorical.group_codes(np.array([2.0, 1.0]), ['vb', 'va'], 'pg_catalog.text')
    assert (got.tolist(), values, lookup) == ([1, 2], ['a', 'b'], {'vb': 2, 'va': 1})


@pytest.mark.parametrize('sizes', [(3, 4), (1 << 40, 1 << 40)])  # in mixed radix; past 2⁶², by numpy's unique
def test_group_rows_are_order_bys_groups_each_in_the_datas_order(sizes):
    rng = np.random.default_rng(3)
    codes = [rng.integers(1, 4, 500).astype(float), rng.integers(1, 5, 500).astype(float)]
    combos, order, counts = categorical.group_rows(codes, list(sizes))
    pairs = sorted({(a, b) for a, b in zip(*codes)})
    assert [tuple(c) for c in combos] == pairs and counts.sum() == 500
    at = 0
    for (a, b), count in zip(pairs, counts):
        rows = order[at:at + count]
        at += count
        assert rows.tolist() == [k for k in range(500) if (codes[0][k], codes[1][k]) == (a, b)]
    empty = categorical.group_rows([np.zeros(0)], [2])
    assert (empty[0].shape, len(empty[1]), len(empty[2])) == ((0, 1), 0, 0)
