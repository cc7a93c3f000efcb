"""Second derivatives (lang/hessian.py, program.build_hessian, pgad.hessian): forward over reverse, in process on
every primitive's case of test_rules against autograd's Hessian and against central differences of the compiled
gradient, every backend against the python backend, the bound on the weights, and pgad.hessian through SQL.
float64 throughout; the tolerances sit next to the assertions.
"""
import json
import os

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import backends, program
from pgad.errors import PgadError
from pgad.lang import hessian
from test_rules import CASES, DATA, N, POINTS, W, WEIGHTS, sums

SIMULATED = os.environ.get('NUMBA_ENABLE_CUDASIM') == '1'


def hessian_sums(text, w=W, data=DATA, weights=WEIGHTS, backend='python'):
    """(the kernel's sums [Σ loss, Σ gradient…], Σ Hessian as a p × p array) over the rows."""
    prog = program.build_hessian(text, tuple(weights))
    kernel = backends.compile(prog, backend)
    columns = [np.asarray(data[c], dtype=np.float64) for c in prog.columns]
    out = kernel(columns, len(columns[0]) if columns else N, np.asarray(w, dtype=np.float64))
    p = len(weights)
    return out[:1 + p], np.array(hessian.full(out[1 + p:], p))


def autograd_hessian(fn, w, data=DATA):
    data = {k: np.asarray(val) for k, val in data.items()}
    return autograd.hessian(lambda weights: anp.sum(fn(data, weights)))(np.array(w, dtype=np.float64))


@pytest.mark.parametrize('point', range(len(POINTS)))
@pytest.mark.parametrize('text, fn', CASES)
def test_matches_autograd(text, fn, point):
    _, h = hessian_sums(text, POINTS[point])
    expected = autograd_hessian(fn, POINTS[point])
    # 1e-9 relative to the largest entry: the same functions in float64, differentiated in another order
    np.testing.assert_allclose(h, expected, rtol=1e-9, atol=1e-9 * max(1.0, np.max(np.abs(expected))))


@pytest.mark.parametrize('text, fn', CASES)
def test_matches_differences_of_the_gradient(text, fn):
    _, h = hessian_sums(text)
    fd = np.empty((len(W), len(W)))
    for k in range(len(W)):
        step = np.zeros(len(W))
        step[k] = 1e-6 * max(1.0, abs(W[k]))
        fd[:, k] = (sums(text, 'reverse', W + step)[1:] - sums(text, 'reverse', W - step)[1:]) / (2 * step[k])
    # central differences with h = 1e-6 of the compiled gradient: truncation ~h², rounding ~1e-16·|g|/h
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6 * max(1.0, np.max(np.abs(fd))))


@pytest.mark.parametrize('backend', ('llvm', 'cuda'))
@pytest.mark.parametrize('text, fn', CASES if not SIMULATED else CASES[::6])
def test_every_backend_matches_python(text, fn, backend):
    reference, h = hessian_sums(text)
    first, other = hessian_sums(text, backend=backend)
    # 1e-12 relative: the same DAG, summed over the rows in another order
    np.testing.assert_allclose(first, reference, rtol=1e-12, atol=1e-12 * np.max(np.abs(reference)))
    np.testing.assert_allclose(other, h, rtol=1e-12, atol=1e-12 * max(1.0, np.max(np.abs(h))))


def test_gradient_outputs_are_the_gradients():
    text = CASES[-1].values[0]
    first, _ = hessian_sums(text)
    np.testing.assert_array_equal(first, sums(text, 'reverse'))


def test_vector_weights_and_their_names():
    """A vector weight's elements are rows of their own, named as vectors.elements names them."""
    text = 'λ(d, w) ln(1 + exp(-(2*d.t - 1) * (w.v[1]*d.x + w.v[2]*d.y + w.b)))'
    from pgad.lang import vectors
    prog = program.build_hessian(text, ('v', 'b'), shapes=vectors.Shapes((('v', (2,)),)))
    assert prog.weights == ('v[1]', 'v[2]', 'b')
    kernel = backends.compile(prog, 'python')
    w = np.array([0.3, -0.2, 0.1])
    out = kernel([DATA[c] for c in prog.columns], N, w)
    h = np.array(hessian.full(out[4:], 3))

    def loss(w):
        z = w[0] * DATA['x'] + w[1] * DATA['y'] + w[2]
        return anp.sum(anp.log(1 + anp.exp(-(2 * DATA['t'] - 1) * z)))
    np.testing.assert_allclose(h, autograd.hessian(loss)(w), rtol=1e-10, atol=1e-12)


def test_too_many_weights():
    names = tuple(f'w{k}' for k in range(hessian.MAX_WEIGHTS + 1))
    text = 'λ(d, w) (' + ' + '.join(f'w.{n}*d.x' for n in names) + ' - d.y)^2'
    with pytest.raises(PgadError) as e:
        program.build_hessian(text, names)
    assert e.value.sqlstate == '54000' and 'too many weights for second derivatives: 301' in str(e.value)


# --- through SQL --------------------------------------------------------------------------------------------------

SETUP = """CREATE TABLE IF NOT EXISTS pts AS SELECT x::float8 AS x, (x % 3)::float8 * 0.5 + 0.1 * x AS y,
           (x % 2)::float8 AS t FROM generate_series(1, 50) AS x"""


def one(cursor):
    """The value of a one-row, one-column result (a jsonb as psycopg reads it: a dict)."""
    value = cursor.fetchone()[0]
    return json.loads(value) if isinstance(value, str) else value


def test_sql_hessian_of_least_squares_is_twice_xtx(db):
    db.execute(SETUP)
    h = one(db.execute("SELECT pgad.hessian('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'SELECT * FROM pts', "
                    "'{\"a\": 0.5, \"b\": -1}')"))
    x = np.arange(1, 51, dtype=np.float64)
    expected = 2 * np.array([[np.mean(x * x), np.mean(x)], [np.mean(x), 1.0]])
    got = np.array([[h['a']['a'], h['a']['b']], [h['b']['a'], h['b']['b']]])
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_sql_hessian_matches_differences_of_pgad_gradient(db):
    db.execute(SETUP)
    loss = 'λ(d, w) ln(1 + exp(-(2*d.t - 1) * (w.a*d.y + w.v[1] + w.v[2]*d.x/50)))'
    w0 = {'a': 0.2, 'v': [-0.1, 0.3]}
    h = one(db.execute('SELECT pgad.hessian(%s, %s, %s)', (loss, 'SELECT * FROM pts', json.dumps(w0))))
    assert list(h) == ['a', 'v[1]', 'v[2]'] and list(h['a']) == ['a', 'v[1]', 'v[2]']

    def grad(w):
        g = one(db.execute('SELECT pgad.gradient(%s, %s, %s)', (loss, 'SELECT * FROM pts', json.dumps(w))))
        return np.array([g['a'], *g['v']])
    flat = np.array([0.2, -0.1, 0.3])
    fd = np.empty((3, 3))
    for k in range(3):
        step = np.zeros(3)
        step[k] = 1e-6
        up, down = flat + step, flat - step
        fd[:, k] = (grad({'a': up[0], 'v': up[1:].tolist()}) - grad({'a': down[0], 'v': down[1:].tolist()})) / 2e-6
    names = ['a', 'v[1]', 'v[2]']
    got = np.array([[h[r][c] for c in names] for r in names])
    # central differences, h = 1e-6: truncation ~1e-12, rounding ~1e-10 of these O(0.1) entries
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-8)


def test_sql_hessian_backends_agree(db):
    db.execute(SETUP)
    loss = 'λ(d, w) (tanh(w.a*d.x/50 + w.b)*w.a - d.y)^2'
    values = [one(db.execute('SELECT pgad.hessian(%s, %s, %s, backend => %s)',
                             (loss, 'SELECT * FROM pts', '{"a": 0.5, "b": 0.1}', b)))
              for b in ('python', 'llvm')]
    for r in ('a', 'b'):
        for c in ('a', 'b'):
            assert values[1][r][c] == pytest.approx(values[0][r][c], rel=1e-12)


# --- optimizer => 'newton' ---------------------------------------------------------------------------------------

LOGISTIC = 'λ(d, w) softplus(w.c + w.a*d.x + w.b*d.y) - d.t*(w.c + w.a*d.x + w.b*d.y)'


def test_newton_reaches_lbfgs_optimum_in_few_iterations():
    from pgad.loader import Table
    from pgad.models import descent
    rng = np.random.default_rng(3)
    n = 5000
    x, y = rng.normal(size=n), rng.uniform(-2, 2, size=n)
    t = (rng.uniform(size=n) < 1 / (1 + np.exp(-(0.4 - 1.3 * x + 0.7 * y)))).astype(np.float64)
    data = {'x': x, 'y': y, 't': t}
    names = ('c', 'a', 'b')
    newton_prog = program.build_hessian(LOGISTIC, names)
    table = Table([data[c] for c in newton_prog.columns], n, 0)
    newton = descent.fit(backends.compile(newton_prog, 'llvm'), table, np.zeros(3), list(names), 'newton',
                         iterations=50)
    lbfgs_prog = program.build(LOGISTIC, names)
    lbfgs = descent.fit(backends.compile(lbfgs_prog, 'llvm'), Table([data[c] for c in lbfgs_prog.columns], n, 0),
                        np.zeros(3), list(names), 'lbfgs', iterations=500)
    assert newton.iterations <= 8  # quadratic convergence from 0: IRLS takes 5 to 7 on such data
    # both at the optimum: the weights to 1e-7 (lbfgs stops at the precision of the sums), the loss to 1e-12
    np.testing.assert_allclose(newton.weights, lbfgs.weights, rtol=1e-6, atol=1e-7)
    assert newton.loss <= lbfgs.loss + 1e-12
    assert newton.loss == pytest.approx(lbfgs.loss, rel=1e-12)


def test_newton_damps_a_nonconvex_start():
    """From a point where the Hessian is indefinite, the damped step still lowers the loss every iteration."""
    from pgad.loader import Table
    from pgad.models import descent
    text = 'λ(d, w) (tanh(w.a*d.x + w.b)*w.a - d.y)^2'
    prog = program.build_hessian(text, ('a', 'b'))
    table = Table([DATA[c] for c in prog.columns], N, 0)
    fit = descent.fit(backends.compile(prog, 'python'), table, np.array([-2.0, 1.5]), ['a', 'b'], 'newton',
                      iterations=100)
    assert all(later < earlier for earlier, later in zip(fit.history, fit.history[1:]))
    g = sums(text, 'reverse', fit.weights)[1:] / N
    assert np.max(np.abs(g)) < 1e-8  # a stationary point


def test_sql_train_newton_matches_lbfgs(db):
    db.execute(SETUP)
    common = ("'λ(d, w) w.c + w.a*d.y', 'logistic', 'pts', '{\"c\": 0, \"a\": 0}', label => 't', "
              "iterations => 200, optimizer => ")
    newton = db.execute(f"SELECT weights, iterations FROM pgad.train('by_newton', {common} 'newton')").fetchone()
    lbfgs = db.execute(f"SELECT weights FROM pgad.train('by_lbfgs', {common} 'lbfgs')").fetchone()
    assert newton[1] <= 10
    for k in ('a', 'c'):
        assert newton[0][k] == pytest.approx(lbfgs[0][k], rel=1e-6, abs=1e-8)


def test_sql_newton_refuses_too_many_weights_and_l1(db):
    from conftest import error_of
    db.execute(SETUP)
    weights = json.dumps({f'w{k}': 0 for k in range(hessian.MAX_WEIGHTS + 1)})
    model = 'λ(d, w) ' + ' + '.join(f'w.w{k}*d.x' for k in range(hessian.MAX_WEIGHTS + 1))
    e = error_of(db, "SELECT pgad.train('big', %s, 'squared', 'pts', %s, optimizer => 'newton')", (model, weights))
    assert e.sqlstate == '54000' and e.message_primary == 'too many weights for second derivatives: 301'
    e = error_of(db, "SELECT pgad.train('l1', 'λ(d, w) w.a*d.x', 'squared', 'pts', '{\"a\": 0}', "
                     "optimizer => 'newton', l1 => 0.1)")
    assert e.sqlstate == '22023' and e.message_primary == 'optimizer "newton" does not take l1'
