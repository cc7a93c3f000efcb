"""The argument checks of pgad.arguments on their own (no server): the value each returns, and each refusal's
SQLSTATE, message, detail and hint, word for word."""
import numpy as np
import pytest

from pgad import arguments
from pgad.errors import PgadError
from pgad.lang import parse

ALL_OPTIONS = ('learning_rate', 'iterations', 'mode', 'backend')
ALL_EXAMPLE = 'Write the options as {"learning_rate": 0.05, "iterations": 100, "mode": "reverse", "backend": "auto"}.'
WEIGHTS_HINT = ('Write the weights as {"a": 0, "b": 0}; a vector as [1, 2, 3], a matrix as [[1, 2], [3, 4]] '
                '(rows).')
PAST_FLOAT8 = '1' + '0' * 400  # jsonb writes 1e400 as this integer


def refusal(check, *args):
    """(sqlstate, message, detail, hint) of the PgadError that check(*args) raises."""
    with pytest.raises(PgadError) as caught:
        check(*args)
    error = caught.value
    return error.sqlstate, error.message, error.detail, error.hint


@pytest.mark.parametrize('text, lam, expected', [
    ('{"a": 1, "b": 0.5}', 'λ(d, w) w.a*d.x + w.b', {'a': 1.0, 'b': 0.5}),
    ('{"a": 1, "c": -2}', 'λ(d, w) w.a*d.x', {'a': 1.0, 'c': -2.0}),
])
def test_weights_are_floats(text, lam, expected):
    weights = arguments.weights(text, parse(lam))
    assert weights == expected and all(type(v) is float for v in weights.values())


def test_vector_and_matrix_weights_are_arrays():
    weights = arguments.weights('{"m": [[1, 2, 3], [4, 5, 6]], "v": [0.5, -1], "c": 2}', parse('λ(d, w) w.c'))
    assert weights['m'].shape == (2, 3) and weights['m'][1, 0] == 4.0 and weights['m'].dtype == np.float64
    assert weights['v'].tolist() == [0.5, -1.0] and weights['c'] == 2.0


@pytest.mark.parametrize('text, lam, message, detail, hint', [
    ('[1, 2]', 'λ(d, w) w.a*d.x + w.b', 'weights must be a JSON object of numbers', 'The weights are [1, 2].',
     WEIGHTS_HINT),
    ('{"a": "1"}', 'λ(d, w) w.a*d.x', 'weight "a" must be a number, not "1"', None, WEIGHTS_HINT),
    ('{"a": true}', 'λ(d, w) w.a*d.x', 'weight "a" must be a number, not true', None, WEIGHTS_HINT),
    # an integer past float8's range, as PostgreSQL writes a float8
    (f'{{"a": {PAST_FLOAT8}}}', 'λ(d, w) w.a*d.x', 'weight "a" is not a finite double precision number',
     'It is 1e+400.', None),
    # a decimal past float8's range (jsonb keeps its fraction) is -inf to json: short, so no ellipsis
    (f'{{"a": -{PAST_FLOAT8}.5}}', 'λ(d, w) w.a*d.x', 'weight "a" is not a finite double precision number',
     'It is -Infinity.', None),
    ('{"a": 0.5, "c": 1}', 'λ(d, w) w.a*d.x + w.b', 'weight "b" is not in the weights', 'The weights are: "a", "c".',
     'Give every weight the lambda reads a starting value: {"a": 0.5, "c": 1, "b": 0}.'),
    ('{}', 'λ(d, w) w.a*d.x', 'weight "a" is not in the weights', 'The weights are: none.',
     'Give every weight the lambda reads a starting value: {"a": 0}.'),
    # vectors and matrices
    ('{"a": []}', 'λ(d, w) w.a*d.x', 'weight "a" is an empty array', None, WEIGHTS_HINT),
    ('{"a": [[]]}', 'λ(d, w) w.a*d.x', 'weight "a" is an empty array', None, WEIGHTS_HINT),
    ('{"a": [1, "2"]}', 'λ(d, w) w.a*d.x', 'weight "a" must be a number, not "2"', None, WEIGHTS_HINT),
    ('{"a": [[1, 2], [3]]}', 'λ(d, w) w.a*d.x', 'weight "a" must be a matrix whose rows have one length',
     'Its rows have: 2, 1.', WEIGHTS_HINT),
    ('{"a": [[1, 2], 3]}', 'λ(d, w) w.a*d.x', 'weight "a" must be a matrix whose rows have one length',
     'Its rows have: 2, a number.', WEIGHTS_HINT),
    ('{"a": [[[1]]]}', 'λ(d, w) w.a*d.x', 'weight "a" must be a number, not [1]', None, WEIGHTS_HINT),
    ('{"a": [1, 1e400]}', 'λ(d, w) w.a*d.x', 'weight "a" is not a finite double precision number', 'It is Infinity.',
     None),
])
def test_bad_weights_are_refused(text, lam, message, detail, hint):
    assert refusal(arguments.weights, text, parse(lam)) == ('22023', message, detail, hint)


@pytest.mark.parametrize('check, value', [
    (arguments.mode, 'forward'), (arguments.mode, 'reverse'),
    (arguments.backend, 'auto'), (arguments.backend, 'python'), (arguments.backend, 'llvm'),
])
def test_good_modes_and_backends_are_returned(check, value):
    assert check(value) == value


@pytest.mark.parametrize('value, expected', [(1, 1.0), (1e-300, 1e-300), (1e308, 1e308)])
def test_a_positive_learning_rate_is_a_float(value, expected):
    assert arguments.learning_rate(value) == expected and type(arguments.learning_rate(value)) is float


@pytest.mark.parametrize('check, value, message, hint', [
    (arguments.mode, 'sideways', 'unknown mode "sideways"', "mode is 'forward' or 'reverse'."),
    (arguments.backend, 'abacus', 'unknown backend "abacus"', "backend is 'auto', 'python', 'llvm' or 'cuda'."),
    (arguments.learning_rate, 0.0, 'learning_rate must be a positive number, not 0', None),
    (arguments.learning_rate, -1.0, 'learning_rate must be a positive number, not -1', None),
    (arguments.learning_rate, float('inf'), 'learning_rate must be a positive number, not Infinity', None),
    (arguments.learning_rate, float('nan'), 'learning_rate must be a positive number, not NaN', None),
])
def test_bad_arguments_are_refused(check, value, message, hint):
    assert refusal(check, value) == ('22023', message, None, hint)


@pytest.mark.parametrize('value, shown', [
    # as PostgreSQL 15 prints each as float8 (SELECT 0::float8, '-0'::float8, 1e-5::float8, …)
    (0, '0'), (0.0, '0'), (-0.0, '-0'), (-1.0, '-1'), (0.05, '0.05'), (1e-05, '1e-05'), (0.0001, '0.0001'),
    (123456789012345.0, '123456789012345'), (1e15, '1e+15'), (1.5e15, '1.5e+15'), (1e-310, '1e-310'),
    (12345678901234567890123, '1.2345678901234568e+22'), (float('inf'), 'Infinity'), (float('-inf'), '-Infinity'),
    (float('nan'), 'NaN'), (int(PAST_FLOAT8), '1e+400'), (-int(PAST_FLOAT8), '-1e+400'),
])
def test_numbers_in_messages_read_as_postgresql_prints_them(value, shown):
    assert arguments.float8(value) == shown


@pytest.mark.parametrize('text, names, expected', [
    (None, (), {}),
    (None, ('mode', 'backend'), {'mode': 'reverse', 'backend': 'auto'}),
    ('{"learning_rate": 1, "iterations": 2147483647}', ALL_OPTIONS,
     {'learning_rate': 1.0, 'iterations': 2147483647, 'mode': 'reverse', 'backend': 'auto'}),
    ('{"mode": "forward", "backend": "llvm"}', ('mode', 'backend'), {'mode': 'forward', 'backend': 'llvm'}),
    (None, ('backend', 'dtype'), {'backend': 'auto', 'dtype': 'float64'}),
    ('{"backend": "cuda", "dtype": "float32"}', ('backend', 'dtype'), {'backend': 'cuda', 'dtype': 'float32'}),
])
def test_options_are_filled_in_with_the_defaults(text, names, expected):
    assert arguments.options(text, 'pgad.gradient_descent_agg', names) == expected


@pytest.mark.parametrize('text, aggregate, names, message, detail, hint', [
    ('[1]', 'pgad.loss_agg', (), 'options must be a JSON object', 'The options are [1].',
     'pgad.loss_agg takes no options.'),
    ('[1]', 'pgad.gradient_agg', ('mode', 'backend'), 'options must be a JSON object', 'The options are [1].',
     'Write the options as {"mode": "reverse", "backend": "auto"}.'),
    ('{"iterations": 2147483648}', 'pgad.gradient_descent_agg', ALL_OPTIONS,
     'option "iterations" must be an integer, not 2147483648', None, ALL_EXAMPLE),
    # the value is cut to 40 characters of its JSON
    ('{"iterations": "' + 'x' * 50 + '"}', 'pgad.gradient_descent_agg', ALL_OPTIONS,
     'option "iterations" must be an integer, not "' + 'x' * 39, None, ALL_EXAMPLE),
    # each option is then checked as the function's argument is
    ('{"learning_rate": 0}', 'pgad.gradient_descent_agg', ALL_OPTIONS,
     'learning_rate must be a positive number, not 0', None, None),
    # jsonb writes 1e400 as an integer of 401 digits: past float8, infinite
    ('{"learning_rate": 1' + '0' * 400 + '}', 'pgad.gradient_descent_agg', ALL_OPTIONS,
     'learning_rate must be a positive number, not Infinity', None, None),
    ('{"mode": "sideways"}', 'pgad.gradient_agg', ('mode', 'backend'), 'unknown mode "sideways"', None,
     "mode is 'forward' or 'reverse'."),
    ('{"backend": "abacus"}', 'pgad.gradient_agg', ('mode', 'backend'), 'unknown backend "abacus"', None,
     "backend is 'auto', 'python', 'llvm' or 'cuda'."),
    # dtype float32 is the cuda backend's (and auto's, where it picks cuda)
    ('{"backend": "llvm", "dtype": "float32"}', 'pgad.gradient_agg', ('backend', 'dtype'),
     'dtype "float32" is not available on backend "llvm"', None,
     "The python and llvm backends compute in float64: use backend => 'cuda' for float32."),
    ('{"dtype": "half"}', 'pgad.gradient_agg', ('backend', 'dtype'), 'unknown dtype "half"', None,
     "dtype is 'float64' or 'float32'."),
])
def test_bad_options_are_refused(text, aggregate, names, message, detail, hint):
    assert refusal(arguments.options, text, aggregate, names) == ('22023', message, detail, hint)
