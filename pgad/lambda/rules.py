"""The table of primitives: one row each — its signature, how to evaluate it, its partial derivatives.

A row reads `primitive(name, signature, evaluate, partials)`:
- signature: the argument types and the result type, 'n' a float8 and 'b' a boolean ('nn->n' is binary arithmetic);
- evaluate: a numpy function over whole arrays (the python backend and constant folding use it);
- partials: given the argument expressions and `out` (the node itself), the partial derivative with respect to each
  argument as a DAG expression, or None where the argument is not differentiable (a condition, a boolean).
Forward mode (forward.py), reverse mode (reverse.py) and every backend read this table; adding a function to the lambda
language is a row here, a name in parser.FUNCTIONS, and a row in tests/test_rules.py.

Conventions at non-differentiable points: abs'(0) = sign'(x) = relu'(0) = 0; greatest and least follow the first
argument that attains the extreme; CASE differentiates the branch taken. At the boundaries of pow the limits are
written out: ∂(x^y)/∂y = 0 where x = 0 (0^y is 0 for every y > 0, where out·ln(x) would be 0·(−∞) = NaN), and
∂(x^y)/∂x = 0 where y = 0 (x^0 is 1, where y·x^(y−1) would be 0·∞ at x = 0).
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
primitive('and', 'bb->b', np.logical_and, lambda x, y, out: (None, None))
primitive('or', 'bb->b', np.logical_or, lambda x, y, out: (None, None))
primitive('not', 'b->b', np.logical_not, lambda x, out: None)


def partials(graph, i):
    """The partial derivatives of node i with respect to each of its arguments: Exprs, or None where there is none."""
    node = graph.nodes[i]
    args = [graph.expr(a) for a in node.args]
    result = PRIMITIVES[node.op].partials(*args, graph.expr(i))
    result = result if isinstance(result, tuple) else (result,)
    return tuple(None if p is None else p if hasattr(p, 'graph') else graph.const(p) for p in result)

