"""The llvm backend's kernel of a keyed model (keyed.py): a loop over the rows that gathers each row's keys' values
out of the weights and adds each derivative at the row's key (Futhark's scatter), compiled as codegen.py's kernels.

    void kernel(i64 rows, double *weights, double *other, double *out, i64 *index, i64 *bounds, double *column0, …)

Row i reads row index[i] of every column where the kernel is `indexed` (block Newton's pass over a chunk of keys,
its rows sorted by key), else row i. A code column holds each row's key, 1 … K, as a double. A weight element is
read (Place) at weights[base + key·stride], key 0-based, or at weights[base] where it is global (or in other, an
array beside the weights: a direction block Newton's conjugate gradients multiply the Hessian by); an output is added
at out[base + (key − shift)·stride], or summed over the rows in a register and added at out[base] at the end.
bounds holds each code column's K, then its shift, then its span. The kernel checks every key on the row it reads:
a row whose key is not in 1 … K (NaN, 0, past K), or whose scattered key falls outside shift … shift + span − 1, is
skipped, so that whatever a column holds no read or write leaves the arrays. Its callers give only the codes the
load made, every one in range (keyed.Kernel checks them once a table), so a row is skipped only where that check
was not made; Scatter checks the arrays' sizes against the places before each call.

The additions at a key depend on the row before (two rows of one key add at one place), so the loop is not
vectorised: it compiles at the first tier of tiers.TIERS whose bounds it fits, without vectorisation, in the
compiler process (compiler.machine_code), cached on disk by its DAG, places and the toolchain. A call is cut in
pieces of about threads.PIECE_NS by cost.py's estimate of a row, the server's interrupts checked between them.
"""
import ctypes
import functools
import hashlib
import time
from dataclasses import dataclass, replace

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from . import cache as disk, compiler, cost, frames, threads, tiers
from .codegen import DOUBLE, EMIT, I64, REDUCE, _const, _Emitter, close_rows, emit_nodes
from .. import limits
from ..lang import printer

I1 = ir.IntType(1)


@dataclass(frozen=True)
class Place:
    """Where a weight element is read or an output added: base + key·stride, key the row's of code column `column`
    (its place among the kernel's columns), less the column's shift for an output; base alone where column is
    None. A read is of the weights, or of the other array where `other`."""
    column: int = None
    base: int = 0
    stride: int = 0
    other: bool = False


def kernel_ir(graph, outputs, reads, targets, columns, indexed, name):
    """The LLVM IR (text) of the kernel `name`: graph's outputs (node ids), its weight leaves read at reads
    ({element name: Place}), output k added at targets[k]; columns: the column leaves' names in argument order, a code
    column's name None where the graph does not read it as a number."""
    module = ir.Module(name='pgad')
    module.triple = llvm.get_process_triple()
    pointer = DOUBLE.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, pointer, pointer, pointer, I64.as_pointer(),
                                                             I64.as_pointer()] + [pointer] * len(columns)), name)
    rows, weights, other, out, index, bounds, *column_ptrs = fn.args
    for arg in fn.args[1:]:
        arg.add_attribute('noalias')  # every array is its own
    entry, row, body, step, done = (fn.append_basic_block(n) for n in ('entry', 'row', 'body', 'step', 'done'))
    codes = sorted({p.column for p in [*reads.values(), *targets] if p.column is not None})

    b = ir.IRBuilder(entry)
    count = len(codes)
    bound = {c: [b.load(b.gep(bounds, [ir.Constant(I64, k + j * count)])) for j in range(3)]
             for k, c in enumerate(codes)}  # column → (K, shift, span)
    scattered = {p.column for p in targets if p.column is not None}
    leaves = {e: b.load(b.gep(other if p.other else weights, [ir.Constant(I64, p.base)]))
              for e, p in reads.items() if p.column is None}
    summed = [k for k, p in enumerate(targets) if p.column is None]
    b.cbranch(b.icmp_signed('>', rows, ir.Constant(I64, 0)), row, done)

    b.position_at_end(row)  # the row's keys, each checked
    i = b.phi(I64, 'i')
    sums = [b.phi(DOUBLE, f'sum{k}') for k in summed]
    at = b.load(b.gep(index, [i])) if indexed else i
    ok, key = ir.Constant(I1, 1), {}
    for c in codes:
        size, shift, span = bound[c]
        x = b.load(b.gep(column_ptrs[c], [at]))
        inside = b.and_(b.fcmp_ordered('>=', x, _const(1.0)), b.fcmp_ordered('<=', x, b.sitofp(size, DOUBLE)))
        key[c] = b.sub(b.fptosi(b.select(inside, x, _const(1.0)), I64), ir.Constant(I64, 1))
        ok = b.and_(ok, inside)
        if c in scattered:
            ok = b.and_(ok, b.icmp_unsigned('<', b.sub(key[c], shift), span))
    b.cbranch(ok, body, step)

    b.position_at_end(body)  # gather, evaluate, scatter
    for e, p in reads.items():
        if p.column is not None:
            leaves[e] = b.load(b.gep(other if p.other else weights, [_place(b, p, key[p.column])]))
    column_at = {n: k for k, n in reversed(list(enumerate(columns))) if n is not None}
    values = emit_nodes(_Emitter(b, module), graph, outputs,
                        lambda node: b.load(b.gep(column_ptrs[column_at[node.value]], [at])) if node.op == 'column'
                        else leaves[node.value])
    added = []
    for o, p in zip(outputs, targets):
        if p.column is None:
            added.append(b.fadd(sums[len(added)], values[o], flags=REDUCE))
        else:
            where = b.gep(out, [_place(b, p, b.sub(key[p.column], bound[p.column][1]))])
            b.store(b.fadd(b.load(where), values[o]), where)
    b.branch(step)

    b.position_at_end(step)
    kept = [b.phi(DOUBLE) for _ in summed]  # a skipped row's sums are the row before's
    for phi, old, new in zip(kept, sums, added):
        phi.add_incoming(old, row)
        phi.add_incoming(new, body)
    totals = close_rows(b, i, sums, kept, rows, entry, step, row, done)
    for k, total in zip(summed, totals):
        where = b.gep(out, [ir.Constant(I64, targets[k].base)])
        b.store(b.fadd(b.load(where), total), where)
    b.ret_void()
    return str(module)


def _place(b, p, key):
    return b.add(ir.Constant(I64, p.base), b.mul(key, ir.Constant(I64, p.stride)))


def tier(graph, outputs, targets):
    """The tier that compiles the kernel, or None: the first of tiers.TIERS whose bounds it fits, counting as its
    accumulators the outputs summed in registers (an output added at a key is a store, which adds nothing to the
    register allocator's work: a rank-32 block's 594 outputs compile at O3 in 0.5 s); without vectorisation where an
    output is added at a key (the row's additions depend on the row before's)."""
    order = graph.ancestors(outputs)
    if any(graph.nodes[n].op not in EMIT and graph.nodes[n].op not in ('const', 'column', 'weight') for n in order):
        return None
    summed = sum(p.column is None for p in targets)
    chosen = next((t for t in tiers.TIERS if len(order) <= t.max_nodes and summed <= t.max_outputs and
                   len(order) * len(outputs) <= t.max_product), None)
    return chosen if chosen is None or summed == len(targets) else replace(chosen, vectorise=False)


def compile(graph, outputs, reads, targets, columns, indexed=False, cache=disk.NONE):
    """The Scatter of kernel_ir's kernel, from the disk cache where it is there; None where no tier compiles it."""
    outputs, targets = list(outputs), list(targets)
    chosen = tier(graph, outputs, targets)
    if chosen is None:
        return None
    listing = printer.to_listing(graph, outputs)
    data, name = machine_code(cache, 'scatter', [listing, repr(outputs), repr(sorted(reads.items())), repr(targets),
                                                 repr(columns), repr(indexed), _source()],
                              lambda name: kernel_ir(graph, outputs, reads, targets, columns, indexed, name),
                              graph, outputs, chosen)
    function = ctypes.CFUNCTYPE(None, ctypes.c_int64, *[ctypes.c_void_p] * (5 + len(columns)))(
        compiler.address(data, name))
    return Scatter(function, reads, targets, len(columns), indexed, row_ns(graph, outputs, chosen))


def checked(kernel, columns, rows, weights, out, keys, spans=None, index=None, other=None):
    """(weights, other, the columns, the index, bounds) as a keyed kernel (kernel: its .columns count, .codes, .reads,
    .targets, .indexed; this Scatter or gpu/scatter.py's) takes them: contiguous float64 (the index int64), bounds
    each code column's K, then its shift, then its span (spans: {scattered code column: (shift, span)}, by default
    (0, K)). ValueError where a place a key in range reaches is outside weights, other or out, or a row read is
    outside the columns: checked before anything runs."""
    if len(columns) != kernel.columns or not (out.dtype == np.float64 and out.flags.c_contiguous):
        raise ValueError('the kernel takes its columns and a contiguous float64 out')
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    other = np.ascontiguousarray(np.zeros(0) if other is None else other, dtype=np.float64)
    arrays = [np.ascontiguousarray(c, dtype=np.float64) for c in columns]
    spans = {c: (0, keys[c]) for c in kernel.codes} | dict(spans or {})
    index = rows_read(arrays, rows, kernel.indexed, index)
    for places, size, count in (([p for p in kernel.reads.values() if not p.other], weights.size, lambda c: keys[c]),
                                ([p for p in kernel.reads.values() if p.other], other.size, lambda c: keys[c]),
                                (kernel.targets, out.size, lambda c: spans[c][1])):
        for p in places:
            last = p.base + (p.stride * (count(p.column) - 1) if p.column is not None else 0)
            if p.base < 0 or p.column is not None and (count(p.column) < 0 or p.stride < 0) or last >= size:
                raise ValueError('a place the kernel reads or adds at is outside its array')
    bounds = np.array([keys[c] for c in kernel.codes] + [spans[c][0] for c in kernel.codes] +
                      [spans[c][1] for c in kernel.codes], dtype=np.int64)
    return weights, other, arrays, index, bounds


def rows_read(arrays, rows, indexed, index=None):
    """The index (int64, contiguous) of an indexed kernel, or None: ValueError where the rows it reads, rows
    index[0 … rows − 1] (or rows 0 … rows − 1 where it is not indexed), are not all in every one of arrays."""
    length = min((len(a) for a in arrays), default=0)
    if indexed:
        index = np.ascontiguousarray(index, dtype=np.int64)
        if len(index) < rows or rows and (index[:rows].min() < 0 or index[:rows].max() >= length):
            raise ValueError('the index reads rows the columns do not have')
        return index
    if rows > length:
        raise ValueError(f'a column has fewer than {rows} rows')
    return None


def machine_code(cache, kind, what, make_ir, graph, outputs, chosen):
    """(object code, its function's name) of the kernel make_ir(name) writes, `what` (strings) saying which kernel it
    is: from the disk cache where it is there, else compiled at the tier chosen — in this process where it is small
    (compiler.IN_PROCESS_NODES and IN_PROCESS_PRODUCT, counted over graph's outputs) and not in a backend, else in
    the compiler process — and kept there. Both keyed kernels (this one, cg.py's) are made so."""
    key = hashlib.sha256('\n'.join([kind, *what, compiler._toolchain()]).encode()).hexdigest()
    name = f'pgad_{kind}_{key[:24]}'
    data = cache.get(key)
    if data is None:
        ms = {}
        started = time.perf_counter()
        ir_text = make_ir(name)
        ms['IR generation'] = (time.perf_counter() - started) * 1e3
        nodes = len(graph.ancestors(outputs))
        here = not compiler.in_backend() and nodes <= compiler.IN_PROCESS_NODES and \
            nodes * len(outputs) <= compiler.IN_PROCESS_PRODUCT
        data, optimized = compiler.machine_code(None, ir_text, chosen, ms, here=here)
        frames.check(optimized)
        cache.put(key, data)
    return data, name


def row_ns(graph, outputs, chosen):
    """cost.py's estimate of a row of graph's outputs at the tier chosen, in nanoseconds."""
    units = len(outputs) + sum(cost.LIBM_UNITS if cost._dear(graph.nodes[n].op) else 1
                               for n in graph.ancestors(outputs))
    return (cost.SCALAR_NS if chosen.speed_level else cost.O0_NS) * units


@functools.lru_cache(maxsize=None)
def _source():
    with open(__file__, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


class Scatter:
    """A compiled kernel_ir: scatter(columns, rows, weights, out, keys, …) adds the rows' outputs into out in
    place."""

    def __init__(self, function, reads, targets, columns, indexed, row_ns):
        self.function, self.reads, self.targets, self.columns = function, reads, targets, columns
        self.indexed, self.row_ns = indexed, row_ns
        self.codes = sorted({p.column for p in [*reads.values(), *targets] if p.column is not None})

    def __call__(self, columns, rows, weights, out, keys, spans=None, index=None, starts=None, other=None):
        """Adds to out (a C-contiguous float64 array) the outputs of `rows` rows: rows 0 … rows − 1 of the columns,
        or where the kernel is indexed, rows index[0 … rows − 1]. keys: {code column: its K}; spans: {scattered
        code column: (shift, span)}, by default (0, K). Checks that every place a key in range reaches is inside
        weights and out, and every row read inside the columns, before anything runs (ValueError).

        The rows are split over the pool's threads (threads.py) where no two threads can add at one place: where
        every output is summed (each piece sums into an out of its own, the pieces' added in order), and where
        starts gives the rows sorted by the one column every output is scattered at (the offsets where each key's
        rows begin: each piece is cut at a key's first row, so a key's rows are one piece's, added in row order
        whatever the thread count). Elsewhere (a gradient, its keys in any order) one thread takes the pieces."""
        weights, other, arrays, index, bounds = checked(self, columns, rows, weights, out, keys, spans, index, other)

        def piece(start, end, into):  # may run in a pool thread: numpy and the machine code only (threads.py)
            at = index.ctypes.data + 8 * start if self.indexed else None
            pointers = [a.ctypes.data + (0 if self.indexed else 8 * start) for a in arrays]
            self.function(end - start, weights.ctypes.data, other.ctypes.data, into.ctypes.data, at,
                          bounds.ctypes.data, *pointers)
            return into
        scattered = {p.column for p in self.targets}
        if scattered == {None}:
            out += threads.sums(lambda start, end: piece(start, end, np.zeros_like(out)), rows, threads.count(rows),
                                limits.check, self.row_ns)
        elif starts is not None and len(scattered) == 1:
            starts = np.asarray(starts, dtype=np.int64)

            def cut(x):  # the first key's first row at or after x
                k = np.searchsorted(starts, x)
                return rows if x >= rows or k == len(starts) else int(starts[k])
            threads.run(lambda start, end: piece(cut(start), cut(end), out), rows, threads.count(rows), limits.check,
                        self.row_ns)
        else:
            for start, end in threads.pieces(rows, 1, self.row_ns):
                piece(start, end, out)
                limits.check()
        return out
