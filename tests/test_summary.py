"""pgad.summary (pgad/models/summary.py): the coefficient tables of OLS and logistic models against statsmodels'
OLS and Logit (params, bse, tvalues, pvalues, conf_int), per group; the t and normal distributions against scipy's;
the refusals (0A000 for a loss or a penalty without a likelihood, 22000 for a singular Hessian). float64; the
tolerances sit next to the assertions.
"""
import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from conftest import error_of
from pgad.models import summary

N = 200
rng = np.random.default_rng(7)
X1, X2 = rng.normal(size=N), rng.uniform(0, 3, size=N)
Y = 1.5 + 0.8 * X1 - 0.4 * X2 + rng.normal(scale=0.7, size=N)
T = (rng.uniform(size=N) < 1 / (1 + np.exp(-(-0.3 + 1.1 * X1 - 0.5 * X2)))).astype(np.float64)
G = np.where(np.arange(N) % 2 == 0, 'east', 'west')


@pytest.fixture
def points(db):
    db.execute('DROP TABLE IF EXISTS points')
    db.execute('CREATE TABLE points (x1 float8, x2 float8, y float8, t float8, g text)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO points VALUES (%s, %s, %s, %s, %s)',
                        [(float(a), float(b), float(c), float(d), str(e)) for a, b, c, d, e in zip(X1, X2, Y, T, G)])
    return db


def fit(db, name, loss, label, **options):
    extra = ''.join(f', {k} => %({k})s' for k in options)
    db.execute("SELECT pgad.train(%(name)s, 'λ(d, w) w.c + w.a*d.x1 + w.b*d.x2', %(loss)s, 'points', "
               f"'{{\"c\": 0, \"a\": 0, \"b\": 0}}', optimizer => 'lbfgs', iterations => 500, label => %(label)s"
               f"{extra})", dict(name=name, loss=loss, label=label, **options))
    rows = db.execute('SELECT group_key, weight, estimate, std_error, statistic, p_value, ci_low, ci_high '
                      'FROM pgad.summary(%s)', (name,)).fetchall()
    return rows


def check(rows, result, estimate_tol):
    """rows for weights c, a, b against a statsmodels result whose exog is [1, x1, x2]."""
    by_name = {r[1]: r for r in rows}
    assert sorted(by_name) == ['a', 'b', 'c'] and len(rows) == 3  # in the order of the stored weights jsonb
    got = np.array([by_name[w][2:] for w in ('c', 'a', 'b')])
    ci = result.conf_int(0.05)
    expected = np.column_stack([result.params, result.bse, result.tvalues, result.pvalues, ci[:, 0], ci[:, 1]])
    # the estimates: lbfgs's optimum against the exact solve, to estimate_tol; the rest follows from them and the
    # exact Hessian, to the same relative tolerance (p-values: absolute, they are tiny for strong weights)
    np.testing.assert_allclose(got[:, 0], expected[:, 0], rtol=estimate_tol, atol=estimate_tol)
    np.testing.assert_allclose(got[:, [1, 2, 4, 5]], expected[:, [1, 2, 4, 5]], rtol=estimate_tol * 10,
                               atol=estimate_tol * 10)
    np.testing.assert_allclose(got[:, 3], expected[:, 3], rtol=1e-4, atol=1e-10)


def exog(mask=slice(None)):
    return np.column_stack([np.ones(N), X1, X2])[mask]


def test_ols_matches_statsmodels(points):
    rows = fit(points, 'ols', 'squared', 'y')
    assert all(r[0] is None for r in rows)
    check(rows, sm.OLS(Y, exog()).fit(), 1e-6)


def test_logistic_matches_statsmodels(points):
    rows = fit(points, 'logit', 'logistic', 't')
    check(rows, sm.Logit(T, exog()).fit(disp=0, tol=1e-12), 1e-5)


def test_grouped_models_give_one_table_per_group(points):
    rows = fit(points, 'ols_by_g', 'squared', 'y', group_by='g')
    for group in ('east', 'west'):
        mine = [r for r in rows if r[0] == {'g': group}]
        check(mine, sm.OLS(Y[G == group], exog(G == group)).fit(), 1e-6)


def test_other_losses_and_penalties_are_refused(points):
    points.execute("SELECT pgad.train('hinged', 'λ(d, w) w.c + w.a*d.x1', 'hinge', "
                   "'SELECT x1, CASE WHEN y > 1.5 THEN 1 ELSE -1 END AS y FROM points', "
                   "'{\"c\": 0, \"a\": 0}', label => 'y', iterations => 2)")
    e = error_of(points, "SELECT * FROM pgad.summary('hinged')")
    assert e.sqlstate == '0A000' and 'not model "hinged" with loss \'hinge\'' in e.message_primary
    points.execute("SELECT pgad.train('ridge', 'λ(d, w) w.c + w.a*d.x1', 'squared', 'points', "
                   "'{\"c\": 0, \"a\": 0}', label => 'y', l2 => 0.1, iterations => 2)")
    e = error_of(points, "SELECT * FROM pgad.summary('ridge')")
    assert e.sqlstate == '0A000' and 'with l2 = 0.1' in e.message_primary
    e = error_of(points, "SELECT * FROM pgad.summary('no_such_model')")
    assert e.sqlstate == '42704'


def test_the_refused_loss_is_named(points):
    """A named loss other than 'squared' and 'logistic' in quotes; a lambda loss as "a lambda" (not its text)."""
    for name, loss, label in [('absolute', 'absolute', ", label => 'y'"), ('own', 'λ(p, d) abs(p - d.y)', '')]:
        points.execute("SELECT pgad.train(%s, 'λ(d, w) w.c + w.a*d.x1', %s, 'points', '{\"c\": 0, \"a\": 0}', "
                       f"iterations => 2{label})", (name, loss))
    e = error_of(points, "SELECT * FROM pgad.summary('absolute')")
    assert (e.sqlstate, e.message_primary) == (
        '0A000', 'pgad.summary takes a \'squared\', \'logistic\', \'softmax\', \'poisson\' or \'gamma\' model, '
        'not model "absolute" with loss \'absolute\'')
    assert e.message_detail == ('Standard errors need the likelihood the loss is: least squares, the Bernoulli, '
                                'multinomial, Poisson or gamma log-likelihood, or a lambda loss declared a negative '
                                'log-likelihood.')
    assert e.message_hint == ("Train the model with loss => 'squared', 'logistic', 'softmax', 'poisson' or 'gamma', "
                              'or, where a lambda loss is the negative log-likelihood of the rows, with likelihood => '
                              'true.')
    e = error_of(points, "SELECT * FROM pgad.summary('own')")
    assert (e.sqlstate, e.message_primary) == (
        '0A000', 'pgad.summary takes a \'squared\', \'logistic\', \'softmax\', \'poisson\' or \'gamma\' model, '
        'not model "own" with loss a lambda')
    points.execute("SELECT pgad.train('lasso', 'λ(d, w) w.c + w.a*d.x1', 'squared', 'points', "
                   "'{\"c\": 0, \"a\": 0}', label => 'y', l1 => 0.1, iterations => 2)")
    e = error_of(points, "SELECT * FROM pgad.summary('lasso')")
    assert (e.sqlstate, e.message_primary, e.message_detail, e.message_hint) == (
        '0A000', 'pgad.summary takes an unregularised model, not model "lasso" with l1 = 0.1',
        'A penalised fit is not the maximum-likelihood estimate the standard errors are of.',
        'Train the model again without l1.')


def test_a_model_with_as_many_weights_as_rows_has_no_standard_errors(points):
    """n = p: the residual variance RSS / (n − p) is 0 / 0, and summary says why instead (n − p = 1 gives a table)."""
    points.execute("SELECT pgad.train('two', 'λ(d, w) w.c + w.a*d.x1', 'squared', "
                   "'SELECT x1, y FROM points ORDER BY x1 LIMIT 2', '{\"c\": 0, \"a\": 0}', label => 'y', "
                   "optimizer => 'newton')")
    e = error_of(points, "SELECT * FROM pgad.summary('two')")
    assert (e.sqlstate, e.message_primary) == (
        '22000', 'model "two" has 2 weights and only 2 rows: no residual degrees of freedom for its standard errors')
    points.execute("SELECT pgad.train('three', 'λ(d, w) w.c + w.a*d.x1', 'squared', "
                   "'SELECT x1, y FROM points ORDER BY x1 LIMIT 3', '{\"c\": 0, \"a\": 0}', label => 'y', "
                   "optimizer => 'newton')")
    assert len(points.execute("SELECT * FROM pgad.summary('three')").fetchall()) == 2


def test_a_singular_hessian_is_refused(points):
    points.execute("SELECT pgad.train('twice', 'λ(d, w) w.a*d.x1 + w.b*(2*d.x1)', 'squared', 'points', "
                   "'{\"a\": 0, \"b\": 0}', label => 'y', optimizer => 'lbfgs')")
    e = error_of(points, "SELECT * FROM pgad.summary('twice')")
    # the condition number the DETAIL ends with is the rounding's (inf, or 1e17 on another CPU's sums)
    assert e.message_detail.startswith('Weights "a" and "b" are collinear: a combination of them leaves the loss '
                                       'unchanged to float64\'s precision (the Hessian, its diagonal scaled to 1, '
                                       'has condition number ')
    assert (e.sqlstate, e.message_primary, e.message_hint) == (
        '22000', 'the Hessian of model "twice" is singular: its weights are not identified by the data',
        'Drop one of those weights, or the column that repeats another (with a categorical weight beside an '
        'intercept, drop the intercept or one category); or add rows. A logistic model that separates its labels '
        'perfectly is singular too.')


def test_a_perfect_fit_has_standard_errors_of_zero(db):
    """RSS = 0 (y = 2x exactly, trained from the optimum): every std_error is 0, each statistic infinite with the
    sign of its estimate (+∞ for an estimate of 0), each p-value 0 and each interval the estimate itself."""
    db.execute('CREATE TABLE exact AS SELECT k::float8 AS x, 2 * k::float8 AS y FROM generate_series(1, 5) AS k')
    db.execute("SELECT pgad.train('exact', 'λ(d, w) w.a*d.x + w.b', 'squared', 'exact', '{\"a\": 2, \"b\": 0}', "
               "label => 'y', optimizer => 'newton')")
    rows = db.execute('SELECT weight, estimate, std_error, statistic, p_value, ci_low, ci_high '
                      "FROM pgad.summary('exact') ORDER BY weight").fetchall()
    assert rows == [('a', 2.0, 0.0, math.inf, 0.0, 2.0, 2.0), ('b', 0.0, 0.0, math.inf, 0.0, 0.0, 0.0)]


@pytest.mark.parametrize('dof', [1, 2, 3, 7, 30, 197, 10_000])
def test_t_distribution_matches_scipy(dof):
    for t in (0.0, 0.05, 0.7, 1.96, 4.0, 12.0):
        # 1e-10 relative: the continued fraction is exact to float64, but its prefactor, exp of a difference of
        # lgammas near 4e4 at 10,000 degrees of freedom, keeps about 11 digits
        assert summary.t_sf(t, dof) == pytest.approx(stats.t.sf(t, dof), rel=1e-10, abs=1e-300)
    assert summary.t_quantile(0.975, dof) == pytest.approx(stats.t.ppf(0.975, dof), rel=1e-10)


def test_normal_distribution_matches_scipy():
    for z in (0.0, 0.5, 1.96, 5.0, 9.0):
        assert summary.normal_sf(z) == pytest.approx(stats.norm.sf(z), rel=1e-13, abs=1e-300)
    assert summary.normal_quantile(0.975) == pytest.approx(stats.norm.ppf(0.975), rel=1e-14)


def test_only_the_role_that_trained_may_summarize(db, cluster, dbname):
    """The model's data query is its trainer's SQL: a summary by any other role, a superuser included, is 42501
    before it runs (alice's query calls her function spy, which counts its calls in her sequence)."""
    import psycopg
    db.execute('DROP ROLE IF EXISTS summary_alice')
    db.execute('CREATE ROLE summary_alice LOGIN')
    db.execute('CREATE SCHEMA alice_s AUTHORIZATION summary_alice')
    db.execute('GRANT CREATE ON SCHEMA pgad_models TO summary_alice')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='summary_alice'), autocommit=True) as alice:
            alice.execute('CREATE SEQUENCE alice_s.ran')
            alice.execute('GRANT USAGE ON SCHEMA alice_s TO PUBLIC')
            alice.execute('GRANT USAGE, SELECT, UPDATE ON SEQUENCE alice_s.ran TO PUBLIC')
            alice.execute("CREATE FUNCTION alice_s.spy() RETURNS boolean LANGUAGE sql AS "
                          "$$ SELECT pg_catalog.nextval('alice_s.ran') > 0 $$")
            alice.execute('CREATE TABLE alice_s.pts AS SELECT x::float8 AS x, (2*x + x % 3)::float8 AS y '
                          'FROM generate_series(1, 20) AS x')
            alice.execute("SELECT pgad.train('alices', 'λ(d, w) w.a*d.x + w.b', 'squared', "
                          "'SELECT x, y FROM alice_s.pts WHERE alice_s.spy()', '{\"a\": 0, \"b\": 0}', "
                          "optimizer => 'lbfgs')")
            before = alice.execute('SELECT last_value FROM alice_s.ran').fetchone()[0]
            assert len(alice.execute("SELECT * FROM pgad.summary('alices')").fetchall()) == 2  # hers to run
            assert alice.execute('SELECT last_value FROM alice_s.ran').fetchone()[0] > before
            before = alice.execute('SELECT last_value FROM alice_s.ran').fetchone()[0]
        e = error_of(db, "SELECT * FROM pgad.summary('alices')")
        assert e.sqlstate == '42501' and e.message_primary == 'model "alices" belongs to role "summary_alice"'
        assert db.execute('SELECT last_value FROM alice_s.ran').fetchone()[0] == before  # her query never ran
    finally:
        db.execute("SELECT pgad.drop_model('alices') FROM pgad.models WHERE name = 'alices' LIMIT 1")
        db.execute('DROP SCHEMA alice_s CASCADE')
        db.execute('DROP OWNED BY summary_alice')
        db.execute('DROP ROLE summary_alice')
