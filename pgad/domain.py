"""Where a lambda leaves its domain: the operation that turned finite numbers into NaN or infinity, and what
PostgreSQL says of the same operation.

A kernel returns only sums over the rows; when one is NaN or infinite at the starting weights, the descent asks
this module why. It evaluates the program's nodes over the rows with numpy (the rules table's evaluate column),
a block of rows at a time, takes the first row where the output is not finite, and follows the value back from
the output to the node whose own arguments were all finite (through a CASE, only the branch that row took). Where
PostgreSQL raises an error for that operation — ln(0), sqrt(−1), 0^−1, 1/0, asin(2), exp(710) — the error is
PostgreSQL's, SQLSTATE and message; elsewhere (a derivative, which PostgreSQL never evaluates) the error says which
expression is not finite. Either way the DETAIL shows the expression and the values it read.
"""
import math

import numpy as np

from . import limits
from .errors import PgadError
from .lang import printer
from .lang.rules import PRIMITIVES

BLOCK_VALUES = 8 << 20  # float8 values kept at once: 64 MB
SHOWN_CHARS = 200       # of the expression in the DETAIL
SHOWN_VALUES = 8        # columns and weights in the DETAIL

LOG = lambda x: ('2201E', 'cannot take logarithm of zero' if x == 0 else  # noqa: E731
                 'cannot take logarithm of a negative number') if x <= 0 else None
OVERFLOW = ('22003', 'value out of range: overflow')
# PostgreSQL's error for an operation on finite arguments that gives NaN or infinity (float.c); None: no error there
POSTGRES = {
    'ln': LOG,
    'log10': LOG,
    'sqrt': lambda x: ('2201F', 'cannot take square root of a negative number') if x < 0 else None,
    'pow': lambda x, y: (('2201F', 'zero raised to a negative power is undefined') if x == 0 and y < 0 else
                         ('2201F', 'a negative number raised to a non-integer power yields a complex result')
                         if x < 0 and y != math.floor(y) else OVERFLOW),
    'div': lambda x, y: ('22012', 'division by zero') if y == 0 else OVERFLOW,
    'mod': lambda x, y: ('22012', 'division by zero') if y == 0 else None,
    'asin': lambda x: ('22003', 'input is out of range') if abs(x) > 1 else None,
    'acos': lambda x: ('22003', 'input is out of range') if abs(x) > 1 else None,
}


ROWS = "the rows the lambda reads (the data's rows without NULL in them, in the order the data query gives)"


def diagnose(program, table, weights, output, rows=ROWS):
    """The PgadError that explains why output k of program (0 the loss, then the gradient by each weight) is not
    finite over table at weights (a vector; or a list whose entries may be arrays, a value a row: a sequence's state
    before each row); None where no row is to blame. rows says what table's rows are, for a NaN in the data."""
    found = _first_bad_row(program, table, weights, program.outputs[output])
    if found is None:
        return None
    values, row, start = found
    node = _origin(program.graph, values, row, program.outputs[output])
    if program.graph.nodes[node].op == 'column':  # the data itself holds the NaN or infinity
        column, value = program.graph.nodes[node].value, _number(_at(values[node], row))
        return PgadError('22000', f'column "{column}" of the data is {value}',
                         detail=f'Row {start + row + 1} of {rows} has {column} = {value}.',
                         hint='pgad trains on finite numbers: leave the row out in the data query '
                              f"(WHERE {column} <> 'NaN'), or make it NULL (NULLIF({column}, 'NaN')), which skips it.")
    past = _past_the_end(program.graph, node)
    if past is not None:  # v[i] with i no position of v: the NaN that ends the CASEs of vectors.py's index
        index, length = past
        return PgadError('2202E', f'index {_number(_at(values[index], row))} is out of range for a vector of {length}',
                         detail=f'The lambda computes {_shown(program, index, values, row)}.',
                         hint=f'Indexes run from 1 to {length}: a 0-based label is written v[d.label + 1].')
    shown = _shown(program, node, values, row)
    op = program.graph.nodes[node].op
    args = [_at(values[a], row) for a in program.graph.nodes[node].args]
    postgres = POSTGRES.get(op, lambda *a: OVERFLOW)(*args) if output == 0 and op in PRIMITIVES else None
    value = 'NaN' if math.isnan(_at(values[node], row)) else 'infinite'
    if postgres:
        sqlstate, message = postgres
        return PgadError(sqlstate, message, detail=f'The lambda computes {shown}, at the starting weights.',
                         hint='Keep the data and the starting weights inside the domain of every function, or '
                              'guard the expression with CASE WHEN.')
    what = 'the loss' if output == 0 else f'the gradient by "{program.weights[output - 1]}"'
    return PgadError('22003', f'{what} is {value} at the starting weights',
                     detail=f'The first value that is {value}: {shown}.',
                     hint='Start from weights where every function the lambda uses is differentiable '
                          '(sqrt and cbrt at 0, asin and acos at ±1 have infinite derivatives).')


def _first_bad_row(program, table, weights, output):
    """(the value of every node over a block of rows, the first row of that block where output is not finite)."""
    graph = program.graph
    order = graph.ancestors([output])
    column_at = {name: k for k, name in enumerate(program.columns)}
    weight_at = {name: k for k, name in enumerate(program.weights)}
    block = max(1, BLOCK_VALUES // len(order))
    for start in range(0, max(table.rows, 1), block):
        values = {}
        with np.errstate(all='ignore'):
            for i in order:
                limits.tick()
                node = graph.nodes[i]
                values[i] = (node.value if node.op == 'const' else
                             table.columns[column_at[node.value]][start:start + block] if node.op == 'column' else
                             _rows(weights[weight_at[node.value]], start, block) if node.op == 'weight' else
                             PRIMITIVES[node.op].evaluate(*[values[a] for a in node.args]))
        bad = ~np.isfinite(np.broadcast_to(values[output], (min(block, table.rows - start) or 1,)))
        if bad.any():
            return values, int(np.argmax(bad)), start
    return None


def _rows(value, start, block):
    """A weight's value, or of one given a row, its block's."""
    return value[start:start + block] if np.ndim(value) else value


def _at(value, row):
    return float(value) if np.ndim(value) == 0 else float(value[row])


def _number(value):
    """value as PostgreSQL prints a float8, in short: 0.5, 1e+300, NaN, -Infinity."""
    return 'NaN' if math.isnan(value) else ('-' if value < 0 else '') + 'Infinity' if math.isinf(value) else \
        f'{value:g}'


def _origin(graph, values, row, i):
    """The node below i whose value at row is not finite while its arguments' are (through the branch taken); the
    CASE that took it, where that is a constant."""
    while True:
        node = graph.nodes[i]
        args = node.args
        if node.op == 'case':
            args = (args[1],) if _at(values[args[0]], row) else (args[2],)
        bad = [a for a in args if graph.type_of(a) == 'n' and not math.isfinite(_at(values[a], row))]
        if not bad:
            return i
        if graph.nodes[bad[0]].op == 'const' and node.op == 'case':
            return i
        i = bad[0]


def _past_the_end(graph, i):
    """(the index's node, the vector's length) where node i is the last CASE of an unrolled v[index] — CASE WHEN
    index = n THEN v[n] ELSE NaN END — else None."""
    node = graph.nodes[i]
    if node.op != 'case':
        return None
    condition, other = graph.nodes[node.args[0]], graph.nodes[node.args[2]]
    if condition.op != 'eq' or other.op != 'const' or not math.isnan(other.value):
        return None
    length = graph.nodes[condition.args[1]]
    return (condition.args[0], int(length.value)) if length.op == 'const' else None


def _shown(program, node, values, row):
    """'ln(d.x) = -Infinity where d.x = 0': the expression, its value at row, and the columns and weights it reads."""
    graph, lam = program.graph, program.lam
    try:
        text = printer.to_lambda(lam, node, SHOWN_CHARS)
    except PgadError:  # longer than is worth showing
        text = f'an expression of {len(graph.ancestors([node]))} nodes'
    leaves = [i for i in graph.ancestors([node]) if graph.nodes[i].op in ('column', 'weight')]
    reads = [f'{printer.to_lambda(lam, i)} = {_number(_at(values[i], row))}' for i in leaves[:SHOWN_VALUES]]
    reads += ['…'] if len(leaves) > SHOWN_VALUES else []
    return f'{text} = {_number(_at(values[node], row))}' + (' where ' + ', '.join(reads) if reads else '')
