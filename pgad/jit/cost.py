"""What a row of a kernel costs, estimated from the program alone, so that a kernel call is cut in pieces that each
run a short while (threads.pieces): a cancel waits for the pieces running, never for a whole call.

The estimate is static — the same program gives the same figure on every run — because the pieces decide how the
sums are grouped, and a given thread count must give the same bits run to run (threads.py). It counts work units a
row: for the unrolled kernel (codegen.py) its DAG's nodes, those that call libm or compute an exp counted as
LIBM_UNITS; for a loop kernel (loops.py) each operation's multiply-adds at its shapes (a matrix product M·N·P, an
elementwise step or a reduction one per element), three times over for the nodes whose adjoint the reverse sweep
computes (the forward value and the two products of its vector-Jacobian product), a libm call counted as
LIBM_UNITS, plus ROW_UNITS a row for the loop's own work. A unit's nanoseconds, measured once on the 2-core VM
(below), turn units into time; they err on the dear side, which costs a cheap kernel nothing (its call stays one
piece a thread: threads.pieces) and a dear one a few more pieces of a few µs each.

`python bench/cost.py --repeats 3`, three runs on the 2-core VM shared with other work (load averages 2 to 6), one
thread, ns a row: the least and the most measured / the estimate
  unrolled  linear loss, 3 columns 0.8 / 2.0; logistic, 8 columns 4.0–7.9 / 4.5; 24 exp terms (not vectorised)
            129–262 / 308; at O0 (one run): 200 exp terms 1,750 / 4,980, 400 of them 6,504 / 9,940, 400
            products 2,000 / 3,220
  store     sum(a @ (b @ x)) at 20 × 20 100–121 / 506, at 40 × 40 579–660 / 1,962; sum(a @ outer(b @ x, x)) at
            16 × 16 4,164–4,261 / 5,389, at 32 × 32 13,739–54,077 / 41,181; a 64-32-10 tanh network 394–963 / 1,974
so a piece estimated at PIECE_NS ran a fifth of it to 1.3 times it (1.8 for the cheapest kernels, whose calls are
one piece a thread at any size the descent gives them).
"""
import numpy as np

from ..lang import vectors
from .codegen import CALLS_LIBM

UNROLLED_NS = 0.05   # a node of the unrolled kernel, vectorised (8 rows a SIMD register on AVX-512, 4 on AVX2)
SCALAR_NS = 0.4      # a node of an unrolled kernel compiled without vectorising (compiler.TIERS)
O0_NS = 0.8          # a node of one compiled at O0, the largest: each value goes through the stack
LOOP_NS = 0.2        # a multiply-add of a loop kernel
LIBM_UNITS = 20      # a call of libm (or an inline exp) against a multiply-add
MATRICES = 2         # a multiply-add of a matrix by a matrix (axpys and dot products, no lanes) against a vector's
ROW_UNITS = 50       # a loop kernel's work a row past its operations: its loops, its tape's records
EXPS = frozenset({'exp', 'sigmoid', 'softplus', 'logsumexp', 'softmax', 'pow'})


def per_row(program, form, tier=None):
    """The estimated nanoseconds a row of program's kernel takes: form is compiler.form(program)'s, tier the
    compiler.Tier that compiles it (None: a vectorised one)."""
    if form == 'unrolled':
        node = UNROLLED_NS if tier is None or tier.vectorise else SCALAR_NS if tier.speed_level else O0_NS
        return node * _unrolled_units(program)
    return LOOP_NS * (_loop_units(program) * (1.5 if form == 'recompute' else 1.0) + ROW_UNITS)


def _dear(op):
    return op in CALLS_LIBM or op in EXPS


def _unrolled_units(program):
    graph = program.graph
    nodes = graph.ancestors(program.outputs)
    return len(program.outputs) + sum(LIBM_UNITS if _dear(graph.nodes[i].op) else 1 for i in nodes)


def _loop_units(program):
    lam = program.tensor
    graph = lam.graph
    shape = vectors.shapes_of(lam, program.dims)
    live = graph.depends_on_weights()
    units = 0
    for i in graph.ancestors([lam.root]):
        node = graph.nodes[i]
        if node.op in ('const', 'weight'):
            continue
        size = int(np.prod(shape[i], dtype=np.int64))
        if node.op in ('matmul', 'dot'):
            a, b = (shape[k] for k in node.args)
            work = (a[0] if len(a) == 2 else 1) * a[-1] * (b[1] if len(b) == 2 else 1)
            work *= MATRICES if len(b) == 2 else 1
        else:
            work = max([size] + [int(np.prod(shape[k], dtype=np.int64)) for k in node.args])
        units += work * (LIBM_UNITS if _dear(node.op) else 1) * (3 if live[i] else 1)
    return units
