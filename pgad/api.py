"""The SQL functions, one Python function each; extension/sql's shims call these and nothing else.

Each takes the SQL arguments as PL/Python gives them (text, jsonb as text, float8, int) and walks the stages:
arguments → program (parse, differentiate) → backend kernel → loader → descent → result.
"""
import json

import numpy as np

from . import arguments, backends, descent, explain as explaining, loader, program, server
from .errors import PgadError
from .lang import parse, printer


@server.entry
def loss(loss, data, weights):
    lam = parse(loss)
    w = arguments.weights(weights, lam)
    table, kernel, vector = _prepare(lam, data, w, 'reverse', 'auto', gradient=False)
    value = descent.evaluate(kernel, table, vector, server.check_interrupts)[0] / table.rows
    descent.check_finite(np.array([value]), vector, 1, list(w), 0)
    return float(value)


@server.entry
def gradient(loss, data, weights, mode='reverse', backend='auto'):
    lam = parse(loss)
    w = arguments.weights(weights, lam)
    table, kernel, vector = _prepare(lam, data, w, arguments.mode(mode), arguments.backend(backend))
    sums = descent.evaluate(kernel, table, vector, server.check_interrupts)
    descent.check_finite(sums, vector, 1, list(w), 0)
    return json.dumps(dict(zip(w, (sums[1:] / table.rows).tolist())))


@server.entry
def gradient_descent(loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto'):
    lam = parse(loss)
    w = arguments.weights(weights, lam)
    learning_rate, iterations = arguments.learning_rate(learning_rate), arguments.iterations(iterations)
    table, kernel, vector = _prepare(lam, data, w, arguments.mode(mode), arguments.backend(backend))
    fitted, value, ran = descent.run(kernel, table, vector, learning_rate, iterations, list(w),
                                     server.check_interrupts, server.notice)
    return json.dumps(dict(zip(w, fitted.tolist()))), float(value), ran


@server.entry
def derivatives(loss):
    lam = parse(loss)
    prog = program.build(loss, tuple(lam.weights))
    return [(name, printer.to_lambda(prog.lam, node)) for name, node in zip(prog.weights, prog.outputs[1:])]


@server.entry
def explain(loss, mode='reverse'):
    return explaining.stages(loss, arguments.mode(mode))


def _prepare(lam, data, w, mode, backend, gradient=True):
    """(loaded table, compiled kernel, weight vector) for one call."""
    names = tuple(w)
    prog = program.build(lam.text, names, mode, gradient)
    kernel = backends.compile(prog, backend)
    table = loader.load(data, list(prog.columns))
    if table.rows == 0:
        raise PgadError('22000', 'the data has no rows' if not table.skipped else
                        f'every row of the data has NULL in a column the lambda reads ({table.skipped} rows)',
                        hint='data must have at least one row to average the loss over.')
    return table, kernel, np.array([w[k] for k in names], dtype=np.float64)
