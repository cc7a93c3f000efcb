"""Every vector operation of the loop kernels, registered in one place beside rules.OPERATIONS (STEPS, a row each):
its forward step, its vector-Jacobian product (reverse), the values that reverse reads (for the 'reversible' tape),
and its steps over a lanes tile; an elementwise primitive's partials come from the rules table (partial_programs).
The slots an operation keeps past its value are layout.EXTRA. Adding a vector operation: its steps in the module of
its kind (products.py, reductions.py, structure.py) and a row of STEPS here.
"""
import functools
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Steps:
    """A vector operation's steps: forward(kn, i, args) and its vector-Jacobian product reverse(kn, i, args), each
    for a row; reads(lay, args, i), the values that reverse reads (for the 'reversible' tape: reads()); and its
    steps over a lanes tile, where it has them (else a lanes tile runs it a row at a time)."""
    forward: object
    reverse: object
    reads: object
    lanes_forward: object = None
    lanes_reverse: object = None


PRODUCT = Steps(products.matmul_forward, products.matmul_reverse, products.matmul_reads,
                products.lanes_matmul_forward, products.lanes_matmul_reverse)  # @ and dot: one product's steps

STEPS = {
    'matmul': PRODUCT,
    'dot': PRODUCT,
    'outer': Steps(products.outer_forward, products.outer_reverse, products.matmul_reads,
                   lanes_reverse=products.lanes_outer_reverse),
    'sum': Steps(reductions.sum_forward, reductions.sum_reverse, reductions.sum_reads,
                 reductions.lanes_sum_forward, reductions.lanes_sum_reverse),
    'logsumexp': Steps(reductions.logsumexp_forward, reductions.logsumexp_reverse, reductions.own_reads,
                       reductions.lanes_logsumexp_forward, reductions.lanes_logsumexp_reverse),
    'softmax': Steps(reductions.softmax_forward, reductions.softmax_reverse, reductions.own_reads),
    'stack': Steps(structure.stack_forward, structure.stack_reverse, structure.no_reads,
                   structure.lanes_stack_forward, structure.lanes_stack_reverse),
    'index': Steps(structure.index_forward, structure.index_reverse, structure.index_reads),
    'transpose': Steps(structure.transpose_forward, structure.transpose_reverse, structure.no_reads),
}
assert set(STEPS) == set(OPERATIONS), set(OPERATIONS) ^ set(STEPS)
assert set(EXTRA) <= set(OPERATIONS), set(EXTRA) - set(OPERATIONS)

# The tables the kernel reads, by step. The operations a lanes tile runs lane by lane are those of LANES_FORWARD and
# LANES_REVERSE; the others (index, transpose, softmax, outer's forward) a row at a time.
FORWARD = {op: steps.forward for op, steps in STEPS.items()}
REVERSE = {op: steps.reverse for op, steps in STEPS.items()}
READS = {op: steps.reads for op, steps in STEPS.items()}
LANES_FORWARD = {op: steps.lanes_forward for op, steps in STEPS.items() if steps.lanes_forward}
LANES_REVERSE = {op: steps.lanes_reverse for op, steps in STEPS.items() if steps.lanes_reverse}
