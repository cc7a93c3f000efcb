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
    return _loss(_prepare(loss, weights, _loading(data), gradient=False))


@server.entry
def gradient(loss, data, weights, mode='reverse', backend='auto'):
    return _gradient(_prepare(loss, weights, _loading(data), mode, backend))


@server.entry
def gradient_descent(loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto'):
    call = _prepare(loss, weights, _loading(data), mode, backend, learning_rate=learning_rate, iterations=iterations)
    return _descend(call, arguments.learning_rate(learning_rate), arguments.iterations(iterations))


# The aggregates (extension/pgad.c, part 4): the transition function asks lambda_columns which columns of a row to
# pack; the final function gives the packed rows, their columns' names and the group's loss, weights and options
# (a jsonb of the functions' arguments by name, or None) to loss_agg, gradient_agg or gradient_descent_agg. A group
# with no row to average over (all skipped for a NULL) gives NULL.

@server.entry
def lambda_columns(loss, names, types):
    """The position (from 1) in a row, whose column names and type oids are names and types, of each column the
    lambda reads: the error for one that is not there or not a number is the functions' own."""
    lam = parse(loss, settings().limits)
    return [k + 1 for k in loader.positions(lam.columns, names, types)]


@server.entry
def loss_agg(packed, columns, loss, weights, options=None):
    arguments.options(options, 'pgad.loss_agg', ())
    call = _prepare(loss, weights, _unpacking(packed, columns), gradient=False)
    return None if call is None else _loss(call)


@server.entry
def gradient_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_agg', ('mode', 'backend'))
    call = _prepare(loss, weights, _unpacking(packed, columns), given['mode'], given['backend'])
    return None if call is None else _gradient(call)


@server.entry
def gradient_descent_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_descent_agg', ('learning_rate', 'iterations', 'mode', 'backend'))
    call = _prepare(loss, weights, _unpacking(packed, columns), given['mode'], given['backend'])
    return None if call is None else _descend(call, given['learning_rate'], given['iterations'])


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


@dataclass(frozen=True)
class Call:
    """One call's stages, ready to run: the program, the loaded table, the compiled kernel, the weights."""
    prog: program.Program
    table: loader.Table
    kernel: object
    vector: np.ndarray  # the starting weights, in the order of prog.weights

    @property
    def names(self):
        return list(self.prog.weights)

    def why(self, w, output):
        """What explains a sum that is not finite at the starting weights: the operation and the row (domain.py)."""
        return domain.diagnose(self.prog, self.table, w, output)


def _loading(data):
    """How a function loads its columns: the data query's, packed by pgad.pack (loader.py). No row is an error."""
    def load(columns, config):
        table = loader.load(data, columns, config.chunk_rows)
        if table.rows == 0:
            raise PgadError('22000', 'the data has no rows' if not table.skipped else
                            f'every row of the data has NULL in a column the lambda reads ({table.skipped} rows)',
                            hint='data must have at least one row to average the loss over.')
        return table
    return load


def _unpacking(packed, names):
    """How an aggregate loads its columns: from the rows its transition function packed. No row gives None."""
    def load(columns, config):
        table = loader.packed(packed, names, columns)
        return table if table.rows else None
    return load


def _prepare(loss, weights, load, mode='reverse', backend='auto', gradient=True, **checked):
    """The Call for the lambda text loss at the weights jsonb, its data from load(columns, settings); None when
    load gives none. The arguments are checked in order (a function's first bad argument is the one reported),
    `checked` ones by arguments' function of their name."""
    config = settings()
    lam = parse(loss, config.limits)
    w = arguments.weights(weights, lam)
    for name, value in checked.items():
        getattr(arguments, name)(value)
    mode, backend = arguments.mode(mode), arguments.backend(backend)
    prog = program.build(lam.text, tuple(w), mode, gradient, config.limits)
    kernel = backends.compile(prog, backend, config.cache)
    table = load(list(prog.columns), config)
    return None if table is None else Call(prog, table, kernel, np.array(list(w.values()), dtype=np.float64))


def _loss(call):
    value = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)[0] / call.table.rows
    descent.check_finite(np.array([value]), call.vector, 1, call.names, 0, call.why)
    return float(value)


def _gradient(call):
    sums = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)
    descent.check_finite(sums, call.vector, 1, call.names, 0, call.why)
    return json.dumps(dict(zip(call.names, (sums[1:] / call.table.rows).tolist())))


def _descend(call, learning_rate, iterations):
    fitted, value, ran = descent.run(call.kernel, call.table, call.vector, learning_rate, iterations, call.names,
                                     server.check_interrupts, server.notice, why=call.why)
    return json.dumps(dict(zip(call.names, fitted.tolist()))), float(value), ran
