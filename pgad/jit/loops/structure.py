"""The operations that move elements — stack ([a, b]), index (v[i]) and transpose — forward, and their
vector-Jacobian products: a row at a time and (stack) over a tile lane by lane. Registered in operations.py.
"""
import math

from llvmlite import ir

from ..codegen import DOUBLE, I64
from .layout import size_of

def no_reads(lay, args, i):
    """stack's and transpose's reverse read no value."""
    return []


def index_reads(lay, args, i):
    """index's reverse reads the position."""
    return [args[1]]


def stack_forward(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.put(i, kn.index((t * inner, 1), (k, 1)), kn.val(a, k)))


def stack_reverse(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.add_adj(a, k, kn.adj(i, kn.index((t * inner, 1), (k, 1)))))


def lanes_stack_forward(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.rows(lambda: kn.put(i, kn.index((t * inner, 1), (k, 1)), kn.val(a, k))))


def lanes_stack_reverse(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.rows(lambda: kn.add_adj(a, k, kn.adj(i, kn.index((t * inner, 1),
                                                                                                (k, 1))))))


def _position(kn, v, index):
    """(the 0-based row of v that index picks, as an i64, clamped into range; is it a position of v, an i1)."""
    b, n = kn.b, kn.lay.shape[v][0]
    x = kn.val(index, 0)
    whole = b.fcmp_ordered('==', x, kn.e.call('llvm.floor.f64', x))
    inside = b.and_(b.fcmp_ordered('>=', x, ir.Constant(DOUBLE, 1.0)), b.fcmp_ordered('<=', x, ir.Constant(DOUBLE, n)))
    ok = b.and_(whole, inside)
    k = b.fptosi(b.select(ok, x, ir.Constant(DOUBLE, 1.0)), I64)
    return b.sub(k, ir.Constant(I64, 1)), ok


def index_forward(kn, i, args):
    v, index = args
    inner = size_of(kn.lay.shape[v][1:])
    at, ok = _position(kn, v, index)
    node = kn.program.tensor.graph.nodes[index]  # a categorical column's code 0, a category never trained: 0
    categorical = node.op == 'column' and node.value in kn.program.dims.categorical
    nan = ir.Constant(DOUBLE, 0.0 if categorical else math.nan)
    kn.loop(inner, lambda k: kn.put(i, k, kn.b.select(ok, kn.val(v, kn.index((at, inner), (k, 1))), nan)))


def index_reverse(kn, i, args):
    v, index = args
    inner = size_of(kn.lay.shape[v][1:])
    at, ok = _position(kn, v, index)
    zero = ir.Constant(DOUBLE, 0.0)
    kn.loop(inner, lambda k: kn.add_adj(v, kn.index((at, inner), (k, 1)), kn.b.select(ok, kn.adj(i, k), zero)))


def transpose_forward(kn, i, args):
    v, = args
    m, n = kn.lay.shape[v]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.put(i, kn.index((k, m), (r, 1)), kn.val(v, kn.index((r, n), (k, 1))))))


def transpose_reverse(kn, i, args):
    v, = args
    m, n = kn.lay.shape[v]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.add_adj(v, kn.index((r, n), (k, 1)),
                                                         kn.adj(i, kn.index((k, m), (r, 1))))))
