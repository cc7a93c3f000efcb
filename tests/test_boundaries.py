"""Every rule at its boundary points, in every backend and both modes, against limits taken by hand (in process).

Each row of BOUNDARIES is one lambda over one row of data, at one point where a function meets the edge of its
domain, a kink, or the end of float8's range: 0 for sqrt, cbrt, ln, pow, abs, sign, relu and division; ±709 and
beyond for exp, softplus, sigmoid and cosh; ±1 for asin and acos; the axes for atan2. The expected loss and
gradient are written out by hand (the comment says how), so that both backends are checked against numbers no backend
computed. tests/test_sql.py evaluates the same rows in PostgreSQL: where PostgreSQL computes a finite value pgad.loss
returns the same one, and where PostgreSQL raises an error (ln(0), 0^-1, exp(710)) pgad raises one with its SQLSTATE
(but exp's underflow: PostgreSQL refuses exp(−746), pgad takes IEEE's 0, which sigmoid and softplus rely on).
"""
import math

import numpy as np
import pytest

from pgad import backends, program

INF, NAN = math.inf, math.nan
BACKENDS = ('python', 'llvm')
MODES = ('forward', 'reverse')
PI = math.pi


def boundary(name, body, w, x, loss, grad, sql=None, postgres=None):
    """A lambda body at weights w (a dict) over one row with d.x = x; its loss and gradient (a list in the order of
    w) by hand. sql: the body in SQL over d and w, where it is not already SQL; postgres: the SQLSTATE that
    PostgreSQL raises at this point, where it raises one."""
    return pytest.param(body, w, x, loss, grad, sql, postgres, id=name)


BOUNDARIES = [
    # pow: 0^p = 0 for p > 0, so ∂/∂p = 0 there; x^0 = 1, so ∂/∂x = 0 there; 0^0 = 1 as in PostgreSQL
    boundary('pow-zero-base', 'd.x^w.p', {'p': 2.0}, 0.0, 0.0, [0.0]),
    boundary('pow-zero-base-root', 'd.x^w.p', {'p': 0.5}, 0.0, 0.0, [0.0]),
    boundary('pow-zero-base-zero-power', 'd.x^w.p', {'p': 0.0}, 0.0, 1.0, [0.0]),
    boundary('pow-zero-base-negative-power', 'd.x^w.p', {'p': -1.0}, 0.0, INF, [0.0], postgres='2201F'),
    boundary('pow-one-base', 'd.x^w.p', {'p': 3.0}, 1.0, 1.0, [0.0]),  # ∂/∂p = 1·ln 1
    boundary('pow-zero-power', 'w.a^d.x', {'a': 0.0}, 0.0, 1.0, [0.0]),
    boundary('pow-zero-weight-linear', 'w.a^d.x', {'a': 0.0}, 1.0, 0.0, [1.0]),
    boundary('pow-zero-weight-square', 'w.a^d.x', {'a': 0.0}, 2.0, 0.0, [0.0]),
    boundary('pow-zero-weight-root', 'w.a^d.x', {'a': 0.0}, 0.5, 0.0, [INF]),  # ½·0^(−½)
    boundary('pow-negative-base-odd', 'w.a^d.x', {'a': -2.0}, 3.0, -8.0, [12.0]),  # 3·(−2)²
    boundary('pow-negative-base-fraction', 'w.a^d.x', {'a': -2.0}, 0.5, NAN, [NAN], postgres='2201F'),
    # roots at 0: the derivative is +∞ (one-sided)
    boundary('sqrt-zero', 'sqrt(w.a)', {'a': 0.0}, 0.0, 0.0, [INF]),
    boundary('sqrt-negative', 'sqrt(w.a)', {'a': -1.0}, 0.0, NAN, [NAN], postgres='2201F'),
    boundary('cbrt-zero', 'cbrt(w.a)', {'a': 0.0}, 0.0, 0.0, [INF]),
    boundary('cbrt-negative', 'cbrt(w.a)', {'a': -8.0}, 0.0, -2.0, [1 / 12]),  # 1/(3·(−2)²)
    # logarithms at 0 and below
    boundary('ln-zero', 'ln(w.a)', {'a': 0.0}, 0.0, -INF, [INF], postgres='2201E'),
    boundary('ln-data-zero', 'w.a*ln(d.x)', {'a': 1.0}, 0.0, -INF, [-INF], postgres='2201E'),
    boundary('ln-negative', 'ln(w.a)', {'a': -1.0}, 0.0, NAN, [-1.0], postgres='2201E'),
    boundary('log10-zero', 'log(w.a)', {'a': 0.0}, 0.0, -INF, [INF], postgres='2201E'),
    # kinks: abs'(0) = sign'(x) = relu'(0) = 0, and sign(0) = 0 as in PostgreSQL
    boundary('abs-zero', 'abs(w.a)', {'a': 0.0}, 0.0, 0.0, [0.0]),
    boundary('sign-zero', 'sign(d.x) + sign(w.a)', {'a': 0.0}, 0.0, 0.0, [0.0]),
    boundary('sign-both-sides', 'sign(d.x) + 2*sign(w.a)', {'a': -0.5}, 3.0, -1.0, [0.0]),
    boundary('relu-zero', 'relu(w.a)', {'a': 0.0}, 0.0, 0.0, [0.0], sql='greatest(w.a, 0)'),
    boundary('relu-data-zero', 'w.a*relu(d.x)', {'a': 2.0}, 0.0, 0.0, [0.0], sql='w.a*greatest(d.x, 0)'),
    # division by 0: PostgreSQL's error; in IEEE arithmetic 1/0 = ∞ and ∂(1/a)/∂a = −1/a² = −∞
    boundary('div-zero', 'd.x / w.a', {'a': 0.0}, 1.0, INF, [-INF], postgres='22012'),
    # exp at the end of float8's range: e^709 is finite, e^710 is not; e^−746 underflows to 0
    boundary('exp-709', 'exp(w.a)', {'a': 709.0}, 0.0, math.exp(709), [math.exp(709)]),
    boundary('exp-710', 'exp(w.a)', {'a': 710.0}, 0.0, INF, [INF], postgres='22003'),
    boundary('exp-minus-746', 'exp(w.a)', {'a': -746.0}, 0.0, 0.0, [0.0], postgres='22003'),  # PG: underflow
    # softplus(x) = ln(1 + e^x) = x + ln(1 + e^−x): x beyond 709 stays finite; its derivative is sigmoid
    boundary('softplus-800', 'softplus(w.a)', {'a': 800.0}, 0.0, 800.0, [1.0],
             sql='greatest(w.a, 0) + ln(1 + exp(-abs(w.a)))', postgres='22003'),  # PG: exp(-800) underflows
    boundary('softplus-710', 'softplus(w.a)', {'a': 710.0}, 0.0, 710.0, [1.0],
             sql='greatest(w.a, 0) + ln(1 + exp(-abs(w.a)))'),
    boundary('softplus-minus-700', 'softplus(w.a)', {'a': -700.0}, 0.0, math.exp(-700), [math.exp(-700)],
             sql='greatest(w.a, 0) + ln(1 + exp(-abs(w.a)))'),
    boundary('softplus-zero', 'softplus(w.a)', {'a': 0.0}, 0.0, math.log(2), [0.5],
             sql='greatest(w.a, 0) + ln(1 + exp(-abs(w.a)))'),
    # sigmoid(x) = 1/(1 + e^−x): 1 and 0 at ±800 without overflow, σ' = σ(1 − σ) = 0 there; σ(−700) ≈ e^−700
    boundary('sigmoid-800', 'sigmoid(w.a)', {'a': 800.0}, 0.0, 1.0, [0.0], sql='1 / (1 + exp(-w.a))',
             postgres='22003'),
    boundary('sigmoid-minus-800', 'sigmoid(w.a)', {'a': -800.0}, 0.0, 0.0, [0.0], sql='exp(w.a) / (1 + exp(w.a))',
             postgres='22003'),
    boundary('sigmoid-minus-700', 'sigmoid(w.a)', {'a': -700.0}, 0.0, math.exp(-700), [math.exp(-700)],
             sql='exp(w.a) / (1 + exp(w.a))'),
    boundary('sigmoid-zero', 'sigmoid(w.a)', {'a': 0.0}, 0.0, 0.5, [0.25], sql='1 / (1 + exp(-w.a))'),
    boundary('tanh-800', 'tanh(w.a)', {'a': 800.0}, 0.0, 1.0, [0.0]),
    boundary('cosh-800', 'cosh(w.a)', {'a': 800.0}, 0.0, INF, [INF]),  # PostgreSQL's cosh gives Infinity
    # asin and acos at ±1: the value is the end of the range, the derivative ±∞; beyond ±1 no value
    boundary('asin-one', 'asin(w.a)', {'a': 1.0}, 0.0, PI / 2, [INF]),
    boundary('asin-minus-one', 'asin(w.a)', {'a': -1.0}, 0.0, -PI / 2, [INF]),
    boundary('acos-one', 'acos(w.a)', {'a': 1.0}, 0.0, 0.0, [-INF]),
    boundary('acos-minus-one', 'acos(w.a)', {'a': -1.0}, 0.0, PI, [-INF]),
    boundary('asin-beyond-one', 'asin(w.a)', {'a': 1.5}, 0.0, NAN, [NAN], postgres='22003'),
    # atan2 on the axes: ∂/∂y = x/(x²+y²), ∂/∂x = −y/(x²+y²); at the origin the angle is 0 and no derivative exists
    boundary('atan2-positive-x-axis', 'atan2(w.y, w.x)', {'y': 0.0, 'x': 2.0}, 0.0, 0.0, [0.5, 0.0]),
    boundary('atan2-negative-x-axis', 'atan2(w.y, w.x)', {'y': 0.0, 'x': -2.0}, 0.0, PI, [-0.5, 0.0]),
    boundary('atan2-positive-y-axis', 'atan2(w.y, w.x)', {'y': 2.0, 'x': 0.0}, 0.0, PI / 2, [0.0, -0.5]),
    boundary('atan2-origin', 'atan2(w.y, w.x)', {'y': 0.0, 'x': 0.0}, 0.0, 0.0, [NAN, NAN]),
    boundary('atan-far', 'atan(w.a)', {'a': 1e300}, 0.0, PI / 2, [0.0]),  # 1/(1 + 1e600) = 0
    # comparisons at a tie: d.x = w.a, so <, > and <> are false and <=, >=, = true (the branch taken, its gradient)
    *(boundary(f'{name}-tie', f'CASE WHEN d.x {op} w.a THEN 3*w.a ELSE 5*w.a END', {'a': 0.5}, 0.5,
               (3 if holds else 5) * 0.5, [3.0 if holds else 5.0])
      for name, op, holds in [('lt', '<', False), ('le', '<=', True), ('gt', '>', False), ('ge', '>=', True),
                              ('eq', '=', True), ('ne', '<>', False)]),
]


def per_row(body, w, x, mode, backend):
    """[loss, ∂loss/∂w…] of the lambda over the one row d.x = x."""
    prog = program.build(f'λ(d, w) {body}', tuple(w), mode)
    kernel = backends.compile(prog, backend)
    columns = [np.array([x], dtype=np.float64) for _ in prog.columns]
    return kernel(columns, 1, np.array(list(w.values()), dtype=np.float64))


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('body, w, x, loss, grad, sql, postgres', BOUNDARIES)
def test_boundary_matches_the_limit_by_hand(body, w, x, loss, grad, sql, postgres, mode, backend):
    result = per_row(body, w, x, mode, backend)
    # exact where the answer is 0, ±∞ or NaN; else to the last few bits (libm's exp is within 1 ulp)
    np.testing.assert_allclose(result, [loss, *grad], rtol=1e-14, atol=0, equal_nan=True)


def test_the_issue_case_trains():
    """λ(d, w) d.x^w.p over data with a 0 has a finite gradient at every p > 0 (it was NaN: 0·ln 0)."""
    x = np.array([0.0, 0.5, 1.0, 2.0])
    for backend in BACKENDS:
        for mode in MODES:
            prog = program.build('λ(d, w) d.x^w.p', ('p',), mode)
            sums = backends.compile(prog, backend)([x], 4, np.array([1.5]))
            np.testing.assert_allclose(sums, [np.sum(x ** 1.5), np.sum(x[1:] ** 1.5 * np.log(x[1:]))], rtol=1e-14)
