"""The products — matmul (@), dot and outer — forward, and their vector-Jacobian products: a row at a time (along
contiguous memory, dot() and axpy()) and over a tile lane by lane (lanes_*). Registered in operations.py.
"""
from llvmlite import ir

from ..codegen import DOUBLE

def _dims(shape_a, shape_b):
    """(M, N, P) of a @ b: a is M×N (M = 1 for a vector), b is N×P (P = 1 for a vector)."""
    m = shape_a[0] if len(shape_a) == 2 else 1
    n = shape_a[-1]
    p = shape_b[1] if len(shape_b) == 2 else 1
    return m, n, p


def matmul_reads(lay, args, i):
    """The values the reverse of a product reads: each argument's, where the other takes an adjoint."""
    return [args[1]] * lay.live[args[0]] + [args[0]] * lay.live[args[1]]


def matmul_forward(kn, i, args):
    """C = A @ B, A M×N, B N×P (a vector: M or P is 1): each row of C a dot product per element (P = 1) or an
    axpy per element of A's row (P > 1), along contiguous memory."""
    a, c = args
    m, n, p = _dims(kn.lay.shape[a], kn.lay.shape[c])
    if p == 1:
        x = kn.preload(kn.ptr(c), n)
        kn.loop(m, lambda r: kn.put(i, r, kn.dot(kn.ptr(a, kn.index((r, n))), kn.ptr(c), n, x)))
        return
    kn.loop(m * p, lambda k: kn.put(i, k, ir.Constant(DOUBLE, 0.0)))
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.axpy(kn.ptr(i, kn.index((r, p))), kn.val(a, kn.index((r, n), (k, 1))),
                                                        kn.ptr(c, kn.index((k, p))), p)))


def matmul_reverse(kn, i, args):
    """C = A @ B: Ā += C̄ Bᵀ, B̄ += Aᵀ C̄, as axpys and dot products along contiguous memory (the matrix's
    cotangent in W @ x is the outer product C̄ xᵀ: one axpy per row of W, into its gradient sums)."""
    a, c = args
    m, n, p = _dims(kn.lay.shape[a], kn.lay.shape[c])
    if kn.lay.live[a]:
        if p == 1:  # Ā[r, :] += C̄[r] · B
            kn.loop(m, lambda r: kn.axpy(kn.adj_ptr(a, kn.index((r, n))), kn.adj(i, r), kn.ptr(c), n))
        else:  # Ā[r, k] += C̄[r, :] · B[k, :]
            kn.loop(m, lambda r: kn.loop(n, lambda k: kn.add_adj(a, kn.index((r, n), (k, 1)), kn.dot(
                kn.adj_ptr(i, kn.index((r, p))), kn.ptr(c, kn.index((k, p))), p))))
    if kn.lay.live[c]:  # B̄[k, :] += A[r, k] · C̄[r, :], for each r
        if p == 1:  # b̄ += C̄[r] · A[r, :]
            kn.loop(m, lambda r: kn.axpy(kn.adj_ptr(c, 0), kn.adj(i, r), kn.ptr(a, kn.index((r, n))), n))
        else:
            kn.loop(m, lambda r: kn.loop(n, lambda k: kn.axpy(kn.adj_ptr(c, kn.index((k, p))), kn.val(
                a, kn.index((r, n), (k, 1))), kn.adj_ptr(i, kn.index((r, p))), p)))


def outer_forward(kn, i, args):
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.put(i, kn.index((r, n), (k, 1)), kn.b.fmul(kn.val(a, r),
                                                                                          kn.val(c, k)))))


def outer_reverse(kn, i, args):  # ā[r] += Ȳ[r, :]·b, b̄ += a[r]·Ȳ[r, :]
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    if kn.lay.live[a]:
        kn.loop(m, lambda r: kn.add_adj(a, r, kn.dot(kn.adj_ptr(i, kn.index((r, n))), kn.ptr(c), n)))
    if kn.lay.live[c]:
        kn.loop(m, lambda r: kn.axpy(kn.adj_ptr(c, 0), kn.val(a, r), kn.adj_ptr(i, kn.index((r, n))), n))


def lanes_matmul_forward(kn, i, args):
    """C = A @ B, element by element (the blocked W @ x is lane_product's)."""
    a, c = args
    m, n, p = _dims(kn.lay.shape[a], kn.lay.shape[c])
    b = kn.b
    kn.loop(m * p, lambda q: kn.rows(lambda: kn.put(i, q, ir.Constant(DOUBLE, 0.0))))

    def term(r, k, j):
        at = kn.index((r, p), (j, 1))
        product = b.fmul(kn.val(a, kn.index((r, n), (k, 1))), kn.val(c, kn.index((k, p), (j, 1))))
        kn.put(i, at, b.fadd(kn.val(i, at), product))
    kn.loop(m, lambda r: kn.loop(p, lambda j: kn.loop(n, lambda k: kn.rows(lambda: term(r, k, j)))))


def lanes_matmul_reverse(kn, i, args):
    """Ā[r, k] += C̄[r, j]·B[k, j], B̄[k, j] += A[r, k]·C̄[r, j]."""
    a, c = args
    m, n, p = _dims(kn.lay.shape[a], kn.lay.shape[c])
    b = kn.b

    def terms(r, k, j):
        g = kn.adj(i, kn.index((r, p), (j, 1)))
        if kn.lay.live[a]:
            kn.add_adj(a, kn.index((r, n), (k, 1)), b.fmul(g, kn.val(c, kn.index((k, p), (j, 1)))))
        if kn.lay.live[c]:
            kn.add_adj(c, kn.index((k, p), (j, 1)), b.fmul(kn.val(a, kn.index((r, n), (k, 1))), g))
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.loop(p, lambda j: kn.rows(lambda: terms(r, k, j)))))


def lanes_outer_reverse(kn, i, args):  # ā[r] += Ȳ[r, k]·b[k], b̄[k] += a[r]·Ȳ[r, k]
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    b = kn.b
    if kn.lay.live[a]:
        kn.loop(m, lambda r: kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(
            a, r, b.fmul(kn.adj(i, kn.index((r, n), (k, 1))), kn.val(c, k))))))
    if kn.lay.live[c]:
        kn.loop(m, lambda r: kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(
            c, k, b.fmul(kn.val(a, r), kn.adj(i, kn.index((r, n), (k, 1))))))))
