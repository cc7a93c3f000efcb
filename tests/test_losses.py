"""The named losses beyond the first four (pgad/models/objective.py): 'poisson' and 'gamma' (log link), 'huber' and
'quantile' with their parameter. Their fits against statsmodels' GLM and QuantReg and scipy's minimize of the same
objective; pgad.summary of poisson and gamma models against statsmodels' GLM (Poisson; Gamma with the log link, whose
covariance is the expected information's inverse times Pearson's dispersion) across column scales; pgad.evaluate's
metrics against scikit-learn's; the label checks at training, evaluate and summary; the parameter's syntax; the
"<name>_mean" function. float64; the tolerances sit next to the assertions.
"""
import json

import numpy as np
import psycopg
import pytest
import statsmodels.api as sm
from scipy import optimize
from sklearn import metrics

from conftest import error_of
from pgad.errors import PgadError
from pgad.models import objective

N = 300
rng = np.random.default_rng(35)
X1, X2 = rng.normal(size=N), rng.uniform(-1, 1, size=N)
MU = np.exp(0.4 + 0.6 * X1 - 0.5 * X2)
COUNTS = rng.poisson(MU).astype(np.float64)
AMOUNTS = rng.gamma(2.5, MU / 2.5)                               # gamma, shape 2.5, mean μ
NOISY = 1 + 2 * X1 - X2 + rng.standard_t(2, size=N)             # heavy tails, for huber and quantile
MODEL = 'λ(d, w) w.c + w.a*d.x1 + w.b*d.x2'
START = '{"c": 0, "a": 0, "b": 0}'


@pytest.fixture
def rows(db):
    db.execute('DROP TABLE IF EXISTS rows')
    db.execute('CREATE TABLE rows (x1 float8, x2 float8, counts float8, amounts float8, noisy float8)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO rows VALUES (%s, %s, %s, %s, %s)',
                        [tuple(map(float, r)) for r in zip(X1, X2, COUNTS, AMOUNTS, NOISY)])
    return db


def train(db, name, loss, label, data='rows', **options):
    extra = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f"SELECT loss, weights, final_loss FROM pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, "
                      f"%(start)s, label => %(label)s{extra})",
                      dict(name=name, model=MODEL, loss=loss, data=data, start=START, label=label,
                           **options)).fetchone()


def design(scale=1.0):
    return np.column_stack([np.ones(N), X1 * scale, X2 * scale])


def scaled(scale):
    return f'SELECT x1 * {scale!r} AS x1, x2 * {scale!r} AS x2, counts, amounts, noisy FROM rows'


# --- the syntax ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('given, stored', [('huber', 'huber(1.0)'), ('huber(1.35)', 'huber(1.35)'),
                                           ('quantile', 'quantile(0.5)'), ('quantile( .9 )', 'quantile(0.9)'),
                                           ('huber(2e-1)', 'huber(0.2)'), ('poisson', 'poisson')])
def test_a_loss_is_stored_as_written_canonically(rows, given, stored):
    label = 'counts' if given == 'poisson' else 'noisy'
    assert train(rows, 'canon', given, label, iterations=3)[0] == stored
    assert rows.execute("SELECT DISTINCT loss FROM pgad.models WHERE name = 'canon'").fetchone()[0] == stored
    rows.execute("SELECT * FROM pgad.evaluate('canon', 'rows')").fetchall()  # the stored text builds again


@pytest.mark.parametrize('loss, says', [
    ('huber(0)', 'loss "huber(0)" has δ = 0, but δ must be greater than 0'),
    ('huber(-1.5)', 'loss "huber(-1.5)" has δ = -1.5, but δ must be greater than 0'),
    ('huber(1e999)', 'loss "huber(1e999)" has δ = 1e999, but δ must be greater than 0'),
    ('quantile(0)', 'loss "quantile(0)" has τ = 0, but τ must be between 0 and 1, both excluded'),
    ('quantile(1)', 'loss "quantile(1)" has τ = 1, but τ must be between 0 and 1, both excluded'),
    ('quantile(1.5)', 'loss "quantile(1.5)" has τ = 1.5, but τ must be between 0 and 1, both excluded'),
    ('quantile()', 'loss "quantile()" is not quantile(number)'),
    ('huber(nan)', 'loss "huber(nan)" is not huber(number)'),
    ('huber(1, 2)', 'loss "huber(1, 2)" is not huber(number)'),
    ('huber(1)x', 'loss "huber(1)x" is not huber(number)'),
])
def test_a_bad_parameter_is_22023_and_stores_nothing(rows, loss, says):
    e = error_of(rows, "SELECT pgad.train('bad', %s, %s, 'rows', %s, label => 'noisy')", (MODEL, loss, START))
    assert (e.sqlstate, e.message_primary) == ('22023', says)
    assert e.message_hint
    assert rows.execute("SELECT count(*) FROM pgad.models WHERE name = 'bad'").fetchone()[0] == 0


def test_the_losses_are_the_primitives_of_the_language():
    """Each loss's text, printed from its DAG, against the formula evaluated in numpy."""
    from pgad import limits
    from pgad import python_backend
    from pgad import program
    p, y = np.array([-3.0, -0.2, 0.0, 0.4, 2.5]), np.array([1.0, 0.5, 0.0, 2.0, 0.1])
    expected = {
        'poisson': np.exp(p) - y * p,
        'gamma': y * np.exp(-p) + p,
        'huber(0.5)': np.where(np.abs(p - y) <= 0.5, 0.5 * (p - y) ** 2, 0.5 * np.abs(p - y) - 0.125),
        'quantile(0.9)': np.where(y >= p, 0.9 * (y - p), 0.1 * (p - y)),
    }
    for loss, want in expected.items():
        goal = objective.build('λ(d, w) d.p', loss, 'y', limits.DEFAULT)
        lam = program.parsed(goal.text, limits.DEFAULT)
        got, = python_backend.values(lam.graph, [lam.root], {'p': p, 'y': y}, {}, len(p))
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


# --- the fits --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('loss, label, family', [
    ('poisson', 'counts', sm.families.Poisson()),
    ('gamma', 'amounts', sm.families.Gamma(link=sm.families.links.Log())),
])
@pytest.mark.parametrize('scale', [1e-2, 1.0, 1e2])
def test_summary_of_poisson_and_gamma_matches_statsmodels_glm(rows, loss, label, family, scale):
    train(rows, 'glm', loss, label, data=scaled(scale), optimizer='newton', iterations=100)
    got = {r[0]: r[1:] for r in rows.execute('SELECT weight, estimate, std_error, statistic, p_value, ci_low, '
                                             "ci_high FROM pgad.summary('glm')")}
    result = sm.GLM(COUNTS if loss == 'poisson' else AMOUNTS, design(scale), family=family).fit(tol=1e-14)
    ci = result.conf_int(0.05)
    want = np.column_stack([result.params, result.bse, result.tvalues, result.pvalues, ci[:, 0], ci[:, 1]])
    got = np.array([got[w] for w in ('c', 'a', 'b')])
    # newton's optimum against IRLS's, both to rounding: 1e-7 relative (the statistics follow from the estimates
    # and the information); p-values absolute, some are tiny
    np.testing.assert_allclose(got[:, [0, 1, 2, 4, 5]], want[:, [0, 1, 2, 4, 5]], rtol=1e-7)
    np.testing.assert_allclose(got[:, 3], want[:, 3], rtol=1e-6, atol=1e-12)
    if loss == 'gamma':  # the observed information Σ x·xᵀ·y/μ would give other standard errors, by more than 1e-3
        X, mu = design(scale), np.exp(design(scale) @ result.params)
        observed = np.sqrt(np.diag(np.linalg.inv(X.T @ (X * (AMOUNTS / mu)[:, None])) * result.scale))
        assert np.max(np.abs(observed / got[:, 1] - 1)) > 1e-3


def test_a_non_linear_gamma_model_uses_its_expected_information(rows):
    """λ(d, w) w.c + exp(w.a)*d.x1: statsmodels cannot fit it, but it is a reparameterised GLM, whose expected
    information is the Jacobian's JᵀJ·φ⁻¹ (J = ∂p/∂w, a = ln of the GLM's slope): the delta method on statsmodels'
    covariance gives its standard errors."""
    data = 'SELECT x1, amounts FROM rows WHERE x1 > -5'
    rows.execute("SELECT pgad.train('nl', 'λ(d, w) w.c + exp(w.a)*d.x1', 'gamma', %s, '{\"c\": 0, \"a\": 0}', "
                 "label => 'amounts', optimizer => 'newton', iterations => 100)", (data,))
    got = dict(rows.execute("SELECT weight, std_error FROM pgad.summary('nl')").fetchall())
    result = sm.GLM(AMOUNTS, design()[:, :2], family=sm.families.Gamma(link=sm.families.links.Log())).fit(tol=1e-14)
    assert got['c'] == pytest.approx(result.bse[0], rel=1e-6)
    assert got['a'] == pytest.approx(result.bse[1] / result.params[1], rel=1e-6)  # d ln(b) = db / b


def test_huber_reaches_the_optimum_of_its_objective(rows):
    _, weights, final = train(rows, 'hub', 'huber(1.35)', 'noisy', optimizer='newton', iterations=100)

    def mean_huber(w, delta=1.35):
        r = np.abs(design() @ w - NOISY)
        return np.mean(np.where(r <= delta, 0.5 * r ** 2, delta * r - 0.5 * delta ** 2))
    best = optimize.minimize(mean_huber, np.zeros(3), method='BFGS', options=dict(gtol=1e-12))
    np.testing.assert_allclose([weights[k] for k in 'cab'], best.x, rtol=1e-6)  # scipy's BFGS stops near 1e-8
    assert final == pytest.approx(best.fun, rel=1e-12)


@pytest.mark.parametrize('tau', [0.5, 0.9])
def test_quantile_reaches_statsmodels_quantreg(rows, tau):
    _, weights, final = train(rows, 'quant', f'quantile({tau})', 'noisy', optimizer='lbfgs', iterations=2000)
    params = sm.QuantReg(NOISY, design()).fit(q=tau, max_iter=5000).params
    residual = NOISY - design() @ params
    theirs = np.mean(np.maximum(tau * residual, (tau - 1) * residual))
    # a piecewise-linear loss: lbfgs ends on a kink, within 1e-5 of the linear program's optimum (or below it)
    assert final <= theirs * (1 + 1e-5)
    np.testing.assert_allclose([weights[k] for k in 'cab'], params, atol=2e-2)


# --- pgad.evaluate ---------------------------------------------------------------------------------------------------

def scores(db, name):
    return np.array([r[0] for r in db.execute(f'SELECT pgad_models.{name}(x1, x2) FROM rows')])


def metrics_of(db, name):
    return {m: v for _, m, v in db.execute(f"SELECT * FROM pgad.evaluate('{name}', 'rows')")}


def test_evaluate_gives_scikit_learns_metrics(rows):
    # 1e-12 relative: the same sums in another order
    train(rows, 'ev_p', 'poisson', 'counts', optimizer='newton')
    got, z = metrics_of(rows, 'ev_p'), scores(rows, 'ev_p')
    assert got['poisson_deviance'] == pytest.approx(metrics.mean_poisson_deviance(COUNTS, np.exp(z)), rel=1e-12)
    assert got['mae'] == pytest.approx(metrics.mean_absolute_error(COUNTS, np.exp(z)), rel=1e-12)
    train(rows, 'ev_g', 'gamma', 'amounts', optimizer='newton')
    got, z = metrics_of(rows, 'ev_g'), scores(rows, 'ev_g')
    assert got['gamma_deviance'] == pytest.approx(metrics.mean_gamma_deviance(AMOUNTS, np.exp(z)), rel=1e-12)
    train(rows, 'ev_q', 'quantile(0.8)', 'noisy', iterations=300)
    got, z = metrics_of(rows, 'ev_q'), scores(rows, 'ev_q')
    assert got['pinball_loss'] == pytest.approx(metrics.mean_pinball_loss(NOISY, z, alpha=0.8), rel=1e-12)
    assert got['loss'] == pytest.approx(got['pinball_loss'], rel=1e-12)
    assert got['mae'] == pytest.approx(metrics.mean_absolute_error(NOISY, z), rel=1e-12)
    train(rows, 'ev_h', 'huber', 'noisy', iterations=300)
    got, z = metrics_of(rows, 'ev_h'), scores(rows, 'ev_h')
    assert got['mae'] == pytest.approx(metrics.mean_absolute_error(NOISY, z), rel=1e-12)
    assert got['mse'] == pytest.approx(metrics.mean_squared_error(NOISY, z), rel=1e-12)
    assert got['r2'] == pytest.approx(metrics.r2_score(NOISY, z), rel=1e-12)


def test_poisson_deviance_takes_a_zero_count(db):
    db.execute('CREATE TABLE zeros AS SELECT x::float8 AS x, (x % 3)::float8 AS y FROM generate_series(0, 11) AS x')
    db.execute("SELECT pgad.train('zc', 'λ(d, w) w.c + w.a*d.x', 'poisson', 'zeros', '{\"c\": 0, \"a\": 0}', "
               "optimizer => 'newton')")
    z = np.array([r[0] for r in db.execute('SELECT pgad_models.zc(x) FROM zeros ORDER BY x')])
    y = np.arange(12) % 3.0
    got = dict((m, v) for _, m, v in db.execute("SELECT * FROM pgad.evaluate('zc', 'zeros')"))
    assert got['poisson_deviance'] == pytest.approx(metrics.mean_poisson_deviance(y, np.exp(z)), rel=1e-12)


# --- the labels ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('loss, label, bad, says', [
    ('poisson', 'counts', -2.0, 'loss "poisson" takes labels 0 or more, but column "y" is -2'),
    ('gamma', 'amounts', 0.0, 'loss "gamma" takes labels greater than 0, but column "y" is 0'),
    ('gamma', 'amounts', -1.0, 'loss "gamma" takes labels greater than 0, but column "y" is -1'),
    ('gamma', 'amounts', float('nan'), 'loss "gamma" takes labels greater than 0, but column "y" is nan'),
])
def test_labels_are_checked_at_training_evaluate_and_summary(rows, loss, label, bad, says):
    bad_data = f"SELECT x1, x2, CASE WHEN x1 > 1 THEN '{bad}'::float8 ELSE {label} END AS y FROM rows"
    count = int(np.sum(X1 > 1))
    rows.execute("SELECT pgad.drop_model(name) FROM (SELECT DISTINCT name FROM pgad.models WHERE name = 'lab') AS m")
    e = error_of(rows, 'SELECT pgad.train(%s, %s, %s, %s, %s)', ('lab', MODEL, loss, bad_data, START))
    assert (e.sqlstate, e.message_primary) == ('22023', says)
    assert e.message_detail.startswith(f'{count} of {N} rows have a label that is not ') and e.message_hint
    assert rows.execute("SELECT count(*) FROM pgad.models WHERE name = 'lab'").fetchone()[0] == 0
    rows.execute('DROP TABLE IF EXISTS lab_rows')
    rows.execute(f'CREATE TABLE lab_rows AS SELECT x1, x2, {label} AS y FROM rows')
    rows.execute("SELECT pgad.train('lab', %s, %s, 'lab_rows', %s, optimizer => 'newton')", (MODEL, loss, START))
    e = error_of(rows, "SELECT * FROM pgad.evaluate('lab', %s)", (bad_data,))
    assert (e.sqlstate, e.message_primary) == ('22023', f'model "lab": {says}')
    rows.execute(f"UPDATE lab_rows SET y = '{bad}'::float8 WHERE x1 > 1")
    e = error_of(rows, "SELECT * FROM pgad.summary('lab', unconverged => 'warning')")
    assert (e.sqlstate, e.message_primary) == ('22023', f'model "lab": {says}')


def test_a_boolean_label_is_refused_for_poisson(db):
    db.execute('CREATE TABLE flags AS SELECT x::float8 AS x, x > 5 AS y FROM generate_series(1, 10) AS x')
    e = error_of(db, "SELECT pgad.train('fl', 'λ(d, w) w.a*d.x', 'poisson', 'flags', '{\"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('42804', 'loss "poisson" takes labels 0 or more, but column "y" is '
                                                        'of type boolean')
    assert 'CASE WHEN y THEN 1 ELSE 0 END AS y' in e.message_hint


# --- the mean function -----------------------------------------------------------------------------------------------

def test_a_poisson_or_gamma_model_gets_a_mean_function(rows):
    for loss, label in (('poisson', 'counts'), ('gamma', 'amounts')):
        train(rows, 'rate', loss, label, optimizer='newton')
        z, mean = np.array(rows.execute('SELECT pgad_models.rate(x1, x2), pgad_models.rate_mean(x1, x2) '
                                        'FROM rows').fetchall()).T
        np.testing.assert_allclose(mean, np.exp(z), rtol=1e-15)
        assert rows.execute('SELECT pgad_models.rate_mean(NULL, 1)').fetchone()[0] is None
        plan = rows.execute('EXPLAIN (VERBOSE) SELECT pgad_models.rate_mean(x1, x2) FROM rows').fetchall()
        assert 'exp(' in ' '.join(r[0] for r in plan)  # inlined
    e = error_of(rows, "SELECT pgad.train('rate_mean', %s, 'squared', 'rows', %s, label => 'noisy')", (MODEL, START))
    assert e.sqlstate == '42710' and e.message_primary == 'model "rate" has a mean function named "rate_mean"'
    rows.execute("SELECT pgad.drop_model('rate')")
    assert rows.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'rate%'").fetchone()[0] == 0


def test_the_stored_catalog_knows_the_mean_function(rows):
    train(rows, 'owned', 'gamma', 'amounts', iterations=3)
    assert rows.execute("SELECT loss FROM pgad._model_owners('owned')").fetchone()[0] == 'gamma'
