"""The python backend (`backend => 'python'`): numpy over whole column arrays.

The reference every other backend is tested against: each node of the program is one numpy call over the rows,
using the evaluate column of the rules table, and each output is summed over the rows. It also runs the lambdas too
large for the llvm backend to compile, so its memory is bounded: a node's array is dropped after its last use,
and the rows go through in blocks small enough that the arrays alive at once take at most BLOCK_BYTES. Between
nodes it lets the server check for interrupts (limits.tick).
"""
import numpy as np

from . import limits
from .lang.rules import PRIMITIVES

BLOCK_BYTES = 64 << 20


def compile(program):
    """A kernel(columns, rows, weights) → the sum over the rows of each of program.outputs."""
    graph, outputs = program.graph, program.outputs
    order, last_use, plan = steps(graph, outputs, {name: k for k, name in enumerate(program.columns)},
                                  {name: k for k, name in enumerate(program.weights)})
    block = max(1, BLOCK_BYTES // (8 * max(1, _most_alive(order, last_use, graph.depends_on_data()))))

    def run(columns, rows, weights):
        with np.errstate(all='ignore'):
            values = evaluate(plan, columns, weights)
            return np.array([np.sum(values[o]) if np.ndim(values[o]) else values[o] * rows for o in outputs],
                            dtype=np.float64)

    def kernel(columns, rows, weights):
        if rows <= block:
            return run(columns, rows, weights)
        return sum(run([c[start:start + block] for c in columns], min(block, rows - start), weights)
                   for start in range(0, rows, block))
    return kernel


def steps(graph, roots, column_at, weight_at):
    """(the ancestors of roots in order, each node's last use there, the plan evaluate() follows): a step per node,
    (node id, how to get its value, from what, the nodes whose last use this is), a column's value from
    columns[column_at[name]] and a weight's from weights[weight_at[name]]. The roots live to the end."""
    order = graph.ancestors(roots)
    last_use = {i: len(order) for i in roots}
    for k, i in enumerate(order):
        for a in graph.nodes[i].args:
            last_use[a] = max(last_use.get(a, k), k)
    plan = []
    for k, i in enumerate(order):
        node = graph.nodes[i]
        dead = tuple(a for a in set(node.args) if last_use[a] == k)
        if node.op == 'const':
            plan.append((i, 'const', node.value, dead))
        elif node.op == 'column':
            plan.append((i, 'column', column_at[node.value], dead))
        elif node.op == 'weight':
            plan.append((i, 'weight', weight_at[node.value], dead))
        elif node.op == 'index':  # a vector weight read at each row's position (pgad.evaluate's categories)
            plan.append((i, _gather, node.args, dead))
        else:
            plan.append((i, PRIMITIVES[node.op].evaluate, node.args, dead))
    return order, last_use, plan


def evaluate(plan, columns, weights):
    """{root: its value} (an array over the rows, or a number where it reads no column) by the plan steps() made,
    each node one numpy call over whole columns, a node's value dropped after its last use; interrupts checked
    between nodes (limits.tick)."""
    values = {}
    with np.errstate(all='ignore'):
        for i, how, what, dead in plan:
            limits.tick()
            if how == 'const':
                values[i] = what
            elif how == 'column':
                values[i] = columns[what]
            elif how == 'weight':
                values[i] = weights[what]
            else:
                values[i] = how(*[values[a] for a in what])
            for a in dead:
                del values[a]
    return values


def named_plan(graph, roots):
    """steps()' plan for inputs given by name: evaluate(plan, {column: array}, {weight: value}) (the sequence models'
    states, adjoints and per-sequence weights are such inputs)."""
    return steps(graph, list(roots), _ByName(), _ByName())[2]


class _ByName(dict):
    """A plan's column_at and weight_at that map every name to itself."""
    def __getitem__(self, name):
        return name


def as_rows(value, n):
    """A node's value, an array over the rows or one number, as n float64s (a view, not a copy)."""
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (n,))


def _gather(vector, at):
    return vector[np.asarray(at, dtype=np.float64).astype(np.int64)]


def _most_alive(order, last_use, per_row):
    """The most arrays of rows alive at once while the nodes are evaluated in order."""
    alive = most = 0
    ends = {}
    for k, i in enumerate(order):
        if per_row[i]:
            alive += 1
            ends[last_use[i]] = ends.get(last_use[i], 0) + 1
        most = max(most, alive)
        alive -= ends.pop(k, 0)
    return most


def values(graph, roots, columns, weights, rows):
    """The value over the rows of each of graph's nodes roots, as float64 arrays of `rows` values: the python
    backend's evaluation over whole columns ({name: array}), the weights {name: number, or a categorical weight's
    vector of its categories' values}. A categorical weight is read as w.x[d.c] only (categorical.indexed), d.c each
    row's code 1 … K, 0 for a category the model never saw: the row's value is the vector's entry at the code, 0 at
    code 0, as the scoring function's CASE gives."""
    at = {n: np.concatenate([[0.0], np.asarray(v, dtype=np.float64)]) if np.ndim(v) else np.float64(v)
          for n, v in weights.items()}  # a categorical weight: 0, then its categories' values
    _, _, plan = steps(graph, roots, {name: name for name in columns}, {name: name for name in at})
    found = evaluate(plan, columns, at)
    return [as_rows(found[r], rows) for r in roots]
