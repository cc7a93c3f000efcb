"""Lambdas of the sizes a generated loss reaches, and nestings past any sensible one: each gets an answer or a clean
PostgreSQL error, in work that grows linearly (issue 9, part 1).

No stage recurses in Python on the depth of the expression: the parser drives its levels from a list, the printer
and the differentiators walk the DAG in topological order. Nesting past parser.MAX_DEPTH levels is 54001. The work
is counted (limits.tick's units, nodes built), not timed: bench/sizes.py times the same cases for
docs/performance.md. Through SQL, every function answers these lambdas or refuses them with a SQLSTATE, and no
message or CONTEXT shows a Python exception.
"""
import json

import numpy as np
import psycopg
import pytest

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import limits, program, python_backend, server
from pgad.errors import PgadError
from pgad.lang import forward, parser, printer, reverse
from pgad.limits import Limits

from conftest import error_of

ROOMY = Limits(1 << 22, 1_000_000)
MAX = parser.MAX_DEPTH


def sum_of(n):
    """The issue's generated loss: n terms, each with a weight of its own."""
    return 'λ(d, w) ' + ' + '.join(f'w.a{i}*d.x' for i in range(n))


def product_of(n):
    """A product chain of n factors, the weights a and b in turn with the columns."""
    return 'λ(d, w) ' + '*'.join(('(w.a + d.x)', '(w.b - d.y)')[i % 2] for i in range(n))


def case_of(depth):
    """CASEs nested depth deep, each with a condition of its own: the innermost arm reads w.a, every ELSE w.b."""
    return 'λ(d, w) ' + ''.join(f'CASE WHEN d.x > {-k} THEN ' for k in range(depth)) + 'w.a*d.x' + \
        ' ELSE w.b END' * depth


def nested(depth, construct):
    """w.a inside depth levels of one construct."""
    opening, closing = {'(': ('(', ')'), 'sin': ('sin(', ')'), '-': ('- ', ''), 'not': ('NOT ', ''),
                        'case': ('CASE WHEN true THEN ', ' ELSE 0 END')}[construct]
    if construct == 'not':
        return f'λ(d, w) CASE WHEN {opening * depth}d.x > 0 THEN w.a ELSE 0 END'
    return 'λ(d, w) ' + opening * depth + 'w.a' + closing * depth


def evaluate(prog, columns, weights):
    """The loss and gradient sums of prog by the python backend (the reference) at one row."""
    rows = [np.array([v]) for v in columns]
    return python_backend.compile(prog)(rows, 1, np.array(weights, dtype=float))


# --- nesting --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('construct', ['(', 'sin', '-', 'not', 'case'])
def test_nesting_to_max_depth_parses_and_one_more_level_is_54001(construct):
    """Every construct that nests (parentheses, calls, unary minus, NOT, CASE) parses MAX_DEPTH deep, without
    Python recursion; one level more is `lambda expression is too deeply nested` with its place and a hint."""
    depth = MAX - 1 if construct == 'not' else MAX  # the CASE around NOT is a level of its own
    parser.parse(nested(depth, construct), ROOMY)
    with pytest.raises(PgadError) as caught:
        parser.parse(nested(depth + 1, construct), ROOMY)
    error = caught.value
    assert (error.sqlstate, error.message) == ('54001', 'lambda expression is too deeply nested')
    assert f'at most {MAX} levels' in error.hint and error.position is not None


def test_fifty_thousand_parentheses_are_54001_not_a_recursion_error():
    with pytest.raises(PgadError) as caught:
        parser.parse('λ(d, w) ' + '(' * 50_000 + 'w.a' + ')' * 50_000, ROOMY)
    assert caught.value.sqlstate == '54001'


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_a_3000_deep_case_differentiates_and_prints(mode):
    """The issue's 3,000 nested CASEs: ∂/∂a is d.x where every condition holds, ∂/∂b is 1 where one fails."""
    prog = program.build.__wrapped__(case_of(3000), ('a', 'b'), mode, True, ROOMY)
    assert list(evaluate(prog, [2.0], [3.0, 5.0])) == [6.0, 2.0, 0.0]
    assert list(evaluate(prog, [-1500.5], [3.0, 5.0])) == [5.0, 0.0, 1.0]
    assert list(evaluate(prog, [-3000.5], [3.0, 5.0])) == [5.0, 0.0, 1.0]
    a = printer.to_lambda(prog.lam, prog.outputs[1], printer.budget(ROOMY))  # ∂/∂b's text is quadratic: k ANDs
    assert a.startswith('CASE WHEN d.x > 0 AND ') and a.endswith(' THEN d.x ELSE 0 END') and a.count('d.x >') == 3000


def test_a_case_inside_a_case_of_the_same_condition_takes_the_same_arm():
    """CASE WHEN c THEN (CASE WHEN c THEN a ELSE b END) ELSE e END is CASE WHEN c THEN a ELSE e END, at any depth."""
    lam = parser.parse('λ(d, w) ' + 'CASE WHEN d.x > 0 THEN ' * 3000 + 'w.a' + ' ELSE w.b END' * 3000, ROOMY)
    assert printer.to_lambda(lam, lam.root) == 'CASE WHEN d.x > 0 THEN w.a ELSE w.b END'
    lam = parser.parse('λ(d, w) CASE WHEN d.x > 0 THEN w.a ELSE CASE WHEN d.x > 0 THEN w.b ELSE d.y END END')
    assert printer.to_lambda(lam, lam.root) == 'CASE WHEN d.x > 0 THEN w.a ELSE d.y END'


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_a_5000_long_chain_of_powers_differentiates(mode):
    """w.a^w.a^…^w.a, 5,000 long (left-associative: ((a^a)^a)…) is a^(a^4999): at a = 1 it is 1, and its derivative
    is 1 (∂/∂a of a^(a^k) at 1 is a^k's value, 1, times 1, plus ln 1 = 0 times the rest)."""
    prog = program.build.__wrapped__('λ(d, w) ' + '^'.join(['w.a'] * 5000), ('a',), mode, True, ROOMY)
    assert list(evaluate(prog, [], [1.0])) == [1.0, 1.0]


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_a_20000_term_sum_differentiates_to_its_columns(mode):
    n = 20_000
    prog = program.build.__wrapped__(sum_of(n), tuple(f'a{i}' for i in range(n)), mode, True, ROOMY)
    sums = evaluate(prog, [1.5], np.arange(n) / n)
    assert sums[0] == pytest.approx(1.5 * (n - 1) / 2, rel=1e-12) and set(sums[1:]) == {1.5}
    assert printer.to_lambdas(prog.lam, list(prog.outputs[1:3]), printer.budget(ROOMY)) == ['d.x', 'd.x']


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_a_20000_factor_product_differentiates(mode):
    """(a + x)^10000 (b - y)^10000 written as a chain: at a + x = 1 and b - y = 1 the derivatives are the powers."""
    prog = program.build.__wrapped__(product_of(20_000), ('a', 'b'), mode, True, ROOMY)
    assert list(evaluate(prog, [0.5, -0.5], [0.5, 0.5])) == [1.0, 10_000.0, 10_000.0]


# --- the work grows linearly ----------------------------------------------------------------------------------------

def units(work):
    """The units of work (limits.tick) that work() does."""
    counted = [0]
    original = limits.tick

    def count(n=1):
        counted[0] += n
    limits.tick = count
    try:
        work()
    finally:
        limits.tick = original
    return counted[0]


@pytest.mark.parametrize('gradient', [forward.gradient, reverse.gradient], ids=['forward', 'reverse'])
@pytest.mark.parametrize('shape', [sum_of, product_of, case_of], ids=['sum', 'product', 'case'])
def test_parsing_differentiating_and_printing_grow_linearly(gradient, shape):
    """Twice the lambda is at most about twice the work, in every stage: forward mode used to visit every node once
    per weight (a sum of n weights: n² units) and the printer to copy a chain's text at every level."""
    def work(n):
        lam = parser.parse(shape(n), ROOMY)
        grad = gradient(lam.graph, lam.root, tuple(lam.weights))
        printer.to_lambdas(lam, [lam.root, *grad.values()], printer.budget(ROOMY))
        return lam
    small, large = units(lambda: work(1000)), units(lambda: work(2000))
    assert large < 2.2 * small, (small, large)


def test_derivatives_share_one_printing_budget():
    """pgad.derivatives prints one derivative per weight, each repeating the residual: the budget is for all."""
    lam = parser.parse('λ(d, w) (w.a*d.x + w.b*d.y + w.c - d.z)^2', ROOMY)
    grad = reverse.gradient(lam.graph, lam.root, ('a', 'b', 'c'))
    texts = printer.to_lambdas(lam, list(grad.values()))
    total = sum(map(len, texts))
    assert printer.to_lambdas(lam, list(grad.values()), total) == texts
    with pytest.raises(PgadError) as caught:
        printer.to_lambdas(lam, list(grad.values()), total - 1)
    assert caught.value.sqlstate == '54001'
    assert all(len(t) < total - 1 for t in texts)  # each alone fits: it is the sum that does not


# --- internal errors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('exception, sqlstate, message', [
    (KeyError('x'), 'XX000', 'internal error in pgad'),
    (RecursionError('maximum recursion depth exceeded'), 'XX000', 'internal error in pgad'),
    (MemoryError(), '53200', 'out of memory'),
])
def test_an_unexpected_python_exception_leaves_as_a_postgresql_error(exception, sqlstate, message):
    """A bug's exception is named in DETAIL, never as the message."""
    error = server.unexpected(exception, 'gradient')
    assert (error.sqlstate, error.message) == (sqlstate, message)
    assert error.detail.startswith(f'{type(exception).__name__} in pgad.gradient') and error.hint


# --- through SQL ----------------------------------------------------------------------------------------------------

PYTHON_NAMES = ('Error:', 'Exception', 'Traceback', 'RecursionError', 'KeyError', 'IndexError', 'ValueError',
                'TypeError', 'AttributeError', 'ZeroDivisionError', 'OverflowError')


@pytest.fixture(scope='module')
def points(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE sizes AS SELECT 0.5::float8 AS x, -0.5::float8 AS y FROM generate_series(1, 20)')
    return 'sizes'


CASES = {
    'parentheses 50,000 deep': nested(50_000, '('),
    'CASE 3,000 deep': case_of(3000),
    '^ 5,000 long': 'λ(d, w) ' + '^'.join(['w.a'] * 5000),
    'sum of 20,000 terms': sum_of(20_000),
    'product of 20,000 factors': product_of(20_000),
    'unary minus 20,000 deep': nested(20_000, '-'),
}


def weights_for(text):
    names = parser.parse(text, ROOMY).weights if 'w.a0' in text else [n for n in ('a', 'b') if f'w.{n}' in text]
    return json.dumps({n: 0.5 for n in names})


@pytest.mark.parametrize('case', list(CASES))
def test_every_function_answers_or_refuses_cleanly(db, points, case):
    """Each case through pgad.derivatives and pgad.gradient in both modes: a result, or an error with a SQLSTATE
    of pgad's (54001 here: too deep, or a derivative too long to print), a message that names no Python exception,
    and no CONTEXT beyond one line; the session goes on."""
    text = CASES[case]
    calls = [('SELECT count(*) FROM pgad.derivatives(%s)', (text,))] + [
        (f"SELECT pgad.gradient(%s, %s, %s, mode => '{mode}')", (text, points, weights_for(text)))
        for mode in ('forward', 'reverse')]
    for sql, args in calls:
        try:
            assert db.execute(sql, args).fetchone()[0]
        except psycopg.Error as e:
            assert e.sqlstate == '54001', (case, sql, e.sqlstate, str(e)[:300])
            assert not any(name in str(e) for name in PYTHON_NAMES), str(e)[:300]
            assert e.diag.context is None or '\n' not in e.diag.context.strip(), e.diag.context
    assert db.execute('SELECT 1').fetchone() == (1,)


def test_1e400_is_out_of_range_as_in_psql(db, points):
    """`SELECT 1e400::float8` is 22003 in psql; in a lambda, the same, with the place of the literal."""
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x + 1e400', %s, '{\"a\": 1}')", (points,))
    assert (diag.sqlstate, diag.message_primary) == ('22003', '"1e400" is out of range for type double precision')
