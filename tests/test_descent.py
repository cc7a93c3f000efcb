"""The descent loop on its own (no server): iterations, interrupt checks, progress reports, divergence."""
import warnings

import numpy as np
import pytest

from pgad import backends, program
from pgad.models import descent
from pgad.errors import PgadError
from pgad.loader import Table


def diverging_hint(rate):
    """The HINT of a training that diverges at learning rate `rate` (descent.diverging)."""
    return (f"Try a smaller learning_rate than {rate}, or pgad.train's optimizer => 'lbfgs' (a line search "
            "instead of a learning rate) or standardize => true.")


LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'


def setup(text=LINEAR):
    prog = program.build(text, ('a', 'b'), 'reverse')
    x = np.linspace(0, 1, 101)
    return backends.compile(prog, 'python'), Table([x, 2 * x + 1], 101, 0)


def test_descent_converges_and_checks_for_interrupts_every_iteration():
    kernel, table = setup()
    checks = []
    w, loss, ran = descent.run(kernel, table, [0.0, 0.0], 0.5, 3000, ['a', 'b'], lambda: checks.append(1),
                               lambda message: None, check=0.0)
    assert w == pytest.approx([2, 1], abs=1e-8) and loss == pytest.approx(0, abs=1e-15) and ran == 3000
    assert len(checks) == 3000


def test_an_interrupt_stops_the_loop():
    kernel, table = setup()

    class Cancelled(Exception):
        pass

    def cancel_at_ten(count=[0]):
        count[0] += 1
        if count[0] == 10:
            raise Cancelled
    with pytest.raises(Cancelled):
        descent.run(kernel, table, [0.0, 0.0], 0.5, 10 ** 9, ['a', 'b'], cancel_at_ten, lambda message: None,
                    check=0.0)


def test_long_runs_report_progress():
    kernel, table = setup()
    messages = []
    descent.run(kernel, table, [0.0, 0.0], 0.5, 50, ['a', 'b'], lambda: None, messages.append, every=0.0)
    assert len(messages) == 50 and messages[0].startswith('iteration 1 of 50, loss ')


def test_divergence_names_the_iteration_and_hints_at_the_learning_rate():
    kernel, table = setup()
    with pytest.raises(PgadError) as caught, pytest.warns(descent.DivergenceWarning):  # the warning, on the way
        descent.run(kernel, table, [0.0, 0.0], 100.0, 1000, ['a', 'b'], lambda: None, lambda message: None)
    assert caught.value.sqlstate == '22003'
    assert 'training diverged at iteration' in caught.value.message
    assert caught.value.hint == diverging_hint('100')


def test_nan_at_the_start_is_not_called_divergence():
    prog = program.build('λ(d, w) ln(d.x - w.a)', ('a',), 'reverse')
    kernel = backends.compile(prog, 'python')
    with pytest.raises(PgadError) as caught:
        descent.run(kernel, Table([np.array([0.0, 1.0])], 2, 0), [0.0], 0.1, 10, ['a'], lambda: None, print)
    assert caught.value.message == 'the loss is infinite at the starting weights'


@pytest.mark.parametrize('backend', ['python', 'llvm'])
def test_chunked_evaluation_equals_one_call_and_checks_between_chunks(backend):
    prog = program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2 + w.a^2', ('a', 'b'), 'forward')
    kernel = backends.compile(prog, backend)
    x = np.random.default_rng(0).random(1000)
    table = Table([x, 3 * x], 1000, 0)
    checks = []
    whole = descent.evaluate(kernel, table, np.array([0.5, 0.1]), lambda: checks.append(1))
    chunked = descent.evaluate(kernel, table, np.array([0.5, 0.1]), lambda: checks.append(1), chunk=64)
    assert len(checks) == 16  # one check after each of the 16 chunks, none for the single call
    np.testing.assert_allclose(chunked, whole, rtol=1e-13)


@pytest.mark.parametrize('iterations', [0, 1, 2, 7])
def test_each_step_and_the_loss_returned_as_written_by_hand(iterations):
    """w ← w − learning_rate · mean gradient, exactly; the loss returned is the loss at the weights returned."""
    kernel, table = setup()
    x, y = table.columns
    w = np.array([0.25, -0.5])
    for _ in range(iterations):  # the mean squared error's gradient by hand: 2·mean(r·x), 2·mean(r)
        r = w[0] * x + w[1] - y
        w = w - 0.3 * np.array([2 * np.mean(r * x), 2 * np.mean(r)])
    fitted, loss, ran = descent.run(kernel, table, [0.25, -0.5], 0.3, iterations, ['a', 'b'], lambda: None,
                                    lambda message: None)
    np.testing.assert_allclose(fitted, w, rtol=1e-13)  # the same float64 sums in another order
    assert loss == pytest.approx(np.mean((w[0] * x + w[1] - y) ** 2), rel=1e-12) and ran == iterations


def test_divergence_in_the_last_step_is_divergence_not_a_bad_start():
    """One step that overflows the weights: the evaluation after it names iteration 2, not the starting weights."""
    kernel, table = setup()
    with pytest.raises(PgadError) as caught, warnings.catch_warnings():
        warnings.simplefilter('error')  # no numpy RuntimeWarning: the server would show it as a WARNING
        descent.run(kernel, table, [0.0, 0.0], 1e308, 1, ['a', 'b'], lambda: None, lambda message: None)
    assert caught.value.message.startswith('training diverged at iteration 2: ')
    assert caught.value.hint == diverging_hint('1e+308')


def test_progress_reports_the_mean_loss_of_the_iteration():
    kernel, table = setup()
    messages = []
    descent.run(kernel, table, [0.0, 0.0], 0.5, 2, ['a', 'b'], lambda: None, messages.append, every=0.0)
    x, y = table.columns
    first = np.mean(y ** 2)  # at w = 0
    assert messages[0].startswith(f'iteration 1 of 2, loss {first:.6g}, 0.')


def test_a_table_past_one_chunk_checks_for_interrupts_between_chunks():
    prog = program.build(LINEAR, ('a', 'b'), 'reverse')
    x = np.linspace(0, 1, descent.CHUNK_ROWS + 1)
    checks = []
    w, loss, _ = descent.run(backends.compile(prog, 'python'), Table([x, 2 * x + 1], len(x), 0), [0.0, 0.0], 0.5, 1,
                             ['a', 'b'], lambda: checks.append(1), lambda message: None, check=1e9)
    assert len(checks) == 4  # two chunks in the one iteration, two in the final evaluation
    assert loss == pytest.approx(np.mean((w[0] * x + w[1] - 2 * x - 1) ** 2), rel=1e-12)


class Clock:
    """time.monotonic for descent.py: each call one second later than the last, from 100 s."""
    def __init__(self):
        self.now = 99.0

    def monotonic(self):
        self.now += 1.0
        return self.now


def clocked_run(monkeypatch, **timing):
    monkeypatch.setattr(descent, 'time', Clock())
    kernel, table = setup()
    checks, messages = [], []
    descent.run(kernel, table, [0.0, 0.0], 0.1, 12, ['a', 'b'], lambda: checks.append(1), messages.append,
                **timing)
    return len(checks), [m.split(',')[0] for m in messages], messages


def test_interrupts_and_progress_come_every_so_many_seconds(monkeypatch):
    """One clock second per iteration: checks when `check` seconds have passed (>=), reports every `every`."""
    checks, reported, messages = clocked_run(monkeypatch, check=2.0, every=3.0)
    assert checks == 6 and reported == ['iteration 3 of 12', 'iteration 6 of 12', 'iteration 9 of 12',
                                         'iteration 12 of 12']
    assert ', 3.0 s, ' in messages[0] and messages[0].endswith(' rows/s')  # seconds since the start, rows/s


def test_by_default_interrupts_are_checked_every_iteration_and_progress_every_second(monkeypatch):
    checks, reported, messages = clocked_run(monkeypatch)
    assert checks == 12 and reported == [f'iteration {k} of 12' for k in range(1, 13)]
    assert messages[2].endswith(', 3.0 s, 101 rows/s')  # 3 iterations of 101 rows in 3 clock seconds


@pytest.mark.parametrize('names, iterations, message', [
    (('a', 'b'), 3, 'the gradient by "a" is infinite at the starting weights'),
    (('b', 'a'), 3, 'the gradient by "a" is infinite at the starting weights'),
    (('b', 'a'), 0, 'the gradient by "a" is infinite at the starting weights'),
])
def test_a_gradient_that_is_not_finite_where_the_loss_is_is_named(names, iterations, message):
    """sqrt(w.a) at a = 0: loss 0, gradient by a infinite; the weight named is the one whose gradient it is."""
    prog = program.build('λ(d, w) sqrt(w.a) + w.b^2 + d.x', names, 'reverse')
    with pytest.raises(PgadError) as caught, np.errstate(divide='ignore'):
        descent.run(backends.compile(prog, 'python'), Table([np.array([1.0, 2.0])], 2, 0), [0.0, 0.0], 0.1,
                    iterations, list(names), lambda: None, lambda message: None)
    assert caught.value.message == message


def test_a_loss_that_is_not_finite_is_named_before_a_finite_gradient():
    prog = program.build('λ(d, w) ln(d.x) + w.a', ('a',), 'reverse')
    with pytest.raises(PgadError) as caught, np.errstate(divide='ignore'):
        descent.run(backends.compile(prog, 'python'), Table([np.array([0.0, 1.0])], 2, 0), [0.0], 0.1, 3, ['a'],
                    lambda: None, lambda message: None)
    assert caught.value.message == 'the loss is infinite at the starting weights'


def test_a_weight_that_overflows_under_a_finite_loss_is_named():
    """1e300·tanh(w.a): one step of 1e10 takes a to -inf, where the loss (-1e300) and the gradient (0) are finite."""
    prog = program.build('λ(d, w) 1e300*tanh(w.a) + w.b^2 + d.x', ('b', 'a'), 'reverse')
    with pytest.raises(PgadError) as caught:
        descent.run(backends.compile(prog, 'python'), Table([np.array([1.0])], 1, 0), [0.0, 0.0], 1e10, 1,
                    ['b', 'a'], lambda: None, lambda message: None)
    assert caught.value.message == 'training diverged at iteration 2: weight "a" is infinite'


@pytest.mark.parametrize('x, message', [
    (0.0, 'the loss is infinite at the starting weights'),  # ln 0 = -inf
    (-1.0, 'the loss is NaN at the starting weights'),  # ln -1 = NaN; the weights are finite
])
def test_a_sum_not_finite_at_the_starting_weights_is_22003_with_the_hint_at_the_lambda(x, message):
    prog = program.build('λ(d, w) ln(d.x - w.a)', ('a',), 'reverse')
    with pytest.raises(PgadError) as caught, np.errstate(divide='ignore', invalid='ignore'):
        descent.run(backends.compile(prog, 'python'), Table([np.array([x, 1.0])], 2, 0), [0.0], 0.1, 10, ['a'],
                    lambda: None, lambda message: None)
    assert (caught.value.sqlstate, caught.value.message, caught.value.hint) == (
        '22003', message, 'Check that the lambda is defined on every row (ln and sqrt of the data, division).')


@pytest.mark.parametrize('chunk, checks', [(101, 0), (100, 2)])
def test_a_table_of_exactly_one_chunk_is_one_call_without_interrupt_checks(chunk, checks):
    kernel, table = setup()
    called = []
    sums = descent.evaluate(kernel, table, np.array([0.5, 0.1]), lambda: called.append(1), chunk=chunk)
    assert len(called) == checks
    np.testing.assert_allclose(sums, kernel(table.columns, table.rows, np.array([0.5, 0.1])), rtol=1e-13)


# --- a finite loss that grows by orders of magnitude: one WARNING (Divergence), and the training goes on ---------
class Losses:
    """A kernel whose mean loss over the rows it is given is the next of losses (the last repeats), and whose
    gradient cancels l2's term: the weights stay where they start, and the objective is the loss + l2·Σw²."""
    def __init__(self, *losses, l2=0.0):
        self.losses, self.l2, self.calls = list(losses), l2, 0

    def __call__(self, columns, rows, w):
        loss = self.losses[min(self.calls, len(self.losses) - 1)]
        self.calls += 1
        return np.array([loss * rows, *(-2 * self.l2 * w * rows)])


def warned(kernel, rows=1, optimizer='gd', iterations=5, learning_rate=0.25, **options):
    """The (message, hint) pairs of the divergence warnings of one fit of kernel over `rows` rows from w = 1."""
    warnings_ = []
    clock = descent.Clock(lambda: None, lambda message: None, iterations,
                          warning=lambda message, hint: warnings_.append((message, hint)))
    descent.fit(kernel, Table([np.zeros(rows)], rows, 0), [1.0], ['a'], optimizer, learning_rate, iterations,
                clock=clock, **options)
    return warnings_


PAST = np.nextafter(2000002.0, np.inf)  # the first loss past 2 + 10⁶·2


@pytest.mark.parametrize('optimizer', ['gd', 'momentum', 'adam'])
def test_a_loss_past_a_million_times_the_start_warns_once_naming_the_iteration(optimizer):
    """Full batches: the loss at iteration k is the progress report's (the weights after k − 1 steps)."""
    assert warned(Losses(2.0, 2000002.0, PAST, 1e9, 1e12), optimizer=optimizer) == [(
        'the loss grew from 2 to 2e+06 by iteration 3: gradient descent is diverging',
        diverging_hint('0.25'))]


@pytest.mark.parametrize('start, boundary', [(2.0, 2000002.0), (-2.0, 1999998.0), (0.5, 500000.5)])
def test_a_rise_of_exactly_a_million_times_the_start_is_not_divergence(start, boundary):
    """The rule is loss − start > GROWTH·|start|: the boundary itself does not warn, the next float does; a start
    below 0 grows by its magnitude."""
    assert warned(Losses(start, boundary)) == []
    past = np.nextafter(boundary, np.inf)
    assert warned(Losses(start, boundary, past)) == [
        (f'the loss grew from {start:g} to {past:.6g} by iteration 3: gradient descent is diverging',
         diverging_hint('0.25'))]


def test_a_loss_that_starts_at_zero_never_warns():
    assert warned(Losses(0.0, 1e300)) == []


def test_a_loss_that_falls_never_warns():
    assert warned(Losses(2.0, -1e300)) == []


@pytest.mark.parametrize('iterations, message', [
    (2, 'the loss grew from 2 to 2e+06 by iteration 3: gradient descent is diverging'),  # the evaluation after
    (1, None),                                                                            # the loop: iteration n + 1
    (0, None),
])
def test_the_loss_after_the_last_step_is_watched_too(iterations, message):
    assert warned(Losses(2.0, 3.0, PAST), iterations=iterations) == (
        [(message, diverging_hint('0.25'))] if message else [])


@pytest.mark.parametrize('optimizer', ['sgd', 'momentum', 'adam'])
def test_mini_batches_start_from_the_first_batch_and_watch_each_epochs_objective(optimizer):
    """Four rows in batches of two: per epoch two batches, then the objective over all the rows. The start is the
    first batch's loss plus l2's term (w = 1, l2 = 1: 1 + 1 = 2); later batches' losses are not watched."""
    kernel = Losses(1.0, 1e9, 2000001.0, 1e9, 1.0, PAST - 1, 1e12, l2=1.0)
    assert warned(kernel, rows=4, optimizer=optimizer, iterations=3, batch_size=2, seed=0,
                  penalty=descent.Penalty(0.0, 1.0)) == [(
                      'the loss grew from 2 to 2e+06 by iteration 2: gradient descent is diverging',
                      diverging_hint('0.25'))]


def test_the_start_of_mini_batches_is_the_first_batch_only():
    """A first batch of loss 10⁹ in a later epoch is not a start: the epochs' objectives stay within bounds."""
    assert warned(Losses(1.0, 1.0, 1.0, 1e9, 1.0, 1.0), rows=4, optimizer='sgd', iterations=2, batch_size=2,
                  seed=0) == []


def test_lbfgs_never_warns():
    """Its line search takes no step that raises the objective."""
    assert warned(Losses(2.0, 1e12), optimizer='lbfgs') == []


def test_divergence_warns_first_as_the_progress_report_numbers_it_then_stays_an_error():
    """A real descent that blows up: the warning names the first iteration whose reported loss is past a million
    times the first; the loss goes on to overflow, which is still the 22003 error."""
    kernel, table = setup()
    messages, warnings_ = [], []
    with pytest.raises(PgadError) as caught:
        descent.run(kernel, table, [0.0, 0.0], 3.0, 1000, ['a', 'b'], lambda: None, messages.append, every=0.0,
                    warning=lambda message, hint: warnings_.append((message, hint)))
    assert caught.value.sqlstate == '22003' and 'training diverged at iteration' in caught.value.message
    losses = [float(m.split(', ')[1].removeprefix('loss ')) for m in messages]
    k = next(k for k, loss in enumerate(losses) if loss - losses[0] > 1e6 * losses[0])
    assert k > 1 and warnings_ == [(f'the loss grew from {losses[0]:.6g} to {losses[k]:.6g} by iteration {k + 1}: '
                                    'gradient descent is diverging', diverging_hint('3'))]


def test_outside_the_server_the_warning_is_a_python_warning_with_its_hint():
    with pytest.warns(descent.DivergenceWarning) as caught:
        descent.fit(Losses(2.0, 1e7), Table([np.zeros(1)], 1, 0), [1.0], ['a'], 'gd', 0.5, 3)
    assert [(str(w.message), w.message.hint) for w in caught] == [
        ('the loss grew from 2 to 1e+07 by iteration 2: gradient descent is diverging',
         diverging_hint('0.5'))]
