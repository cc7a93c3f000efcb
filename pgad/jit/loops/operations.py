"""Every vector operation of the loop kernels, registered in one place beside rules.OPERATIONS: its forward step, its
vector-Jacobian product (reverse), the values that reverse reads (for the 'reversible' tape), and its steps over a
lanes tile; an elementwise primitive's partials come from the rules table (partial_programs). The slots an operation
keeps past its value are layout.EXTRA. Adding a vector operation: its steps in the module of its kind (products.py,
reductions.py, structure.py) and a row in each table here.
"""
import functools

from ...lang.dag import Graph
from ...lang.rules import OPERATIONS, PRIMITIVES
from . import products, reductions, structure
from .layout import EXTRA


@functools.lru_cache(maxsize=None)
def partial_programs(op):
    """The partials of primitive op as a small DAG over the leaves '#0', '#1', … (its arguments) and '#out', and the
    node of each partial (None where there is none)."""
    graph = Graph()
    args = [graph.weight(f'#{k}') for k in range(len(PRIMITIVES[op].args))]
    result = PRIMITIVES[op].partials(*args, graph.weight('#out'))
    result = result if isinstance(result, tuple) else (result,)
    return graph, [None if p is None else (p if hasattr(p, 'graph') else graph.const(p)).id for p in result]


FORWARD = {'matmul': products.matmul_forward, 'dot': products.matmul_forward, 'sum': reductions.sum_forward,
           'logsumexp': reductions.logsumexp_forward, 'softmax': reductions.softmax_forward,
           'stack': structure.stack_forward, 'index': structure.index_forward,
           'transpose': structure.transpose_forward, 'outer': products.outer_forward}
REVERSE = {'matmul': products.matmul_reverse, 'dot': products.matmul_reverse, 'sum': reductions.sum_reverse,
           'logsumexp': reductions.logsumexp_reverse, 'softmax': reductions.softmax_reverse,
           'stack': structure.stack_reverse, 'index': structure.index_reverse,
           'transpose': structure.transpose_reverse, 'outer': products.outer_reverse}
# The values each vector operation's reverse reads (reads()): of its arguments, or its own (with its extra slots).
READS = {'matmul': lambda lay, args, i: [args[1]] * lay.live[args[0]] + [args[0]] * lay.live[args[1]],
         'sum': lambda lay, args, i: [], 'logsumexp': lambda lay, args, i: [i], 'softmax': lambda lay, args, i: [i],
         'stack': lambda lay, args, i: [], 'index': lambda lay, args, i: [args[1]],
         'transpose': lambda lay, args, i: []}
READS['dot'] = READS['outer'] = READS['matmul']
assert set(FORWARD) == set(REVERSE) == set(READS) == set(OPERATIONS), set(OPERATIONS) ^ set(FORWARD)
assert set(EXTRA) <= set(OPERATIONS), set(EXTRA) - set(OPERATIONS)

# The operations a lanes tile runs lane by lane; the others (index, transpose, softmax, outer's forward) a row at a time
LANES_FORWARD = {'matmul': products.lanes_matmul_forward, 'dot': products.lanes_matmul_forward,
                 'logsumexp': reductions.lanes_logsumexp_forward, 'stack': structure.lanes_stack_forward,
                 'sum': reductions.lanes_sum_forward}
LANES_REVERSE = {'matmul': products.lanes_matmul_reverse, 'dot': products.lanes_matmul_reverse,
                 'outer': products.lanes_outer_reverse, 'logsumexp': reductions.lanes_logsumexp_reverse,
                 'stack': structure.lanes_stack_reverse, 'sum': reductions.lanes_sum_reverse}
