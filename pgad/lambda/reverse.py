"""Reverse mode: adjoint propagation over the DAG, one sweep for all weights.

Give the root the adjoint 1, then walk the nodes in reverse topological order and push
each node's adjoint to its arguments:
    adj(a) += ∂node/∂a · adj(node)
Only nodes that depend on a weight take part. The loss of one row needs no tape across
rows: the mean over rows is a reduce of this per-row map, so the backends fuse the
gradient into the same pass over the data as the loss.
"""
from . import rules


def gradient(graph, root, weights, by='weight'):
    """{weight name: node id of ∂root/∂weight}, for every name in weights; by='column', of the columns named instead
    (the derivatives by the data that explanations integrate: models/attribution.py)."""
    live = graph.depends_on_weights() if by == 'weight' else graph.depends_on_data()
    adjoint = {root: graph.const(1)}
    for i in reversed(graph.ancestors([root])):
        node = graph.nodes[i]
        if i not in adjoint or node.op == by or not live[i]:
            continue
        for a, p in zip(node.args, rules.partials(graph, i)):
            if p is not None and live[a]:
                term = p * adjoint[i]
                adjoint[a] = adjoint[a] + term if a in adjoint else term
    by_name = {graph.nodes[i].value: i for i in adjoint if graph.nodes[i].op == by}
    return {name: adjoint[by_name[name]].id if name in by_name else graph.const(0).id for name in weights}
