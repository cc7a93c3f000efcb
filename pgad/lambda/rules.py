"""The table of primitives: one row each — its signature, how to evaluate it, its partial derivatives.

A row reads `primitive(name, signature, evaluate, partials)`:
- signature: the argument types and the result type, 'n' a float8 and 'b' a boolean ('nn->n' is binary arithmetic);
- evaluate: a numpy function over whole arrays (the python backend and constant folding use it);
- partials: given the argument expressions and `out` (the node itself), the partial derivative with respect to each
  argument as a DAG expression, or None where the argument is not differentiable (a condition, a boolean).
Forward mode (forward.py), reverse mode (reverse.py) and every backend read this table; adding a function to the lambda
language is a row here, a name in parser.FUNCTIONS, and a row in tests/test_rules.py.

Vector operations (matrix products, sums, softmax, indexing) have rows of their own below, read by
vectors.py: a shape rule and how the operation unrolls into the scalar primitives above, whose partials then give its
derivatives in both modes and every backend. Every scalar primitive also applies elementwise to vectors and
matrices, a scalar operand broadcast.

Conventions at non-differentiable points: abs'(0) = sign'(x) = relu'(0) = 0; greatest and least follow the first
argument that attains the extreme; CASE differentiates the branch taken. At the boundaries of pow the limits are
written out: ∂(x^y)/∂y = 0 where x = 0 (0^y is 0 for every y > 0, where out·ln(x) would be 0·(−∞) = NaN), and
∂(x^y)/∂x = 0 where y = 0 (x^0 is 1, where y·x^(y−1) would be 0·∞ at x = 0). x % y jumps where x/y is an
integer; there its partials are those of the side where the remainder is 0: 1 and −x/y.
"""
import math
from collections import namedtuple

import numpy as np

Primitive = namedtuple('Primitive', 'name args result evaluate partials')
PRIMITIVES = {}


def primitive(name, signature, evaluate, partials):
    args, result = signature.split('->')
    PRIMITIVES[name] = Primitive(name, args, result, evaluate, partials)


def call(name):
    """A function that builds `name(...)` nodes, for writing rules: cos(x) is the node cos of x."""
    return lambda *args: args[0].graph.apply(name, *args)


exp, ln, sqrt, sin, cos, sign, sigmoid, case, eq = map(call, 'exp ln sqrt sin cos sign sigmoid case eq'.split())
cosh, sinh = call('cosh'), call('sinh')


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# arithmetic
primitive('add', 'nn->n', np.add, lambda x, y, out: (1, 1))
primitive('sub', 'nn->n', np.subtract, lambda x, y, out: (1, -1))
primitive('mul', 'nn->n', np.multiply, lambda x, y, out: (y, x))
primitive('div', 'nn->n', np.divide, lambda x, y, out: (1 / y, -out / y))
primitive('neg', 'n->n', np.negative, lambda x, out: -1)
# x % y: C's fmod, the remainder of x / y truncated toward zero, with the sign of x (PostgreSQL's numeric % and mod());
# ∂/∂y = −trunc(x/y), written (out − x)/y
primitive('mod', 'nn->n', np.fmod, lambda x, y, out: (1, (out - x) / y))
primitive('pow', 'nn->n', np.power,
          lambda x, y, out: (case(eq(y, 0), 0, y * x ** (y - 1)), case(eq(x, 0), 0, out * ln(x))))
# exponentials and logarithms
primitive('exp', 'n->n', np.exp, lambda x, out: out)
primitive('ln', 'n->n', np.log, lambda x, out: 1 / x)
primitive('log10', 'n->n', np.log10, lambda x, out: 1 / (math.log(10) * x))
primitive('sqrt', 'n->n', np.sqrt, lambda x, out: 0.5 / out)
primitive('cbrt', 'n->n', np.cbrt, lambda x, out: 1 / (3 * out ** 2))
# sign and magnitude
primitive('abs', 'n->n', np.abs, lambda x, out: sign(x))
primitive('sign', 'n->n', np.sign, lambda x, out: None)
primitive('greatest', 'nn->n', np.maximum, lambda x, y, out: (case(x >= y, 1, 0), case(x >= y, 0, 1)))
primitive('least', 'nn->n', np.minimum, lambda x, y, out: (case(x <= y, 1, 0), case(x <= y, 0, 1)))
# trigonometric and hyperbolic
primitive('sin', 'n->n', np.sin, lambda x, out: cos(x))
primitive('cos', 'n->n', np.cos, lambda x, out: -sin(x))
primitive('tan', 'n->n', np.tan, lambda x, out: 1 + out ** 2)
primitive('asin', 'n->n', np.arcsin, lambda x, out: 1 / sqrt(1 - x ** 2))
primitive('acos', 'n->n', np.arccos, lambda x, out: -1 / sqrt(1 - x ** 2))
primitive('atan', 'n->n', np.arctan, lambda x, out: 1 / (1 + x ** 2))
primitive('atan2', 'nn->n', np.arctan2, lambda y, x, out: (x / (x ** 2 + y ** 2), -y / (x ** 2 + y ** 2)))
primitive('sinh', 'n->n', np.sinh, lambda x, out: cosh(x))
primitive('cosh', 'n->n', np.cosh, lambda x, out: sinh(x))
primitive('tanh', 'n->n', np.tanh, lambda x, out: 1 - out ** 2)
# machine learning, which SQL lacks
primitive('sigmoid', 'n->n', _sigmoid, lambda x, out: out * (1 - out))
primitive('relu', 'n->n', lambda x: np.maximum(x, 0.0), lambda x, out: case(x > 0, 1, 0))
primitive('softplus', 'n->n', lambda x: np.logaddexp(0.0, x), lambda x, out: sigmoid(x))
# conditions: CASE WHEN c THEN a ELSE b END, comparisons, logic
primitive('case', 'bnn->n', np.where, lambda c, a, b, out: (None, case(c, 1, 0), case(c, 0, 1)))
primitive('lt', 'nn->b', np.less, lambda x, y, out: (None, None))
primitive('le', 'nn->b', np.less_equal, lambda x, y, out: (None, None))
primitive('gt', 'nn->b', np.greater, lambda x, y, out: (None, None))
primitive('ge', 'nn->b', np.greater_equal, lambda x, y, out: (None, None))
primitive('eq', 'nn->b', np.equal, lambda x, y, out: (None, None))
primitive('ne', 'nn->b', np.not_equal, lambda x, y, out: (None, None))
primitive('iff', 'bb->b', np.equal, lambda x, y, out: (None, None))      # a = b of two booleans
primitive('xor', 'bb->b', np.not_equal, lambda x, y, out: (None, None))  # a <> b of two booleans
primitive('and', 'bb->b', np.logical_and, lambda x, y, out: (None, None))
primitive('or', 'bb->b', np.logical_or, lambda x, y, out: (None, None))
primitive('not', 'b->b', np.logical_not, lambda x, out: None)
# a boolean column, which the loader packs as 1 (true) or 0 (false), where the lambda reads it as a boolean
primitive('truth', 'n->b', lambda x: np.not_equal(x, 0), lambda x, out: None)


def partials(graph, i):
    """The partial derivatives of node i with respect to each of its arguments: Exprs, or None where there is none."""
    node = graph.nodes[i]
    args = [graph.expr(a) for a in node.args]
    result = PRIMITIVES[node.op].partials(*args, graph.expr(i))
    result = result if isinstance(result, tuple) else (result,)
    return tuple(None if p is None else p if hasattr(p, 'graph') else graph.const(p) for p in result)



# Vector operations. A row reads `operation(name, signature, shape, unroll, vjp)`: shape(*argument shapes) is the
# result's shape, or a VectorError naming what does not fit; unroll(*arguments) is the result as scalar nodes (numpy
# object arrays of Exprs, shape () a scalar), written with the scalar primitives; vjp(ḡ, out, *arguments, shapes=…)
# is each argument's cotangent as a vector expression, given the result's ḡ (what pgad.derivatives prints:
# tensors.py). Shapes are tuples: () a number, (n,) a vector, (m, n) a matrix of m rows. A signature of '*' takes
# one or more numbers or same-shaped vectors (the vector literal [a, b, c]). cost(*argument shapes) is at most how
# many scalar nodes and array elements unroll makes (vectors.py checks the sum against pgad.max_lambda_nodes before
# it builds anything: outer of two vectors of 20,000 would be an array of 400 million).
Operation = namedtuple('Operation', 'name args shape unroll vjp cost')
OPERATIONS = {}


class VectorError(Exception):
    """What is wrong with an operation's shapes (vectors.py adds the place in the lambda)."""


def operation(name, signature, shape, unroll, vjp, cost):
    OPERATIONS[name] = Operation(name, signature.split('->')[0], shape, unroll, vjp, cost)


def size(shape):
    """The number of elements of a shape, as a Python int (no overflow): 1 for a number."""
    return math.prod(shape)


def _product(a, b):  # @: matrix·vector, vector·matrix, matrix·matrix, vector·vector
    if len(a) in (1, 2) and len(b) in (1, 2) and a[-1] == b[0]:
        return a[:-1] + b[1:]
    raise VectorError(f'cannot multiply {describe(a)} by {describe(b)} with @')


def _vector(what, result):
    """The shape rule of an operation of one vector: result(its shape) is the result's."""
    def check(a):
        if len(a) != 1:
            raise VectorError(f'{what} takes a vector, not {describe(a)}')
        return result(a)
    return check


def _same_vectors(a, b):
    if len(a) != 1 or a != b:
        raise VectorError(f'dot takes two vectors of the same length, not {describe(a)} and {describe(b)}')
    return ()


def _stack(*shapes):
    if len(set(shapes)) != 1 or len(shapes[0]) > 1:
        raise VectorError('the elements of [...] must be numbers, or vectors of one length, not ' +
                          ', '.join(describe(s) for s in shapes))
    return (len(shapes),) + shapes[0]


def _index(v, i):
    if not v or i:
        raise VectorError(f'cannot index {describe(v)} by {describe(i)}')
    return v[1:]


def _matmul(a, b):
    """a @ b, each element the sum of its products (_sum's tree)."""
    rows, cols = (a if a.ndim == 2 else a[None, :]), (b if b.ndim == 2 else b[:, None])
    out = np.empty((rows.shape[0], cols.shape[1]), dtype=object)
    for i, j in np.ndindex(*out.shape):
        out[i, j] = _sum(np.array([x * y for x, y in zip(rows[i], cols[:, j])], dtype=object))
    return out.reshape(a.shape[:-1] + b.shape[1:])


def _sum(v):
    """The sum of v's elements as a tree ⌈log2 n⌉ additions deep: its first half added to its second element by
    element, (v0 + v_h) … (v_{h−1} + v_{2h−1}), the odd one out carried, until one is left. Its rounding error grows
    as log n rather than n, a CPU overlaps its additions rather than waiting on each, and each level's additions are
    of neighbouring elements, which the compiler adds as vectors."""
    terms = list(v.flat)
    while len(terms) > 1:
        h = (len(terms) + 1) // 2
        terms = [terms[k] + terms[k + h] if k + h < len(terms) else terms[k] for k in range(h)]
    return terms[0]


def _logsumexp(v):  # m + ln Σ exp(v - m), m the greatest: no overflow
    top = _greatest(v)
    return top + ln(_sum(np.array([exp(x - top) for x in v], dtype=object)))


def _softmax(v):
    top = _greatest(v)
    e = np.array([exp(x - top) for x in v], dtype=object)
    total = _sum(e)
    return np.array([x / total for x in e], dtype=object)


def _greatest(v):
    top = v[0]
    for x in v[1:]:
        top = top.graph.apply('greatest', top, x)
    return top


def _outer(a, b):
    out = np.empty((len(a), len(b)), dtype=object)
    for i, j in np.ndindex(*out.shape):
        out[i, j] = a[i] * b[j]
    return out


def _stacked(items):
    out = np.empty((len(items),) + items[0].shape, dtype=object)
    for k, item in enumerate(items):
        out[k, ...] = item
    return out


def describe(shape):
    """A shape as the messages name it: 'a number', 'a vector of 3', 'a 20×4 matrix'."""
    if not shape:
        return 'a number'
    return f'a vector of {shape[0]}' if len(shape) == 1 else f'a {"×".join(map(str, shape))} matrix'


def _transpose_shape(a):
    if len(a) != 2:
        raise VectorError(f'transpose takes a matrix, not {describe(a)}')
    return a[::-1]


def _outer_shape(a, b):
    if len(a) != 1 or len(b) != 1:
        raise VectorError(f'outer takes two vectors, not {describe(a)} and {describe(b)}')
    return a + b


def _matmul_vjp(g, out, a, b, shapes):
    """C = A @ B: Ā = C̄ Bᵀ and B̄ = Aᵀ C̄, in the form each of @'s four cases takes."""
    sa, sb = shapes
    if len(sa) == 1 and len(sb) == 1:
        return g * b, g * a
    if len(sb) == 1:   # W @ x: W̄ = ḡ xᵀ, x̄ = Wᵀ ḡ
        return outer(g, b), matmul(transpose(a), g)
    if len(sa) == 1:   # x @ W: x̄ = W ḡ, W̄ = x ḡᵀ
        return matmul(b, g), outer(a, g)
    return matmul(g, transpose(b)), matmul(transpose(a), g)


matmul, transpose, outer, softmax, dot = map(call, 'matmul transpose outer softmax dot'.split())

operation('matmul', 'nn->n', _product, lambda a, b: _matmul(a, b), _matmul_vjp,
          lambda a, b: size(_product(a, b)) * 2 * a[-1])  # each element a row of products and its sum
operation('dot', 'nn->n', _same_vectors, lambda a, b: _matmul(a, b), lambda g, out, a, b, shapes: (g * b, g * a),
          lambda a, b: 2 * size(a))
operation('sum', 'n->n', lambda v: (), lambda v: np.asarray(_sum(v), dtype=object), lambda g, out, v, shapes: (g,),
          size)
operation('softmax', 'n->n', _vector('softmax', lambda a: a), _softmax,
          lambda g, out, v, shapes: (out * (g - dot(g, out)),), lambda v: 6 * size(v))
operation('logsumexp', 'n->n', _vector('logsumexp', lambda a: ()), lambda v: np.asarray(_logsumexp(v), dtype=object),
          lambda g, out, v, shapes: (g * softmax(v),), lambda v: 5 * size(v) + 2)
operation('index', 'nn->n', _index, None, None, None)  # unrolled by vectors.py (its index may change from row to
#                                                          row), differentiated by tensors.py (a mask of the position)
operation('stack', '*->n', _stack, lambda *items: _stacked(items), None,  # tensors.py: each item's, by index
          lambda *shapes: size(_stack(*shapes)))
operation('transpose', 'n->n', _transpose_shape, lambda m: np.asarray(m.T, dtype=object),
          lambda g, out, m, shapes: (transpose(g),), lambda m: 0)  # a view: nothing new
operation('outer', 'nn->n', _outer_shape, lambda a, b: _outer(a, b),
          lambda g, out, a, b, shapes: (matmul(g, b), matmul(a, g)), lambda a, b: size(a) * size(b))
