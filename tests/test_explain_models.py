"""Explanations of trained models (issue 36 §2): pgad_models.<name>_explain, each column's contribution to one
prediction by integrated gradients from the training means, and pgad.importance over any rows, against a real
server. The oracles are independent of pgad's derivatives: exact Shapley values by brute force over the coalitions
(a linear model), integrated gradients computed with torch autograd on the same model and weights with the same
quadrature (captum's method, written with torch.autograd directly), and numpy on the loaded rows.
(tests/test_explain.py tests pgad.explain, the query plan's explanation: another function.)"""
import itertools
import json
import math

import numpy as np
import psycopg
import pytest
import torch

from conftest import error_of, settings

LINEAR = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.e*d.x4 + w.k'
LAYER = 'λ(d, w) w.v @ tanh(w.m @ [d.x1, d.x2, d.x3] + w.b) + w.c'
LAYER_START = json.dumps({'v': [0.5, -0.7, 0.9], 'm': [[0.3, -0.2, 0.1], [0.1, 0.4, -0.3], [-0.2, 0.1, 0.5]],
                          'b': [0.1, -0.1, 0.2], 'c': 0.0})
N_POINTS = 120  # the rows of points
NODES = 32  # Gauss–Legendre nodes on [0, 1], as docs/sql.md states


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE points AS SELECT g AS id, (g % 7)::float8 - 3 AS x1, ((g * 13) % 11)::float8 / 4 "
                   "AS x2, sin(g)::float8 AS x3, ((g * 7) % 5)::float8 AS x4, "
                   "(ARRAY['north', 'south', 'east'])[g % 3 + 1] AS region, (ARRAY['a', 'b'])[g % 2 + 1] AS part "
                   "FROM generate_series(1, 120) AS g")
        db.execute("ALTER TABLE points ADD COLUMN y float8, ADD COLUMN yes float8")
        db.execute("UPDATE points SET y = 2*x1 - 3*x2 + 0.5*x3 + x4 + 1 + tanh(x1*x2) + cos(id), "
                   "yes = CASE WHEN x1 + x2 - 2 + sin(3*id) > 0 THEN 1 ELSE 0 END")


def train(db, name, model, loss, data, weights, **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    db.execute(f"SELECT name FROM pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, %(weights)s{args})",
               dict(name=name, model=model, loss=loss, data=data, weights=weights, **options)).fetchall()
    rows = db.execute('SELECT group_key, weights, options FROM pgad.models WHERE name = %s ORDER BY group_key',
                      [name]).fetchall()
    return rows[0][1], rows[0][2]


def data(db, columns, table='points', where=''):
    return np.array(db.execute(f'SELECT {columns} FROM {table} {where} ORDER BY id').fetchall(), dtype=np.float64)


def explained(db, call):
    """{feature: contribution} of each row of points, and the prediction, by the SQL expressions call (of the row)."""
    return [(r[0], r[1]) for r in db.execute(f'SELECT {call} FROM points ORDER BY id')]


def quadrature():
    t, w = np.polynomial.legendre.leggauss(NODES)
    return (t + 1) / 2, w / 2


def torch_ig(f, x, baseline):
    """captum's integrated gradients of f (torch, float64) at the rows x from baseline, on the same Gauss–Legendre
    nodes: (x − x̄) · Σ ωₖ ∇f(x̄ + αₖ(x − x̄)), with torch autograd."""
    alphas, omegas = quadrature()
    x = torch.tensor(x, dtype=torch.float64)
    base = torch.tensor(baseline, dtype=torch.float64)
    total = torch.zeros_like(x)
    for alpha, omega in zip(alphas, omegas):
        point = (base + alpha * (x - base)).requires_grad_(True)
        grad, = torch.autograd.grad(f(point).sum(), point)
        total += omega * grad
    return ((x - base) * total).numpy()


def test_a_linear_model_s_explanation_is_exact_and_its_shapley_values(db):
    weights, options = train(db, 'lin', LINEAR, 'squared', 'points', '{"a":0,"b":0,"c":0,"e":0,"k":0}')
    x = data(db, 'x1, x2, x3, x4')
    # the baseline is the training rows' means, and the prediction there
    mean = x.mean(axis=0)
    baseline = options['baseline']
    assert [baseline[c] for c in ('x1', 'x2', 'x3', 'x4')] == pytest.approx(mean, rel=1e-12, abs=1e-14)
    w = np.array([weights[n] for n in 'abce'])
    f = lambda rows: rows @ w + weights['k']  # noqa: E731
    assert options['baseline_prediction'] == pytest.approx(f(mean), rel=1e-12)
    found = explained(db, 'pgad_models.lin_explain(x1, x2, x3, x4), pgad_models.lin(x1, x2, x3, x4)')
    phi = np.array([[e[c] for c in ('x1', 'x2', 'x3', 'x4')] for e, _ in found])
    # exact: wᵢ·(xᵢ − x̄ᵢ), to rounding
    assert np.allclose(phi, w * (x - mean), rtol=1e-12, atol=1e-12)
    # exact Shapley values, by brute force over the 2⁴ coalitions, with the interventional baseline of the training
    # rows: v(S) = mean over the rows z of f(x_S, z_~S)
    n = 4
    for row in (0, 17, 63):
        shapley = np.zeros(n)
        for i in range(n):
            others = [j for j in range(n) if j != i]
            for size in range(n):
                for s in itertools.combinations(others, size):
                    weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                    with_i, without = x.copy(), x.copy()
                    for j in (*s, i):
                        with_i[:, j] = x[row, j]
                    for j in s:
                        without[:, j] = x[row, j]
                    shapley[i] += weight * (f(with_i).mean() - f(without).mean())
        assert phi[row] == pytest.approx(shapley, rel=1e-9, abs=1e-12)
    # completeness
    predictions = np.array([p for _, p in found])
    assert phi.sum(axis=1) == pytest.approx(predictions - options['baseline_prediction'], rel=1e-12, abs=1e-12)


def test_a_logistic_model_s_contributions_sum_to_its_score_less_the_baseline_s(db):
    _, options = train(db, 'logit', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', 'logistic', 'points', '{"a":0,"b":0,"c":0}',
                       label='yes')
    found = explained(db, 'pgad_models.logit_explain(x1, x2), pgad_models.logit(x1, x2)')
    for e, score in found:
        assert e['x1'] + e['x2'] == pytest.approx(score - options['baseline_prediction'], rel=1e-12, abs=1e-12)


def test_a_tanh_layer_s_explanation_is_complete_and_torch_s_integrated_gradients(db):
    weights, options = train(db, 'layer', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    found = explained(db, 'pgad_models.layer_explain(x1, x2, x3), pgad_models.layer(x1, x2, x3)')
    phi = np.array([[e[c] for c in ('x1', 'x2', 'x3')] for e, _ in found])
    predictions = np.array([p for _, p in found])
    # completeness: to rounding, the quadrature's error being far below it for a model analytic along the path
    assert phi.sum(axis=1) == pytest.approx(predictions - options['baseline_prediction'], rel=1e-9, abs=1e-12)
    m, b, v = (torch.tensor(weights[n], dtype=torch.float64) for n in 'mbv')
    model = lambda x: torch.tanh(x @ m.T + b) @ v + weights['c']  # noqa: E731
    baseline = [options['baseline'][c] for c in ('x1', 'x2', 'x3')]
    assert baseline == pytest.approx(data(db, 'x1, x2, x3').mean(axis=0), rel=1e-12)
    expected = torch_ig(model, data(db, 'x1, x2, x3'), baseline)
    assert np.allclose(phi, expected, rtol=1e-9, atol=1e-12)


def test_a_vector_prediction_is_explained_element_by_element(db):
    model = 'λ(d, w) tanh(w.m @ [d.x1, d.x2] + w.b)'
    loss = 'λ(p, d) (p[1] - d.x3)^2 + (p[2] - tanh(d.x4 - 2))^2'
    weights, options = train(db, 'pair', model, loss, 'points', '{"m": [[0.1, 0.2], [0.3, -0.1]], "b": [0, 0]}')
    found = explained(db, 'pgad_models.pair_explain(x1, x2), pgad_models.pair(x1, x2)')
    m, b = (torch.tensor(weights[n], dtype=torch.float64) for n in 'mb')
    x = data(db, 'x1, x2')
    baseline = [options['baseline'][c] for c in ('x1', 'x2')]
    for k in range(2):
        phi = np.array([[e[k][c] for c in ('x1', 'x2')] for e, _ in found])
        predictions = np.array([p[k] for _, p in found])
        assert phi.sum(axis=1) == pytest.approx(predictions - options['baseline_prediction'][k], rel=1e-9,
                                                abs=1e-12)
        expected = torch_ig(lambda z: torch.tanh(z @ m.T + b)[..., k], x, baseline)  # noqa: B023
        assert np.allclose(phi, expected, rtol=1e-9, atol=1e-12)


def test_a_categorical_column_contributes_its_category_s_weight_less_the_mean_weight(db):
    weights, options = train(db, 'cat', 'λ(d, w) w.a*d.x1 + w.r[d.region]', 'squared', 'points', '{"a": 0, "r": {}}')
    regions = [r[0] for r in db.execute('SELECT region FROM points ORDER BY id')]
    mean_r = np.mean([weights['r'][r] for r in regions])
    assert options['baseline']['region'] == pytest.approx(mean_r, rel=1e-12)
    found = explained(db, 'pgad_models.cat_explain(x1, region), pgad_models.cat(x1, region)')
    for (e, p), region in zip(found, regions):
        assert e['region'] == pytest.approx(weights['r'][region] - mean_r, rel=1e-12, abs=1e-12)
        assert e['x1'] + e['region'] == pytest.approx(p - options['baseline_prediction'], rel=1e-12, abs=1e-12)
    # a category the model never saw contributes 0 to the prediction: -mean to the explanation
    e, = db.execute("SELECT pgad_models.cat_explain(1, 'west')").fetchone()
    assert e['region'] == pytest.approx(-mean_r, rel=1e-12)


def test_a_case_on_a_number_column_is_no_categorical_lookup(db):
    """CASE WHEN d.x4 = 1 …: a test of a number column against a constant, not a categorical weight's lookup. Its
    gradient is 0 but at the jump, so x4 contributes 0 and x1 exactly a·(x1 − x̄1)."""
    weights, options = train(db, 'stepped', 'λ(d, w) w.a*d.x1 + CASE WHEN d.x4 = 1 THEN w.b ELSE 0 END', 'squared',
                             'points', '{"a": 0, "b": 0}')
    found = explained(db, 'pgad_models.stepped_explain(x1, x4), x1')
    for e, x1 in found:
        assert e['x4'] == 0 and e['x1'] == pytest.approx(weights['a'] * (x1 - options['baseline']['x1']), rel=1e-12)
    rows = db.execute("SELECT feature, mean_contribution FROM pgad.importance('stepped', 'points')").fetchall()
    assert rows[1] == ('x4', 0.0)


def test_permutation_importance_checks_the_labels_as_training_does(db):
    train(db, 'labels', 'λ(d, w) w.a*d.x1 + w.k', 'logistic', 'SELECT x1, yes AS y FROM points',
           '{"a": 0, "k": 0}')
    e = error_of(db, "SELECT * FROM pgad.importance('labels', 'SELECT x1, yes + 1 AS y FROM points', true)")
    assert (e.sqlstate, e.message_primary) == (
        '22023', 'model "labels": loss "logistic" takes labels 0 or 1, but column "y" is 2')


def test_a_polynomial_s_explanation_is_exact(db):
    """a·x1⁴ + b·x2: separable, so each contribution is its term's rise from the baseline, exactly (the quadrature is
    exact for the derivative 4a·x³ along the path; only x² is written x·x)."""
    weights, options = train(db, 'quartic', 'λ(d, w) w.a*d.x1^4 + w.b*d.x2', 'squared', 'points',
                             '{"a": 0, "b": 0}')
    found = explained(db, 'pgad_models.quartic_explain(x1, x2), x1')
    for e, x1 in found:
        assert e['x1'] == pytest.approx(weights['a'] * (x1 ** 4 - options['baseline']['x1'] ** 4), rel=1e-9,
                                        abs=1e-12)


def test_a_model_that_reads_no_column_is_explained_by_no_feature(db):
    train(db, 'flat', 'λ(d, w) w.c', 'squared', 'points', '{"c": 0}')
    assert db.execute('SELECT pgad_models.flat_explain()').fetchone() == ({},)


def test_a_column_that_indexes_two_categorical_weights_is_one_feature(db):
    """w.r[d.region] + w.s[d.region]: two lookups of one column, whose contributions add up to the feature's."""
    weights, options = train(db, 'cat2', 'λ(d, w) w.a*d.x1 + w.r[d.region] + 2 * w.s[d.region]', 'squared', 'points',
                             '{"a": 0, "r": {}, "s": {"north": 0.5}}', l2=0.1)
    regions = [r[0] for r in db.execute('SELECT region FROM points ORDER BY id')]
    mean_r, mean_s = (np.mean([weights[n][r] for r in regions]) for n in 'rs')
    found = explained(db, 'pgad_models.cat2_explain(x1, region), pgad_models.cat2(x1, region)')
    for (e, p), region in zip(found, regions):
        assert sorted(e) == ['region', 'x1']
        assert e['region'] == pytest.approx(weights['r'][region] - mean_r + 2 * (weights['s'][region] - mean_s),
                                            rel=1e-12, abs=1e-12)
        assert e['x1'] + e['region'] == pytest.approx(p - options['baseline_prediction'], rel=1e-12, abs=1e-12)


def test_a_categorical_column_in_a_nonlinear_model_is_explained_through_its_weight_s_value(db):
    weights, options = train(db, 'catnl', 'λ(d, w) tanh(w.a*d.x1 + w.r[d.region]) * w.s', 'squared', 'points',
                             '{"a": 0.1, "r": {}, "s": 1}')
    regions = [r[0] for r in db.execute('SELECT region FROM points ORDER BY id')]
    found = explained(db, 'pgad_models.catnl_explain(x1, region), pgad_models.catnl(x1, region)')
    x = data(db, 'x1')[:, 0]
    t = np.array([weights['r'][r] for r in regions])
    baseline = [options['baseline']['x1'], options['baseline']['region']]
    assert baseline[1] == pytest.approx(t.mean(), rel=1e-12)
    expected = torch_ig(lambda z: torch.tanh(weights['a'] * z[:, 0] + z[:, 1]) * weights['s'],
                        np.stack([x, t], axis=1), baseline)
    phi = np.array([[e['x1'], e['region']] for e, _ in found])
    assert np.allclose(phi, expected, rtol=1e-9, atol=1e-12)
    assert phi.sum(axis=1) == pytest.approx(np.array([p for _, p in found]) - options['baseline_prediction'],
                                            rel=1e-9, abs=1e-12)


def test_an_array_column_is_explained_element_by_element_and_its_length_checked(db):
    query = 'SELECT id, ARRAY[x1, x2, x1 * x2] AS px, y FROM points'
    weights, options = train(db, 'arr', 'λ(d, w) w.v @ d.px + w.c', 'squared', query, '{"v": [0, 0, 0], "c": 0}')
    e, = db.execute("SELECT pgad_models.arr_explain(ARRAY[1, 2, 3]::float8[])").fetchone()
    assert sorted(e) == ['px[1]', 'px[2]', 'px[3]']
    for k, v in enumerate([1, 2, 3]):
        assert e[f'px[{k + 1}]'] == pytest.approx(weights['v'][k] * (v - options['baseline'][f'px[{k + 1}]']),
                                                  rel=1e-12)
    diag = error_of(db, "SELECT pgad_models.arr_explain(ARRAY[1, 2]::float8[])")
    assert diag.sqlstate == '2202E'


def test_a_null_argument_gives_null(db):
    train(db, 'nulls', 'λ(d, w) w.a*d.x1 + w.b*d.x2', 'squared', 'points', '{"a": 0, "b": 0}')
    assert db.execute('SELECT pgad_models.nulls_explain(NULL, 1), pgad_models.nulls_explain(1, NULL)').fetchone() \
        == (None, None)
    train(db, 'nullarr', 'λ(d, w) w.v @ d.px', 'squared', 'SELECT ARRAY[x1, x2] AS px, y FROM points',
          '{"v": [0, 0]}')
    assert db.execute('SELECT pgad_models.nullarr_explain(NULL), pgad_models.nullarr_explain(ARRAY[1, NULL])'
                      '::jsonb').fetchone() == (None, None)


def test_the_explain_function_is_inlined_and_immutable(db):
    train(db, 'inl', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    volatile, parallel = db.execute("SELECT provolatile, proparallel FROM pg_proc "
                                    "WHERE proname = 'inl_explain'").fetchone()
    assert (volatile, parallel) == ('i', 's')
    plan = '\n'.join(r[0] for r in db.execute('EXPLAIN VERBOSE SELECT pgad_models.inl_explain(x1, x2, x3) '
                                              'FROM points'))
    assert 'inl_explain' not in plan and 'tanh' in plan  # the body, in place of a call


def test_hostile_column_names_are_quoted(db):
    query = 'SELECT id, x1 AS "x""y", x2 AS "$$", x3 AS "a\'); DROP TABLE points; --", y FROM points'
    train(db, 'hostile', 'λ(d, w) tanh(w.a*d."x""y" + w.b*d."$$" + w.c*d."a\'); DROP TABLE points; --")',
          'squared', query, '{"a": 0.1, "b": 0.1, "c": 0.1}')
    e, p = db.execute('SELECT pgad_models.hostile_explain(1, 2, 3), pgad_models.hostile(1, 2, 3)').fetchone()
    assert sorted(e) == sorted(['x"y', '$$', "a'); DROP TABLE points; --"])
    options, = db.execute("SELECT options FROM pgad.models WHERE name = 'hostile'").fetchone()
    assert sum(e.values()) == pytest.approx(p - options['baseline_prediction'], rel=1e-9)
    assert db.execute('SELECT count(*) FROM points').fetchone() == (120,)


def test_a_grouped_model_is_explained_from_its_group_s_means(db):
    train(db, 'grouped', 'λ(d, w) w.a*d.x1 + w.b', 'squared', 'points', '{"a": 0, "b": 0}', group_by='part')
    rows = db.execute("SELECT group_key->>'part', weights, options FROM pgad.models WHERE name = 'grouped'").fetchall()
    for part, weights, options in rows:
        x1 = data(db, 'x1', where=f"WHERE part = '{part}'")[:, 0]
        assert options['baseline']['x1'] == pytest.approx(x1.mean(), rel=1e-12)
        e, = db.execute('SELECT pgad_models.grouped_explain(%s, 2.5)', [part]).fetchone()
        assert e['x1'] == pytest.approx(weights['a'] * (2.5 - x1.mean()), rel=1e-12)
    assert db.execute("SELECT pgad_models.grouped_explain('z', 2.5)").fetchone() == (None,)


def test_the_explain_function_is_dropped_with_the_model_and_replaced_on_retraining(db):
    train(db, 'life', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    explain = "SELECT pg_catalog.pg_get_function_identity_arguments(p.oid) FROM pg_proc AS p " \
              "WHERE p.proname = 'life_explain'"
    assert db.execute(explain).fetchall() == [('x1 double precision',)]
    train(db, 'life', 'λ(d, w) w.a*d.x1 + w.b*d.x2', 'squared', 'points', '{"a": 0, "b": 0}')  # other arguments
    assert db.execute(explain).fetchall() == [('x1 double precision, x2 double precision',)]
    db.execute("SELECT pgad.drop_model('life')")
    assert db.execute(explain).fetchall() == []
    # a model may not take the name of another's explain function, nor the other way round
    train(db, 'base', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    diag = error_of(db, "SELECT pgad.train('base_explain', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{\"a\": 0}')")
    assert diag.sqlstate == '42710' and 'explain function' in diag.message_primary
    db.execute("SELECT pgad.drop_model('base')")
    train(db, 'other_explain', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    diag = error_of(db, "SELECT pgad.train('other', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{\"a\": 0}')")
    assert diag.sqlstate == '42710'
    db.execute("SELECT pgad.drop_model('other_explain')")


def test_another_role_s_function_of_the_explain_name_is_refused_and_kept(cluster, dbname, db):
    db.execute('CREATE ROLE explainer_other')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO explainer_other')
    try:
        db.execute('SET ROLE explainer_other')
        db.execute('CREATE FUNCTION pgad_models.taken_explain(x1 float8) RETURNS jsonb LANGUAGE sql '
                   "RETURN '{}'::jsonb")
        db.execute('RESET ROLE')
        diag = error_of(db, "SELECT pgad.train('taken', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{\"a\": 0}')")
        assert diag.sqlstate == '42501' and 'explainer_other' in diag.message_primary
        assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'taken_explain'").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'taken'").fetchone() == (0,)
    finally:
        db.execute('RESET ROLE')
        db.execute('DROP FUNCTION IF EXISTS pgad_models.taken_explain(float8)')
        db.execute('REVOKE CREATE ON SCHEMA pgad_models FROM explainer_other')
        db.execute('DROP ROLE explainer_other')


def test_an_explanation_past_the_printer_s_budget_gives_a_notice_and_no_function(db):
    train(db, 'big', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'big_explain'").fetchone() == (1,)
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    db.execute('SET pgad.max_lambda_bytes = 4000')  # 64,000 characters a printed expression
    try:
        train(db, 'big', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    finally:
        db.execute('RESET pgad.max_lambda_bytes')
    assert 'model "big" gets no pgad_models."big_explain" function: its explanation is too long to write as SQL ' \
        '(expression is too long to write as SQL: more than 64000 characters)' in notices
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'big_explain'").fetchone() == (0,)
    assert db.execute('SELECT pgad_models.big(1, 2, 3)').fetchone()[0] is not None
    # the baseline is stored all the same
    assert len(db.execute("SELECT * FROM pgad.importance('big', 'points')").fetchall()) == 3


def test_the_groups_explanations_share_one_budget(db):
    """Each group's explanation fits the printer's budget, their CASE does not: the model gets no explain function
    (else the groups of one training would each spend the budget: memory past any bound)."""
    model = 'λ(d, w) w.v*tanh(w.a*d.x1 + w.b*d.x2 + w.c*d.x3) + w.k'
    start = '{"v": 0.5, "a": 0.3, "b": -0.2, "c": 0.1, "k": 0}'
    train(db, 'shared', model, 'squared', 'points', start, group_by='region', l2=0.05)
    size, = db.execute("SELECT length(pg_get_functiondef(format('pgad_models.%I', name || '_explain@' || version)"
                       "::regproc)) FROM pgad.models WHERE name = 'shared'").fetchone()
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    # the budget: 7/4 of the three groups' text, above what one group's writing counts (its pieces, then the whole),
    # below what the three count together (measured: one group alone passes from 1.5, the three fail up to 2)
    db.execute(f'SET pgad.max_lambda_bytes = {size * 7 // 4 // 16}')
    try:
        train(db, 'shared', model, 'squared', 'points', start, group_by='region', l2=0.05)
    finally:
        db.execute('RESET pgad.max_lambda_bytes')
    assert any('gets no pgad_models."shared_explain" function: its explanation is too long' in n for n in notices)
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname = 'shared_explain'").fetchone() == (0,)


def permutation_rises(x, loss, seed):
    """numpy's permutation importance: each column of x shuffled in turn by default_rng(seed), the loss's rise."""
    rng = np.random.default_rng(seed)
    rises = []
    for k in range(x.shape[1]):
        shuffled = x.copy()
        shuffled[:, k] = x[rng.permutation(len(x)), k]
        rises.append(loss(shuffled) - loss(x))
    return rises


def test_importance_is_numpy_s_on_the_loaded_rows(db):
    weights, options = train(db, 'imp', LINEAR, 'squared', 'points', '{"a":0,"b":0,"c":0,"e":0,"k":0}')
    query = 'SELECT * FROM points WHERE id % 3 = 0'
    rows = db.execute('SELECT * FROM pgad.importance(%s, %s, true, 7)', ['imp', query]).fetchall()
    x = data(db, 'x1, x2, x3, x4, y', where='WHERE id % 3 = 0')
    w = np.array([weights[n] for n in 'abce'])
    mean = np.array([options['baseline'][c] for c in ('x1', 'x2', 'x3', 'x4')])
    phi = w * (x[:, :4] - mean)
    rises = permutation_rises(x[:, :4], lambda z: np.mean((z @ w + weights['k'] - x[:, 4]) ** 2), 7)
    assert [r[2] for r in rows] == ['x1', 'x2', 'x3', 'x4']
    for k, (key, output, feature, mean_abs, mean_phi, drop) in enumerate(rows):
        assert key is None and output is None
        assert mean_abs == pytest.approx(np.mean(np.abs(phi[:, k])), rel=1e-12)
        assert mean_phi == pytest.approx(np.mean(phi[:, k]), rel=1e-9, abs=1e-12)
        assert drop == pytest.approx(rises[k], rel=1e-9, abs=1e-12)
    # without permutation, none; the same seed, the same shuffles
    assert all(r[5] is None for r in db.execute("SELECT * FROM pgad.importance('imp', 'points')"))
    again = db.execute('SELECT * FROM pgad.importance(%s, %s, true, 7)', ['imp', query]).fetchall()
    assert again == rows


def test_importance_of_an_array_column_is_numpy_s_element_by_element(db):
    """A float8[] column's elements are features of their own ('px[1]' …), their lengths from the baseline."""
    query = 'SELECT id, ARRAY[x1, x2, x1 * x2] AS px, y FROM points'
    weights, options = train(db, 'arr_imp', 'λ(d, w) w.v @ d.px + w.c', 'squared', query, '{"v": [0, 0, 0], "c": 0}')
    rows = db.execute('SELECT feature, mean_abs_contribution, permutation_importance FROM pgad.importance(%s, %s, '
                      'true, 3)', ['arr_imp', query]).fetchall()
    x, y = data(db, 'x1, x2, x1 * x2'), data(db, 'y')[:, 0]
    v = np.array(weights['v'])
    phi = v * (x - [options['baseline'][f'px[{k}]'] for k in (1, 2, 3)])
    rises = permutation_rises(x, lambda z: np.mean((z @ v + weights['c'] - y) ** 2), 3)
    assert [r[0] for r in rows] == ['px[1]', 'px[2]', 'px[3]']
    assert [r[1] for r in rows] == pytest.approx(np.mean(np.abs(phi), axis=0), rel=1e-12)
    assert [r[2] for r in rows] == pytest.approx(rises, rel=1e-9, abs=1e-12)


def test_importance_of_a_model_of_number_weights_with_a_vector_inside(db):
    """No vector weight or array column, but a vector in the model ([1, 2] @ [d.x1, d.x2]): unrolled all the same."""
    weights, options = train(db, 'inner', 'λ(d, w) w.a * ([1, 2] @ [d.x1, d.x2]) + w.c', 'squared', 'points',
                             '{"a": 0, "c": 0}')
    rows = db.execute("SELECT feature, mean_contribution FROM pgad.importance('inner', 'points')").fetchall()
    x = data(db, 'x1, x2')
    phi = weights['a'] * np.array([1, 2]) * (x - [options['baseline']['x1'], options['baseline']['x2']])
    assert [r[0] for r in rows] == ['x1', 'x2']
    assert [r[1] for r in rows] == pytest.approx(np.mean(phi, axis=0), rel=1e-9, abs=1e-12)


def test_a_number_column_named_like_an_element_is_no_array(db):
    """Columns x1 and "x1[1]", both numbers: the baseline holds 'x1' and 'x1[1]', and x1 is still no array."""
    query = 'SELECT x1, x2 AS "x1[1]", y FROM points'
    weights, options = train(db, 'odd_imp', 'λ(d, w) w.a*d.x1 + w.b*d."x1[1]"', 'squared', query, '{"a": 0, "b": 0}')
    rows = db.execute('SELECT feature, mean_contribution FROM pgad.importance(%s, %s)', ['odd_imp', query]).fetchall()
    x = data(db, 'x1, x2')
    phi = [weights['a'], weights['b']] * (x - [options['baseline']['x1'], options['baseline']['x1[1]']])
    assert [r[0] for r in rows] == ['x1', 'x1[1]']
    assert [r[1] for r in rows] == pytest.approx(np.mean(phi, axis=0), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize('label, query', [
    ('part', 'points'),                                               # text: 'b', the second class, is 1
    ('is_b', "SELECT *, part = 'b' AS is_b FROM points"),             # boolean
])
def test_importance_of_a_logistic_model_of_a_text_or_boolean_label_is_numpy_s_log_loss(db, label, query):
    """The permutation importance takes the label as training did: a text label by its class code less 1, a
    boolean as 0/1. (With an interaction: a shuffle keeps the mean of a score linear in the columns, and a label
    read 1 too high would shift both losses alike.)"""
    train(db, 'yes_imp', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x1*d.x2 + w.k', 'logistic', query,
          '{"a": 0, "b": 0, "c": 0, "k": 0}', label=label)
    weights = db.execute("SELECT weights FROM pgad.models WHERE name = 'yes_imp'").fetchone()[0]
    rows = db.execute('SELECT feature, permutation_importance FROM pgad.importance(%s, %s, true, 11)',
                      ['yes_imp', query]).fetchall()
    x = data(db, 'x1, x2')
    y = data(db, "(part = 'b')::int")[:, 0]
    score = lambda z: z @ [weights['a'], weights['b']] + weights['c'] * z[:, 0] * z[:, 1] + weights['k']  # noqa
    loss = lambda z: np.mean(np.logaddexp(0, score(z)) - y * score(z))  # noqa: E731
    assert [r[0] for r in rows] == ['x1', 'x2']
    assert [r[1] for r in rows] == pytest.approx(permutation_rises(x, loss, 11), rel=1e-9, abs=1e-12)


def test_importance_of_a_categorical_column_is_the_mean_of_its_explanations(db):
    """A categorical weight's column is one feature: its contributions those of <name>_explain, averaged; a category
    the training never saw ('west', a tenth of the rows) has weight 0, as in the function."""
    train(db, 'cat_imp', 'λ(d, w) w.r[d.region] + w.a*d.x1', 'squared', 'points', '{"r": {}, "a": 0}')
    west = "CASE WHEN id % 10 = 0 THEN 'west' ELSE region END"
    rows = db.execute(f"SELECT feature, mean_abs_contribution, mean_contribution FROM pgad.importance('cat_imp', "
                      f"'SELECT x1, y, {west.replace(chr(39), chr(39) * 2)} AS region FROM points')").fetchall()
    found = explained(db, f'pgad_models.cat_imp_explain({west}, x1), 0')
    assert [r[0] for r in rows] == ['region', 'x1']
    for feature, mean_abs, mean_phi in rows:
        phi = np.array([e[feature] for e, _ in found])
        assert mean_abs == pytest.approx(np.mean(np.abs(phi)), rel=1e-9)
        assert mean_phi == pytest.approx(np.mean(phi), rel=1e-9, abs=1e-12)


def test_importance_of_a_tanh_layer_is_the_mean_of_its_explanations(db):
    train(db, 'impl', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    rows = db.execute("SELECT feature, mean_abs_contribution, mean_contribution "
                      "FROM pgad.importance('impl', 'points')").fetchall()
    found = explained(db, 'pgad_models.impl_explain(x1, x2, x3), 0')
    for feature, mean_abs, mean_phi in rows:
        phi = np.array([e[feature] for e, _ in found])
        assert mean_abs == pytest.approx(np.mean(np.abs(phi)), rel=1e-9)
        assert mean_phi == pytest.approx(np.mean(phi), rel=1e-9, abs=1e-12)


def test_importance_per_group_and_output(db):
    train(db, 'impg', 'λ(d, w) w.a*d.x1 + w.r[d.region]', 'squared', 'points', '{"a": 0, "r": {}}',
          group_by='part')
    rows = db.execute("SELECT group_key->>'part', output, feature FROM pgad.importance('impg', 'points')").fetchall()
    assert rows == [('a', None, 'x1'), ('a', None, 'region'), ('b', None, 'x1'), ('b', None, 'region')]
    train(db, 'impv', 'λ(d, w) tanh(w.m @ [d.x1, d.x2] + w.b)', 'λ(p, d) (p[1] - d.x3)^2 + (p[2] - d.x4 / 5)^2',
          'points', '{"m": [[0.1, 0.2], [0.3, -0.1]], "b": [0, 0]}')
    rows = db.execute("SELECT output, feature, permutation_importance FROM pgad.importance('impv', 'points', true, 1)"
                      ).fetchall()
    assert [r[:2] for r in rows] == [('1', 'x1'), ('1', 'x2'), ('2', 'x1'), ('2', 'x2')]
    assert rows[0][2] == rows[2][2] and rows[0][2] > 0  # one shuffle a feature


def test_importance_over_groups_takes_an_unseen_category_and_the_load_s_bound(db):
    """Grouped: a category no group was trained on ('west') contributes its weight 0, as ungrouped; a group the
    model lacks is left out; and the load of the groups is bounded by pgad.memory_limit (53200), as pgad.importance's
    own load is."""
    train(db, 'impw', 'λ(d, w) w.a*d.x1 + w.r[d.region]', 'squared', 'points', '{"a": 0, "r": {}}', group_by='part')
    west = "CASE WHEN id % 10 = 0 THEN 'west' ELSE region END"
    rows = db.execute(f"SELECT group_key->>'part', feature, mean_abs_contribution FROM pgad.importance('impw', "
                      f"'SELECT part, x1, y, {west.replace(chr(39), chr(39) * 2)} AS region FROM points')").fetchall()
    assert len(rows) == 4
    lacking = db.execute("SELECT group_key->>'part' FROM pgad.importance('impw', 'SELECT (CASE WHEN id % 3 = 0 THEN "
                         "''0'' ELSE part END) AS part, x1, y, region FROM points')").fetchall()
    assert lacking == [('a',), ('a',), ('b',), ('b',)]  # rows of a group the model lacks ('0', first) left out
    for part, feature, mean_abs in rows:
        found = explained(db, f"pgad_models.impw_explain(part, x1, {west}), part")
        phi = [e[feature] for e, p in found if p == part]
        assert mean_abs == pytest.approx(np.mean(np.abs(phi)), rel=1e-9)
    with settings(db, {'pgad.memory_limit': '1MB'}):
        e = error_of(db, "SELECT * FROM pgad.importance('impw', 'SELECT p.* FROM points AS p, "
                         "generate_series(1, 100) AS k')")
    assert e.sqlstate == '53200' and e.message_primary.startswith('the data needs ')


def test_importance_s_load_is_bounded_before_its_explanation(db):
    """17,000 rows of x1 and y: the load (4 × 8 bytes a row and column: 1.04 MB) passes pgad.memory_limit = 1MB
    and is refused (53200) though the explanation itself (56 bytes a row) would fit."""
    train(db, 'loadb', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    with settings(db, {'pgad.memory_limit': '1MB'}):
        e = error_of(db, "SELECT * FROM pgad.importance('loadb', 'SELECT p.* FROM points AS p, "
                         "generate_series(1, 142) AS k LIMIT 17000')")
    assert (e.sqlstate, e.message_primary) == ('53200', 'the data needs 1.0 MB, more than pgad.memory_limit (1.0 MB)')


def test_importance_fills_nulls_as_the_model_imputes(db):
    """impute => mean: a row whose x1 is NULL is explained at the training mean, its contribution 0."""
    query = 'SELECT id, CASE WHEN id % 4 = 0 THEN NULL ELSE x1 END AS x1, y FROM points'
    weights, options = train(db, 'filled', 'λ(d, w) w.a*d.x1 + w.k', 'squared', query, '{"a": 0, "k": 0}',
                             impute='{"x1": "mean"}')
    (rows, mean_abs), = db.execute('SELECT count(*), max(mean_abs_contribution) FROM pgad.importance(%s, %s)',
                                   ['filled', query]).fetchall()
    x1 = data(db, 'x1', where='WHERE id % 4 <> 0')[:, 0]
    filled = np.concatenate([x1, np.full(N_POINTS // 4, x1.mean())])
    assert rows == 1 and mean_abs == pytest.approx(np.mean(np.abs(weights['a'] * (filled - options['baseline']['x1']))),
                                                   rel=1e-9)


def test_importance_fills_a_null_category_as_the_model_imputes(db):
    """impute => most_frequent of a categorical weight's column: a NULL region is explained as the stored category,
    as <name>_explain explains it."""
    region = "CASE WHEN id % 5 = 0 THEN NULL ELSE region END"
    query = f'SELECT id, x1, y, {region} AS region FROM points'
    train(db, 'filled_cat', 'λ(d, w) w.r[d.region] + w.a*d.x1', 'squared', query, '{"r": {}, "a": 0}',
          impute='{"region": "most_frequent"}')
    rows = db.execute('SELECT feature, mean_abs_contribution FROM pgad.importance(%s, %s)',
                      ['filled_cat', query]).fetchall()
    found = explained(db, f'pgad_models.filled_cat_explain({region}, x1), 0')
    assert [r[0] for r in rows] == ['region', 'x1']
    for feature, mean_abs in rows:
        assert mean_abs == pytest.approx(np.mean(np.abs([e[feature] for e, _ in found])), rel=1e-9)


@pytest.mark.parametrize('call, sqlstate, message, hint', [
    ("SELECT * FROM pgad.importance(NULL, 'points')", '22004', 'argument "name" of pgad.importance must not be NULL',
     None),
    ("SELECT * FROM pgad.importance('errs', NULL)", '22004', 'argument "data" of pgad.importance must not be NULL',
     None),
    ("SELECT * FROM pgad.importance('nosuch', 'points')", '42704', None, None),
    ("SELECT * FROM pgad.importance('errs', 'SELECT * FROM points WHERE false')", '22000',
     'the data has no rows without NULL in the columns the model reads',
     'pgad.importance explains model "errs" on the rows of the data.'),
    ("SELECT * FROM pgad.importance('errs', 'SELECT 1; DROP TABLE points')", '42601', None, None),
])
def test_importance_s_errors(db, call, sqlstate, message, hint):
    """Each refusal's SQLSTATE, and where pgad.importance words it, its message and hint in full."""
    train(db, 'errs', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    e = error_of(db, call)
    assert e.sqlstate == sqlstate and (message is None or (e.message_primary, e.message_hint) == (message, hint))


def test_importance_of_a_model_without_a_baseline_says_to_train_it_again(db):
    """A model stored before 0.15.0 has no options.baseline (made so here by removing it): 0A000, and why."""
    train(db, 'old', 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    db.execute("UPDATE pgad.model_versions SET options = options - 'baseline' WHERE name = 'old'")
    e = error_of(db, "SELECT * FROM pgad.importance('old', 'points')")
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '0A000', 'model "old" has no baseline to explain its predictions from',
        "pgad.train stores the training rows' means (options.baseline) since pgad 0.15.0, where the model gets a "
        '_explain function.', 'Train the model again.')


def test_importance_is_bounded_by_the_memory_limit(db):
    """An explanation of a model of 2 leaves, 2 features and 2 outputs (a softmax model of two classes) holds
    8 × (3·2 + 2·2 + 2·2 + 2) = 128 bytes a row: 8,192 rows take 1 MB exactly and are explained under
    pgad.memory_limit = 1MB, one more row is refused (53200) before the quadrature allocates anything (the load's
    bound, 4 × 8 bytes a row and column, is 96 bytes a row)."""
    train(db, 'bounded', 'λ(d, w) w.m @ [d.x1, d.x2] + w.b', 'softmax', 'points', '{"m": {}, "b": {}}', label='part',
          l2=0.1)
    query = "SELECT * FROM pgad.importance('bounded', 'SELECT p.* FROM points AS p, generate_series(1, 69) AS k " \
            "LIMIT %s')"
    with settings(db, {'pgad.memory_limit': '1MB'}):
        assert len(db.execute(query % 8192).fetchall()) == 4
        e = error_of(db, query % 8193)
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '53200', 'the explanation of the data needs 1.0 MB, more than pgad.memory_limit (1.0 MB)',
        '8193 rows, 2 features, 2 outputs.',
        'Explain fewer rows at a time, or have a superuser raise pgad.memory_limit.')


def test_importance_ends_at_statement_timeout(db):
    """1.2 million rows of a tanh layer take pgad.importance about 4 s on a quiet 2-core machine, most of it in the
    quadrature over whole columns (the load is under 1 s): a statement_timeout of 1.5 s stops it within about a
    second of that (the interrupts are checked at every node of every quadrature point, and between features)."""
    import time
    train(db, 'slow', LAYER, 'squared', 'points', LAYER_START, optimizer='gd', iterations=0)
    db.execute("SET statement_timeout = '1500ms'")
    start = time.monotonic()
    try:
        diag = error_of(db, "SELECT count(*) FROM pgad.importance('slow', 'SELECT p.* FROM points AS p, "
                            "generate_series(1, 10000) AS k', true, 1)")
    finally:
        db.execute('RESET statement_timeout')
    assert diag.sqlstate == '57014'
    assert time.monotonic() - start < 4.5  # 1.5 s, and up to 3 s for a loaded machine's load and first node


def test_a_name_too_long_for_its_explain_function_trains_without_one(db):
    name = 'n' * 56  # "<name>_explain" would pass 63 bytes: PostgreSQL would truncate it to another function's name
    notices = []
    db.add_notice_handler(lambda n: notices.append(n.message_primary))
    train(db, name, 'λ(d, w) w.a*d.x1', 'squared', 'points', '{"a": 0}')
    assert f'model "{name}" gets no pgad_models."{name}_explain" function: its name would be longer than 63 bytes' \
        in notices
    assert db.execute('SELECT count(*) FROM pg_proc WHERE proname LIKE %s', [name + '%']).fetchone() == (2,)  # @1
    db.execute('SELECT pgad.drop_model(%s)', [name])


def test_a_softmax_model_is_explained_by_class_name(db):
    """A model of classes (issue 36 §1's loss 'softmax', options.classes): each class's logit explained, keyed by the
    class's name; pgad.importance's outputs by class name, its permutation importance numpy's cross-entropy's rise.
    Skipped where the server has no loss 'softmax' (a branch without part 1)."""
    db.execute("CREATE TABLE IF NOT EXISTS kinds AS SELECT id, x1, x2, (ARRAY['ant', 'bee', 'cow'])[1 + "
               "((id % 7) + (id * 13) % 11 + id % 3) / 6 % 3] AS kind FROM points")
    try:
        weights, options = train(db, 'kinds', 'λ(d, w) tanh(w.m @ [d.x1, d.x2] + w.b)', 'softmax', 'kinds',
                                 '{"m": {}, "b": {}}', label='kind', l2=0.1)
    except psycopg.Error as e:
        if 'softmax' in str(e) and e.sqlstate == '22023':
            pytest.skip("no loss 'softmax' here")
        raise
    assert options['classes'] == ['ant', 'bee', 'cow']
    found = explained(db, 'pgad_models.kinds_explain(x1, x2), pgad_models.kinds(x1, x2)')
    x = data(db, 'x1, x2')
    m, b = (torch.tensor(weights[n], dtype=torch.float64) for n in 'mb')
    baseline = [options['baseline'][c] for c in ('x1', 'x2')]
    for k, kind in enumerate(options['classes']):
        phi = np.array([[e[kind][c] for c in ('x1', 'x2')] for e, _ in found])
        assert phi.sum(axis=1) == pytest.approx(np.array([p[k] for _, p in found]) - options['baseline_prediction'][k],
                                                rel=1e-9, abs=1e-12)
        expected = torch_ig(lambda z: torch.tanh(z @ m.T + b)[..., k], x, baseline)  # noqa: B023
        assert np.allclose(phi, expected, rtol=1e-9, atol=1e-12)
    rows = db.execute("SELECT output, feature, permutation_importance FROM pgad.importance('kinds', 'kinds', true, 5)"
                      ).fetchall()
    assert [r[:2] for r in rows] == [(k, c) for k in ('ant', 'bee', 'cow') for c in ('x1', 'x2')]
    kinds = [options['classes'].index(r[0]) for r in db.execute('SELECT kind FROM kinds ORDER BY id')]
    logits = lambda z: np.tanh(z @ np.array(weights['m']).T + np.array(weights['b']))  # noqa: E731
    loss = lambda z: np.mean(np.log(np.exp(logits(z)).sum(axis=1)) - logits(z)[np.arange(len(z)), kinds])  # noqa
    assert [r[2] for r in rows[:2]] == pytest.approx(permutation_rises(x, loss, 5), rel=1e-9, abs=1e-12)


def test_rows_of_classes_the_model_never_saw_have_no_permutation_importance(db):
    """pgad.importance of the softmax model over rows whose every label is a class it was not trained on: the
    contributions (of the logits, which need no label), and no loss to shuffle (NULL), rather than a mean over no
    rows."""
    db.execute("CREATE TABLE IF NOT EXISTS kinds AS SELECT id, x1, x2, (ARRAY['ant', 'bee', 'cow'])[1 + "
               "((id % 7) + (id * 13) % 11 + id % 3) / 6 % 3] AS kind FROM points")
    train(db, 'kinds_unseen', 'λ(d, w) w.m @ [d.x1, d.x2] + w.b', 'softmax', 'kinds', '{"m": {}, "b": {}}',
          label='kind', l2=0.1)
    rows = db.execute("SELECT output, feature, mean_abs_contribution, permutation_importance FROM pgad.importance("
                      "'kinds_unseen', 'SELECT id, x1, x2, ''yak''::text AS kind FROM kinds', true, 5)").fetchall()
    assert len(rows) == 6 and all(r[2] > 0 and r[3] is None for r in rows)


def test_a_standardized_model_is_explained_in_its_columns_units(db):
    """standardize => true trains on scaled columns and stores the weights scaled back: the baseline and the
    contributions are in the columns' own units, exactly wᵢ·(xᵢ − x̄ᵢ)."""
    weights, options = train(db, 'scaled', 'λ(d, w) w.a*d.x1 + w.b*d.x4 + w.c', 'squared', 'points',
                             '{"a": 0, "b": 0, "c": 0}', standardize=True)
    x = data(db, 'x1, x4')
    assert [options['baseline']['x1'], options['baseline']['x4']] == pytest.approx(x.mean(axis=0), rel=1e-12)
    e, = db.execute('SELECT pgad_models.scaled_explain(2, 3)').fetchone()
    assert e['x1'] == pytest.approx(weights['a'] * (2 - x[:, 0].mean()), rel=1e-12)
    assert e['x4'] == pytest.approx(weights['b'] * (3 - x[:, 1].mean()), rel=1e-12)


def test_an_explain_function_a_view_uses_is_not_dropped_by_a_retraining_that_gets_none(db):
    train(db, 'viewed', LAYER, 'squared', 'points', LAYER_START, l2=0.05)
    db.execute('CREATE VIEW viewed_why AS SELECT pgad_models.viewed_explain(x1, x2, x3) AS why FROM points')
    db.execute('SET pgad.max_lambda_bytes = 4000')
    try:
        diag = error_of(db, "SELECT pgad.train('viewed', %s, 'squared', 'points', %s, l2 => 0.05)",
                        [LAYER, LAYER_START])
    finally:
        db.execute('RESET pgad.max_lambda_bytes')
    assert diag.sqlstate == '2BP01'
    assert diag.message_primary == 'cannot replace the explain function of model "viewed": the model gets none this ' \
                                   'time, and other objects depend on it'
    assert db.execute('SELECT count(*) FROM viewed_why').fetchone() == (120,)
    db.execute('DROP VIEW viewed_why')
