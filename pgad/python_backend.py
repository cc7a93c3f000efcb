"""The python backend (`backend => 'python'`): numpy over whole column arrays.

The reference every other backend is tested against: each node of the program is one numpy call over all
rows, using the evaluate column of the rules table, and each output is summed over the rows.
"""
import numpy as np

from .lang.rules import PRIMITIVES


def compile(program):
    """A kernel(columns, rows, weights) → the sum over the rows of each of program.outputs."""
    nodes = program.graph.nodes
    column_at = {name: k for k, name in enumerate(program.columns)}
    weight_at = {name: k for k, name in enumerate(program.weights)}
    steps = []  # (node id, how to get its value)
    for i in program.graph.ancestors(program.outputs):
        node = nodes[i]
        if node.op == 'const':
            steps.append((i, 'const', node.value))
        elif node.op == 'column':
            steps.append((i, 'column', column_at[node.value]))
        elif node.op == 'weight':
            steps.append((i, 'weight', weight_at[node.value]))
        else:
            steps.append((i, PRIMITIVES[node.op].evaluate, node.args))
    outputs = program.outputs

    def kernel(columns, rows, weights):
        values = {}
        with np.errstate(all='ignore'):
            for i, how, what in steps:
                if how == 'const':
                    values[i] = what
                elif how == 'column':
                    values[i] = columns[what]
                elif how == 'weight':
                    values[i] = weights[what]
                else:
                    values[i] = how(*[values[a] for a in what])
            return np.array([np.sum(values[o]) if np.ndim(values[o]) else values[o] * rows for o in outputs],
                            dtype=np.float64)
    return kernel
