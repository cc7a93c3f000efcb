"""Forward mode: tangent propagation through the DAG, one tangent per weight.

For every weight w, walk the nodes in topological order and give each the tangent
    t(node) = sum over its arguments a of  ∂node/∂a · t(a)
with t(w) = 1 and t(anything else a leaf) = 0. A tangent that is structurally zero is
None and costs nothing. The result is the gradient as DAG nodes, built in the same graph
as the loss, so every subexpression the two share is computed once.
"""
from . import rules
from .. import limits


def gradient(graph, root, weights):
    """{weight name: node id of ∂root/∂weight}, for every name in weights."""
    order = graph.ancestors([root])
    live = graph.depends_on_weights()
    partials = {i: rules.partials(graph, i) for i in order if live[i] and graph.nodes[i].op != 'weight'}
    result = {}
    for name in weights:
        tangent = {}
        limits.tick(len(order))
        for i in order:
            node = graph.nodes[i]
            if node.op == 'weight':
                tangent[i] = graph.const(1) if node.value == name else None
            elif i in partials:
                tangent[i] = _sum(p * tangent[a] for a, p in zip(node.args, partials[i])
                                  if p is not None and tangent.get(a) is not None)
        result[name] = (tangent.get(root) or graph.const(0)).id
    return result


def _sum(terms):
    total = None
    for term in terms:
        total = term if total is None else total + term
    return total
