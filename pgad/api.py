"""The SQL functions, one Python function each; extension/sql's shims call these and nothing else.

Each takes the SQL arguments as PL/Python gives them (text, jsonb as text, float8, int), reads pgad's settings
(the limits, the kernel cache, the load's chunk size), and walks the stages:
arguments → program (parse, differentiate) → backend kernel → loader → descent → result.
"""
import json
from dataclasses import dataclass

import numpy as np

from . import arguments, backends, descent, domain, explain as explaining, loader, program, server
from .errors import PgadError
from .jit.cache import DiskCache
from .lang import parse, printer
from .limits import Limits


@dataclass(frozen=True)
class Settings:
    limits: Limits      # pgad.max_lambda_bytes, pgad.max_lambda_nodes
    cache: DiskCache    # pgad.cache_directory, pgad.cache_size
    chunk_rows: int     # pgad.load_chunk_rows


def settings():
    """pgad's settings, as this call sees them."""
    s = server.settings()
    return Settings(Limits(server.in_bytes(s['max_lambda_bytes']), int(s['max_lambda_nodes'])),
                    DiskCache(s['cache_directory'], server.in_bytes(s['cache_size'])), int(s['load_chunk_rows']))


@server.entry
def loss(loss, data, weights):
    config = settings()
    lam = parse(loss, config.limits)
    w = arguments.weights(weights, lam)
    prog, table, kernel, vector = _prepare(lam, data, w, 'reverse', 'auto', config, gradient=False)
    value = descent.evaluate(kernel, table, vector, server.check_interrupts)[0] / table.rows
    descent.check_finite(np.array([value]), vector, 1, list(w), 0, _why(prog, table))
    return float(value)


@server.entry
def gradient(loss, data, weights, mode='reverse', backend='auto'):
    config = settings()
    lam = parse(loss, config.limits)
    w = arguments.weights(weights, lam)
    prog, table, kernel, vector = _prepare(lam, data, w, arguments.mode(mode), arguments.backend(backend), config)
    sums = descent.evaluate(kernel, table, vector, server.check_interrupts)
    descent.check_finite(sums, vector, 1, list(w), 0, _why(prog, table))
    return json.dumps(dict(zip(w, (sums[1:] / table.rows).tolist())))


@server.entry
def gradient_descent(loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto'):
    config = settings()
    lam = parse(loss, config.limits)
    w = arguments.weights(weights, lam)
    learning_rate, iterations = arguments.learning_rate(learning_rate), arguments.iterations(iterations)
    prog, table, kernel, vector = _prepare(lam, data, w, arguments.mode(mode), arguments.backend(backend), config)
    fitted, value, ran = descent.run(kernel, table, vector, learning_rate, iterations, list(w),
                                     server.check_interrupts, server.notice, why=_why(prog, table))
    return json.dumps(dict(zip(w, fitted.tolist()))), float(value), ran


@server.entry
def derivatives(loss):
    limits = settings().limits
    lam = parse(loss, limits)
    prog = program.build(loss, tuple(lam.weights), limits=limits)
    return [(name, printer.to_lambda(prog.lam, node, printer.budget(limits)))
            for name, node in zip(prog.weights, prog.outputs[1:])]


@server.entry
def explain(loss, mode='reverse'):
    return explaining.stages(loss, arguments.mode(mode), settings().limits)


def _prepare(lam, data, w, mode, backend, config, gradient=True):
    """(program, loaded table, compiled kernel, weight vector) for one call."""
    names = tuple(w)
    prog = program.build(lam.text, names, mode, gradient, config.limits)
    kernel = backends.compile(prog, backend, config.cache)
    table = loader.load(data, list(prog.columns), config.chunk_rows)
    if table.rows == 0:
        raise PgadError('22000', 'the data has no rows' if not table.skipped else
                        f'every row of the data has NULL in a column the lambda reads ({table.skipped} rows)',
                        hint='data must have at least one row to average the loss over.')
    return prog, table, kernel, np.array([w[k] for k in names], dtype=np.float64)


def _why(prog, table):
    """What explains a sum that is not finite at the starting weights: the operation and the row (domain.py)."""
    return lambda w, output: domain.diagnose(prog, table, w, output)
