"""The piecewise-linear losses reach their optimum by default (issue 45, item 6; pgad/models/piecewise.py):
'quantile(τ)', 'absolute' and 'hinge' of a model linear in its weights are solved as their linear programme by optimizer
'interior_point'; of a model not linear in its weights, and a lambda loss of relu, abs or greatest, by smoothing with
continuation. Oracles: scipy's HiGHS on the exact linear programme (its columns scaled to 1 and back, so that its
tolerances are relative), statsmodels' QuantReg (IRLS, on the same scaled columns: its own accuracy is about 1e-7 of
the objective), and for l2, where the programme is quadratic, the optimality conditions checked from the residuals.
Ten quantile cases of columns from 1e-6 to 1e6, made with fixed seeds; float64; the tolerances sit next to the
assertions.
"""
import json
import pathlib
import re
import time

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import optimize

from conftest import error_of
from pgad.models import piecewise

SCALES = (1e-6, 1e-3, 1.0, 1e3, 1e6)
TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)


def case(k, n=240):
    """(x: n × 3 columns, y, τ) of case k: columns at scales drawn from 1e-6 … 1e6, heavy-tailed noise."""
    rng = np.random.default_rng(4506 + k)
    scales = rng.choice(SCALES, size=3)
    x = (rng.normal(size=(n, 3)) + 1.0) * scales
    y = x @ (rng.normal(size=3) / scales) + 2.0 + rng.standard_t(2, size=n) * 10.0 ** rng.integers(-2, 3)
    return x, y, TAUS[k % len(TAUS)]


def check(y, p, tau):
    """The mean pinball loss of predictions p."""
    r = y - p
    return float(np.mean(np.maximum(tau * r, (tau - 1) * r)))


def exact(b, a, alpha, beta, l1=0.0):
    """The weights of min Σ α·max(r, 0) + β·max(−r, 0) + n·l1·Σ|w|, r = a − B·w, by HiGHS on B's columns scaled to 1."""
    m, p = b.shape
    k = np.abs(b).max(axis=0)
    scaled = b / k
    if l1:  # |w_j| as a row of its own: b = e_j (scaled), a = 0, α = β = n·l1
        scaled = np.vstack([scaled, np.diag(1 / k)])
        a, alpha, beta = np.r_[a, np.zeros(p)], np.r_[alpha, np.full(p, m * l1)], np.r_[beta, np.full(p, m * l1)]
        m += p
    cost = np.concatenate([np.zeros(p), alpha, beta])
    found = optimize.linprog(cost, A_eq=np.hstack([scaled, np.eye(m), -np.eye(m)]), b_eq=a,
                             bounds=[(None, None)] * p + [(0, None)] * (2 * m), method='highs',
                             options=dict(primal_feasibility_tolerance=1e-10, dual_feasibility_tolerance=1e-10))
    assert found.status == 0
    return found.x[:p] / k


def design(x):
    return np.column_stack([np.ones(len(x)), x])


MODEL = 'λ(d, w) w.c + w.a*d.x1 + w.b*d.x2 + w.e*d.x3'
START = '{"c": 0, "a": 0, "b": 0, "e": 0}'
ORDER = 'cabe'


@pytest.fixture
def cases(db):
    db.execute('DROP TABLE IF EXISTS cases')
    db.execute('CREATE TABLE cases (k int, i int, x1 float8, x2 float8, x3 float8, y float8)')
    with db.cursor() as cur:
        for k in range(10):
            x, y, _ = case(k)
            cur.executemany('INSERT INTO cases VALUES (%s, %s, %s, %s, %s, %s)',
                            [(k, i, *map(float, row), float(v)) for i, (row, v) in enumerate(zip(x, y))])
    return db


def train(db, name, loss, data, **options):
    extra = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f'SELECT weights, final_loss, converged, options, iterations FROM pgad.train(%(name)s, '
                      f'%(model)s, %(loss)s, %(data)s, %(start)s{extra})',
                      dict(name=name, model=MODEL, loss=loss, data=data, start=START, **options)).fetchone()


@pytest.mark.parametrize('k', range(10))
def test_quantile_reaches_the_linear_programmes_optimum_on_any_scale(cases, k):
    x, y, tau = case(k)
    weights, final, converged, options, _ = train(cases, f'q{k}', f'quantile({tau})',
                                                  f'SELECT x1, x2, x3, y FROM cases WHERE k = {k}')
    assert options['optimizer'] == 'interior_point' and converged
    got = np.array([weights[n] for n in ORDER])
    best = exact(design(x), y, np.full(len(y), tau), np.full(len(y), 1 - tau))
    optimum = check(y, design(x) @ best, tau)
    assert final == pytest.approx(optimum, rel=1e-8)                       # the objective: 1e-8 of the optimum
    assert check(y, design(x) @ got, tau) == pytest.approx(optimum, rel=1e-8)
    scale = np.abs(design(x)).max(axis=0)                                  # the weights, in units of the columns
    np.testing.assert_allclose(got * scale, best * scale, rtol=1e-6, atol=1e-6 * np.abs(best * scale).max())
    theirs = sm.QuantReg(y, design(x) / scale).fit(q=tau, max_iter=5000, p_tol=1e-10).params / scale
    assert check(y, design(x) @ theirs, tau) == pytest.approx(optimum, rel=1e-6)  # QuantReg's IRLS: about 1e-7


def test_absolute_and_hinge_reach_their_linear_programmes_optimum(cases):
    x, y, _ = case(3)
    weights, final, converged, options, _ = train(cases, 'ab', 'absolute',
                                                  'SELECT x1, x2, x3, y FROM cases WHERE k = 3')
    assert options['optimizer'] == 'interior_point' and converged
    best = exact(design(x), y, np.ones(len(y)), np.ones(len(y)))
    assert final == pytest.approx(np.mean(np.abs(y - design(x) @ best)), rel=1e-8)
    scale = np.abs(design(x)).max(axis=0)
    np.testing.assert_allclose(np.array([weights[n] for n in ORDER]) * scale, best * scale, rtol=1e-6,
                               atol=1e-6 * np.abs(best * scale).max())
    # hinge: labels ±1 that no hyperplane separates; r = 1 − y·p, α = 1, β = 0
    labels = np.where(y > np.median(y), 1.0, -1.0)
    cases.execute('CREATE TEMP TABLE signs AS SELECT x1, x2, x3, CASE WHEN y > %s THEN 1 ELSE -1 END::float8 AS y '
                  'FROM cases WHERE k = 3', (float(np.median(y)),))
    weights, final, converged, options, _ = train(cases, 'hi', 'hinge', 'signs')
    assert options['optimizer'] == 'interior_point' and converged
    margins = labels[:, None] * design(x)
    best = exact(margins, np.ones(len(y)), np.ones(len(y)), np.zeros(len(y)))
    assert final == pytest.approx(np.mean(np.maximum(1 - margins @ best, 0)), rel=1e-8)


def test_l1_reaches_its_linear_programmes_optimum_and_l2_its_optimality_conditions(cases):
    x, y, tau = case(5)
    data = 'SELECT x1, x2, x3, y FROM cases WHERE k = 5'
    b = design(x)
    scale = np.abs(b).max(axis=0)
    l1 = 0.01
    # l1 on the standardised weights' scale: the columns scaled to 1 in the data query, the weights back after
    scaled = (f'SELECT x1 / {float(scale[1])!r} AS x1, x2 / {float(scale[2])!r} AS x2, '
              f'x3 / {float(scale[3])!r} AS x3, y FROM ({data}) AS q')
    weights, final, converged, options, _ = train(cases, 'l1', f'quantile({tau})', scaled, l1=l1)
    assert options['optimizer'] == 'interior_point' and converged
    got = np.array([weights[n] for n in ORDER])
    best = exact(b / scale, y, np.full(len(y), tau), np.full(len(y), 1 - tau), l1=l1)
    optimum = check(y, b / scale @ best, tau) + l1 * np.abs(best).sum()
    assert final == pytest.approx(optimum, rel=1e-8)
    np.testing.assert_allclose(got, best, rtol=1e-6, atol=1e-6 * np.abs(best).max())
    # l2: 0 is in the subdifferential at the weights: Bᵀd = 2·n·l2·w, d = τ where r > 0, τ − 1 where r < 0, and
    # within [τ − 1, τ] on the rows the fit passes through (|r| ≤ 1e-9 of the labels' scale)
    l2 = 0.05
    weights, final, converged, options, _ = train(cases, 'l2', f'quantile({tau})', scaled, l2=l2)
    assert options['optimizer'] == 'interior_point' and converged
    w = np.array([weights[n] for n in ORDER])
    r = y - b / scale @ w
    on = np.abs(r) <= 1e-9 * np.abs(y).max()
    d = np.where(r > 0, tau, tau - 1.0)
    need = 2 * len(y) * l2 * w - (b / scale)[~on].T @ d[~on]
    free, *_ = np.linalg.lstsq((b / scale)[on].T, need, rcond=None)
    assert np.abs((b / scale)[on].T @ free - need).max() <= 1e-8 * len(y)   # stationarity, to 1e-8 a row
    assert np.all(free >= tau - 1 - 1e-8) and np.all(free <= tau + 1e-8)   # d within its bounds, to 1e-8


def test_grouped_with_null_rows(cases):
    # every 7th row's x1 NULL: those rows are not read
    cases.execute('CREATE TEMP TABLE nulls AS SELECT k % 2 AS g, CASE WHEN i % 7 = 0 THEN NULL ELSE x1 END AS x1, '
                  'x2, x3, y FROM cases WHERE k IN (2, 3)')
    rows = cases.execute('SELECT group_key, weights, converged FROM pgad.train(%s, %s, %s, %s, %s, group_by => %s)',
                         ('grouped', MODEL, 'quantile(0.5)', 'nulls', START, 'g')).fetchall()
    assert len(rows) == 2
    for key, weights, converged in rows:
        g = int((json.loads(key) if isinstance(key, str) else key)['g'])
        x, y, _ = case(2 + g)  # k 2 is group 0, k 3 group 1
        kept = np.arange(len(y)) % 7 != 0
        best = exact(design(x[kept]), y[kept], np.full(kept.sum(), 0.5), np.full(kept.sum(), 0.5))
        assert converged
        got = np.array([weights[n] for n in ORDER])
        assert check(y[kept], design(x[kept]) @ got, 0.5) == pytest.approx(
            check(y[kept], design(x[kept]) @ best, 0.5), rel=1e-8)


def test_the_other_optimizers_still_run_and_interior_point_refuses_what_it_cannot_solve(cases):
    data = 'SELECT x1, x2, x3, y FROM cases WHERE k = 2'
    _, _, _, options, iterations = train(cases, 'gd', 'quantile(0.5)', data, optimizer='gd', iterations=3)
    assert options['optimizer'] == 'gd' and iterations == 3
    # a model not linear in its weights: the default as before; asked for, 0A000
    cases.execute('CREATE TEMP TABLE small AS SELECT x1 / 1000 AS x, y FROM cases WHERE k = 0')
    found = cases.execute("SELECT options FROM pgad.train('nl', 'λ(d, w) exp(w.a*d.x) + w.c', 'quantile(0.5)', "
                          "'small', '{\"a\": 0, \"c\": 0}')").fetchone()[0]
    assert found['optimizer'] in ('newton', 'lbfgs')
    e = error_of(cases, "SELECT pgad.train('nl', 'λ(d, w) exp(w.a*d.x) + w.c', 'quantile(0.5)', 'small', "
                        "'{\"a\": 0, \"c\": 0}', optimizer => 'interior_point')")
    assert (e.sqlstate, e.message_primary) == (
        '0A000', 'optimizer "interior_point" cannot train a model that is not linear in its weights')
    e = error_of(cases, "SELECT pgad.train('sq', 'λ(d, w) w.a*d.x', 'squared', 'small', '{\"a\": 0}', "
                        "optimizer => 'interior_point')")
    assert (e.sqlstate, e.message_primary) == ('0A000', 'optimizer "interior_point" cannot train loss "squared"')
    e = error_of(cases, "SELECT pgad.train('lr', 'λ(d, w) w.a*d.x', 'absolute', 'small', '{\"a\": 0}', "
                        "optimizer => 'interior_point', learning_rate => 0.1)")
    assert (e.sqlstate, e.message_primary) == ('22023', 'optimizer "interior_point" takes no learning_rate')
    assert cases.execute("SELECT count(*) FROM pgad.models WHERE name IN ('sq', 'lr')").fetchone()[0] == 0


def test_a_cap_short_of_the_optimum_says_so(cases):
    data = 'SELECT x1, x2, x3, y FROM cases WHERE k = 4'
    notices = []
    cases.add_notice_handler(lambda d: notices.append(d.message_primary))
    _, _, converged, _, iterations = train(cases, 'capped', 'quantile(0.9)', data, iterations=2)
    assert (converged, iterations) == (False, 2)
    assert any('optimizer "interior_point" did not converge in its 2 iterations' in m for m in notices)


def test_the_documented_example_gives_the_linear_programmes_optimum(db):
    """docs/sql.md's quantile regression: its query on its houses, against HiGHS and against the output it shows."""
    text = (pathlib.Path(__file__).parent.parent / 'docs' / 'sql.md').read_text()
    houses = re.search(r'^(CREATE TABLE houses AS.*?;\nALTER TABLE houses.*?;\nUPDATE houses.*?;)$', text,
                       re.M | re.S).group(1)
    section = text[text.index("### Quantile regression: optimizer 'interior_point'"):]
    query = re.search(r'```sql\n(.*?)```', section, re.S).group(1)
    shown = re.search(r'```\n.*?\n-+\+.*?\n(.*?)\n```', section, re.S).group(1)
    db.execute('DROP TABLE IF EXISTS houses')
    db.execute(houses)
    a, b, c, final, converged, optimizer = db.execute(query).fetchone()
    assert ' | '.join([str(a), str(b), str(c), str(final), 't' if converged else 'f', optimizer]) == \
        ' | '.join(v.strip() for v in shown.split('|'))
    sqft, rooms, price = map(np.array, zip(*db.execute('SELECT sqft, rooms, price FROM houses ORDER BY id')))
    x = np.column_stack([sqft, rooms, np.ones(len(price))])
    best = exact(x, price, np.full(len(price), 0.9), np.full(len(price), 0.1))
    np.testing.assert_allclose([float(a), float(b), float(c)], best, atol=5e-4)  # the 3 decimals shown
    assert float(final) == pytest.approx(check(price, x @ best, 0.9), abs=5e-5)   # the 4 decimals shown


def test_the_interior_point_ends_at_statement_timeout(db):
    """A million rows of five weights take 3.5-4 s on a quiet 2-core VM (21 iterations; about 20 s under load), so a
    timeout of 1 s lands in the iterations on any machine of this kind: statement_timeout stops it within about a
    second of the timeout, wherever it is (the load, the design, an iteration), and stores nothing."""
    db.execute('CREATE TEMP TABLE big AS SELECT sin(x)::float8 AS x1, cos(x * 1.3)::float8 AS x2, '
               'sin(x * 0.7)::float8 AS x3, sin(x * 2.1)::float8 AS x4, '
               '(sin(x * 0.37) * 3 + cos(x * 11.0))::float8 AS y FROM generate_series(1, 1000000) AS x')
    db.execute("SET statement_timeout = '1s'")
    started = time.monotonic()
    e = error_of(db, "SELECT pgad.train('big', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.e*d.x4 + w.f', "
                     "'quantile(0.3)', 'big', '{\"a\": 0, \"b\": 0, \"c\": 0, \"e\": 0, \"f\": 0}')")
    took = time.monotonic() - started
    db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014'
    assert took < 1 + 1.5  # the timeout, and at most 1.5 s of a block's or an iteration's work on a shared machine
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'big'").fetchone()[0] == 0


def test_solve_checks_for_interrupts_every_iteration_and_block():
    """In process: piecewise.solve calls interrupts() before each iteration and after each block of the normal
    equations' sums, so a cancel raised there ends it at once."""
    x, y, tau = case(1, n=3 * piecewise.BLOCK_ROWS // 1000)
    b = design(x)
    calls = []
    w, history, measure, stopped = piecewise.solve(b, y, np.full(len(y), tau), np.full(len(y), 1 - tau),
                                                   np.zeros(4), 200, lambda *_: None, lambda: calls.append(1))
    assert stopped == 'optimum' and len(calls) >= 2 * len(history)  # a factor's block and the iteration's check

    class Cancel(Exception):
        pass

    def cancel():
        if len(calls) > 5:
            raise Cancel
        calls.append(1)
    calls.clear()
    with pytest.raises(Cancel):
        piecewise.solve(b, y, np.full(len(y), tau), np.full(len(y), 1 - tau), np.zeros(4), 200, lambda *_: None,
                        cancel)


NONLINEAR = 'λ(d, w) w.c + w.a*d.x1 + w.b*d.x2 + w.e*exp(w.f)*d.x3'


@pytest.mark.parametrize('k', [0, 3, 7])
def test_a_model_not_linear_in_its_weights_reaches_the_optimum_by_smoothing(cases, k):
    """w.e·exp(w.f) is the slope of x3: the optimum is the linear programme's, reached by the smoothed loss's stages."""
    x, y, tau = case(k)
    found = cases.execute('SELECT weights, final_loss, converged, options FROM pgad.train(%s, %s, %s, %s, %s)',
                          (f'nl{k}', NONLINEAR, f'quantile({tau})', f'SELECT x1, x2, x3, y FROM cases WHERE k = {k}',
                           '{"c": 0, "a": 0, "b": 0, "e": 1, "f": 0}')).fetchone()
    weights, final, converged, options = found
    assert options['optimizer'] == 'newton' and options['smoothing'] and converged
    best = exact(design(x), y, np.full(len(y), tau), np.full(len(y), 1 - tau))
    optimum = check(y, design(x) @ best, tau)
    assert final == pytest.approx(optimum, rel=1e-8)                       # the objective: 1e-8 of the optimum
    got = np.array([weights['c'], weights['a'], weights['b'], weights['e'] * np.exp(weights['f'])])
    scale = np.abs(design(x)).max(axis=0)
    np.testing.assert_allclose(got * scale, best * scale, rtol=1e-6, atol=1e-6 * np.abs(best * scale).max())


@pytest.mark.parametrize('k, loss, alpha', [(2, 'λ(p, d) greatest({t}*(d.y - p), ({t} - 1)*(d.y - p))', None),
                                             (6, 'λ(p, d) abs(p - d.y)', 1.0),
                                             (8, 'λ(p, d) {t}*relu(d.y - p) + (1 - {t})*relu(p - d.y)', None)])
def test_a_lambda_made_of_kinks_reaches_the_optimum_by_smoothing(cases, k, loss, alpha):
    x, y, tau = case(k)
    tau = 0.5 if alpha else tau
    found = cases.execute('SELECT weights, final_loss, converged, options FROM pgad.train(%s, %s, %s, %s, %s)',
                          (f'lam{k}', MODEL, loss.format(t=tau), f'SELECT x1, x2, x3, y FROM cases WHERE k = {k}',
                           START)).fetchone()
    weights, final, converged, options = found
    assert options['smoothing'] and converged
    best = exact(design(x), y, np.full(len(y), tau), np.full(len(y), 1 - tau))
    optimum = check(y, design(x) @ best, tau) * (2 if alpha else 1)       # abs is twice the pinball loss at ½
    assert final == pytest.approx(optimum, rel=1e-8)                       # the objective: 1e-8 of the optimum
    got = np.array([weights[n] for n in ORDER])
    scale = np.abs(design(x)).max(axis=0)
    np.testing.assert_allclose(got * scale, best * scale, rtol=1e-6, atol=1e-6 * np.abs(best * scale).max())


def test_a_categorical_weight_is_a_column_of_the_programme_per_category(cases):
    """w.r[d.g]: one weight per category, its column of the design the category's indicator. τ = 0.37: τ times no
    group's rows (80) is a whole number, where a group's intercept could move along a flat stretch of the objective."""
    x, y, _ = case(9)
    tau = 0.37
    groups = np.array(['a', 'b', 'c'])[np.arange(len(y)) % 3]
    cases.execute('CREATE TEMP TABLE cats AS SELECT (ARRAY[\'a\', \'b\', \'c\'])[i % 3 + 1] AS g, x1, x2, y '
                  'FROM cases WHERE k = 9')
    weights, final, converged, options = cases.execute(
        "SELECT weights, final_loss, converged, options FROM pgad.train('cats', 'λ(d, w) w.r[d.g] + w.a*d.x1 + "
        "w.b*d.x2', %s, 'cats', '{\"r\": {}, \"a\": 0, \"b\": 0}')", (f'quantile({tau})',)).fetchone()
    assert options['optimizer'] == 'interior_point' and converged
    b = np.column_stack([groups == 'a', groups == 'b', groups == 'c', x[:, 0], x[:, 1]]).astype(float)
    best = exact(b, y, np.full(len(y), tau), np.full(len(y), 1 - tau))
    assert final == pytest.approx(check(y, b @ best, tau), rel=1e-8)       # the objective: 1e-8 of the optimum
    got = np.array([weights['r']['a'], weights['r']['b'], weights['r']['c'], weights['a'], weights['b']])
    scale = np.abs(b).max(axis=0)
    np.testing.assert_allclose(got * scale, best * scale, rtol=1e-6, atol=1e-6 * np.abs(best * scale).max())


def test_hinge_on_separable_labels_reaches_a_loss_of_zero(db):
    """Separable labels: the hinge loss's optimum is 0 and its dual has no interior; the iterates reach 0 exactly, the
    optimum (no loss is lower), and the separation WARNING still says the weights are not unique."""
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    final, converged, options = db.execute(
        "SELECT final_loss, converged, options FROM pgad.train('hsep_lp', 'λ(d, w) w.a*d.x + w.b', 'hinge', "
        "'SELECT x::float8 AS x, CASE WHEN x > 10 THEN 1 ELSE -1 END::float8 AS y FROM generate_series(1, 20) AS x', "
        "'{\"a\": 0, \"b\": 0}')").fetchone()
    assert (final, converged, options['optimizer']) == (0.0, True, 'interior_point')  # exactly 0
    assert any(m.startswith('model "hsep_lp": the hinge loss is 0 on every row') for m in notices)
