"""The objective stage on its own (no server): model and loss → one lambda, and the loss lambda's parse errors."""
from dataclasses import replace

import numpy as np
import pytest

from pgad import backends, program
from pgad.models import objective
from pgad.errors import PgadError
from pgad.limits import DEFAULT
from pgad.loader import Table

MODEL = 'λ(d, w) w.a*d.x + w.b'


@pytest.mark.parametrize('loss, text', [
    ('squared', 'λ(d, w) (w.a*d.x + w.b - d.y)^2'),
    ('absolute', 'λ(d, w) abs(w.a*d.x + w.b - d.y)'),
    ('logistic', 'λ(d, w) softplus(w.a*d.x + w.b) - d.y*(w.a*d.x + w.b)'),
    ('hinge', 'λ(d, w) relu(1 - d.y*(w.a*d.x + w.b))'),
    ('λ(p, r) (p - r.price)^2 + 0.1*abs(p)', 'λ(d, w) (w.a*d.x + w.b - d.price)^2 + 0.1*abs(w.a*d.x + w.b)'),
    ('LAMBDA(prediction, row) ln(cosh(prediction - row.y))', 'λ(d, w) ln(cosh(w.a*d.x + w.b - d.y))'),
])
def test_the_objective_is_the_loss_of_the_prediction(loss, text):
    assert objective.build(MODEL, loss, 'y', DEFAULT).text == text


def test_the_columns_the_model_reads_come_first_and_the_loss_keeps_its_own():
    goal = objective.build('λ(d, w) w.b*d.rooms + w.a*d.sqft', 'λ(p, d) (p - d.price)^2 * d.rooms', 'y', DEFAULT)
    assert goal.columns == ('rooms', 'sqft') and goal.loss_columns == ('price', 'rooms')
    assert goal.model.columns == ['rooms', 'sqft'] and goal.model.weights == ['b', 'a']  # the model, parsed
    assert objective.build(MODEL, 'squared', 'Price', DEFAULT).text.endswith('- d."Price")^2')


def test_the_logistic_loss_is_the_cross_entropy_without_overflow():
    goal = objective.build('λ(d, w) w.a*d.x', 'logistic', 'y', DEFAULT)
    kernel = backends.compile(program.build(goal.text, ('a',), gradient=False), 'python')
    x, y = np.array([-800.0, -1.0, 0.0, 2.0, 800.0]), np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    per_row = [kernel([x[k:k + 1], y[k:k + 1]], 1, np.array([1.0]))[0] for k in range(5)]
    p = 1 / (1 + np.exp(-x[1:4]))
    expected = -(y[1:4] * np.log(p) + (1 - y[1:4]) * np.log(1 - p))
    assert per_row[1:4] == pytest.approx(expected, rel=1e-12)
    assert per_row[0] == 0 and per_row[4] == 0  # log(1 + e^-800): no overflow, no NaN


@pytest.mark.parametrize('loss, sqlstate, message', [
    ('quadratic', '22023', 'unknown loss "quadratic"'),
    ('λ(p, d) (p - d.y)^2 + w.a', '42P01', '"w" is not the data row "d"'),
    ('λ(p, d) p.x', '42809', '"p" is the prediction, a number: it has no field "x"'),
    ('λ(p, p) p', '42P08', 'the data row and the prediction have the same name "p"'),
    ('λ(p, d) q', '42703', 'column reference "q" needs a row'),
    ('λ(p, d) p > 0', '42804', 'the body of a lambda must be a number, not a boolean'),
    ('λ(p, d) (p - d.y', '42601', 'syntax error at end of input'),
    ('lambda p', '42601', 'syntax error at or near "p"'),
])
def test_a_bad_loss_is_a_clear_error(loss, sqlstate, message):
    with pytest.raises(PgadError) as caught:
        objective.build(MODEL, loss, 'y', DEFAULT)
    assert (caught.value.sqlstate, caught.value.message) == (sqlstate, message)


def test_an_unknown_loss_hints_at_the_names_and_the_lambda():
    with pytest.raises(PgadError) as caught:
        objective.build(MODEL, 'quadratic', 'y', DEFAULT)
    assert caught.value.hint == ("loss is 'squared', 'absolute', 'logistic', 'hinge', 'poisson', 'gamma', 'huber' "
                                 "('huber(1.35)'), 'quantile' ('quantile(0.9)'), 'softmax' or a lambda λ(p, d) of the "
                                 "prediction p and the row d, for example 'λ(p, d) (p - d.y)^2'.")


@pytest.mark.parametrize('model, loss', [
    ('λ(d, w) ' + ' + '.join(f'w.a{k}*d.x' for k in range(30)), 'squared'),  # the model past the limit
    (MODEL, 'λ(p, d) ' + ' + '.join(f'(p - d.y{k})^2' for k in range(30))),  # the loss past it
    (MODEL, 'λ(p, d) (p - d.y)^2' + ' ' * 2000),  # the loss's text past pgad.max_lambda_bytes
])
def test_the_limits_bound_the_model_and_the_loss(model, loss):
    small = replace(DEFAULT, lambda_nodes=60, lambda_bytes=1000)
    with pytest.raises(PgadError) as caught:
        objective.build(model, loss, 'y', small)
    assert caught.value.sqlstate == '54001'


def test_the_objective_printed_is_bounded_too():
    """A loss that reads p 40 times prints the model 40 times: past 16 characters a byte of pgad.max_lambda_bytes,
    although each text and the DAG are small."""
    model = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.e*d.x4 + w.f'
    loss = 'λ(p, d) ' + '*'.join(['p'] * 40)
    small = replace(DEFAULT, lambda_bytes=100)
    assert len(model.encode()) < 100 and len(loss) < 100
    with pytest.raises(PgadError) as caught:
        objective.build(model, loss, 'y', small)
    assert caught.value.sqlstate == '54001'
    assert objective.build(model, loss, 'y', replace(DEFAULT, lambda_bytes=1000)).text.count('w.a*d.x1') == 40


def test_a_bare_name_in_a_loss_hints_at_the_row_and_the_prediction():
    with pytest.raises(PgadError) as caught:
        objective.build(MODEL, 'λ(p, d) (p - y)^2', 'y', DEFAULT)
    assert caught.value.hint == 'Write d.y for a column of the data or p for the prediction.'
    assert caught.value.position == 14


def test_training_on_the_objective_is_training_on_the_written_out_lambda():
    goal = objective.build(MODEL, 'squared', 'y', DEFAULT)
    x = np.linspace(0, 1, 11)
    table = Table([x, 3 * x - 1], 11, 0)
    ours = backends.compile(program.build(goal.text, ('a', 'b')), 'python')
    theirs = backends.compile(program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2', ('a', 'b')), 'python')
    w = np.array([0.5, 0.25])
    assert np.array_equal(ours(table.columns, 11, w), theirs(table.columns, 11, w))
