"""The llvm backend's Newton step of a keyed group (models/blocks.py): every key's block solved by conjugate
gradients in one kernel, a key at a time over its rows, which lie together (rows in the key's order).

    void kernel(i64 first, i64 last, i64 most, double *weights, double *steps, double *measures, i64 *starts,
                i64 *index, i64 *bounds, double *params, double *column0, …)

For each key k in first … last − 1 (0-based, of the group's code column) its rows are starts[k] … starts[k+1] − 1
(row index[t] of the columns where the kernel is `indexed`, else row t). The kernel sums the gradient of the local
lambda over them, g = Σ∇/rows + ridge∘x (x the key's values; params holds 1/rows, the residual's ratio squared, then
each element's ridge, 2·l2·its share), and runs conjugate gradients from d = 0 on (H + diag ridge)·d = g, each step
one more pass over the key's rows for H·p (the Hessian-vector program, its direction p read from registers), until
the residual's square is within the ratio of g's or `most` steps, or the curvature along p is not positive. It
writes d at steps[k·m …], and gᵀd = Σ αᵢ·rᵢᵀrᵢ and the steps it took at measures[2k], measures[2k + 1]: what
blocks.conjugate_gradients computes for every key at once in numpy, here without a pass over the whole table a
step, the key's rows read again while in cache.

A row is read only where its own key is k + 1 and every other key in 1 … K (else skipped), so whatever the columns
hold no read leaves the arrays; Solver checks the arrays' sizes and starts' order before each call. A key's sums
are in its rows' order on one thread, so its step has the same bits on any thread count; keys are split over the
pool's threads at key boundaries, in pieces of about threads.PIECE_NS by cost.py's estimate of a row times the steps.
"""
import ctypes
import functools
import hashlib

import numpy as np
from llvmlite import ir
import llvmlite.binding as llvm

from . import cache as disk, compiler, scatter, threads, tiers
from .codegen import DOUBLE, I64, REDUCE, _const, _Emitter, emit_nodes
from .. import limits
from ..lang import printer


def kernel_ir(graph, gradient, product, direction, reads, own, columns, indexed, name):
    """The LLVM IR (text) of the kernel `name`: gradient and product the graph's outputs (m each) of the key's
    gradient and its Hessian times the direction, whose leaves are direction (m names); reads {weight element:
    scatter.Place} of every other leaf; own the group's code column (its place among the columns); columns the column
    leaves' names in argument order (None where the graph does not read it as a number)."""
    m = len(gradient)
    module = ir.Module(name='pgad')
    module.triple = llvm.get_process_triple()
    pointer, counts = DOUBLE.as_pointer(), I64.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, I64, pointer, pointer, pointer, counts, counts,
                                                             counts, pointer] + [pointer] * len(columns)), name)
    first, last, most, weights, steps, measures, starts, index, bounds, params, *column_ptrs = fn.args
    for arg in fn.args[3:]:
        arg.add_attribute('noalias')
    codes = sorted({p.column for p in reads.values() if p.column is not None} | {own})
    b = ir.IRBuilder(fn.append_basic_block('entry'))
    entry = b.block
    size = {c: b.load(b.gep(bounds, [ir.Constant(I64, k)])) for k, c in enumerate(codes)}
    inv_rows, ratio = (b.load(b.gep(params, [ir.Constant(I64, j)])) for j in (0, 1))
    ridge = [b.load(b.gep(params, [ir.Constant(I64, 2 + j)])) for j in range(m)]
    leaves = {e: b.load(b.gep(weights, [ir.Constant(I64, p.base)])) for e, p in reads.items() if p.column is None}
    key_head, exit_ = fn.append_basic_block('key'), fn.append_basic_block('exit')
    b.cbranch(b.icmp_signed('<', first, last), key_head, exit_)

    b.position_at_end(key_head)  # a key: its values, its rows, its gradient
    k = b.phi(I64, 'k')
    k.add_incoming(first, entry)
    begin, end = (b.load(b.gep(starts, [j])) for j in (k, b.add(k, ir.Constant(I64, 1))))
    mine = dict(leaves)
    for e, p in reads.items():
        if p.column == own:
            mine[e] = b.load(b.gep(weights, [_place(b, p, k)]))
    column_at = {n: j for j, n in reversed(list(enumerate(columns))) if n is not None}
    emitter = _Emitter(b, module)

    def rows_sum(outputs, more):
        """Each of outputs summed over the key's rows (a loop at the builder), leaves also from more."""
        before = b.block
        head, body, latch, done = (fn.append_basic_block(n) for n in ('row', 'body', 'latch', 'rows_done'))
        b.cbranch(b.icmp_signed('<', begin, end), head, done)
        b.position_at_end(head)
        t = b.phi(I64, 't')
        sums = [b.phi(DOUBLE) for _ in outputs]
        at = b.load(b.gep(index, [t])) if indexed else t
        ok, key = ir.Constant(scatter.I1, 1), {}
        for c in codes:
            x = b.load(b.gep(column_ptrs[c], [at]))
            if c == own:
                ok = b.and_(ok, b.fcmp_ordered('==', x, b.sitofp(b.add(k, ir.Constant(I64, 1)), DOUBLE)))
                continue
            inside = b.and_(b.fcmp_ordered('>=', x, _const(1.0)), b.fcmp_ordered('<=', x, b.sitofp(size[c], DOUBLE)))
            key[c] = b.sub(b.fptosi(b.select(inside, x, _const(1.0)), I64), ir.Constant(I64, 1))
            ok = b.and_(ok, inside)
        b.cbranch(ok, body, latch)
        b.position_at_end(body)
        here = dict(mine, **more)
        for e, p in reads.items():
            if p.column is not None and p.column != own:
                here[e] = b.load(b.gep(weights, [_place(b, p, key[p.column])]))
        values = emit_nodes(emitter, graph, outputs,
                            lambda node: b.load(b.gep(column_ptrs[column_at[node.value]], [at]))
                            if node.op == 'column' else here[node.value])
        added = [b.fadd(s, values[o], flags=REDUCE) for s, o in zip(sums, outputs)]
        b.branch(latch)
        b.position_at_end(latch)
        kept = []
        for s, new in zip(sums, added):
            phi = b.phi(DOUBLE)
            phi.add_incoming(s, head)
            phi.add_incoming(new, body)
            kept.append(phi)
        following = b.add(t, ir.Constant(I64, 1))
        b.cbranch(b.icmp_signed('<', following, end), head, done)
        t.add_incoming(begin, before)
        t.add_incoming(following, latch)
        for s, new in zip(sums, kept):
            s.add_incoming(_const(0.0), before)
            s.add_incoming(new, latch)
        b.position_at_end(done)
        totals = []
        for new in kept:
            phi = b.phi(DOUBLE)
            phi.add_incoming(_const(0.0), before)
            phi.add_incoming(new, latch)
            totals.append(phi)
        return totals

    def dot(u, v):
        total = _const(0.0)
        for a, c in zip(u, v):
            total = b.fadd(total, b.fmul(a, c))
        return total

    x = [mine[e] for e in gradient_leaves(reads, own, direction)]
    g = [b.fadd(b.fmul(s, inv_rows), b.fmul(ridge[j], x[j])) for j, s in enumerate(rows_sum(gradient, {}))]
    rs0 = dot(g, g)
    goal = b.fmul(ratio, rs0)
    start = b.block
    cg_head, cg_body, cg_update, key_done = (fn.append_basic_block(n) for n in ('cg', 'cg_body', 'cg_update',
                                                                                'key_done'))
    b.branch(cg_head)

    b.position_at_end(cg_head)  # a step of conjugate gradients: (step, d, r, p, rᵀr, gᵀd so far)
    step = b.phi(I64, 'step')
    d, r, p = ([b.phi(DOUBLE) for _ in range(m)] for _ in range(3))
    rs, measure = b.phi(DOUBLE, 'rs'), b.phi(DOUBLE, 'measure')
    step.add_incoming(ir.Constant(I64, 0), start)
    for j in range(m):
        d[j].add_incoming(_const(0.0), start)
        r[j].add_incoming(g[j], start)
        p[j].add_incoming(g[j], start)
    rs.add_incoming(rs0, start)
    measure.add_incoming(_const(0.0), start)
    going = b.and_(b.icmp_signed('<', step, most), b.fcmp_ordered('>', rs, goal))
    b.cbranch(going, cg_body, key_done)

    b.position_at_end(cg_body)
    q = [b.fadd(b.fmul(s, inv_rows), b.fmul(ridge[j], p[j]))
         for j, s in enumerate(rows_sum(product, dict(zip(direction, p))))]
    curvature = dot(p, q)
    body_end = b.block
    b.cbranch(b.fcmp_ordered('>', curvature, _const(0.0)), cg_update, key_done)

    b.position_at_end(cg_update)
    alpha = b.fdiv(rs, curvature)
    new_measure = b.fadd(measure, b.fmul(alpha, rs))
    new_d = [b.fadd(d[j], b.fmul(alpha, p[j])) for j in range(m)]
    new_r = [b.fsub(r[j], b.fmul(alpha, q[j])) for j in range(m)]
    new_rs = dot(new_r, new_r)
    beta = b.fdiv(new_rs, rs)
    new_p = [b.fadd(new_r[j], b.fmul(beta, p[j])) for j in range(m)]
    step.add_incoming(b.add(step, ir.Constant(I64, 1)), cg_update)
    for phis, new in ((d, new_d), (r, new_r), (p, new_p)):
        for phi, value in zip(phis, new):
            phi.add_incoming(value, cg_update)
    rs.add_incoming(new_rs, cg_update)
    measure.add_incoming(new_measure, cg_update)
    b.branch(cg_head)

    b.position_at_end(key_done)  # the key's step, gᵀd and steps written
    finals = []
    for value in [*d, measure, step]:
        final = b.phi(value.type)
        final.add_incoming(value, cg_head)
        final.add_incoming(value, body_end)
        finals.append(final)
    for j, final in enumerate(finals[:m]):
        b.store(final, b.gep(steps, [b.add(b.mul(k, ir.Constant(I64, m)), ir.Constant(I64, j))]))
    for j, final in enumerate((finals[m], b.sitofp(finals[m + 1], DOUBLE))):
        b.store(final, b.gep(measures, [b.add(b.mul(k, ir.Constant(I64, 2)), ir.Constant(I64, j))]))
    following = b.add(k, ir.Constant(I64, 1))
    k.add_incoming(following, b.block)
    b.cbranch(b.icmp_signed('<', following, last), key_head, exit_)

    b.position_at_end(exit_)
    b.ret_void()
    return str(module)


def gradient_leaves(reads, own, direction):
    """The group's elements in the order of its direction's (each direction leaf names its element after the
    prefix program.DIRECTION)."""
    from ..program import DIRECTION
    elements = [e[len(DIRECTION):] for e in direction]
    if any(reads.get(e) is None or reads[e].column != own for e in elements):
        raise ValueError("a direction's element is not a weight of the group's key")
    return elements


def _tier(graph, gradient, product):
    """The tier that compiles the kernel, or None: the first of tiers.TIERS that compiles both its loops over the
    rows (scatter.tier's, every output summed in a register; vectorised where it fits, which vectorises a row's
    arithmetic: the rows' sums go on in the loop's order)."""
    chosen = [scatter.tier(graph, outputs, [scatter.Place()] * len(outputs)) for outputs in (gradient, product)]
    return None if None in chosen else max(chosen, key=tiers.TIERS.index)


def _place(b, p, key):
    return b.add(ir.Constant(I64, p.base), b.mul(key, ir.Constant(I64, p.stride)))


def compile(graph, gradient, product, direction, reads, own, columns, indexed=False, cache=disk.NONE):
    """The Solver of kernel_ir's kernel, from the disk cache where it is there; None where no tier compiles it."""
    gradient, product, direction = list(gradient), list(product), list(direction)
    chosen = _tier(graph, gradient, product)
    if chosen is None:
        return None
    gradient_leaves(reads, own, direction)
    listing = printer.to_listing(graph, gradient + product)
    data, name = scatter.machine_code(
        cache, 'cg', [listing, repr(gradient), repr(product), repr(direction), repr(sorted(reads.items())), repr(own),
                      repr(columns), repr(indexed), _source()],
        lambda name: kernel_ir(graph, gradient, product, direction, reads, own, columns, indexed, name),
        graph, product, chosen)
    function = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                *[ctypes.c_void_p] * (7 + len(columns)))(compiler.address(data, name))
    return Solver(function, reads, own, len(gradient), len(columns), indexed, scatter.row_ns(graph, product, chosen))


@functools.lru_cache(maxsize=None)
def _source():
    with open(__file__, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


class Solver:
    """A compiled kernel_ir: solver(columns, starts, weights, keys, inv_rows, ratio, ridge, most) → (steps K×m,
    K×2: each key's gᵀd and the steps it took)."""

    def __init__(self, function, reads, own, m, columns, indexed, row_ns):
        self.function, self.reads, self.own, self.m, self.columns = function, reads, own, m, columns
        self.indexed, self.row_ns = indexed, row_ns
        self.codes = sorted({p.column for p in reads.values() if p.column is not None} | {own})

    def __call__(self, columns, starts, weights, keys, inv_rows, ratio, ridge, most, index=None):
        """(every key's step of the own column's K = keys[own] keys, K×m; each one's gᵀd and steps, K×2): starts
        (K + 1 offsets, in order) where each key's rows begin among the columns' rows (or index's, where the kernel is
        indexed). keys: {code column: its K}. Checks the arrays against the places, starts and index before anything
        runs (ValueError)."""
        if len(columns) != self.columns or len(ridge) != self.m:
            raise ValueError('the kernel takes its columns and a ridge an element')
        count = keys[self.own]
        weights = np.ascontiguousarray(weights, dtype=np.float64)
        arrays = [np.ascontiguousarray(c, dtype=np.float64) for c in columns]
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        if len(starts) != count + 1 or count and (starts[0] < 0 or np.any(np.diff(starts) < 0)):
            raise ValueError('starts is not an offset a key, in order')
        rows = int(starts[-1]) if count else 0
        index = scatter.rows_read(arrays, rows, self.indexed, index)
        for p in self.reads.values():
            last = p.base + (p.stride * (keys[p.column] - 1) if p.column is not None else 0)
            if p.base < 0 or p.column is not None and (keys[p.column] < 0 or p.stride < 0) or last >= weights.size:
                raise ValueError('a place the kernel reads is outside the weights')
        bounds = np.array([keys[c] for c in self.codes], dtype=np.int64)
        params = np.concatenate([[inv_rows, ratio], np.asarray(ridge, dtype=np.float64)])
        steps, measures = np.zeros((count, self.m)), np.zeros((count, 2))

        def call(k0, k1):  # may run in a pool thread: numpy and the machine code only (threads.py)
            if k0 < k1:
                self.function(k0, k1, most, weights.ctypes.data, steps.ctypes.data, measures.ctypes.data,
                              starts.ctypes.data, index.ctypes.data if self.indexed else None, bounds.ctypes.data,
                              params.ctypes.data, *[a.ctypes.data for a in arrays])

        def key_at(x):  # the first key whose rows begin at or after row x; past every key from the last row on
            return count if x >= rows else int(np.searchsorted(starts[:count], x))
        if rows == 0:  # no key has a row: each steps on its penalty alone
            call(0, count)
        else:
            threads.run(lambda first, end: call(key_at(first), key_at(end)), rows,
                        threads.count(rows, threads.LOOP_SHARE_ROWS), limits.check, self.row_ns * (1 + most))
        return steps, measures
