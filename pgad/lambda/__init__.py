"""The lambda language: parser → DAG → derivatives.

`lambda` is a Python keyword, so `import pgad.lambda` is a syntax error; pgad/lang.py binds this package
once as `pgad.lang`, and the rest of pgad imports it by that name (`from pgad.lang import parser`).
Every stage is imported here, so pgad.lang.<stage> is the same module object as pgad.lambda.<stage>.
"""
# rules first: dag reads its table
from . import rules, dag, parser, vectors, forward, reverse, hessian, tensors, printer, sql  # noqa: F401

MODES = {'forward': forward.gradient, 'reverse': reverse.gradient}


parse = parser.parse  # parse(text, limits) → Lambda


def gradient(lam, weights, mode='reverse'):
    """{weight: node id of ∂body/∂weight} in lam's graph, by forward or reverse mode."""
    return MODES[mode](lam.graph, lam.root, weights)
