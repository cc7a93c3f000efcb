"""pgad.train's optimizers on their own (no server): each reaches a known optimum, and the loop keeps its promises.

Known optima, computed here in float64 by other means: least squares by np.linalg.lstsq, ridge by its normal
equations, the lasso on orthogonal columns by soft thresholding, logistic regression by Newton's method (IRLS).
The full-batch optimizers reach them to 1e-6 in every weight; the mini-batch ones reach the least-squares optimum of
a problem without noise (where every mini-batch's gradient vanishes at it), to 1e-6 too. Data from
np.random.default_rng with fixed seeds.
"""
import numpy as np
import pytest

from pgad import backends, program
from pgad.models import descent
from pgad.loader import Table


def diverging_hint(rate):
    """The HINT of a training that diverges at learning rate `rate` (descent.diverging)."""
    return (f"Try a smaller learning_rate than {rate}, or pgad.train's optimizer => 'lbfgs' (a line search "
            "instead of a learning rate) or standardize => true.")


LINEAR = 'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.k - d.y)^2'
LOGISTIC = 'λ(d, w) softplus(w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.k) - d.y*(w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.k)'
NAMES = ['a', 'b', 'c', 'k']


def kernel(text=LINEAR, backend='python'):
    return backends.compile(program.build(text, tuple(NAMES)), backend)


def regression(rows=400, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (rows, 3))
    y = x @ [1.5, -2.0, 0.5] + 0.75 + noise * rng.normal(0, 1, rows)
    return Table([*x.T, y], rows, 0), np.column_stack([x, np.ones(rows)])


def classification(rows=400, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (rows, 3))
    y = (rng.random(rows) < 1 / (1 + np.exp(-(x @ [1.0, -1.5, 0.5] + 0.25)))).astype(float)
    return Table([*x.T, y], rows, 0), np.column_stack([x, np.ones(rows)])


def newton(a, y):
    """The optimum of the mean logistic loss, by Newton's method to machine precision."""
    w = np.zeros(a.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-(a @ w)))
        w -= np.linalg.solve(a.T @ (a * (p * (1 - p))[:, None]), a.T @ (p - y))
    return w


def fit(table, optimizer, text=LINEAR, **options):
    return descent.fit(kernel(text), table, np.zeros(4), NAMES, optimizer, **options)


FULL_BATCH = [  # each optimizer with the options that reach the optimum
    ('gd', dict(learning_rate=0.2, iterations=500)),
    ('sgd', dict(learning_rate=0.2, iterations=500, batch_size=10 ** 6)),  # a batch of every row: gd
    ('momentum', dict(learning_rate=0.05, iterations=500, batch_size=10 ** 6)),
    ('adam', dict(learning_rate=0.05, iterations=3000, batch_size=10 ** 6)),
    ('lbfgs', dict(iterations=100)),
]


@pytest.mark.parametrize('optimizer, options', FULL_BATCH)
def test_least_squares_reaches_lstsq(optimizer, options):
    table, a = regression()
    expected = np.linalg.lstsq(a, table.columns[3], rcond=None)[0]
    result = fit(table, optimizer, **options)
    np.testing.assert_allclose(result.weights, expected, atol=1e-6)
    assert result.loss == pytest.approx(np.mean((a @ expected - table.columns[3]) ** 2), rel=1e-9)


@pytest.mark.parametrize('optimizer, options', [
    ('gd', dict(learning_rate=3.0, iterations=3000)),
    ('momentum', dict(learning_rate=0.5, iterations=1000, batch_size=10 ** 6)),
    ('adam', dict(learning_rate=0.05, iterations=3000, batch_size=10 ** 6)),
    ('lbfgs', dict(iterations=100)),
])
def test_logistic_regression_reaches_newtons_optimum(optimizer, options):
    table, a = classification()
    expected = newton(a, table.columns[3])
    np.testing.assert_allclose(fit(table, optimizer, LOGISTIC, **options).weights, expected, atol=1e-6)


@pytest.mark.parametrize('optimizer, options', [
    ('sgd', dict(learning_rate=0.05, iterations=300, batch_size=16, seed=3)),
    ('momentum', dict(learning_rate=0.01, iterations=300, batch_size=16, seed=3)),
    ('adam', dict(learning_rate=0.01, iterations=600, batch_size=16, seed=3)),
])
def test_mini_batches_reach_the_optimum_of_a_problem_without_noise(optimizer, options):
    table, _ = regression(noise=0.0)
    np.testing.assert_allclose(fit(table, optimizer, **options).weights, [1.5, -2.0, 0.5, 0.75], atol=1e-6)


@pytest.mark.parametrize('optimizer', ['gd', 'lbfgs'])
def test_l2_on_the_weights_named_reaches_the_ridge_optimum(optimizer):
    table, a = regression()
    lam, mask = 0.3, np.array([1.0, 1.0, 0.0, 0.0])  # a and b only
    y, n = table.columns[3], table.rows
    expected = np.linalg.solve(a.T @ a / n + lam * np.diag(mask), a.T @ y / n)
    result = fit(table, optimizer, learning_rate=0.2, iterations=1000, penalty=descent.Penalty(0.0, lam, mask))
    np.testing.assert_allclose(result.weights, expected, atol=1e-6)
    w = result.weights
    assert result.loss == pytest.approx(np.mean((a @ w - y) ** 2) + lam * (w[0] ** 2 + w[1] ** 2), rel=1e-12)


@pytest.mark.parametrize('optimizer, options', [
    ('gd', dict(learning_rate=0.2, iterations=300)),
    ('adam', dict(learning_rate=0.01, iterations=3000, batch_size=10 ** 6)),
])
def test_l1_reaches_the_lasso_optimum_with_exact_zeros(optimizer, options):
    """Orthogonal columns with mean square 1 (a Hadamard matrix's): the optimum of mean((Xw − y)²) + l1·Σ|w| is
    the least-squares weights b soft-thresholded by l1/2, exactly 0 where |b| ≤ l1/2."""
    h = np.array([[1.0]])
    for _ in range(3):
        h = np.block([[h, h], [h, -h]])
    x = np.tile(h[:, 1:4], (5, 1))  # 40 rows, columns orthogonal to each other and to the intercept's ones
    y = x @ [2.0, -0.1, 0.05] + 1.0
    table = Table([*x.T, y], 40, 0)
    l1 = 0.4
    b = np.array([2.0, -0.1, 0.05])
    expected = [*(np.sign(b) * np.maximum(np.abs(b) - l1 / 2, 0)), 1.0]  # the intercept is not penalised
    result = fit(table, optimizer, penalty=descent.Penalty(l1, 0.0, np.array([1.0, 1.0, 1.0, 0.0])), **options)
    np.testing.assert_allclose(result.weights, expected, atol=1e-6)
    if optimizer == 'gd':
        assert result.weights[1] == 0.0 and result.weights[2] == 0.0  # the proximal step's exact zeros


def test_sgd_with_a_seed_gives_the_same_weights_twice_and_another_seed_others():
    table, _ = regression()
    runs = [fit(table, 'sgd', learning_rate=0.01, iterations=3, batch_size=7, seed=s).weights for s in (5, 5, 6)]
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], runs[2])


class Spy:
    """A kernel that records how many rows each call got and sums the first column it was given."""
    def __init__(self, inner):
        self.inner, self.rows, self.ids = inner, [], []

    def __call__(self, columns, rows, w):
        self.rows.append(rows)
        self.ids.append(columns[0].copy())
        return self.inner(columns, rows, w)


def test_each_epoch_visits_every_row_once_in_mini_batches_of_batch_size():
    table, _ = regression(rows=103)
    spy = Spy(kernel())
    descent.fit(spy, table, np.zeros(4), NAMES, 'adam', learning_rate=0.01, iterations=2, batch_size=25, seed=0)
    # each epoch: its mini-batches, then the objective at its end (the judge's full-batch passes follow)
    assert spy.rows[:12] == [25, 25, 25, 25, 3, 103] * 2 and set(spy.rows[12:]) == {103}
    for epoch in (spy.ids[:5], spy.ids[6:11]):
        assert sorted(np.concatenate(epoch)) == sorted(table.columns[0])
    assert not np.array_equal(np.concatenate(spy.ids[:5]), np.concatenate(spy.ids[6:11]))  # reshuffled


@pytest.mark.parametrize('optimizer, options', [
    ('gd', dict(learning_rate=0.1)), ('adam', dict(learning_rate=0.1, batch_size=50, seed=0)),
    ('lbfgs', dict()),
])
def test_tolerance_stops_early_and_the_history_has_one_objective_per_iteration(optimizer, options):
    table, a = regression()
    result = fit(table, optimizer, iterations=10000, tolerance=1e-6, **options)
    assert result.iterations < 10000 and len(result.history) == result.iterations
    assert result.history[-1] == result.loss
    last, before = result.history[-1], result.history[-2]
    assert before - last < 1e-6 * abs(before)  # the stop was earned
    assert all(b - c >= 1e-6 * abs(b) for b, c in zip(result.history[:-2], result.history[1:-1]))  # and not sooner


def test_the_full_batch_history_is_the_objective_after_each_step():
    table, a = regression()
    y = table.columns[3]
    result = fit(table, 'gd', learning_rate=0.1, iterations=3)
    w, expected = np.zeros(4), []
    for _ in range(3):
        w = w - 0.1 * 2 * a.T @ (a @ w - y) / len(y)
        expected.append(np.mean((a @ w - y) ** 2))
    np.testing.assert_allclose(result.history, expected, rtol=1e-12)


def test_lbfgs_stops_on_its_own_at_the_optimum():
    table, _ = regression()
    result = fit(table, 'lbfgs', iterations=1000)
    assert result.iterations < 100 and len(result.history) == result.iterations


def test_progress_every_so_many_iterations():
    table, _ = regression()
    messages = []
    clock = descent.Clock(lambda: None, messages.append, 7, every=1e9, every_iterations=3)
    fit(table, 'gd', learning_rate=0.1, iterations=7, clock=clock)
    assert [m.split(',')[0] for m in messages] == ['iteration 3 of 7', 'iteration 6 of 7']
    assert messages[0].endswith(' rows/s')


def test_divergence_in_a_mini_batch_is_named_by_its_epoch():
    table, _ = regression()
    with pytest.raises(Exception) as caught:
        fit(table, 'sgd', learning_rate=1e6, iterations=5, batch_size=10, seed=0)
    assert caught.value.sqlstate == '22003' and caught.value.message.startswith('training diverged at iteration 1:')


@pytest.mark.parametrize('optimizer', ['gd', 'sgd', 'momentum', 'adam'])
def test_the_llvm_kernel_trains_as_the_python_one(optimizer):
    """20 fixed steps of a contracting iteration at a rate well inside the stable range: a step does not amplify
    the kernels' rounding (1e-15 relative in the sums, in another order for each llvm target's vector width), so
    the weights agree far within 1e-9."""
    table, _ = regression()
    options = dict(learning_rate=0.05, iterations=20, batch_size=64, seed=2)
    ours = descent.fit(kernel(backend='llvm'), table, np.zeros(4), NAMES, optimizer, **options)
    reference = descent.fit(kernel(), table, np.zeros(4), NAMES, optimizer, **options)
    np.testing.assert_allclose(ours.weights, reference.weights, rtol=1e-9, atol=1e-12)
    assert ours.iterations == reference.iterations == 20


def test_the_llvm_kernel_trains_lbfgs_to_the_python_ones_optimum():
    """L-BFGS stops on its own at the optimum, where rounding decides the last steps: the kernels sum the rows in
    other orders (each llvm target's vector width its own), and a line search cannot tell apart weights whose
    objectives differ by less than the sums' rounding, so the paths part there (6.9e-9 relative after 20 iterations
    on an AVX-512 Xeon; 4.3e-9 from w* for x86-64 here, where the python backend stops 2.5e-11 from it). So each is
    compared with the optimum, lstsq's w*, to the radius within which the objective f = f* + ½ δᵀHδ stays within
    the rounding bound of its sum of n nonnegative terms (n·ε·f*, ε a double's): |δ| ≤ √(2nεf*/λmin(H)),
    H = 2AᵀA/n — 9.9e-8 here. A kernel that read column x1 1e-6 too large stops 1.5e-6 from w*."""
    table, a = regression()
    y = table.columns[3]
    optimum = np.linalg.lstsq(a, y, rcond=None)[0]
    f = np.mean((a @ optimum - y) ** 2)
    hessian = 2 * a.T @ a / table.rows
    radius = np.sqrt(2 * table.rows * np.finfo(float).eps * f / np.linalg.eigvalsh(hessian)[0])
    for backend in ('llvm', 'python'):
        fit = descent.fit(kernel(backend=backend), table, np.zeros(4), NAMES, 'lbfgs', learning_rate=0.05,
                          iterations=20)
        assert fit.iterations < 20 and fit.converged, (backend, fit.iterations, fit.gradient_norm)
        assert np.linalg.norm(fit.weights - optimum) <= radius, (backend, fit.weights - optimum, radius)


@pytest.mark.parametrize('optimizer, options', [
    ('gd', dict()), ('sgd', dict(batch_size=64, seed=1)), ('adam', dict(batch_size=64, seed=1)), ('lbfgs', dict()),
])
def test_rows_per_second_counts_every_row_the_kernel_ran(optimizer, options):
    table, _ = regression()
    spy = Spy(kernel())
    clock = descent.Clock(lambda: None, lambda message: None, 4)
    result = descent.fit(spy, table, np.zeros(4), NAMES, optimizer, 0.05, 4, clock=clock, **options)
    after_the_loop = table.rows if optimizer == 'gd' else 0  # gd's last evaluation comes after its last report
    assert clock.rows == sum(spy.rows) - after_the_loop > 0
    assert result.seconds >= 0


@pytest.mark.parametrize('optimizer', ['momentum', 'adam'])
def test_each_step_as_written_by_hand(optimizer):
    """Three full-batch steps of heavy-ball momentum and of Adam (bias-corrected), with l2 on a, by hand."""
    table, a = regression()
    y, n, lam, rate = table.columns[3], table.rows, 0.1, 0.05
    mask = np.array([1.0, 0.0, 0.0, 0.0])
    w, m, v, history = np.zeros(4), np.zeros(4), np.zeros(4), []
    for t in range(1, 4):
        g = 2 * a.T @ (a @ w - y) / n + 2 * lam * mask * w
        if optimizer == 'momentum':
            m = 0.9 * m + g
            w = w - rate * m
        else:
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
            w = w - rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        history.append(np.mean((a @ w - y) ** 2) + lam * w[0] ** 2)
    result = fit(table, optimizer, learning_rate=rate, iterations=3, batch_size=n,
                 penalty=descent.Penalty(0.0, lam, mask))
    np.testing.assert_allclose(result.weights, w, rtol=1e-12)
    np.testing.assert_allclose(result.history, history, rtol=1e-12)


def test_lbfgs_converges_superlinearly_and_every_step_lowers_the_objective():
    table, _ = regression()
    result = fit(table, 'lbfgs', iterations=1000)
    assert result.iterations <= 12  # 4 weights, a quadratic: a handful of quasi-Newton steps
    assert all(later < earlier for earlier, later in zip(result.history, result.history[1:]))


class Explained(Exception):
    sqlstate = 'XX000'


@pytest.mark.parametrize('optimizer, options', [
    ('lbfgs', dict()), ('sgd', dict(batch_size=2, seed=0)), ('gd', dict()),
])
def test_a_loss_not_finite_at_the_start_is_explained_by_why(optimizer, options):
    """ln(d.x − w.a) at x = 0: every loop asks why() at the starting weights, and says 'at the starting weights'."""
    prog = program.build('λ(d, w) ln(d.x - w.a)', ('a',))
    table = Table([np.array([0.0, 1.0, 2.0, 3.0])], 4, 0)
    asked = []
    with pytest.raises(Explained), np.errstate(divide='ignore'):
        descent.fit(backends.compile(prog, 'python'), table, [0.0], ['a'], optimizer, 0.1, 5, **options,
                    why=lambda w, k: asked.append((w.tolist(), k)) or Explained())
    assert asked == [([0.0], 0)]
    with pytest.raises(Exception) as caught, np.errstate(divide='ignore'):
        descent.fit(backends.compile(prog, 'python'), table, [0.0], ['a'], optimizer, 0.1, 5, **options)
    assert (caught.value.sqlstate, caught.value.message) == ('22003', 'the loss is infinite at the starting weights')


def test_divergence_in_a_later_mini_batch_names_the_epoch_and_the_learning_rate():
    """(w.b·d.x)² at x = 1e150: the first batch is finite (1e300) and its step sends b to −1e300, where the next
    batch's loss overflows: divergence in epoch 1, not a bad start."""
    prog = program.build('λ(d, w) (w.b*d.x)^2', ('b',))
    table = Table([np.full(8, 1e150)], 8, 0)
    with pytest.raises(Exception) as caught, np.errstate(over='ignore', invalid='ignore'):
        descent.fit(backends.compile(prog, 'python'), table, [1.0], ['b'], 'sgd', 0.5, 3, batch_size=2, seed=0)
    assert caught.value.message == 'training diverged at iteration 1: the loss is infinite'
    assert caught.value.hint == diverging_hint('0.5')
