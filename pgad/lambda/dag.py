"""The expression DAG: every distinct subexpression is one node, built once.

A Graph is a list of nodes in topological order (a node's arguments always come
before it) and an index that returns the existing node when the same
(op, args, value) is built again, so primal and derivative code share every
common subexpression. Building a node also applies the small algebra that keeps
derivatives readable: constant folding and the identities of 0 and 1. While the parser
builds the user's expression (Graph.exact) the rules that would turn a NaN or an infinity
into a number are off: ln(w.a)*0 at w.a = -1 is NaN, as PostgreSQL's ln(-1) is an error.

Expr wraps a node id with Python operators, so derivative rules read as maths:
`lambda x, y, out: (y, x)`.
"""
import math
from dataclasses import dataclass

import numpy as np

from . import rules
from .. import limits


@dataclass(frozen=True)
class Node:
    op: str           # 'const', 'column', 'weight', a primitive name from rules.PRIMITIVES or an operation's from
                      # rules.OPERATIONS (before vectors.py unrolls it)
    args: tuple = ()  # ids of the argument nodes
    value: object = None  # the number for 'const', the name for 'column' and 'weight'


LEAVES = ('const', 'column', 'weight')


class Graph:
    def __init__(self, max_nodes=limits.DEFAULT.lambda_nodes):
        self.nodes = []
        self._index = {}
        self.max_nodes = max_nodes  # pgad.max_lambda_nodes: building one more stops with SQLSTATE 54001
        self.exact = False  # the parser's: no rule that turns a NaN or an infinity into a number (x*0, 0/x, x - x)

    def copy(self):
        """A graph with the same nodes, to grow apart from this one."""
        other = Graph(self.max_nodes)
        other.nodes, other._index, other.exact = list(self.nodes), dict(self._index), self.exact
        return other

    def expr(self, i):
        return Expr(self, i)

    def __len__(self):
        return len(self.nodes)

    def _intern(self, op, args=(), value=None):
        key = (op, args, value if op != 'const' else (type(value), value, math.copysign(1, value)))  # -0 is not 0
        limits.tick()
        if key not in self._index:
            if len(self.nodes) >= self.max_nodes:
                raise limits.too_large(f'lambda is too large: more than {self.max_nodes} expression nodes with its '
                                       'derivatives', 'pgad.max_lambda_nodes', self.max_nodes)
            self._index[key] = len(self.nodes)
            self.nodes.append(Node(op, args, value))
        return self._index[key]

    # leaves
    def const(self, value):
        value = bool(value) if isinstance(value, (bool, np.bool_)) else float(value)
        if value == 0.0 and not isinstance(value, bool) and not self.exact:
            value = 0.0  # a derivative's zero has no sign; the user's -0 keeps it (atan2(-0, -1) is -pi)
        return Expr(self, self._intern('const', (), value))

    def column(self, name):
        return Expr(self, self._intern('column', (), name))

    def weight(self, name):
        return Expr(self, self._intern('weight', (), name))

    # primitives, simplified as they are built
    def apply(self, op, *args):
        ids = tuple(a.id if isinstance(a, Expr) else self.const(a).id for a in args)
        return Expr(self, simplify(self, op, ids))

    def type_of(self, i):
        node = self.nodes[i]
        if node.op == 'const':
            return 'b' if isinstance(node.value, bool) else 'n'
        if node.op in LEAVES or node.op in rules.OPERATIONS:
            return 'n'
        return rules.PRIMITIVES[node.op].result

    def ancestors(self, roots):
        """Ids of every node the roots depend on (the roots included), in topological order."""
        seen, stack = set(), list(roots)
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                stack.extend(self.nodes[i].args)
        return sorted(seen)

    def depends_on_weights(self):
        """For every node: does its value change with some weight?"""
        flags = []
        for node in self.nodes:
            flags.append(node.op == 'weight' or any(flags[a] for a in node.args))
        return flags

    def depends_on_data(self):
        """For every node: does its value change from row to row?"""
        flags = []
        for node in self.nodes:
            flags.append(node.op == 'column' or any(flags[a] for a in node.args))
        return flags

    def rebuilt(self, roots, replace):
        """(a new graph of roots' ancestors, {old id: its Expr there}), each node for which replace(node, new graph)
        gives an Expr replaced by it (a state read made a column, a label made a weight, a keyed weight's read
        w.p[d.c] made a weight p). The new graph is exact, as the parser's: it folds nothing that would hide a NaN."""
        graph, values = Graph(self.max_nodes), {}
        graph.exact = True
        for i in self.ancestors(roots):
            node = self.nodes[i]
            found = replace(node, graph)
            if found is not None:
                values[i] = found
            elif node.op == 'const':
                values[i] = graph.const(node.value)
            elif node.op == 'column':
                values[i] = graph.column(node.value)
            elif node.op == 'weight':
                values[i] = graph.weight(node.value)
            else:
                values[i] = graph.apply(node.op, *[values[a] for a in node.args])
        return graph, values


def simplify(graph, op, ids):
    """The id of op(ids), after constant folding and the identities of 0 and 1."""
    nodes = graph.nodes
    consts = [nodes[i].value if nodes[i].op == 'const' else None for i in ids]
    if all(c is not None for c in consts) and op in rules.PRIMITIVES:
        with np.errstate(all='ignore'):
            return graph.const(rules.PRIMITIVES[op].evaluate(*[np.float64(c) if not isinstance(c, bool)
                                                             else np.bool_(c) for c in consts])).id
    is_const = lambda k, v: consts[k] is not None and not isinstance(consts[k], bool) and consts[k] == v  # noqa: E731
    if op == 'add':
        if is_const(0, 0): return ids[1]
        if is_const(1, 0): return ids[0]
        if consts[0] is not None: ids = (ids[1], ids[0])  # constants last: x + 1
        if nodes[ids[1]].op == 'neg': return simplify(graph, 'sub', (ids[0], nodes[ids[1]].args[0]))
    elif op == 'sub':
        if is_const(1, 0): return ids[0]
        if is_const(0, 0): return simplify(graph, 'neg', (ids[1],))
        if ids[0] == ids[1] and not graph.exact: return graph.const(0).id  # NaN - NaN is NaN
        if nodes[ids[1]].op == 'neg': return simplify(graph, 'add', (ids[0], nodes[ids[1]].args[0]))
    elif op == 'mul':
        if consts[1] is not None and consts[0] is None: ids, consts = (ids[1], ids[0]), [consts[1], consts[0]]  # 2*x
        if is_const(0, 1): return ids[1]
        if is_const(0, 0) and not graph.exact: return ids[0]  # NaN*0 is NaN
        if is_const(0, -1): return simplify(graph, 'neg', (ids[1],))
        a, b = nodes[ids[0]], nodes[ids[1]]
        if a.op == 'neg' and b.op == 'neg': return simplify(graph, 'mul', (a.args[0], b.args[0]))
        if a.op == 'neg': return simplify(graph, 'neg', (simplify(graph, 'mul', (a.args[0], ids[1])),))
        if b.op == 'neg': return simplify(graph, 'neg', (simplify(graph, 'mul', (ids[0], b.args[0])),))
        if a.op == 'const' and b.op == 'mul' and nodes[b.args[0]].op == 'const':  # 2*(3*x) = 6*x
            return simplify(graph, 'mul', (simplify(graph, 'mul', (ids[0], b.args[0])), b.args[1]))
        masks = [(k, ids[1 - k]) for k in (1, 0) if nodes[ids[k]].op == 'case' and _masks(nodes, nodes[ids[k]])]
        if masks and not graph.exact:  # x * CASE WHEN c THEN y ELSE 0 END: a select of x*y, into a mask of constants first
            select, other = min(masks, key=lambda m: not _constant(nodes, nodes[ids[m[0]]]))
            return _through_mask(graph, ids[select], lambda branch: simplify(graph, 'mul', (other, branch)))
    elif op == 'div':
        if is_const(1, 1): return ids[0]
        if is_const(0, 0) and not graph.exact: return ids[0]  # 0/NaN is NaN
        if nodes[ids[0]].op == 'neg': return simplify(graph, 'neg', (simplify(graph, 'div', (nodes[ids[0]].args[0], ids[1])),))
    elif op == 'neg':
        if nodes[ids[0]].op == 'neg': return nodes[ids[0]].args[0]
        if nodes[ids[0]].op == 'case' and _masks(nodes, nodes[ids[0]]) and not graph.exact:
            return _through_mask(graph, ids[0], lambda branch: simplify(graph, 'neg', (branch,)))
    elif op == 'pow':
        if is_const(1, 1): return ids[0]
        if is_const(1, 0): return graph.const(1).id
    elif op in ('and', 'or'):
        if ids[0] == ids[1]: return ids[0]  # x AND x is x
    elif op == 'case':
        if consts[0] is not None: return ids[1] if consts[0] else ids[2]
        if ids[1] == ids[2]: return ids[1]
        then, other = nodes[ids[1]], nodes[ids[2]]
        if then.op == 'case' and then.args[0] == ids[0]:  # the same condition inside: its THEN is taken
            return simplify(graph, 'case', (ids[0], then.args[1], ids[2]))
        if other.op == 'case' and other.args[0] == ids[0]:  # … or its ELSE
            return simplify(graph, 'case', (ids[0], ids[1], other.args[2]))
        # masks in masks flatten: their chains stay one deep
        if is_const(2, 0) and then.op == 'case' and _zero(nodes, then.args[2]):  # CASE WHEN a AND b THEN y ELSE 0
            return simplify(graph, 'case', (simplify(graph, 'and', (ids[0], then.args[0])), then.args[1], ids[2]))
        if is_const(1, 0) and other.op == 'case' and _zero(nodes, other.args[1]):  # CASE WHEN a OR b THEN 0 ELSE y
            return simplify(graph, 'case', (simplify(graph, 'or', (ids[0], other.args[0])), ids[1], other.args[2]))
    return graph._intern(op, tuple(ids))


def _masks(nodes, case_node):
    """Is this CASE a mask — one branch the constant 0, or both branches constants?

    Products with a mask are rewritten as the mask of the product, so the rows a CASE did not take get an exact 0
    rather than 0 times whatever the untaken branch's derivative is there (inf·0 = NaN under ln, sqrt, /).
    """
    return any(_zero(nodes, k) for k in case_node.args[1:]) or _constant(nodes, case_node)


def _zero(nodes, i):
    return nodes[i].op == 'const' and not isinstance(nodes[i].value, bool) and nodes[i].value == 0


def _constant(nodes, case_node):
    """Are both branches of this CASE constants?"""
    return all(nodes[k].op == 'const' for k in case_node.args[1:])


def _through_mask(graph, i, apply):
    """The mask at node i with apply(branch) in place of its branches: down the chain of masks inside masks (the
    branch that is not the constant 0, to the first branch that is no mask, or a mask of constants), then built back
    up, without recursion: a CASE nested thousands deep is a chain thousands long."""
    nodes, levels = graph.nodes, []  # (condition, the chain goes on in THEN, the other branch applied)
    while True:
        node = nodes[i]
        if not (node.op == 'case' and _masks(nodes, node)):
            result = apply(i)
            break
        c, then, other = node.args
        if _constant(nodes, node):
            result = simplify(graph, 'case', (c, apply(then), apply(other)))
            break
        on = not _zero(nodes, then)
        levels.append((c, on, apply(other if on else then)))
        i = then if on else other
    for c, on, fixed in reversed(levels):
        result = simplify(graph, 'case', (c, result, fixed) if on else (c, fixed, result))
    return result


class Expr:
    """A node of a Graph, with operators that build new nodes: the language derivative rules are written in."""
    __slots__ = ('graph', 'id')
    __array_priority__ = 1000  # numpy scalars on the left defer to Expr's reflected operators

    def __init__(self, graph, id):
        self.graph, self.id = graph, id

    def __add__(self, other): return self.graph.apply('add', self, other)
    def __radd__(self, other): return self.graph.apply('add', other, self)
    def __sub__(self, other): return self.graph.apply('sub', self, other)
    def __rsub__(self, other): return self.graph.apply('sub', other, self)
    def __mul__(self, other): return self.graph.apply('mul', self, other)
    def __rmul__(self, other): return self.graph.apply('mul', other, self)
    def __truediv__(self, other): return self.graph.apply('div', self, other)
    def __rtruediv__(self, other): return self.graph.apply('div', other, self)
    def __pow__(self, other): return self.graph.apply('pow', self, other)
    def __neg__(self): return self.graph.apply('neg', self)
    def __gt__(self, other): return self.graph.apply('gt', self, other)
    def __ge__(self, other): return self.graph.apply('ge', self, other)
    def __le__(self, other): return self.graph.apply('le', self, other)

    def __repr__(self):
        return f'Expr(#{self.id} {self.graph.nodes[self.id]})'
