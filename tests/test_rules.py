"""The derivative rules, in process (no database): every primitive of the lambda language, forward and reverse mode,
against central finite differences and against autograd; the conventions at non-differentiable points; the parser's
PostgreSQL semantics; one node per shared subexpression; and the errors (with their SQLSTATEs) that bad lambdas raise.

Adding a function to the lambda language means adding a row to CASES (test_cases_cover_every_primitive checks).
Everything is float64 with data from np.random.default_rng(0); the tolerances sit next to the assertions.
"""
import os
import re
import sys
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import backends, program, python_backend
from pgad.errors import PgadError
from pgad.limits import Limits
from pgad.lang import parse, parser, printer, rules

MODES = ('forward', 'reverse')
WEIGHTS = ('a', 'b')
W = np.array([0.5, 0.05])  # the weights every case is evaluated at

# The data: x in [0.2, 0.9] (positive, for ln, sqrt and friends), y in ±[0.3, 1.5] (both signs, away from 0),
# t a 0/1 label. At W, u = w.a*d.y + w.b lies in ±[0.15, 0.8]: both signs, away from 0 (abs, sign, relu, CASE
# conditions) and inside (-1, 1) (asin, acos). The ties of greatest/least in CASES are at least 0.01 apart.
N = 40
_rng = np.random.default_rng(0)
DATA = {
    'x': _rng.uniform(0.2, 0.9, N),
    'y': _rng.choice([-1.0, 1.0], N) * _rng.uniform(0.3, 1.5, N),
    't': (_rng.uniform(size=N) < 0.5).astype(np.float64),
}


def u(d, w):
    """w.a*d.y + w.b, the argument most unary cases use."""
    return w[0] * d['y'] + w[1]


def v(d, w):
    """w.a*d.x + w.b: positive, in [0.15, 0.5] at W."""
    return w[0] * d['x'] + w[1]


def case(name, text, fn):
    return pytest.param(text, fn, id=name)


def fmod(x, y):
    """x % y as autograd differentiates it: ∂/∂x = 1 and ∂/∂y = −trunc(x/y) (trunc's own derivative is 0)."""
    return x - y * anp.trunc(x / y)


U = 'w.a*d.y + w.b'
V = 'w.a*d.x + w.b'

# (lambda text, the same loss per row in autograd.numpy as fn(d, w)); d maps column names to arrays, w = [a, b]
CASES = [
    # arithmetic
    case('add', 'λ(d, w) (w.a + d.x) * (w.b + d.y) + w.a', lambda d, w: (w[0] + d['x']) * (w[1] + d['y']) + w[0]),
    case('sub', 'λ(d, w) (w.a - d.x) * (d.y - w.b) - w.b', lambda d, w: (w[0] - d['x']) * (d['y'] - w[1]) - w[1]),
    case('mul', 'λ(d, w) w.a*w.b*d.x*d.y + w.a*w.a*d.x',
         lambda d, w: w[0] * w[1] * d['x'] * d['y'] + w[0] * w[0] * d['x']),
    case('div', 'λ(d, w) (w.a + d.y) / (w.b + d.x) + 1/w.a',
         lambda d, w: (w[0] + d['y']) / (w[1] + d['x']) + 1 / w[0]),
    case('neg', 'λ(d, w) exp(-w.a*d.x) - w.b*-d.y + -(w.a*d.y)^2',
         lambda d, w: anp.exp(-w[0] * d['x']) - w[1] * -d['y'] + (-(w[0] * d['y'])) ** 2),
    case('pow', f'λ(d, w) ({V})^(w.b + d.y)', lambda d, w: v(d, w) ** (w[1] + d['y'])),
    case('pow-data-base', 'λ(d, w) d.x^w.a * w.b^2', lambda d, w: d['x'] ** w[0] * w[1] ** 2),
    case('pow-negative-base', 'λ(d, w) (w.a*d.y - w.b)^3 + w.a^(-1)',
         lambda d, w: (w[0] * d['y'] - w[1]) ** 3 + w[0] ** -1.0),
    case('power', 'λ(d, w) power(w.a + d.x, w.b*d.y + 1)', lambda d, w: (w[0] + d['x']) ** (w[1] * d['y'] + 1)),
    # 4*u % v is (4*u) % v; u of both signs, so the remainder takes the sign of the dividend; x/y at least 0.007 from
    # an integer at every point the cases are checked at (a jump there would break the finite differences)
    case('mod', f'λ(d, w) 4*({U}) % (w.b + 0.5*d.x)', lambda d, w: fmod(4 * u(d, w), w[1] + 0.5 * d['x'])),
    # exponentials and logarithms
    case('exp', f'λ(d, w) exp({U})', lambda d, w: anp.exp(u(d, w))),
    case('ln', f'λ(d, w) ln({V})', lambda d, w: anp.log(v(d, w))),
    case('log10', f'λ(d, w) log({V})', lambda d, w: anp.log10(v(d, w))),
    case('log-base', 'λ(d, w) log(w.a + 1, w.b + d.x)', lambda d, w: anp.log(w[1] + d['x']) / anp.log(w[0] + 1)),
    case('log-base-2', f'λ(d, w) log(2, {V})', lambda d, w: anp.log(v(d, w)) / np.log(2)),
    case('sqrt', f'λ(d, w) sqrt({V})', lambda d, w: anp.sqrt(v(d, w))),
    case('cbrt', f'λ(d, w) cbrt({U})', lambda d, w: anp.sign(u(d, w)) * anp.abs(u(d, w)) ** (1 / 3)),
    # sign and magnitude
    case('abs', f'λ(d, w) abs({U})', lambda d, w: anp.abs(u(d, w))),
    case('sign', f'λ(d, w) sign({U})*w.a*d.x + w.b', lambda d, w: anp.sign(u(d, w)) * w[0] * d['x'] + w[1]),
    case('greatest', 'λ(d, w) greatest(w.a*d.y, w.b - d.x)', lambda d, w: anp.maximum(w[0] * d['y'], w[1] - d['x'])),
    case('greatest-3', 'λ(d, w) greatest(w.a*d.y, w.b - d.x, w.a*w.b*d.x)',
         lambda d, w: anp.maximum(anp.maximum(w[0] * d['y'], w[1] - d['x']), w[0] * w[1] * d['x'])),
    case('least', 'λ(d, w) least(w.a*d.y, w.b - d.x)', lambda d, w: anp.minimum(w[0] * d['y'], w[1] - d['x'])),
    case('least-3', 'λ(d, w) least(w.a*d.y, w.b - d.x, w.a*w.b*d.x)',
         lambda d, w: anp.minimum(anp.minimum(w[0] * d['y'], w[1] - d['x']), w[0] * w[1] * d['x'])),
    # trigonometric and hyperbolic
    case('sin', f'λ(d, w) sin({U})', lambda d, w: anp.sin(u(d, w))),
    case('cos', f'λ(d, w) cos({U})', lambda d, w: anp.cos(u(d, w))),
    case('tan', f'λ(d, w) tan({U})', lambda d, w: anp.tan(u(d, w))),
    case('asin', f'λ(d, w) asin({U})', lambda d, w: anp.arcsin(u(d, w))),
    case('acos', f'λ(d, w) acos({U})', lambda d, w: anp.arccos(u(d, w))),
    case('atan', f'λ(d, w) atan({U})', lambda d, w: anp.arctan(u(d, w))),
    case('atan2', 'λ(d, w) atan2(w.a*d.y + w.b, w.b + d.x)', lambda d, w: anp.arctan2(u(d, w), w[1] + d['x'])),
    case('sinh', f'λ(d, w) sinh({U})', lambda d, w: anp.sinh(u(d, w))),
    case('cosh', f'λ(d, w) cosh({U})', lambda d, w: anp.cosh(u(d, w))),
    case('tanh', f'λ(d, w) tanh({U})', lambda d, w: anp.tanh(u(d, w))),
    # machine learning
    case('sigmoid', f'λ(d, w) sigmoid(4*({U}))', lambda d, w: 1 / (1 + anp.exp(-4 * u(d, w)))),
    case('relu', f'λ(d, w) relu({U})*d.x + w.b*relu(d.y)',
         lambda d, w: anp.maximum(u(d, w), 0.0) * d['x'] + w[1] * np.maximum(d['y'], 0.0)),
    case('softplus', f'λ(d, w) softplus(3*({U}))', lambda d, w: anp.logaddexp(0.0, 3 * u(d, w))),
    # conditions
    case('case', f'λ(d, w) CASE WHEN {U} > 0 THEN sin(w.a*d.x) ELSE w.b*d.y^2 END',
         lambda d, w: anp.where(u(d, w) > 0, anp.sin(w[0] * d['x']), w[1] * d['y'] ** 2)),
    case('case-and-or-not',
         f'λ(d, w) CASE WHEN d.y > 0 AND NOT d.x < 0.5 AND true THEN w.a*exp(w.b*d.x) '
         f'WHEN {U} <= 0 OR d.t = 1 THEN w.b*d.y^2 + w.a '
         f'WHEN d.t <> 1 AND (d.x >= 0.3 OR false) AND d.y != 0 THEN cos(w.a + w.b*d.x) '
         f'ELSE w.a*w.b END',
         lambda d, w: anp.where((d['y'] > 0) & ~(d['x'] < 0.5), w[0] * anp.exp(w[1] * d['x']),
                                anp.where((u(d, w) <= 0) | (d['t'] == 1), w[1] * d['y'] ** 2 + w[0],
                                          anp.where((d['t'] != 1) & (d['x'] >= 0.3) & (d['y'] != 0),
                                                    anp.cos(w[0] + w[1] * d['x']), w[0] * w[1] + 0 * d['x'])))),
    # d.t read where PostgreSQL takes a boolean is a boolean column (the loader packs it as 1 or 0); = and <> of
    # booleans
    case('boolean-column', 'λ(d, w) CASE WHEN d.t AND (d.y > 0) = (d.x > 0.5) THEN w.a*d.x '
                           'WHEN d.t <> (d.x > 0.5) THEN w.b*d.y ELSE w.a*w.b END',
         lambda d, w: anp.where((d['t'] != 0) & ((d['y'] > 0) == (d['x'] > 0.5)), w[0] * d['x'],
                                anp.where((d['t'] != 0) != (d['x'] > 0.5), w[1] * d['y'], w[0] * w[1] + 0 * d['x']))),
    case('case-simple', 'λ(d, w) CASE d.t WHEN 1 THEN w.a*exp(w.b*d.x) WHEN 0.5 THEN 0 ELSE w.b*d.y^2 END',
         lambda d, w: anp.where(d['t'] == 1, w[0] * anp.exp(w[1] * d['x']), w[1] * d['y'] ** 2)),
    # composite losses
    case('linear-regression', 'λ(d, w) (w.a*d.x + w.b - d.y)^2', lambda d, w: (w[0] * d['x'] + w[1] - d['y']) ** 2),
    case('logistic', 'λ(d, w) softplus(w.a*d.x + w.b*d.y) - d.t*(w.a*d.x + w.b*d.y)',
         lambda d, w: anp.logaddexp(0.0, w[0] * d['x'] + w[1] * d['y']) - d['t'] * (w[0] * d['x'] + w[1] * d['y'])),
    case('shared-subexpressions',
         f'λ(d, w) sin({V})*exp(sin({V})) + ln(1 + sin({V})^2)*w.b - sqrt(1 + ({V})^2)',
         lambda d, w: (anp.sin(v(d, w)) * anp.exp(anp.sin(v(d, w))) + anp.log(1 + anp.sin(v(d, w)) ** 2) * w[1]
                       - anp.sqrt(1 + v(d, w) ** 2))),
    case('small-network', 'λ(d, w) (tanh(w.a*d.x + w.b)*w.a + sigmoid(w.b*d.y - w.a) - d.t)^2',
         lambda d, w: (anp.tanh(w[0] * d['x'] + w[1]) * w[0] + 1 / (1 + anp.exp(-(w[1] * d['y'] - w[0])))
                       - d['t']) ** 2),
]

# the primitives that have a derivative: everything whose result is a number (the rest are conditions)
DIFFERENTIABLE = {name for name, p in rules.PRIMITIVES.items() if p.result == 'n'}


def sums(text, mode, w=W, data=DATA, weights=WEIGHTS, rows=None, backend='python'):
    """What the backend's kernel returns: [Σ loss, Σ ∂loss/∂w_0, ...] over the rows."""
    prog = program.build(text, tuple(weights), mode)
    kernel = backends.compile(prog, backend)
    columns = [np.asarray(data[c], dtype=np.float64) for c in prog.columns]
    rows = len(columns[0]) if rows is None else rows
    return kernel(columns, rows, np.asarray(w, dtype=np.float64))


def gradient_and_differences(text, mode, w=W, backend='python'):
    """(the kernel's gradient of the mean loss, its central finite differences)."""
    grad = sums(text, mode, w, backend=backend)[1:] / N
    fd = np.empty(len(w))
    for k in range(len(w)):
        h = 1e-6 * max(1.0, abs(w[k]))
        step = np.zeros(len(w))
        step[k] = h
        fd[k] = (sums(text, mode, w + step, backend=backend)[0] - sums(text, mode, w - step, backend=backend)[0]) / (
            2 * h * N)
    return grad, fd


def autograd_reference(fn, w=W, data=DATA):
    """(Σ loss, ∇ Σ loss) by autograd."""
    data = {k: np.asarray(val) for k, val in data.items()}
    total = lambda weights: anp.sum(fn(data, weights))  # noqa: E731
    return float(total(w)), autograd.grad(total)(np.array(w, dtype=np.float64))


# --- 1. every primitive, both modes ---------------------------------------------------------------------------------

def test_cases_cover_every_primitive():
    """Every differentiable primitive is a node of some case, and every function of the language is called."""
    used = set()
    for param in CASES:
        lam = parse(param.values[0])
        used |= {lam.graph.nodes[i].op for i in lam.graph.ancestors([lam.root])}
    assert DIFFERENTIABLE - used == set()
    assert {'truth', 'iff', 'xor'} - used == set()  # run in every backend too
    texts = ' '.join(param.values[0] for param in CASES)
    missing = [fn for fn, (op, _) in parser.FUNCTIONS.items() if op in rules.PRIMITIVES
               and not re.search(rf'\b{fn}\(', texts)]  # the vector ones: tests/test_vectors.py
    assert missing == []
    assert re.search(r'\blog\([^,()]+,', texts)  # log(b, x)


@pytest.mark.parametrize('text, fn', CASES)
def test_forward_matches_reverse(text, fn):
    forward, reverse = sums(text, 'forward'), sums(text, 'reverse')
    assert np.all(np.isfinite(forward)) and np.all(np.isfinite(reverse))
    # 1e-10 relative to the largest of loss and gradient: the two modes build different (equivalent) expressions
    np.testing.assert_allclose(forward, reverse, rtol=1e-10, atol=1e-10 * np.max(np.abs(reverse)))


# The weight points every case is checked at: W and two random points within ±10% of it (the data's ranges above
# keep every case in its domain, away from its kinks, there too).
POINTS = [W, *(W * np.random.default_rng(seed).uniform(0.9, 1.1, len(W)) for seed in (1, 2))]
BACKENDS = ('python', 'llvm', 'cuda')
# The cuda backend runs on numba's CUDA simulator where there is no GPU (conftest.py), some 0.1 s a kernel call:
# there it is checked at W alone (and against the python backend at 1e-12 on every case: test_gpu.py).
POINT_BACKEND = [(point, backend) for backend in BACKENDS for point in range(len(POINTS))
                 if backend != 'cuda' or point == 0 or os.environ.get('NUMBA_ENABLE_CUDASIM') != '1']


@pytest.mark.parametrize('point, backend', POINT_BACKEND)
@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text, fn', CASES)
def test_gradient_matches_finite_differences(text, fn, mode, backend, point):
    grad, fd = gradient_and_differences(text, mode, POINTS[point], backend)
    # central differences with h = 1e-6: truncation ~h² and rounding ~1e-16·|loss|/h, both far below 1e-8
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize('point, backend', POINT_BACKEND)
@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text, fn', CASES)
def test_matches_autograd(text, fn, mode, backend, point):
    result = sums(text, mode, POINTS[point], backend=backend)
    loss, grad = autograd_reference(fn, POINTS[point])
    # 1e-10 relative: the same functions in float64, evaluated in a different order
    np.testing.assert_allclose(result[0], loss, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(result[1:], grad, rtol=1e-10, atol=1e-10 * max(1.0, np.max(np.abs(grad))))


@pytest.fixture
def fresh_caches():
    """Empty program and kernel caches around a test that changes the rules, so no stale program survives it."""
    program.build.cache_clear()
    backends.compile.cache_clear()
    yield
    program.build.cache_clear()
    backends.compile.cache_clear()


WRONG_RULES = [
    # sin' = sin instead of cos
    pytest.param('sin', lambda x, out: rules.sin(x), f'λ(d, w) sin({U})', lambda d, w: anp.sin(u(d, w)), id='sin'),
    # ∂(x % y)/∂y = +trunc(x/y) instead of −trunc(x/y)
    pytest.param('mod', lambda x, y, out: (1, (x - out) / y), f'λ(d, w) 4*({U}) % (w.b + 0.5*d.x)',
                 lambda d, w: fmod(4 * u(d, w), w[1] + 0.5 * d['x']), id='mod'),
    # atan2's two partials swapped
    pytest.param('atan2', lambda y, x, out: (-y / (x ** 2 + y ** 2), x / (x ** 2 + y ** 2)),
                 'λ(d, w) atan2(w.a*d.y + w.b, w.b + d.x)', lambda d, w: anp.arctan2(u(d, w), w[1] + d['x']),
                 id='atan2'),
]


@pytest.mark.parametrize('name, wrong, text, fn', WRONG_RULES)
def test_a_wrong_rule_fails_the_checks(name, wrong, text, fn, monkeypatch, fresh_caches):
    """The checks above can fail: with a wrong partial in the table, finite differences and autograd disagree."""
    with monkeypatch.context() as patch:
        patch.setitem(rules.PRIMITIVES, name, rules.PRIMITIVES[name]._replace(partials=wrong))
        for mode in MODES:
            grad, fd = gradient_and_differences(text, mode)
            assert not np.allclose(grad, fd, rtol=1e-6, atol=1e-8), mode
            assert not np.allclose(sums(text, mode)[1:], autograd_reference(fn)[1], rtol=1e-10), mode
    program.build.cache_clear()
    backends.compile.cache_clear()
    for mode in MODES:  # the rule restored, the same checks pass again
        grad, fd = gradient_and_differences(text, mode)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_lang_is_one_module_per_stage():
    """pgad.lang.<stage> is the same module object as pgad.lambda.<stage>, as pgad/lambda/__init__.py promises."""
    for stage in ('rules', 'dag', 'parser', 'forward', 'reverse', 'printer'):
        original = sys.modules[f'pgad.lambda.{stage}']
        assert sys.modules.get(f'pgad.lang.{stage}', original) is original, stage
        assert getattr(pgad.lang, stage) is original, stage
    assert python_backend.PRIMITIVES is sys.modules['pgad.lambda.rules'].PRIMITIVES
    assert type(parse('λ(d, w) w.a')) is sys.modules['pgad.lambda.parser'].Lambda


# --- 2. conventions at non-differentiable points -----------------------------------------------------------------

@pytest.mark.parametrize('mode', MODES)
def test_abs_at_zero(mode):
    # rows: a - x = 0, 0, -0.7; and |b| at b = 0
    result = sums('λ(d, w) abs(w.a - d.x) + abs(w.b)', mode, w=[0.3, 0.0], data={'x': [0.3, 0.3, 1.0]})
    np.testing.assert_array_equal(result[1:], [-1.0, 0.0])  # exact: abs'(0) = sign(0) = 0


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('w', [[0.5, 0.25], [0.0, 0.0], [-1.0, 3.0]])
def test_sign_has_zero_derivative(mode, w):
    result = sums('λ(d, w) sign(w.a*d.x - w.b) + sign(w.b)', mode, w=w, data={'x': [0.5, 1.0, -2.0]})
    np.testing.assert_array_equal(result[1:], [0.0, 0.0])


@pytest.mark.parametrize('mode', MODES)
def test_relu_at_zero(mode):
    # rows: a - x = 0 (→ 0), 0.2 (→ 1), -0.2 (→ 0); relu(b) at b = 0 (→ 0)
    result = sums('λ(d, w) relu(w.a - d.x) + relu(w.b)', mode, w=[0.3, 0.0], data={'x': [0.3, 0.1, 0.5]})
    np.testing.assert_array_equal(result[1:], [1.0, 0.0])


TIES = [  # (body, weights a, b, c, gradient): the first argument that attains the extreme takes it all
    ('greatest(w.a, w.b)', [2, 2, 2], [1, 0, 0]),
    ('greatest(w.b, w.a)', [2, 2, 2], [0, 1, 0]),
    ('least(w.a, w.b)', [2, 2, 2], [1, 0, 0]),
    ('least(w.b, w.a)', [2, 2, 2], [0, 1, 0]),
    ('greatest(w.a, w.b, w.c)', [2, 2, 2], [1, 0, 0]),
    ('greatest(w.c, w.b, w.a)', [2, 2, 2], [0, 0, 1]),
    ('greatest(w.a, w.b, w.c)', [1, 2, 2], [0, 1, 0]),
    ('least(w.a, w.b, w.c)', [3, 2, 2], [0, 1, 0]),
    ('least(w.a, w.b, w.c)', [2, 2, 2], [1, 0, 0]),
    ('greatest(w.a*w.a, w.b*2)', [2, 2, 0], [4, 0, 0]),
    ('least(2*w.b, w.a*w.a)', [2, 2, 0], [0, 2, 0]),
]


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('body, w, expected', TIES)
def test_greatest_and_least_at_ties(body, w, expected, mode):
    result = sums(f'λ(d, w) {body}', mode, w=w, data={}, weights=('a', 'b', 'c'), rows=1)
    np.testing.assert_array_equal(result[1:], expected)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('op, a, expected', [
    ('>=', 1.0, [3.0, 1.0]),  # at the boundary, the condition holds: the THEN branch's gradient (b, a)
    ('>', 1.0, [2.0, 6.0]),   # at the boundary, the condition fails: the ELSE branch's gradient (2, 2b)
    ('>=', 0.5, [2.0, 6.0]),
    ('>=', 1.5, [3.0, 1.5]),
])
def test_case_differentiates_the_branch_taken(op, a, expected, mode):
    text = f'λ(d, w) CASE WHEN w.a {op} 1 THEN w.a*w.b ELSE 2*w.a + w.b^2 END'
    result = sums(text, mode, w=[a, 3.0], data={}, rows=1)
    np.testing.assert_allclose(result[1:], expected, rtol=1e-15)


@pytest.mark.parametrize('mode', MODES)
def test_case_untaken_branch_outside_the_domain(mode):
    """Where d.x <= 0, ln(d.x) and ln(w.b*d.x) are -inf or NaN, but that branch is not taken: all stays finite."""
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    a, b = 0.7, 0.3
    text = 'λ(d, w) CASE WHEN d.x > 0 THEN w.a*ln(d.x) + ln(w.b*d.x) ELSE w.a*d.x END'
    result = sums(text, mode, w=[a, b], data={'x': x})
    assert np.all(np.isfinite(result))
    taken = x > 0
    loss = np.sum(a * np.log(x[taken]) + np.log(b * x[taken])) + np.sum(a * x[~taken])
    expected = [loss, np.sum(np.log(x[taken])) + np.sum(x[~taken]), np.sum(taken) / b]
    np.testing.assert_allclose(result, expected, rtol=1e-12)


NESTED_UNTAKEN = [  # an untaken branch two functions deep, with a row where the inner partial is infinite (d.x = 0)
    'λ(d, w) CASE WHEN d.x > 0 THEN ln(w.a*d.x)^2 ELSE w.b END',
    'λ(d, w) CASE WHEN d.x > 0 THEN sqrt(sqrt(w.a*d.x)) ELSE w.b END',
]
@pytest.mark.parametrize('mode', ['forward', 'reverse'])
@pytest.mark.parametrize('text', NESTED_UNTAKEN)
def test_case_untaken_nested_branch_outside_the_domain(text, mode):
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    result = sums(text, mode, w=[0.7, 0.3], data={'x': x})
    assert np.all(np.isfinite(result)), result
    # only the rows where d.x > 0 contribute to ∂/∂a; the other two give ∂/∂b = 1 each
    taken = x[x > 0]
    if 'ln' in text:
        da = np.sum(2 * np.log(0.7 * taken) / 0.7)
    else:
        da = np.sum(0.25 * (0.7 * taken) ** -0.75 * taken)
    np.testing.assert_allclose(result[1:], [da, 2.0], rtol=1e-12)


# --- 3. parser semantics ------------------------------------------------------------------------------------------

def value(text, data=None, w=None):
    """The loss of a lambda over one row (or its columns' rows), without a gradient."""
    lam = parse(text)
    prog = program.build(text, tuple(lam.weights), 'reverse', gradient=False)
    kernel = backends.compile(prog, 'python')
    data = data or {}
    columns = [np.asarray(data[c], dtype=np.float64) for c in prog.columns]
    weights = np.asarray([(w or {})[name] for name in prog.weights], dtype=np.float64)
    return kernel(columns, 1, weights)[0]


@pytest.mark.parametrize('body, expected', [
    ('-2^2', 4.0),          # unary minus binds tighter than ^, as in PostgreSQL
    ('2^3^2', 64.0),        # ^ is left-associative
    ('1/2', 0.5),           # numeric literals are float8
    ('2 + 3 * 4 ^ 2', 50.0),
    ('(2 + 3) * 4', 20.0),
    ('10 - 4 - 3', 3.0),    # - is left-associative
    ('2 / 4 / 2', 0.25),
    ('2 * -3', -6.0),
    ('- - 3', 3.0),
    ('.5 + 2. + 1e1 + 25E-1', 15.0),
    ('log(100)', 2.0),       # log(x) is base 10, as in PostgreSQL
    ('log(2, 8)', 3.0),      # log(b, x)
    ('power(2, 10)', 1024.0),
    ('greatest(1, 5, 3) + least(4, -2, 7)', 3.0),
    # OR < AND < NOT < comparisons
    ('CASE WHEN true OR false AND false THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN NOT 1 > 2 AND 2 > 1 THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN NOT false OR true THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN 1 + 1 = 2 AND 1 <> 2 AND 1 != 2 AND 1 <= 1 AND 2 >= 1 THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN false THEN 1 WHEN 1 < 2 THEN 2 ELSE 3 END', 2.0),  # the first WHEN that holds
    ('CASE 2 WHEN 1 THEN 10 WHEN 2 THEN 20 WHEN 2 THEN 30 ELSE 40 END', 20.0),  # simple CASE: the first equal value
    ('CASE 1 + 1 WHEN 3 THEN 10 ELSE 40 END', 40.0),
    ('1 -- a comment\n + 2', 3.0),
    # % is PostgreSQL's numeric remainder: the sign of the dividend, at the precedence of * and /
    ('7.5 % 2', 1.5),
    ('-7 % 3', -1.0),
    ('7 % -3', 1.0),
    ('-7.5 % -2', -1.5),
    ('1 + 2 % 3 * 4', 9.0),
    ('2 * 3 % 4', 2.0),
    ('5 % 2 ^ 2', 1.0),      # ^ binds tighter
    ('7 % 10', 7.0),
    # a + or - after * / < = splits off, as PostgreSQL's lexer splits it; with a space ^ - is ^ and -
    ('2*-1', -2.0),
    ('2 ^ -1', 0.5),
    ('2^ -1', 0.5),
    ('2^(-1)', 0.5),
    ('CASE WHEN 2<-1 THEN 1 ELSE 0 END', 0.0),
    ('2+-1', 1.0),
    ('2--1', 2.0),           # -- starts a comment, as in psql
    # = and <> of two booleans
    ('CASE WHEN true = false THEN 1 ELSE 0 END', 0.0),
    ('CASE WHEN (1 > 0) <> (2 > 3) THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN true != false THEN 1 ELSE 0 END', 1.0),
    ('CASE WHEN (1 > 0) = (2 > 1) AND NOT false = true THEN 1 ELSE 0 END', 1.0),
])
def test_constant_expressions(body, expected):
    assert value(f'λ(d, w) {body}') == pytest.approx(expected, rel=1e-15)


def test_unary_minus_on_a_weight():
    assert value('λ(d, w) -w.a^2', w={'a': 3.0}) == 9.0
    assert value('λ(d, w) -(w.a^2)', w={'a': 3.0}) == -9.0


def test_identifiers_fold_to_lower_case():
    lam = parse('λ(D, W) d.X * W.A + D.x')
    assert lam.columns == ['x'] and lam.weights == ['a']
    assert value('λ(D, W) d.X * W.A', {'x': [2.0]}, {'a': 3.0}) == 6.0


def test_only_ascii_letters_fold():
    """As PostgreSQL folds an unquoted name in a multibyte encoding: A to Z, the ends included, and nothing else."""
    lam = parse('λ(d, w) w.ÀZY * d.ÉAb_9')
    assert lam.weights == ['Àzy'] and lam.columns == ['Éab_9']


def test_quoted_identifiers_keep_case():
    lam = parse('λ(d, w) d."X" - d.x + w."A" * w.a + d."a ""b"""')
    assert lam.columns == ['X', 'x', 'a "b"'] and lam.weights == ['A', 'a']
    assert value('λ(d, w) d."X" - d.x', {'X': [5.0], 'x': [2.0]}) == 3.0
    assert value('λ("D", w) "D".x', {'x': [4.0]}) == 4.0
    with pytest.raises(PgadError) as caught:
        parse('λ("D", w) d.x')  # "D" is not d
    assert caught.value.sqlstate == '42P01'


@pytest.mark.parametrize('text', [
    'λ(d, w) w.a*d.x',
    'lambda(d, w) w.a*d.x',
    'LAMBDA (d, w) w.a*d.x',
    'lambda(row, theta) theta.a*row.x',
    'λ(données, poids) poids.a*données.x',
    'λ ( d , w )  w . a * d . x',
])
def test_lambda_heads_and_parameter_names(text):
    lam = parse(text)
    assert lam.columns == ['x'] and lam.weights == ['a']
    assert value(text, {'x': [3.0]}, {'a': 2.0}) == 6.0


@pytest.mark.parametrize('text, fn', CASES)
def test_printer_round_trip(text, fn):
    """to_lambda's text of the loss and of each derivative parses back to the same values."""
    lam = parse(text)
    for mode in MODES:
        prog = program.build(text, WEIGHTS, mode)
        expected = sums(text, mode)
        for k, node in enumerate(prog.outputs):
            printed = 'λ(d, w) ' + printer.to_lambda(prog.lam, node)
            again = program.build(printed, WEIGHTS, mode, gradient=False)
            kernel = backends.compile(again, 'python')
            got = kernel([DATA[c] for c in again.columns], N, W)[0]
            np.testing.assert_allclose(got, expected[k], rtol=1e-12, atol=1e-12, err_msg=printed)
    assert lam.columns  # every case reads the data


# --- 4. shared subexpressions -------------------------------------------------------------------------------------

def test_shared_subexpression_is_one_node():
    lam = parse('λ(d,w) sin(w.a*d.x) + cos(w.a*d.x)')
    nodes = [lam.graph.nodes[i] for i in lam.graph.ancestors([lam.root])]
    muls = [n for n in nodes if n.op == 'mul']
    assert len(muls) == 1
    (sin,) = [n for n in nodes if n.op == 'sin']
    (cos,) = [n for n in nodes if n.op == 'cos']
    assert sin.args == cos.args
    assert [n.op for n in lam.graph.nodes].count('mul') == 1  # built once, not built twice and deduplicated later


def test_derivative_reuses_the_loss_nodes():
    """The gradient is built in the loss's graph: cos(w.a*d.x) in ∂/∂a is the cos node of the loss itself."""
    for mode in MODES:
        program.build.cache_clear()
        prog = program.build('λ(d,w) sin(w.a*d.x) + cos(w.a*d.x)', ('a',), mode)
        graph = prog.graph
        ops = [(n.op, n.args) for n in graph.nodes]
        assert len(ops) == len(set(ops))  # no node twice
        loss_nodes = set(graph.ancestors([prog.outputs[0]]))
        cos_node = next(i for i in loss_nodes if graph.nodes[i].op == 'cos')
        assert cos_node in graph.ancestors([prog.outputs[1]])
    program.build.cache_clear()


# --- 5. errors ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('text, sqlstate', [
    ('λ(d, w) w.a*d.x +', '42601'),                                 # trailing operator
    ('λ(d, w) w.a * * d.x', '42601'),
    ('λ(d, w) (w.a*d.x', '42601'),                                  # unclosed parenthesis
    ('λ(d, w) w.a $ d.x', '42601'),                                 # not a token
    ('λ(d, w) w.a # d.x', '42883'),                                 # an operator the language lacks
    ('λ(d, w) 2^-1', '42883'),                                      # ^- is one operator, as in PostgreSQL
    ('λ(d, w) CASE WHEN true = 1 THEN 1 ELSE 0 END', '42883'),      # boolean = number
    ('λ(d, w) CASE WHEN d.x THEN d.x ELSE 0 END', '42804'),         # a column read as a boolean and a number
    ('λ(d, w) foo(w.a)', '42883'),                                  # unknown function
    ('λ(d, w) sin(w.a, d.x)', '42883'),                             # wrong number of arguments
    ('λ(d, w) atan2(w.a)', '42883'),
    ('λ(d, w) greatest()', '42883'),
    ('λ(d, w) ln(2, w.a)', '42883'),
    ('λ(d, w) x * w.a', '42703'),                                   # bare identifier
    ('λ(d, w) q.x * w.a', '42P01'),                                 # unknown row name
    ('λ(d, w) w.a > d.x', '42804'),                                 # boolean body
    ('λ(d, w) sin(w.a > d.x)', '42804'),
    ('λ(d, w) CASE WHEN w.a THEN 1 ELSE 0 END', '42804'),           # WHEN needs a boolean
    ('λ(d, w) CASE WHEN NOT w.a THEN 1 ELSE 0 END', '42804'),
    ('λ(d, w) CASE WHEN w.a > 0 THEN 1 END', '42601'),              # CASE without ELSE
    ('λ(d, w) CASE d.x WHEN 1 THEN w.a END', '42601'),              # simple CASE without ELSE
    ('λ(d, w) CASE d.x THEN w.a ELSE 0 END', '42601'),              # no WHEN
    ('λ(d, w) CASE d.x > 0 WHEN true THEN w.a ELSE 0 END', '42804'),  # the operand is a number
    ('λ(d, w) CASE d.x WHEN d.x > 0 THEN w.a ELSE 0 END', '42804'),   # and so is each value
    ('λ(d, w) d."" * w.a', '42601'),                                # the empty identifier
    ('λ("", w) w.a', '42601'),
    ('λ(d, w) CASE WHEN 1 < 2 < 3 THEN w.a ELSE 0 END', '42601'),   # comparisons do not chain
    ('λ(d, w) CASE WHEN w.a = d.x = 1 THEN w.a ELSE 0 END', '42601'),
    ('λ(d, d) d.x', '42P08'),                                       # one name for both parameters
    ('(d, w) w.a*d.x', '42601'),                                    # no λ
    ('λ(d, w)', '42601'),                                           # no body
])
def test_errors(text, sqlstate):
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert caught.value.sqlstate == sqlstate, caught.value.message
    with pytest.raises(PgadError):  # and the same through program.build
        program.build(text, WEIGHTS, 'reverse')


def test_syntax_error_positions():
    text = 'λ(d, w) w.a*d.x +'
    with pytest.raises(PgadError) as caught:
        parse(text)
    error = caught.value
    assert error.sqlstate == '42601'
    assert error.message == 'syntax error at end of input'
    assert error.position == len(text) + 1  # 1-based: just past the end
    assert error.detail.endswith('\n' + ' ' * len(text) + '^')

    text = 'λ(d, w) w.a * * d.x'
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert caught.value.position == text.index('* d') + 1
    assert caught.value.message == 'syntax error at or near "*"'

    text = 'λ(d, w) CASE WHEN 1 < 2 < 3 THEN w.a ELSE 0 END'
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert caught.value.position == text.index('< 3') + 1

    text = 'λ(d, w) d.x "y z"'  # near a quoted identifier: its text as written, quotes included
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert (caught.value.message, caught.value.position) == ('syntax error at or near ""y z""', text.index('"') + 1)


def test_function_errors_name_the_function():
    with pytest.raises(PgadError) as caught:
        parse('λ(d, w) foo(w.a, d.x > 1)')
    assert caught.value.message == 'function foo(double precision, boolean) does not exist'
    assert caught.value.position == len('λ(d, w) ') + 1


def test_error_detail_is_the_line_with_a_caret_and_the_hint_is_kept():
    """DETAIL is the lambda's line where the error is (not the whole text, not the first line) and a caret under
    the place; HINT is passed through. Exact strings."""
    with pytest.raises(PgadError) as caught:
        parse('λ(d, w)\n  w.a * * d.x')  # the tokenizer's syntax error, on the second line
    error = caught.value
    assert (error.message, error.detail, error.hint, error.position) == (
        'syntax error at or near "*"', '  w.a * * d.x\n        ^', None, 17)
    with pytest.raises(PgadError) as caught:
        parse('λ(d, w) x * w.a\n + d.y')  # the parser's error, with a hint, on the first of two lines
    error = caught.value
    assert (error.sqlstate, error.message, error.detail, error.hint, error.position) == (
        '42703', 'column reference "x" needs a row', 'λ(d, w) x * w.a\n        ^',
        'Write d.x for a column of the data or w.x for a weight.', 9)


def test_printed_names_double_their_quotes():
    """A name with a double quote prints as PostgreSQL quotes it, so the printed derivative parses back."""
    prog = program.build('λ(d, w) w."q""r" * d."a ""b"""', ('q"r',), 'reverse')
    assert [printer.to_lambda(prog.lam, node) for node in prog.outputs] == ['w."q""r"*d."a ""b"""', 'd."a ""b"""']
    assert printer.quote_ident('say "hi"') == '"say ""hi"""'


@pytest.mark.parametrize('text, message, position', [
    ('λ(d, w) CASE d.x > 0 WHEN true THEN w.a ELSE 0 END', 'CASE operand must be double precision', 9),
    ('λ(d, w) CASE WHEN w.a THEN 1 ELSE 0 END', 'argument of CASE/WHEN must be type boolean', 14),
    ('λ(d, w) CASE d.x WHEN d.x > 0 THEN w.a ELSE 0 END', 'CASE/WHEN value must be double precision', 18),
    ('λ(d, w) CASE WHEN d.x > 0 THEN d.x > 1 ELSE 0 END', 'CASE results must be double precision', 14),
    ('λ(d, w) CASE WHEN d.x > 0 THEN 1 ELSE d.x > 1 END', 'CASE results must be double precision', 9),
])
def test_case_type_errors_say_what_postgresql_says(text, message, position):
    """PostgreSQL's own messages for a CASE of the wrong types (SQLSTATE 42804), word for word, at CASE or WHEN."""
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert (caught.value.sqlstate, caught.value.message, caught.value.position) == ('42804', message, position)


def test_case_without_else_says_what_to_add():
    with pytest.raises(PgadError) as caught:
        parse('λ(d, w) CASE WHEN w.a > 0 THEN 1 END')
    error = caught.value
    assert (error.sqlstate, error.message, error.hint, error.position) == (
        '42601', 'CASE needs an ELSE: every row must have a value', 'Add ELSE 0 (or another value) before END.', 34)


def test_a_negative_constant_prints_in_parentheses_under_a_power():
    """-2 is a unary minus in the printed text, so (-2)^w.a keeps its parentheses (-2^w.a would be -(2^w.a))."""
    lam = parse('λ(d, w) (-2)^w.a + w.a*(-3)')
    assert printer.to_lambda(lam, lam.root) == '(-2)^w.a + -3*w.a'


@pytest.mark.parametrize('body, printed', [
    ('CASE WHEN d.x > 0 AND true THEN w.a ELSE 0 END', 'CASE WHEN d.x > 0 AND TRUE THEN w.a ELSE 0 END'),
    ('CASE WHEN false OR d.x > 0 THEN w.a ELSE 0 END', 'CASE WHEN FALSE OR d.x > 0 THEN w.a ELSE 0 END'),
    ('w.a + 1e308*10', "w.a + 'Infinity'"),    # the product overflows float8 to infinity
    ('w.a*(0 - 1e308*10)', "-'Infinity'*w.a"),
    ('w.a + 0*(1e308*10)', "w.a + 'NaN'"),
])
def test_boolean_and_non_finite_constants_print_as_postgresql_writes_them(body, printed):
    """TRUE, FALSE, 'Infinity', -'Infinity' and 'NaN', exact text (pgad.derivatives and pgad.explain print these)."""
    lam = parse(f'λ(d, w) {body}')
    assert printer.to_lambda(lam, lam.root) == printed


@pytest.mark.parametrize('literal, value', [('1e308', 1e308), ('2e-320', 2e-320), ('0e999', 0.0), ('0.000e-999', 0.0),
                                            ('1.7976931348623157e308', 1.7976931348623157e308)])
def test_a_literal_float8_holds_is_its_value(literal, value):
    """float8 holds the largest double and subnormals (2e-320), as PostgreSQL's float8in does; zero is zero."""
    lam = parse(f'λ(d, w) {literal}')
    assert lam.graph.nodes[lam.root].value == value


@pytest.mark.parametrize('literal', ['1e400', '1e309', '1e-400', '1e-324', '00.10e-999'])
def test_a_literal_past_float8_is_out_of_range_as_in_postgresql(literal):
    """`SELECT '1e400'::float8` and `'1e-400'::float8` are 22003 in psql: a literal that overflows to infinity or
    underflows to zero (with a nonzero digit) is an error, not a silent Infinity or 0, with the place shown."""
    with pytest.raises(PgadError) as caught:
        parse(f'λ(d, w) w.a + {literal}')
    assert (caught.value.sqlstate, caught.value.message) == (
        '22003', f'"{literal}" is out of range for type double precision')
    assert caught.value.position == len('λ(d, w) w.a + ') + 1 and caught.value.detail.endswith('^')

@pytest.mark.parametrize('body, printed', [
    ('w.a + 0', 'w.a'), ('0 + w.a', 'w.a'), ('w.a - 0', 'w.a'),      # the identities of 0
    ('0 - w.a', '-w.a'), ('w.a - w.a', 'w.a - w.a'),                 # NaN - NaN is NaN: kept as written
    ('1 + w.a', 'w.a + 1'), ('w.a + 1', 'w.a + 1'),                  # a constant term goes last
    ('w.a + -d.x', 'w.a - d.x'), ('w.a - -d.x', 'w.a + d.x'),        # adding a negation is subtracting
    ('-d.x + w.a', '-d.x + w.a'),
    ('1*w.a', 'w.a'), ('w.a*1', 'w.a'), ('w.a*0', '0*w.a'),          # the identity of 1; NaN*0 is NaN
    ('-1*w.a', '-w.a'), ('w.a*-1', '-w.a'), ('w.a*2', '2*w.a'),      # a constant factor goes first
    ('-w.a*-d.x', 'w.a*d.x'), ('-w.a*d.x', '-(w.a*d.x)'), ('w.a*-d.x', '-(w.a*d.x)'),  # a negation goes outside
    ('2*(3*w.a)', '6*w.a'), ('2*(w.a*d.x)', '2*(w.a*d.x)'),          # constant factors multiply
    ('w.a/1', 'w.a'), ('w.a/2', 'w.a/2'), ('0/w.a', '0/w.a'),
    ('-w.a/d.x', '-(w.a/d.x)'), ('w.a/-d.x', 'w.a/(-d.x)'),
    ('- - w.a', 'w.a'),
    ('-CASE WHEN d.x > 0 THEN w.a ELSE 0 END', '-CASE WHEN d.x > 0 THEN w.a ELSE 0 END'),  # derivatives only
    ('w.a^1', 'w.a'), ('w.a^0', '1'), ('w.a^2', 'w.a^2'),
    ('CASE WHEN true THEN w.a ELSE w.b END', 'w.a'), ('CASE WHEN false THEN w.a ELSE w.b END', 'w.b'),
    ('CASE WHEN d.x > 0 THEN w.a ELSE w.a END', 'w.a'),
])
def test_arithmetic_simplifies_as_it_is_built(body, printed):
    """The DAG's rules for +, -, *, /, ^ and CASE, seen in the printed text (exact; pgad.derivatives prints
    derivatives so)."""
    lam = parse(f'λ(d, w) {body}')
    assert printer.to_lambda(lam, lam.root) == printed


def test_derivatives_drop_what_the_users_text_keeps():
    """x*0, 0/x and x - x are 0, and a negation or product goes inside a mask, in the graph derivatives are built in;
    while parsing (Graph.exact) they stay, because x may be NaN or infinite there: ln(w.a)*0 at w.a = -1 is NaN."""
    lam = parse('λ(d, w) ln(w.a)*0 + 0/w.a + (w.a - w.a) - CASE WHEN d.x > 0 THEN w.a ELSE 0 END')
    assert printer.to_lambda(lam, lam.root) == \
        '0*ln(w.a) + 0/w.a + (w.a - w.a) - CASE WHEN d.x > 0 THEN w.a ELSE 0 END'
    copied = lam.copy()
    graph = copied.graph
    a, x = graph.weight('a'), graph.column('x')
    mask = graph.apply('case', graph.apply('gt', x, 0), a, 0)
    assert [graph.nodes[e.id] for e in (a*0, 0/a, a - a)] == [graph.nodes[graph.const(0).id]] * 3
    assert printer.to_lambda(copied, (-mask).id) == 'CASE WHEN d.x > 0 THEN -w.a ELSE 0 END'
    sums = python_backend.compile(program.Program(lam, (lam.root,), ('a',)))([np.array([1.0])], 1, np.array([-1.0]))
    assert np.isnan(sums[0])


def test_a_product_of_two_negations_builds_no_node_it_does_not_use():
    """-a*-b is a*b straight away, not -(-(a*b)) by way of an unused -(a*b): pgad.explain prints the number of
    nodes and the listing, and every node counts towards pgad.max_lambda_nodes."""
    lam = parse('λ(d, w) -w.a*-d.x + d.y')
    assert len(lam.graph) == 7  # w.a, -w.a, d.x, -d.x, w.a*d.x, d.y, the sum
    assert printer.to_listing(lam.graph, [lam.root]) == (
        '%0 = weight a\n%2 = column x\n%4 = mul(%0, %2)\n%5 = column y\n%6 = add(%4, %5)   ← output')

def test_max_lambda_nodes_is_the_most_nodes_a_lambda_may_have():
    """(w.a*d.x + w.b - d.y)^2 is 9 nodes: it parses under a limit of 9, and under 8 is SQLSTATE 54001
    with the setting named in DETAIL and HINT (exact strings)."""
    text = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
    assert len(parse(text, Limits(lambda_nodes=9)).graph) == 9
    with pytest.raises(PgadError) as caught:
        parse(text, Limits(lambda_nodes=8))
    error = caught.value
    assert (error.sqlstate, error.message, error.detail, error.hint) == (
        '54001', 'lambda is too large: more than 8 expression nodes with its derivatives',
        'The limit, pgad.max_lambda_nodes, is 8.', 'Write a smaller lambda, or have a superuser raise '
                                                   'pgad.max_lambda_nodes.')

def test_folding_constants_outside_the_domain_warns_nothing():
    """1/0, ln(0), sqrt(-1), an overflow and 0/0 fold to ±Infinity and NaN without a numpy RuntimeWarning (the
    server passes every Python warning on to the client as a PostgreSQL WARNING)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        lam = parse('λ(d, w) w.a + 1/0 + ln(0) + sqrt(-1) + 1e308*10 + 0/0')
    assert [str(w.message) for w in caught] == []
    assert printer.to_lambda(lam, lam.root) == "w.a + 'Infinity' + (-'Infinity') + 'NaN' + 'Infinity' + 'NaN'"

def test_printing_stops_past_max_chars_with_54001():
    """A text of exactly max_chars prints; one character more is SQLSTATE 54001, with its DETAIL and HINT."""
    lam = parse('λ(d, w) w.a + d.x')
    assert printer.to_lambda(lam, lam.root, max_chars=9) == 'w.a + d.x'
    with pytest.raises(PgadError) as caught:
        printer.to_lambda(lam, lam.root, max_chars=8)
    error = caught.value
    assert (error.sqlstate, error.message, error.detail, error.hint) == (
        '54001', 'expression is too long to print: more than 8 characters',
        f'pgad prints at most {printer.PRINTED_PER_BYTE} times pgad.max_lambda_bytes characters in one call; '
        'the DAG shares subexpressions that the text repeats.',
        'Write a smaller lambda, or have a superuser raise pgad.max_lambda_bytes.')


_FUNCTIONS_HINT = ('The lambda language has the functions ' + ', '.join(sorted(parser.FUNCTIONS)) + ', and log(b, x).')


@pytest.mark.parametrize('text, sqlstate, message, hint', [
    ('λ(d, w) foo(w.a)', '42883', 'function foo(double precision) does not exist', _FUNCTIONS_HINT),
    ('λ(d, w) sin(w.a, d.x)', '42883', 'function sin(double precision, double precision) does not exist',
     'sin takes 1 argument.'),
    ('λ(d, w) atan2(w.a)', '42883', 'function atan2(double precision) does not exist', 'atan2 takes 2 arguments.'),
    ('λ(d, w) greatest()', '42883', 'function greatest() does not exist', 'greatest takes one or more arguments.'),
    ('λ(d, w) greatest(d.x > 0, w.a)', '42804', 'argument of greatest must be double precision, not boolean', None),
    ('λ(d, w) least(w.a, d.x > 0)', '42804', 'argument of least must be double precision, not boolean', None),
    ('λ(d, w) log(2, d.x > 0)', '42804', 'argument of log must be double precision, not boolean', None),
    ('λ(d, w) log(d.x > 0, 2)', '42804', 'argument of log must be double precision, not boolean', None),
])
def test_function_errors_say_what_the_function_takes(text, sqlstate, message, hint):
    """A call of an unknown function, with the wrong number of arguments or of the wrong type: exact message and
    HINT, at the function's name."""
    with pytest.raises(PgadError) as caught:
        parse(text)
    error = caught.value
    assert (error.sqlstate, error.message, error.hint, error.position) == (sqlstate, message, hint, 9)


@pytest.mark.parametrize('body, message, position', [
    ('CASE WHEN w.a or d.x > 0 THEN w.a ELSE 0 END', 'argument of OR must be boolean, not double precision', 23),
    ('CASE WHEN d.x > 0 and w.a THEN w.a ELSE 0 END', 'argument of AND must be boolean, not double precision', 27),
    ('CASE WHEN not w.a THEN w.a ELSE 0 END', 'argument of NOT must be boolean, not double precision', 19),
    ('w.a + (d.x > 0)', 'argument of + must be double precision, not boolean', 13),    # and each operator's
    ('w.a * (d.x > 0)', 'argument of * must be double precision, not boolean', 13),
    ('w.a ^ (d.x > 0)', 'argument of ^ must be double precision, not boolean', 13),
    ('CASE WHEN w.a < (d.x > 0) THEN 1 ELSE 0 END', 'argument of < must be double precision, not boolean', 23),
    ('-(d.x > 0)', 'argument of - must be double precision, not boolean', 9),
    ('+(d.x > 0)', 'argument of + must be double precision, not boolean', 9),
])
def test_an_argument_of_the_wrong_type_names_the_operator(body, message, position):
    """SQLSTATE 42804 at the operator, a keyword named in upper case however it is written; exact message and
    position."""
    with pytest.raises(PgadError) as caught:
        parse(f'λ(d, w) {body}')
    error = caught.value
    assert (error.sqlstate, error.message, error.hint, error.position) == ('42804', message, None, position)

HEAD_HINT = "Write the loss as a lambda of a data row and the weights, for example 'λ(d, w) (w.a*d.x + w.b - d.y)^2'."


@pytest.mark.parametrize('text, sqlstate, message, hint, position', [
    ('(d, w) w.a*d.x', '42601', 'a loss must start with λ(d, w) or lambda(d, w)', HEAD_HINT, 1),
    ('μ(d, w) w.a', '42601', 'a loss must start with λ(d, w) or lambda(d, w)', HEAD_HINT, 1),
    ('λ(d, d) d.x', '42P08', 'the data row and the weights have the same name "d"', None, 6),
])
def test_a_wrong_lambda_head_says_what_to_write(text, sqlstate, message, hint, position):
    with pytest.raises(PgadError) as caught:
        parse(text)
    error = caught.value
    assert (error.sqlstate, error.message, error.hint, error.position) == (sqlstate, message, hint, position)

@pytest.mark.parametrize('text, sqlstate, message, position', [
    ('λ(d, w) w.a $ d.x', '42601', 'syntax error at or near "$"', 13),                 # not a token
    ('λ(d, w) d."" * w.a', '42601', 'zero-length delimited identifier in lambda', 11),
    # at the operator that made the body a boolean, not at its last token
    ('λ(d, w) w.a > d.x', '42804', 'the body of a lambda must be a number, not a boolean', 13),
    ('λ(d, w) (d.x > 1)', '42804', 'the body of a lambda must be a number, not a boolean', 14),
    ('λ(d, w) d.x > 1 AND true', '42804', 'the body of a lambda must be a number, not a boolean', 17),
    ('λ(d, w) w.a + d.x <> 1', '42804', 'the body of a lambda must be a number, not a boolean', 19),
    ('λ(d, w) true', '42804', 'the body of a lambda must be a number, not a boolean', 9),
    # PostgreSQL's error for an operator that does not exist, at the operator
    ('λ(d, w) w.a # d.x', '42883', 'operator does not exist: double precision # double precision', 13),
    ('λ(d, w) 2^-1', '42883', 'operator does not exist: double precision ^- double precision', 10),
    ('λ(d, w) w.a %- 2', '42883', 'operator does not exist: double precision %- double precision', 13),
    ('λ(d, w) 1 + 2 ** 3', '42883', 'operator does not exist: double precision ** double precision', 15),
    ('λ(d, w) ^-1', '42883', 'operator does not exist: ^- double precision', 9),
    ('λ(d, w) CASE WHEN 2 !=-1 THEN 1 ELSE 0 END', '42883',
     'operator does not exist: double precision !=- double precision', 21),
    ('λ(d, w) CASE WHEN true = 1 THEN 1 ELSE 0 END', '42883', 'operator does not exist: boolean = double precision',
     24),
    ('λ(d, w) CASE WHEN 1 <> (w.a > 1) THEN 1 ELSE 0 END', '42883',
     'operator does not exist: double precision <> boolean', 21),
])
def test_errors_say_what_and_where(text, sqlstate, message, position):
    """Exact message, position (1-based) and DETAIL: the line with a caret under the place."""
    with pytest.raises(PgadError) as caught:
        parse(text)
    error = caught.value
    assert (error.sqlstate, error.message, error.detail, error.position) == (
        sqlstate, message, text + '\n' + ' ' * (position - 1) + '^', position)


@pytest.mark.parametrize('text, hint', [
    ('λ(d, w) 2^-1', 'PostgreSQL reads "^-" as one operator: write the sign in parentheses, as in 2^(-1).'),
    ('λ(d, w) 2 %+ w.a', 'PostgreSQL reads "%+" as one operator: write the sign in parentheses, as in 2%(+1).'),
    ('λ(d, w) w.a # d.x', 'The lambda language has the operators != % * + - / < <= <> = > >= @ ^, AND, OR and NOT.'),
])
def test_an_operator_that_does_not_exist_says_what_to_write(text, hint):
    """2^-1 is an error in psql (its lexer reads ^- as one operator): here too, with a HINT saying what to write."""
    with pytest.raises(PgadError) as caught:
        parse(text)
    assert (caught.value.sqlstate, caught.value.hint) == ('42883', hint)


def test_a_column_read_as_a_boolean_is_a_boolean_column():
    """A column where PostgreSQL takes a boolean (CASE WHEN, AND, OR, NOT, = with a boolean) is marked boolean in
    Lambda.columns (the loader checks and packs it) and is true where its packed value is 1; anywhere else a number."""
    text = 'λ(d, w) CASE WHEN d.f AND NOT d.g OR d.h = (d.x > 0) OR true <> d.k THEN d.x ELSE -d.x END'
    lam = parse(text)
    assert [(c, c.boolean) for c in lam.columns] == [
        ('f', True), ('g', True), ('h', True), ('x', False), ('k', True)]
    rows = {'f': [1, 1, 0, 0, 0], 'g': [0, 1, 0, 0, 0], 'h': [0, 0, 1, 0, 0], 'x': [2, 3, 5, 7, 11],
            'k': [1, 1, 1, 1, 0]}  # taken by f AND NOT g, by h = (x > 0), by true <> k; the 2nd and 4th by none
    prog = program.build(text, (), 'reverse', gradient=False)
    for backend in BACKENDS:
        kernel = backends.compile(prog, backend)
        got = kernel([np.asarray(rows[c], dtype=np.float64) for c in prog.columns], 5, np.zeros(0))[0]
        assert got == 2 - 3 + 5 - 7 + 11, backend
    printed = printer.to_lambda(lam, lam.root)
    assert printed == 'CASE WHEN d.f AND NOT d.g OR d.h = (d.x > 0) OR TRUE <> d.k THEN d.x ELSE -d.x END'
    assert [(c, c.boolean) for c in parse('λ(d, w) ' + printed).columns] == [(c, c.boolean) for c in lam.columns]


@pytest.mark.parametrize('body, position', [
    ('CASE WHEN d.f THEN d.f ELSE 0 END', 14),     # at the WHEN whose result reads it as a number
    ('d.f + CASE WHEN d.f THEN 1 ELSE 0 END', 13),  # at the + that reads it as a number
    ('CASE WHEN d.f = 1 OR d.f THEN 1 ELSE 0 END', 27),  # at the OR that reads it as a boolean
])
def test_a_column_cannot_be_both_a_number_and_a_boolean(body, position):
    with pytest.raises(PgadError) as caught:
        parse(f'λ(d, w) {body}')
    error = caught.value
    assert (error.sqlstate, error.message, error.position) == (
        '42804', 'column "f" is read both as a number and as a boolean', position)


def test_column_and_weight_names_can_be_keywords_and_have_63_bytes():
    """After the dot any word is a name, keywords too (d.end, w.case); a column name has at most NAMEDATALEN - 1 =
    63 bytes, as in PostgreSQL, and one of 64 is SQLSTATE 42622 at the name."""
    lam = parse('λ(d, w) w.case*d.end')
    assert (lam.columns, lam.weights) == (['end'], ['case'])
    assert parse(f'λ(d, w) w.a*d.{"é" * 31}x').columns == ['é' * 31 + 'x']  # 63 bytes
    name = 'é' * 32  # 64 bytes
    with pytest.raises(PgadError) as caught:
        parse(f'λ(d, w) w.a*d.{name}')
    error = caught.value
    assert (error.sqlstate, error.message, error.position) == ('42622', f'column name "{name}" is too long', 15)
    assert error.hint == ('PostgreSQL column names have at most 63 bytes: rename the column in the data query '
                          '(SELECT … AS shorter) and in the lambda.')


def test_an_unknown_row_name_says_which_names_there_are():
    """q.x where the parameters are (d, w): SQLSTATE 42P01 at q, naming both parameters; exact strings."""
    with pytest.raises(PgadError) as caught:
        parse('λ(row, theta) theta.a*q.x')
    error = caught.value
    assert (error.sqlstate, error.message, error.detail, error.hint, error.position) == (
        '42P01', '"q" is neither the data row "row" nor the weights "theta"',
        'λ(row, theta) theta.a*q.x\n' + ' ' * 22 + '^',
        'Columns are read as row.column and weights as theta.name.', 23)


@pytest.mark.parametrize('text, printed', [
    # a CASE with a constant 0 branch, or only constant branches, is a mask: products and negations in the derivatives
    # go inside it (the loss stays as written: Graph.exact)
    ('λ(d, w) d.y*CASE WHEN d.x > 0.5 THEN 0 ELSE w.a END',
     ['d.y*CASE WHEN d.x > 0.5 THEN 0 ELSE w.a END', 'CASE WHEN d.x > 0.5 THEN 0 ELSE d.y END', '0']),
    ('λ(d, w) d.y*CASE WHEN d.x > 0.5 THEN 2 ELSE 3 END*w.a',
     ['d.y*CASE WHEN d.x > 0.5 THEN 2 ELSE 3 END*w.a', 'd.y*CASE WHEN d.x > 0.5 THEN 2 ELSE 3 END', '0']),
    # any other CASE is not: the product stays outside
    ('λ(d, w) d.y*CASE WHEN d.x > 0.5 THEN w.a ELSE w.b END',
     ['d.y*CASE WHEN d.x > 0.5 THEN w.a ELSE w.b END', 'CASE WHEN d.x > 0.5 THEN d.y ELSE 0 END',
      'CASE WHEN d.x > 0.5 THEN 0 ELSE d.y END']),
    ('λ(d, w) -CASE WHEN d.x > 0.5 THEN w.a ELSE w.b END',
     ['-CASE WHEN d.x > 0.5 THEN w.a ELSE w.b END', 'CASE WHEN d.x > 0.5 THEN -1 ELSE 0 END',
      'CASE WHEN d.x > 0.5 THEN 0 ELSE -1 END']),
    ('λ(d, w) d.y*CASE WHEN d.x > 0.5 THEN w.a ELSE 2 END',
     ['d.y*CASE WHEN d.x > 0.5 THEN w.a ELSE 2 END', 'CASE WHEN d.x > 0.5 THEN d.y ELSE 0 END', '0']),
])
def test_products_go_inside_a_masking_case(text, printed):
    """The printed loss and derivatives (exact text) show which CASEs the DAG treats as masks."""
    prog = program.build(text, WEIGHTS, 'reverse')
    assert [printer.to_lambda(prog.lam, node) for node in prog.outputs] == printed


def test_prefix_operators_print_without_needless_parentheses():
    """NOT NOT c and -CASE … END print as written: a prefix operator parenthesizes only an argument that binds less."""
    for text in ('CASE WHEN NOT NOT d.x > 0 THEN w.a ELSE 0 END', '-CASE WHEN d.x > 0 THEN w.a ELSE w.b END',
                 'CASE WHEN NOT (NOT d.x > 0 OR d.y > 0) THEN w.a ELSE 0 END'):
        lam = parse(f'λ(d, w) {text}')
        assert printer.to_lambda(lam, lam.root) == text


def test_the_empty_identifier_is_postgresqls_error_at_its_place():
    text = 'λ(d, w) d."" * w.a'
    with pytest.raises(PgadError) as caught:
        parse(text)
    error = caught.value
    assert (error.sqlstate, error.message) == ('42601', 'zero-length delimited identifier in lambda')
    assert error.position == text.index('""') + 1 and error.detail == text + '\n' + ' ' * text.index('""') + '^'


def test_the_listing_shows_every_node_once_in_order():
    """printer.to_listing, as pgad.explain shows the DAG: constants as numbers, leaves by name, the output marked."""
    lam = parse('λ(d, w) 2*w.a + d.x')
    assert printer.to_listing(lam.graph, [lam.root]).split('\n') == [
        '%0 = 2', '%1 = weight a', '%2 = mul(%0, %1)', '%3 = column x', '%4 = add(%2, %3)   ← output']
