"""pgad.summary's numerics (pgad/models/summary.py, issue 35): identification judged on the equilibrated Hessian
D^-½·H·D^-½, so that a badly scaled but identified model gets its table, exact against 50-digit arithmetic, and a
singular one gets 22000 naming the weights that are collinear; statistics only at an optimum (55000, or a WARNING
with unconverged => 'warning'), judged from the recorded converged flag and from a Newton step at the stored
weights; a lambda loss declared a negative log-likelihood (likelihood => true) against statsmodels' GLM; the names
of a matrix weight's elements, m[1,2]. float64; the tolerances sit next to the assertions.
"""
import json

import mpmath
import numpy as np
import pytest
import statsmodels.api as sm

from conftest import error_of

N = 60
rng = np.random.default_rng(35)
# columns in an ordinary mix of units: a length in km of a micrometre-scale part, a price in cents
SMALL, LARGE = rng.normal(size=N) * 1e-6, rng.normal(size=N) * 1e6
SCALED_Y = 3.0 + 2e6 * SMALL + 4e-6 * LARGE + rng.normal(scale=2.0, size=N)
X1, X2 = rng.normal(size=N), rng.uniform(0, 3, size=N)
Y = 1.5 + 0.8 * X1 - 0.4 * X2 + rng.normal(scale=0.7, size=N)
COUNT = rng.poisson(np.exp(0.3 + 0.5 * X1 - 0.2 * X2)).astype(np.float64)
G = np.array(['east', 'north', 'west'])[np.arange(N) % 3]
H = np.array(['p', 'q'])[(np.arange(N) // 3) % 2]
LINEAR = 'λ(d, w) w.c + w.a*d.x1 + w.b*d.x2'
START = '{"c": 0, "a": 0, "b": 0}'


@pytest.fixture
def rows(db):
    db.execute('DROP TABLE IF EXISTS numerics')
    db.execute('CREATE TABLE numerics (small float8, large float8, sy float8, x1 float8, x2 float8, y float8, '
               'n float8, g text, h text)')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO numerics VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)',
                        [(*map(float, r[:7]), str(r[7]), str(r[8]))
                         for r in zip(SMALL, LARGE, SCALED_Y, X1, X2, Y, COUNT, G, H)])
    return db


def train(db, name, model, loss, data, weights, **options):
    extra = ''.join(f', {k} => %({k})s' for k in options)
    db.execute(f'SELECT pgad.train(%(name)s, %(model)s, %(loss)s, %(data)s, %(weights)s{extra})',
               dict(name=name, model=model, loss=loss, data=data, weights=weights, **options))


def summary(db, name, **options):
    extra = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute('SELECT weight, estimate, std_error, statistic, p_value, ci_low, ci_high '
                      f'FROM pgad.summary(%(name)s{extra})', dict(name=name, **options)).fetchall()


# --- identification on the equilibrated Hessian ---------------------------------------------------------------------

def ols_in_50_digits(columns, y):
    """(estimates, standard errors) of OLS on these columns, in 50-digit arithmetic from the float8 values."""
    with mpmath.workdps(50):
        x = mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in np.column_stack(columns)])
        ys = mpmath.matrix([mpmath.mpf(float(v)) for v in y])
        xtx = x.T * x
        beta = mpmath.lu_solve(xtx, x.T * ys)
        residual = ys - x * beta
        sigma2 = sum(r ** 2 for r in residual) / (len(y) - len(columns))
        inverse = xtx ** -1
        return ([float(b) for b in beta], [float(mpmath.sqrt(sigma2 * inverse[k, k])) for k in range(len(columns))])


def test_a_badly_scaled_identified_model_gets_its_exact_table(rows):
    """Columns at 1e-6 and 1e6: cond(H) is about 1e24 and was 22000; D^-½·H·D^-½ is well conditioned, and the table
    computed through it is exact to float64's rounding against 50-digit arithmetic."""
    train(rows, 'scaled', 'λ(d, w) w.c + w.a*d.small + w.b*d.large', 'squared',
          'SELECT small, large, sy AS y FROM numerics', START, optimizer='newton')
    got = {r[0]: r[1:] for r in summary(rows, 'scaled')}
    beta, se = ols_in_50_digits([np.ones(N), SMALL, LARGE], SCALED_Y)
    for k, weight in enumerate('cab'):
        estimate, std_error, t, _, low, high = got[weight]
        # the estimate: newton's optimum in float64, to 1e-9 of its standard error; the standard error, from the
        # Hessian through its equilibrated inverse, to 1e-9 relative
        assert abs(estimate - beta[k]) <= 1e-9 * se[k]
        assert std_error == pytest.approx(se[k], rel=1e-9)
        assert t == pytest.approx(beta[k] / se[k], rel=1e-8)
        assert (low + high) / 2 == pytest.approx(estimate, rel=1e-12)
    assert got['a'][1] / got['b'][1] > 1e10  # standard errors 1e12 apart: H's condition number about 1e24


SINGULAR = {
    # a weight the data does not move: its column is 0 on every row
    'unmoved': ('λ(d, w) w.c + w.a*d.x1 + w.z*d.zero', 'SELECT x1, 0::float8 AS zero, y FROM numerics',
                '{"c": 0, "a": 0, "z": 0}', ['z'], ['c', 'a']),
    # the dummy-variable trap: an intercept beside a weight for every category
    'dummy trap': ('λ(d, w) w.b + w.hood[d.g] + w.a*d.x1', 'SELECT x1, g, y FROM numerics',
                   '{"b": 0, "hood": {}, "a": 0}', ['b', 'hood[east]', 'hood[north]', 'hood[west]'], ['a']),
    # two categorical weights and no reference level: a constant moves from one to the other
    'two categorical': ('λ(d, w) w.r[d.g] + w.s[d.h] + w.a*d.x1', 'SELECT x1, g, h, y FROM numerics',
                        '{"r": {}, "s": {}, "a": 0}', ['r[east]', 'r[north]', 'r[west]', 's[p]', 's[q]'], ['a']),
    # collinear columns: x3 = x1 + x2, rounded
    'collinear': ('λ(d, w) w.c + w.a*d.x1 + w.b*d.x2 + w.e*d.x3', 'SELECT x1, x2, x1 + x2 AS x3, y FROM numerics',
                  '{"c": 0, "a": 0, "b": 0, "e": 0}', ['a', 'b', 'e'], ['c']),
}


@pytest.mark.parametrize('case', sorted(SINGULAR))
def test_a_singular_model_names_its_collinear_weights(rows, case):
    model, data, weights, named, free = SINGULAR[case]
    name = 'singular_' + case.replace(' ', '_')
    train(rows, name, model, 'squared', data, weights, optimizer='lbfgs')
    e = error_of(rows, 'SELECT * FROM pgad.summary(%s)', [name])
    assert e.sqlstate == '22000' and e.message_primary == \
        f'the Hessian of model "{name}" is singular: its weights are not identified by the data'
    for weight in named:
        assert f'"{weight}"' in e.message_detail
    for weight in free:
        assert f'"{weight}"' not in e.message_detail
    assert e.message_hint.startswith('Drop one of those weights')


# --- statistics only at an optimum ----------------------------------------------------------------------------------

def test_a_fit_stopped_short_is_refused_or_warned(rows):
    """Two L-BFGS iterations: the weights are far from the optimum, and the Newton step at them says how far."""
    train(rows, 'short', LINEAR, 'squared', 'numerics', START, optimizer='lbfgs', iterations=2)
    e = error_of(rows, "SELECT * FROM pgad.summary('short')")
    assert e.sqlstate == '55000' and e.message_primary.startswith('model "short" is not at an optimum: ')
    assert "unconverged => 'warning'" in e.message_hint
    warnings = []
    rows.add_notice_handler(lambda d: warnings.append((d.severity_nonlocalized, d.message_primary)))
    got = summary(rows, 'short', unconverged='warning')
    assert sorted(r[0] for r in got) == ['a', 'b', 'c']
    assert [s for s, m in warnings if m.startswith('model "short" is not at an optimum: ')] == ['WARNING']


def test_a_recorded_unconverged_fit_is_refused_or_warned(rows):
    """pgad.models.converged = false refuses the table even at the optimum (the flag the optimizers record)."""
    train(rows, 'flagged', LINEAR, 'squared', 'numerics', START, optimizer='newton')
    assert len(summary(rows, 'flagged')) == 3
    rows.execute("UPDATE pgad.models SET converged = false WHERE name = 'flagged'")
    e = error_of(rows, "SELECT * FROM pgad.summary('flagged')")
    assert e.sqlstate == '55000'
    assert e.message_primary == 'model "flagged" is not at an optimum: its training did not converge'
    warnings = []
    rows.add_notice_handler(lambda d: warnings.append(d.message_primary))
    assert len(summary(rows, 'flagged', unconverged='warning')) == 3 and len(warnings) == 1
    # and off the optimum as well: both reasons, in one message (one WARNING)
    rows.execute("UPDATE pgad.models SET weights = jsonb_set(weights, '{b}', to_jsonb((weights->>'b')::float8 + 1)) "
                 "WHERE name = 'flagged'")
    e = error_of(rows, "SELECT * FROM pgad.summary('flagged')")
    assert e.message_primary.startswith('model "flagged" is not at an optimum: its training did not converge; a '
                                        'Newton step from its weights moves weight "b" by ')
    assert len(summary(rows, 'flagged', unconverged='warning')) == 3 and len(warnings) == 2


def test_an_old_row_off_its_optimum_is_refused(rows):
    """A row trained before 0.14.0 (converged NULL) whose weights are off the optimum of its data query now (moved
    by 0.002 standard errors here, twice what is allowed) is refused, per group, naming the group."""
    train(rows, 'old', LINEAR, 'squared', 'numerics', START, optimizer='newton', group_by='h')
    se = {(json.loads(k) if isinstance(k, str) else k)['h']: dict((w, s) for w, s in v)
          for k, v in _by_group(rows.execute("SELECT group_key, weight, std_error FROM pgad.summary('old')"))}
    rows.execute("UPDATE pgad.models SET converged = NULL, weights = jsonb_set(weights, '{a}', "
                 "to_jsonb((weights->>'a')::float8 + %s)) WHERE name = 'old' AND group_key->>'h' = 'q'",
                 [0.002 * se['q']['a']])
    e = error_of(rows, "SELECT * FROM pgad.summary('old')")
    assert e.sqlstate == '55000'
    assert e.message_primary.startswith('model "old", group {"h": "q"} is not at an optimum: a Newton step from its '
                                        'weights moves weight "a" by 0.002 standard errors')
    rows.execute("UPDATE pgad.models SET weights = jsonb_set(weights, '{a}', "
                 "to_jsonb((weights->>'a')::float8 - %s)) WHERE name = 'old' AND group_key->>'h' = 'q'",
                 [0.0015 * se['q']['a']])
    assert len(summary(rows, 'old')) == 6  # within 0.0005 standard errors: at the optimum


def _by_group(result):
    out = {}
    for key, weight, se in result:
        out.setdefault(json.dumps(key), []).append((weight, se))
    return out.items()


def test_unconverged_takes_error_or_warning(rows):
    train(rows, 'either', LINEAR, 'squared', 'numerics', START, optimizer='newton')
    e = error_of(rows, "SELECT * FROM pgad.summary('either', unconverged => 'ignore')")
    assert e.sqlstate == '22023' and e.message_primary == 'unconverged must be \'error\' or \'warning\', not "ignore"'
    assert len(summary(rows, 'either', unconverged='error')) == 3


# --- likelihood => true ----------------------------------------------------------------------------------------------

POISSON = 'λ(p, d) exp(p) - d.n*p'


def test_a_declared_likelihood_matches_statsmodels_glm(rows):
    """Poisson regression written as a lambda loss and declared a negative log-likelihood: the Wald table of
    statsmodels' GLM with family Poisson (its log link)."""
    train(rows, 'counts', LINEAR, POISSON, 'numerics', START, optimizer='newton', likelihood=True)
    by_name = {r[0]: r[1:] for r in summary(rows, 'counts')}
    got = np.array([by_name[w] for w in 'cab'])
    result = sm.GLM(COUNT, np.column_stack([np.ones(N), X1, X2]), family=sm.families.Poisson()).fit(
        tol=1e-14, tol_criterion='params', maxiter=1000)
    ci = result.conf_int(0.05)
    expected = np.column_stack([result.params, result.bse, result.tvalues, result.pvalues, ci[:, 0], ci[:, 1]])
    # the estimates: pgad's newton and statsmodels' IRLS each stop within about 1e-7 of a standard error of the
    # optimum; the rest follows from them and the exact Hessian, to 1e-6 relative (the p-values to 1e-5)
    assert np.all(np.abs(got[:, 0] - expected[:, 0]) <= 1e-6 * expected[:, 1])
    np.testing.assert_allclose(got[:, [1, 2, 4, 5]], expected[:, [1, 2, 4, 5]], rtol=1e-6)
    np.testing.assert_allclose(got[:, 3], expected[:, 3], rtol=1e-5)


def test_a_lambda_loss_without_likelihood_is_refused_with_a_hint(rows):
    train(rows, 'undeclared', LINEAR, POISSON, 'numerics', START, optimizer='newton')
    e = error_of(rows, "SELECT * FROM pgad.summary('undeclared')")
    assert e.sqlstate == '0A000' and 'likelihood => true' in e.message_hint


def test_likelihood_takes_a_loss_that_is_one(rows):
    e = error_of(rows, "SELECT pgad.train('hinged', 'λ(d, w) w.a*d.x1', 'hinge', "
                       "'SELECT x1, CASE WHEN y > 1.5 THEN 1 ELSE -1 END AS y FROM numerics', '{\"a\": 0}', "
                       'likelihood => true)')
    assert e.sqlstate == '22023' and e.message_primary == \
        'likelihood => true takes a loss that is a negative log-likelihood, not loss "hinge"'
    assert rows.execute("SELECT count(*) FROM pgad.models WHERE name = 'hinged'").fetchone()[0] == 0
    # squared is one already: likelihood => true changes nothing (OLS's t table)
    train(rows, 'ols_declared', LINEAR, 'squared', 'numerics', START, optimizer='newton', likelihood=True)
    train(rows, 'ols_plain', LINEAR, 'squared', 'numerics', START, optimizer='newton')
    assert summary(rows, 'ols_declared') == summary(rows, 'ols_plain')


# --- the names of a matrix's elements --------------------------------------------------------------------------------

def test_matrix_elements_are_named_as_documented(rows):
    """docs/sql.md: a vector's elements "v[1]", a matrix's "m[1,2]" (row-major, from 1), in pgad.hessian and in
    pgad.summary's weight column."""
    loss = 'λ(d, w) (w.m[1][1]*d.x1 + w.m[1][2]*d.x2 + w.m[2][1] + w.m[2][2]*d.x1*d.x2 + w.v[1] - d.y)^2'
    start = '{"m": [[0, 0], [0, 0]], "v": [0]}'
    got = json.loads(rows.execute('SELECT pgad.hessian(%s, %s, %s)::text', [loss, 'numerics', start]).fetchone()[0])
    names = ['m[1,1]', 'm[1,2]', 'm[2,1]', 'm[2,2]', 'v[1]']
    assert sorted(got) == names and all(sorted(row) == names for row in got.values())
    train(rows, 'matrix', 'λ(d, w) w.m[1][1]*d.x1 + w.m[1][2]*d.x2 + w.m[2][1] + w.m[2][2]*d.x1*d.x2', 'squared',
          'numerics', '{"m": [[0, 0], [0, 0]]}', optimizer='newton')
    assert [r[0] for r in summary(rows, 'matrix')] == names[:4]


def test_n_equal_to_p_plus_one_and_to_p(rows):
    """Four rows for three weights: OLS's table on one degree of freedom, as statsmodels gives it; three rows: no
    residual degrees of freedom, 22000."""
    train(rows, 'tight', LINEAR, 'squared', 'SELECT x1, x2, y FROM numerics ORDER BY x1 LIMIT 4', START,
          optimizer='newton')
    by_name = {r[0]: r[1:] for r in summary(rows, 'tight')}
    got = np.array([by_name[w] for w in 'cab'])
    first = np.argsort(X1)[:4]
    result = sm.OLS(Y[first], np.column_stack([np.ones(4), X1[first], X2[first]])).fit()
    ci = result.conf_int(0.05)
    expected = np.column_stack([result.params, result.bse, result.tvalues, result.pvalues, ci[:, 0], ci[:, 1]])
    np.testing.assert_allclose(got, expected, rtol=1e-7)  # newton's optimum of a 4-row fit, exact to ~1e-12
    train(rows, 'exact', LINEAR, 'squared', 'SELECT x1, x2, y FROM numerics ORDER BY x1 LIMIT 3', START,
          optimizer='newton')
    e = error_of(rows, "SELECT * FROM pgad.summary('exact')")
    assert e.sqlstate == '22000' and e.message_primary == \
        'model "exact" has 3 weights and only 3 rows: no residual degrees of freedom for its standard errors'
