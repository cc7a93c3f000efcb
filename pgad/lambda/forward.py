"""Forward mode: tangent propagation through the DAG, all weights' tangents in one sweep.

Walk the nodes in topological order and give each the tangent vector
    t(node) = sum over its arguments a of  ∂node/∂a · t(a)
where t(w) is 1 in w's own place, and a tangent is sparse: {weight: DAG node}, a weight whose tangent is
structurally zero left out (it costs nothing). For each weight the sum is taken over the arguments in order, so each
component is the node that one tangent pass per weight would build. A node's tangent is dropped after its last use,
and an argument used for the last time with ∂node/∂a = 1 hands its tangent on instead of being copied: along a
chain of + (a sum of n terms, each with weights of its own) the work is linear, where a pass per weight, or a copy
per node, would be quadratic. The result is the gradient as DAG nodes, in the same graph as the loss, so every
subexpression the two share is computed once.

A tangent's entries cost memory whether or not they build nodes (a tangent copied through x + c builds none), and
they grow with the weights times the nodes: sum(sum(w.v) + d.u) of 6,000 weights and a 6,000-element column holds
36 million. Past TANGENT_ENTRIES per node pgad.max_lambda_nodes allows, SQLSTATE 54001, before they are built.
"""
from . import rules
from .. import limits
from ..errors import PgadError

TANGENT_ENTRIES = 4  # a small network's tangents hold about one entry per node


def gradient(graph, root, weights):
    """{weight name: node id of ∂root/∂weight}, for every name in weights."""
    order = graph.ancestors([root])
    live = graph.depends_on_weights()
    wanted = set(weights)
    uses = {}  # of each live node, by the nodes still to visit
    for i in order:
        if live[i]:
            for a in graph.nodes[i].args:
                if live[a]:
                    uses[a] = uses.get(a, 0) + 1
    tangent, entries, most = {}, 0, TANGENT_ENTRIES * graph.max_nodes
    for i in order:
        node = graph.nodes[i]
        limits.tick()
        if not live[i]:
            continue
        if node.op == 'weight':
            tangent[i] = {node.value: graph.const(1)} if node.value in wanted else {}
            continue
        total = None
        for a, p in zip(node.args, rules.partials(graph, i)):
            if not live[a]:
                continue
            uses[a] -= 1
            t = tangent.pop(a) if uses[a] == 0 else tangent[a]
            if p is None or not t:
                continue
            if total is None and uses[a] == 0 and _one(graph, p):
                total = t  # its last use, times 1: handed on
                continue
            total = {} if total is None else total
            limits.tick(len(t))
            entries += len(t)
            if entries > most:
                raise PgadError(limits.STATEMENT_TOO_COMPLEX, f'lambda is too large for forward mode: its tangents '
                                f'hold more than {most} entries', detail=f'Forward mode carries a tangent per weight '
                                f'element: at most {TANGENT_ENTRIES} entries per node of pgad.max_lambda_nodes '
                                f'({graph.max_nodes}).', hint="Use mode => 'reverse', or a smaller lambda.")
            one = _one(graph, p)  # a copy: 1·v is v
            for name, v in t.items():
                term = v if one else p * v
                total[name] = total[name] + term if name in total else term
        tangent[i] = total or {}
    found = tangent.get(root, {})
    return {name: (found[name] if name in found else graph.const(0)).id for name in weights}


def _one(graph, p):
    node = graph.nodes[p.id]
    return node.op == 'const' and not isinstance(node.value, bool) and node.value == 1


def directional(graph, roots, seeds):
    """{root: node id of Σ_j ∂root/∂w_j · seeds[w_j]}, the derivative of each root along one direction (seeds:
    {weight name: the Expr of its component}): one forward sweep whose tangent is a single node a node, not a
    vector. Over the reverse-mode gradient's nodes it is a Hessian-vector product, a node a weight rather than the
    Hessian's p² (models/blocks.py's conjugate gradients)."""
    live = graph.depends_on_weights()
    tangent = {}
    for i in graph.ancestors(list(roots)):
        limits.tick()
        node = graph.nodes[i]
        if not live[i]:
            continue
        if node.op == 'weight':
            if node.value in seeds:
                tangent[i] = seeds[node.value]
            continue
        total = None
        for a, p in zip(node.args, rules.partials(graph, i)):
            if p is None or a not in tangent:
                continue
            term = tangent[a] if _one(graph, p) else p * tangent[a]
            total = term if total is None else total + term
        if total is not None:
            tangent[i] = total
    return {r: (tangent[r] if r in tangent else graph.const(0)).id for r in roots}
