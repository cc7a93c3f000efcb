"""The tile planning of a loop kernel: where each node of the parsed lambda lives (its value's and its adjoint's
place in a row's records), the slots an operation keeps past its value, how many rows a 'store' tile holds, and which
buffers stay on the stack and which are carved out of the scratch buffer on the heap.
"""
from dataclasses import dataclass

import numpy as np

from ...lang import vectors

TILE = 64  # rows a 'store' tile holds: measured fastest (docs/design.md, "Loop kernels and tape strategies")
TAPE_BYTES = 1 << 20  # but fewer where their tape would pass 1 MiB (rows_of): the scratch buffer grows with them
SMALL = 1    # the most doubles one alloca() may hold: a scalar accumulator (a buffer is buffer()'s)
ALIGN = 8    # doubles in a cache line: each scratch buffer starts on one
# The bytes of buffers a kernel keeps on its stack, the first that fit: small ones, which LLVM keeps in registers (a
# logistic loss of 8 columns over 200,000 rows took 37–39 ms with 'recompute' and 35–36 ms with 'store' with every
# buffer on the heap, 5.6–9.6 and 10–24 ms so, the same run); the rest on the heap.
STACK_BYTES = 16 << 10


@dataclass
class Layout:
    """Where each node of the parsed DAG lives: its shape, its value's place and its adjoint's."""
    order: list       # the nodes under the root, in topological order
    shape: dict       # node → shape
    value: dict       # node → offset in a row's value record (not for constants, weights)
    adjoint: dict     # node → offset in a row's adjoint record (the nodes that depend on a weight, but weights)
    weight: dict      # weight node → offset of its first element in the weight vector (and the gradient sums)
    columns: dict     # column node → [index into the kernel's columns, one per element]
    record: int       # doubles in a row's value record
    adjoints: int     # doubles in a row's adjoint record
    live: list        # node → does it depend on a weight?


def layout(program):
    """The Layout of program's parsed lambda (program.tensor) at its shapes."""
    lam = program.tensor
    graph = lam.graph
    order = graph.ancestors([lam.root])
    shape = vectors.shapes_of(lam, program.dims)
    weight_at = {name: k for k, name in enumerate(program.weights)}
    column_at = {name: k for k, name in enumerate(program.columns)}
    live = graph.depends_on_weights()
    value, adjoint, weight, columns = {}, {}, {}, {}
    record = adjoints = 0
    for i in order:
        node = graph.nodes[i]
        size = int(np.prod(shape[i], dtype=np.int64))
        if node.op == 'weight':
            weight[i] = weight_at[vectors.elements(node.value, shape[i])[0]]
            continue
        if node.op == 'const':
            continue
        if node.op == 'column':
            columns[i] = [column_at[e] for e in vectors.elements(node.value, shape[i])]
        value[i], record = record, record + size + EXTRA.get(node.op, lambda a: 0)(shape[node.args[0]] if node.args
                                                                                    else ())
        if live[i]:
            adjoint[i], adjoints = adjoints, adjoints + size
    return Layout(order, shape, value, adjoint, weight, columns, max(record, 1), max(adjoints, 1), live)


# Slots a node keeps past its value, for its reverse sweep: logsumexp its exp(v − max v) and their sum, so that
# its vector-Jacobian product (the softmax) needs no exp of its own.
EXTRA = {'logsumexp': lambda shape: shape[0] + 1}


def size_of(shape):
    return int(np.prod(shape, dtype=np.int64))


def on_the_heap(sizes):
    """The doubles of the scratch buffer for buffers of these sizes, as buffer() places them: those past STACK_BYTES
    on the stack, each rounded up to whole cache lines."""
    stack = heap = 0
    for n in sizes:
        if stack + 8 * n > STACK_BYTES:
            heap += -(-n // ALIGN) * ALIGN
        else:
            stack += 8 * n
    return heap


def rows_of(program, tape, tile=None):
    """The rows of program's tile: 1 but for 'store', whose tile holds tile rows if given, else TILE, or as many
    as keep its tape, adjoints and weights' lanes within TAPE_BYTES (at least 1)."""
    if tape != 'store':
        return 1
    if tile:
        return tile
    lay = layout(program)
    return max(1, min(TILE, TAPE_BYTES // (8 * (lay.record + lay.adjoints + len(program.weights)))))
