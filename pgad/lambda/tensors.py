"""The derivatives of a lambda with vectors, as vector expressions: what pgad.derivatives prints for it.

Reverse mode over the parsed DAG, at its shapes, each node's adjoint an expression of the language:
- an elementwise primitive: ā += ∂n/∂a · n̄, the partial from the rules table applied element by element, and
  summed (sum(…)) where a was a number broadcast over n;
- a vector operation: its row's vjp in rules.OPERATIONS (W @ x: W̄ = outer(n̄, x), x̄ = transpose(W) @ n̄);
- v[i]: v̄ += CASE WHEN [1, 2, …, n] = i THEN 1 ELSE 0 END * n̄, the mask of the position (outer(mask, n̄) for a
  row of a matrix);
- [a, b, c]: ā += n̄[1], b̄ += n̄[2], …
An adjoint that is a number where its node is a vector or a matrix (sum's: every element's is the same) stands for
that number in every element; an operation whose vjp needs the shape (@, outer, dot, softmax, indexing) gets it
spread first, times a vector or matrix of ones. The gradient is built into a copy of the parsed graph, so the
printer writes it in the lambda language, and it reads back: unrolled at the same shapes, each element is the
unrolled program's derivative (tests/test_vectors.py).
"""
from .. import limits
from .rules import OPERATIONS, PRIMITIVES, partials
from . import vectors


def gradient(lam, shapes):
    """{weight name: node id of ∂body/∂weight} in lam's graph (a copy, grown here) at vectors.Shapes shapes."""
    graph = lam.graph
    known = vectors.shapes_of(lam, shapes)  # the parsed nodes'; the nodes built here are constants or operations
    exact, graph.exact = graph.exact, False

    def shape(i):
        """The shape of node i, also of the nodes built here."""
        if i not in known:
            node = graph.nodes[i]
            args = [shape(a) for a in node.args]
            known[i] = () if node.op == 'const' else OPERATIONS[node.op].shape(*args) if node.op in OPERATIONS \
                else vectors.broadcast(node.op, args)
        return known[i]

    def spread(g, to):
        """g, a number standing for every element, as a vector or matrix of shape to."""
        if shape(g.id) == tuple(to) or not to:
            return g
        return g * ones(to)

    def ones(to):
        one = graph.const(1)
        row = graph.apply('stack', *[one] * to[-1])
        return row if len(to) == 1 else graph.apply('stack', *[row] * to[0])

    try:
        live = graph.depends_on_weights()
        adjoint = {lam.root: graph.const(1)}

        def add(a, term):
            if live[a]:
                adjoint[a] = adjoint[a] + term if a in adjoint else term

        for i in reversed(graph.ancestors([lam.root])):
            node = graph.nodes[i]
            limits.tick()
            if i not in adjoint or node.op == 'weight' or not live[i]:  # constants and columns are never live
                continue
            g = adjoint[i]
            if node.op in PRIMITIVES:
                for a, p in zip(node.args, partials(graph, i)):
                    if p is not None and live[a]:
                        term = p * g
                        add(a, graph.apply('sum', term) if not shape(a) and shape(term.id) else term)
            elif node.op == 'index':
                v, at = node.args
                n = shape(v)[0]
                mask = graph.apply('case', graph.apply('eq', graph.apply('stack', *map(graph.const, range(1, n + 1))),
                                                       graph.expr(at)), 1, 0)
                inner = shape(v)[1:]
                add(v, mask * g if not inner else graph.apply('outer', mask, spread(g, inner)))
            elif node.op == 'stack':
                for k, a in enumerate(node.args):
                    add(a, g if not shape(g.id) else graph.apply('index', g, graph.const(k + 1)))
            else:
                args = [graph.expr(a) for a in node.args]
                cotangents = OPERATIONS[node.op].vjp(spread(g, shape(i)), graph.expr(i), *args,
                                                      [shape(a) for a in node.args])
                for a, c in zip(node.args, cotangents):
                    if c is not None:
                        add(a, c)
        found = {graph.nodes[i].value: i for i in adjoint if graph.nodes[i].op == 'weight'}
        return {name: adjoint[found[name]].id if name in found else graph.const(0).id
                for name in dict.fromkeys([*lam.weights, *dict(shapes.weights)])}
    finally:
        graph.exact = exact
