"""The reductions — sum, logsumexp, and softmax beside it — forward, and their vector-Jacobian products: a row at a
time and over a tile lane by lane (lanes_*). Registered in operations.py.
"""
from llvmlite import ir

from ..codegen import DOUBLE, EMIT, I64
from .layout import size_of

def sum_reads(lay, args, i):
    """sum's reverse reads no value."""
    return []


def own_reads(lay, args, i):
    """logsumexp's and softmax's reverse read their own value (and its extra slots)."""
    return [i]


def sum_forward(kn, i, args):
    v, = args
    kn.put(i, 0, kn.reduce(size_of(kn.lay.shape[v]), lambda k: kn.val(v, k)))


def sum_reverse(kn, i, args):
    v, = args
    g = kn.adj(i, 0)
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.add_adj(v, k, g))


def _greatest(kn, v, n):
    top = kn.alloca(1)
    kn.b.store(kn.val(v, 0), top)
    kn.loop(n, lambda k: kn.b.store(EMIT['greatest'](kn.e, kn.b.load(top), kn.val(v, k)), top))
    return kn.b.load(top)


def logsumexp_forward(kn, i, args):  # L = m + ln Σ e, e = exp(v − m) kept (slots 1…n) with Σ e (slot n + 1)
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    top = _greatest(kn, v, n)
    kn.exps(v, n, top, lambda k, e: kn.put(i, b.add(k, ir.Constant(I64, 1)), e))
    total = kn.reduce(n, lambda k: b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1)))))
    kn.put(i, n + 1, total)
    kn.put(i, 0, b.fadd(top, kn.e.call('log', total)))


def logsumexp_reverse(kn, i, args):  # v̄ += L̄ · e / Σ e: the softmax, from the forward sweep's exps
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    scale = b.fdiv(kn.adj(i, 0), b.load(kn.extra(i, n + 1)))
    kn.loop(n, lambda k: kn.add_adj(v, k, b.fmul(scale, b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1)))))))


def softmax_forward(kn, i, args):
    v, = args
    n = kn.lay.shape[v][0]
    top = _greatest(kn, v, n)
    kn.exps(v, n, top, lambda k, e: kn.put(i, k, e))
    total = kn.reduce(n, lambda k: kn.val(i, k))
    kn.loop(n, lambda k: kn.put(i, k, kn.b.fdiv(kn.val(i, k), total)))


def softmax_reverse(kn, i, args):  # v̄ += s ⊙ (s̄ − s̄·s)
    v, = args
    n = kn.lay.shape[v][0]
    inner = kn.reduce(n, lambda k: kn.b.fmul(kn.adj(i, k), kn.val(i, k)))
    kn.loop(n, lambda k: kn.add_adj(v, k, kn.b.fmul(kn.val(i, k), kn.b.fsub(kn.adj(i, k), inner))))


def lanes_logsumexp_forward(kn, i, args):  # as logsumexp_forward: the greatest, the exps, their sum, lane by lane
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    one = ir.Constant(I64, 1)
    kn.rows(lambda: kn.put(i, 0, kn.val(v, 0)))
    kn.loop(n, lambda k: kn.rows(lambda: kn.put(i, 0, EMIT['greatest'](kn.e, kn.val(i, 0), kn.val(v, k)))))
    kn.loop(n, lambda k: kn.rows(lambda: b.store(kn.e.call('exp', b.fsub(kn.val(v, k), kn.val(i, 0))),
                                                 kn.extra(i, b.add(k, one)))))
    kn.rows(lambda: b.store(ir.Constant(DOUBLE, 0.0), kn.extra(i, n + 1)))
    kn.loop(n, lambda k: kn.rows(lambda: b.store(b.fadd(b.load(kn.extra(i, n + 1)), b.load(kn.extra(i, b.add(k, one)))),
                                                 kn.extra(i, n + 1))))
    kn.rows(lambda: kn.put(i, 0, b.fadd(kn.val(i, 0), kn.e.call('log', b.load(kn.extra(i, n + 1))))))


def lanes_logsumexp_reverse(kn, i, args):  # v̄ += L̄ · e / Σ e
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(v, k, b.fmul(
        b.fdiv(kn.adj(i, 0), b.load(kn.extra(i, n + 1))), b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1))))))))


def lanes_sum_forward(kn, i, args):
    v, = args
    kn.rows(lambda: kn.put(i, 0, ir.Constant(DOUBLE, 0.0)))
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.rows(lambda: kn.put(i, 0, kn.b.fadd(kn.val(i, 0), kn.val(v, k)))))


def lanes_sum_reverse(kn, i, args):
    v, = args
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.rows(lambda: kn.add_adj(v, k, kn.adj(i, 0))))
