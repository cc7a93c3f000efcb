"""Naming the operation that left its domain (pgad/domain.py), in process: PostgreSQL's error where PostgreSQL has one,
the expression and the values it read, the branch a CASE took, and the row found past the first block."""
import numpy as np
import pytest

from pgad import backends, domain, program
from pgad.models import descent
from pgad.errors import PgadError
from pgad.loader import Table


def error(text, x, w, weights=('a',), mode='reverse'):
    """The PgadError that descent.run raises at the starting weights w over the rows d.x = x."""
    prog = program.build(text, weights, mode)
    table = Table([np.array(x, dtype=np.float64)] * len(prog.columns), len(x), 0)
    with pytest.raises(PgadError) as caught:
        descent.run(backends.compile(prog, 'python'), table, np.array(w, dtype=np.float64), 0.1, 5, list(weights),
                    lambda: None, print, why=lambda at, output: domain.diagnose(prog, table, at, output))
    return caught.value


@pytest.mark.parametrize('text, x, w, sqlstate, message, detail', [
    ('λ(d, w) w.a*ln(d.x)', [0.5, 0.0, 2.0], [1.0], '2201E', 'cannot take logarithm of zero',
     'ln(d.x) = -Infinity where d.x = 0'),
    ('λ(d, w) log(d.x - w.a)', [2.0, 0.5], [1.0], '2201E', 'cannot take logarithm of a negative number',
     'log(d.x - w.a) = NaN where d.x = 0.5, w.a = 1'),
    ('λ(d, w) (w.a - sqrt(d.x - 1))^2', [2.0, 0.5], [1.0], '2201F', 'cannot take square root of a negative number',
     'sqrt(d.x - 1) = NaN where d.x = 0.5'),
    ('λ(d, w) w.a / d.x', [1.0, 0.0], [0.5], '22012', 'division by zero', 'w.a/d.x = Infinity where w.a = 0.5, d.x = 0'),
    ('λ(d, w) d.x^w.a', [1.0, 0.0], [-1.0], '2201F', 'zero raised to a negative power is undefined',
     'd.x^w.a = Infinity where d.x = 0, w.a = -1'),
    ('λ(d, w) (d.x - w.a)^0.5', [1.0, -1.0], [0.5], '2201F',
     'a negative number raised to a non-integer power yields a complex result', '(d.x - w.a)^0.5 = NaN'),
    ('λ(d, w) asin(w.a*d.x)', [0.5, 3.0], [0.5], '22003', 'input is out of range', 'asin(w.a*d.x) = NaN'),
    ('λ(d, w) acos(w.a*d.x)', [0.5, -3.0], [0.5], '22003', 'input is out of range', 'acos(w.a*d.x) = NaN'),
    ('λ(d, w) exp(w.a*d.x)', [1.0, 1500.0], [0.5], '22003', 'value out of range: overflow',
     'exp(w.a*d.x) = Infinity where w.a = 0.5, d.x = 1500'),
    ('λ(d, w) w.a*d.x*d.x', [1.0, 1e200], [0.5], '22003', 'value out of range: overflow', '= Infinity'),
    # the branch the row took, not the one it did not
    ('λ(d, w) CASE WHEN d.x > 0 THEN ln(d.x) ELSE asin(w.a + d.x) END', [1.0, 0.0, -3.0], [0.5], '22003',
     'input is out of range', 'asin(w.a + d.x) = NaN where d.x = -3, w.a = 0.5'),
    # a derivative: PostgreSQL never evaluates it, so the error is pgad's, naming the expression
    ('λ(d, w) sqrt(w.a*d.x)', [0.0, 1.0], [0.0], '22003', 'the gradient by "a" is infinite at the starting weights',
     'The first value that is infinite: 0.5/sqrt(w.a*d.x) = Infinity where w.a = 0, d.x = 0.'),
    ('λ(d, w) asin(w.a)*d.x', [1.0], [1.0], '22003', 'the gradient by "a" is infinite at the starting weights',
     '= Infinity where w.a = 1'),
])
def test_the_error_names_the_operation(text, x, w, sqlstate, message, detail):
    for mode in ('forward', 'reverse'):
        caught = error(text, x, w, mode=mode)
        assert (caught.sqlstate, caught.message) == (sqlstate, message)
        assert detail in caught.detail


def test_a_nan_in_the_data_is_named_as_such():
    caught = error('λ(d, w) w.a*d.x', [1.0, np.nan], [1.0])
    assert (caught.sqlstate, caught.message) == ('22000', 'column "x" of the data is NaN')
    assert caught.detail == ("Row 2 of the rows the lambda reads (the data's rows without NULL in them, in the order "
                             "the data query gives) has x = NaN.")


def test_the_bad_row_is_found_past_the_first_block(monkeypatch):
    monkeypatch.setattr(domain, 'BLOCK_VALUES', 16)
    x = np.ones(1000)
    x[777] = 0.0
    caught = error('λ(d, w) w.a*ln(d.x)', x, [1.0])
    assert caught.message == 'cannot take logarithm of zero'
    x[777] = np.inf  # the row is counted from the first, past the first block
    caught = error('λ(d, w) w.a*d.x', x, [1.0])
    assert caught.message == 'column "x" of the data is Infinity' and caught.detail.startswith('Row 778 of ')


def test_a_long_expression_is_not_printed_whole():
    body = ' + '.join(f'w.a*d.x^{k}' for k in range(1, 60))
    caught = error(f'λ(d, w) ln({body})', [0.0], [1.0])
    assert caught.message == 'cannot take logarithm of zero' and 'an expression of' in caught.detail
