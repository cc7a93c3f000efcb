"""Vectors and matrices → scalars: the stage between the parsed lambda and its derivatives.

The parser builds a lambda whose operations may take vectors and matrices (w.W1 @ [d.x1, d.x2] + w.b1, softmax,
v[i]), without knowing any shape: a weight's shape is its value's in the weights jsonb, a column's is its data
type's (a float8[] column is a vector, its length read from the data). unroll() meets the lambda with those shapes
and writes it out in scalars — every vector operation as the scalar primitives of its row in rules.OPERATIONS,
every elementwise one element by element — into a new graph whose weights are the elements ('W1[2][3]', 1-based,
row-major) and whose columns are a float8[] column's elements ('pixels[5]'). The scalar lambda that comes out is
what the rest of pgad takes: both modes differentiate it, every backend compiles it, the SQL printers print it.
Shared subexpressions stay shared: the logits written twice in a cross-entropy are built once.

A shape that does not fit is SQLSTATE 2202E (as PostgreSQL's array errors), naming the operation, both shapes and
the place in the lambda. Before anything is built, the shapes alone say how many scalar nodes and array elements the
unrolling makes at most (each operation's cost in rules.OPERATIONS, an elementwise one's its result's size, a leaf's
its elements): past pgad.max_lambda_nodes, SQLSTATE 54001 — an outer product of two float8[] columns of 20,000
elements is refused at once, not after an array of 400 million elements.
"""
from dataclasses import dataclass, replace

import numpy as np

from .. import limits as bounds
from ..errors import PgadError
from .dag import Graph
from .parser import Lambda, caret
from .printer import INFIX, PREFIX, identifier
from .rules import OPERATIONS, PRIMITIVES, VectorError, describe, size

ARRAY_SUBSCRIPT_ERROR = '2202E'
# an operation as its messages name it: the printer's symbol for an operator
SYMBOLS = {**{op: symbol.strip() for op, (symbol, _) in {**INFIX, **PREFIX}.items()},
           'index': '[]', 'stack': '[...]', 'case': 'CASE'}


@dataclass(frozen=True)
class Shapes:
    """The shapes a lambda meets: of the weights that are not numbers, and the lengths of float8[] columns."""
    weights: tuple = ()   # ((name, shape), …)
    columns: tuple = ()   # ((name, length), …)
    categorical: tuple = ()  # the columns read as categories' codes (1 … K): an index by one past its vector is 0

    def __bool__(self):
        return bool(self.weights or self.columns)


def element(name, index):
    """The name of one element: 'W1[2][3]' (index 1-based, as PostgreSQL's arrays)."""
    return name + ''.join(f'[{k}]' for k in index)


def elements(name, shape):
    """The names of a weight's or column's elements, row-major: what a kernel's weight vector holds in turn."""
    return [element(name, tuple(k + 1 for k in index)) for index in np.ndindex(*shape)] if shape else [name]


def with_folded(columns, read):
    """columns (an unrolled lambda's, or an objective's as parsed from its printed DAG) and then each column of read
    (the columns its texts read) that is neither among them nor has its elements ('x[1]') among them: a column whose
    every use the DAG folded away, still read, so that a NULL there skips the row (docs/sql.md)."""
    return [*columns, *(c for c in read if c not in columns and not any(str(e).startswith(f'{c}[') for e in columns))]


def by_element(weights):
    """Weights {name: number or (nested) array} as the unrolled lambda reads them: {element: number} ('m[1][2]')."""
    return {e: float(v) for name, value in weights.items()
            for e, v in zip(elements(name, np.shape(value)), np.ravel(value))}


def labels(name, shape, columns=None):
    """The names a user reads of a weight's elements, row-major: 'v[2]', 'm[1,2]' (pgad.hessian's keys, pgad.summary's
    rows and the messages, as docs/sql.md writes them); elements() names the unrolled lambda's nodes. columns: the
    columns the weight multiplies (multiplied_columns), which name its last index: 'v[x1]', 'm[1,x2]'."""
    if not shape:
        return [name]
    named = columns is not None and len(columns) == shape[-1]
    last = len(shape) - 1
    return [name + '[' + ','.join(columns[k] if named and at == last else str(k + 1) for at, k in enumerate(index))
            + ']' for index in np.ndindex(*shape)]


def multiplied_columns(lam):
    """{weight: the columns it multiplies, as the lambda spells them} of each weight read as w.W @ [d.x1, …, d.xp]
    in lam (a weight read so more than once: the first): the columns name its last index where numbers would
    (labels: W[1,alcohol], coef["barolo",alcohol])."""
    nodes, found = lam.graph.nodes, {}
    for node in nodes:
        if node.op == 'matmul' and nodes[node.args[0]].op == 'weight' and nodes[node.args[1]].op == 'stack' and \
                all(nodes[a].op == 'column' for a in nodes[node.args[1]].args):
            found.setdefault(nodes[node.args[0]].value, [identifier(nodes[a].value) for a in nodes[node.args[1]].args])
    return found


def needed(lam):
    """Does lam use a vector operation, so that it must be unrolled even where every weight and column is a number?"""
    return any(node.op in OPERATIONS for node in lam.graph.nodes)


def unroll(lam, shapes, limits=bounds.DEFAULT):
    """The scalar Lambda of lam at these Shapes: its weights and columns the elements', in order of first use."""
    unrolled, root = unrolled_value(lam, shapes, limits)
    _number_body(lam, root.shape)
    return unrolled


def unrolled_value(lam, shapes, limits=bounds.DEFAULT):
    """(the scalar Lambda of lam at these Shapes, its root as an object array of nodes: a model's prediction may be a
    vector). The Lambda's root is the array's first element."""
    check_size(lam, shapes, limits)
    weight_shape, column_length = dict(shapes.weights), dict(shapes.columns)
    graph = Graph(limits.lambda_nodes)
    graph.exact = True  # the user's expression, unrolled: no rule that hides a NaN
    nodes, values = lam.graph.nodes, {}
    columns, weights = {}, {}
    for i in lam.graph.ancestors([lam.root]):
        node = nodes[i]
        bounds.tick()
        if node.op == 'const':
            values[i] = np.array(graph.const(node.value), dtype=object)
        elif node.op == 'column':
            shape = (column_length[node.value],) if node.value in column_length else ()
            values[i] = _leaves(graph.column, node.value, shape, columns)
        elif node.op == 'weight':
            values[i] = _leaves(graph.weight, node.value, weight_shape.get(node.value, ()), weights)
        else:
            args = [values[a] for a in node.args]
            try:
                values[i] = _apply(graph, node.op, args, shapes.categorical)
            except VectorError as e:
                raise _error(lam, i, str(e)) from None
    root = values[lam.root]
    named = {c: c for c in lam.columns}  # a scalar column keeps its parser.Column (read as a boolean or not)
    return Lambda(lam.text, graph, root.flat[0].id, lam.row, lam.params, [named.get(c, c) for c in columns],
                  list(weights)), root


def shapes_of(lam, shapes):
    """{node: shape} for every node under lam's root at these Shapes: the shape rules alone, nothing unrolled."""
    found = _shapes(lam, shapes)
    _number_body(lam, found[lam.root])
    return found


def shape_of(lam, shapes, node):
    """The shape of one node of lam at these Shapes (a model's prediction may be a vector: no check of the body)."""
    return _shapes(replace(lam, root=node), shapes)[node]


def check_size(lam, shapes, limits=bounds.DEFAULT):
    """The error, before anything is built, where unrolling lam at these Shapes would make more than
    pgad.max_lambda_nodes scalar nodes and array elements: their sum over the parsed nodes, from the shapes alone."""
    found, nodes, total = _shapes(lam, shapes), lam.graph.nodes, 0
    for i in lam.graph.ancestors([lam.root]):
        node, shape = nodes[i], found[i]
        bounds.tick()
        args = [found[a] for a in node.args]
        if node.op == 'index':  # a constant index picks a view; one that changes per row, a CASE per element
            cost = 0 if nodes[node.args[1]].op == 'const' else 2 * size(args[0]) + 1
        elif node.op in OPERATIONS:
            cost = OPERATIONS[node.op].cost(*args)
        else:  # a leaf's elements, or an elementwise primitive's
            cost = size(shape)
        total += cost
        if total > limits.lambda_nodes:
            what = (f'{SYMBOLS.get(node.op, node.op)} of {" and ".join(describe(a) for a in args)}' if args else
                    f'{node.op} "{node.value}", {describe(shape)},')
            alone = f'{what} alone unrolls to {cost}' if cost > limits.lambda_nodes else \
                f'unrolled up to {what} it has more than {limits.lambda_nodes}'
            raise bounds.too_large(f'lambda is too large: {alone} expression nodes', 'pgad.max_lambda_nodes',
                                   limits.lambda_nodes)


def _shapes(lam, shapes):
    """shapes_of's {node: shape}, of a body of any shape."""
    weight_shape, column_length = dict(shapes.weights), dict(shapes.columns)
    nodes, found = lam.graph.nodes, {}
    for i in lam.graph.ancestors([lam.root]):
        node = nodes[i]
        bounds.tick()
        if node.op == 'const':
            found[i] = ()
        elif node.op == 'column':
            found[i] = (column_length[node.value],) if node.value in column_length else ()
        elif node.op == 'weight':
            found[i] = tuple(weight_shape.get(node.value, ()))
        else:
            args = [found[a] for a in node.args]
            try:
                found[i] = OPERATIONS[node.op].shape(*args) if node.op in OPERATIONS else broadcast(node.op, args)
            except VectorError as e:
                raise _error(lam, i, str(e)) from None
    return found


def _number_body(lam, shape):
    """The error for a loss whose body (of this shape) is not a number."""
    if shape:
        raise _error(lam, lam.root, f'the body of a lambda must be a number, not {describe(shape)}',
                     hint='Sum it with sum(…), or pick an element with […].')


def _leaves(make, name, shape, seen):
    """The leaves of a column or weight of this shape, as an object array; their names noted in seen, in order."""
    names = elements(name, shape)
    seen.update(dict.fromkeys(names))
    return np.array([make(n) for n in names], dtype=object).reshape(shape)


def _apply(graph, op, args, categorical=()):
    """op of the argument arrays, as an array of scalar nodes."""
    shapes = [a.shape for a in args]
    if op in OPERATIONS:
        OPERATIONS[op].shape(*shapes)  # a VectorError where the shapes do not fit
        out = _index(graph, *args, categorical) if op == 'index' else OPERATIONS[op].unroll(*args)
        return out if isinstance(out, np.ndarray) else np.array(out, dtype=object)
    shape = broadcast(op, shapes)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(*shape):
        out[index] = graph.apply(op, *[a[index] if a.shape else a[()] for a in args])
    return out


def broadcast(op, shapes):
    """The shape of an elementwise op: its arguments' shape, numbers broadcast to it."""
    shape = max(shapes, key=len)
    if any(other and other != shape for other in shapes):
        raise VectorError(f'cannot apply {SYMBOLS.get(op, op)} to {" and ".join(describe(s) for s in shapes)}')
    return shape


def _index(graph, v, i, categorical=()):
    """v[i]: the i-th row or element (1-based). A constant i picks it; an i that changes from row to row is a chain
    of CASEs, NaN where i is no position of v (as the loss's error then says where). Where i is a categorical
    column's code (in categorical), the chain ends in i·0: 0 for a category the weight does not know (code 0, as
    a scoring function codes a value training never saw), NULL for a NULL one."""
    i = i[()]
    node = graph.nodes[i.id]
    unknown = graph.apply('mul', i, 0.0) if node.op == 'column' and node.value in categorical else None
    n = v.shape[0]
    if node.op == 'const':
        k = node.value
        if not (1 <= k <= n and k == int(k)):
            raise VectorError(f'index {k:g} is out of range for {describe(v.shape)}')
        return v[int(k) - 1]
    out = np.empty(v.shape[1:], dtype=object)
    for index in np.ndindex(*v.shape[1:]):
        result = graph.const(float('nan')) if unknown is None else unknown
        for k in range(n, 0, -1):
            result = graph.apply('case', graph.apply('eq', i, float(k)), v[(k - 1, *index)], result)
        out[index] = result
    return out


def _error(lam, i, message, hint=None):
    pos = lam.places.get(i)
    return PgadError(ARRAY_SUBSCRIPT_ERROR, message, detail=None if pos is None else caret(lam.text, pos), hint=hint)
