"""A lambda with vectors and matrices → LLVM IR with a loop per vector operation, and a tape strategy.

The kernel has codegen.kernel_ir's signature and meaning — void kernel(i64 rows, double *weights, double *sums,
double *column0, …), the columns and weights those of the unrolled Program (an array column's elements, each
weight's elements row-major) — so the loader, the descent and the disk cache see a kernel like any other. Where the
unrolled kernel grows with the shapes, this one grows with the lambda: each node of the parsed DAG is a buffer of its
shape's size, and each operation a loop nest over it (the products written out in SIMD: dot, axpy).

Reverse mode only (forward mode carries a tangent per weight element: it runs unrolled). For each row the forward
sweep fills the nodes' value buffers; the reverse sweep zeroes the adjoint buffers, sets the loss's to 1, and walks the
nodes backwards, each operation's vector-Jacobian product a loop nest (VJP below): the matrix's cotangent in
W @ x is the outer product ḡxᵀ, accumulated straight into the weight's gradient sums, which live across rows (no
allocation per row: every buffer is allocated once per call). An elementwise primitive's partials come from the
rules table, emitted per element with codegen.EMIT.

What the reverse sweep reads of the forward values is the tape, kept one of three ways (`tape`):
- 'store': the forward sweep of a tile of TILE rows writes every node's value, and the reverse sweep of the tile
  reads them back. A tile of 1 is the fused kernel, the row's values one record, in L1. A tile of more rows keeps
  them lane by lane (structure-of-arrays: each element of each value the tile's rows side by side) and runs each
  step for all the tile's rows before the next (lanes_tile), the rows the innermost loop, which LLVM vectorises: a
  SIMD register holds one element of 8 rows (AVX-512), as in the unrolled kernel. W @ x, W a weight matrix, is
  then a small matrix product over the tile, blocked (lane_product: 4 outputs by 2 registers of rows, each weight
  broadcast once for them, the sums in registers), and so are its VJPs, Wᵀȳ the same way and W̄ += Σ_t ȳ_t x_tᵀ
  as sums along the lanes (lane_gradient), or along an array column's row-major block (block_gradient).
- 'recompute': no tape. The tile's forward sweep computes the loss alone, and its reverse sweep runs each row's
  forward sweep again before its reverse (Futhark's redundant execution): one row's buffers, twice the forward work.
- 'reversible': the forward sweep keeps only the loss's value; before each step's reverse, the reverse sweep recovers
  exactly each value that reverse reads (plan_recovery()): by running its own step again where its arguments are at
  hand (leaves, the loss, values recovered before), or from the value of a step that consumed it by running that step
  backwards where the inverse is exact (NiLang; in doubles only negation is: x = out − y, ln(exp(x)) round, and lose
  the value where exp underflows, tanh saturates or y ≫ x). Where neither gives the value, the kernel is refused with
  the step named (0A000).

Every buffer that grows with the shapes (the tape, the adjoints, the weights' lanes, the gradient sums) is carved
out of one scratch buffer, the kernel's last argument, which its caller allocates on the heap once a call
(scratch_doubles), but the first that fit in STACK_BYTES, which stay on the stack (LLVM keeps small ones in
registers); the stack keeps those and a few scalar accumulators (frames.py checks it).
"""
import functools
import math
import re
import weakref
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from .. import limits
from ..errors import PgadError
from ..lang import vectors
from ..lang.dag import Graph
from ..lang.parser import caret
from ..lang.rules import OPERATIONS, PRIMITIVES
from .codegen import BOOL, DOUBLE, EMIT, I64, _Emitter, link_math, vectorised, vector_widths
import llvmlite.binding as llvm

TAPES = ('store', 'recompute', 'reversible')
TILE = 64  # rows a 'store' tile holds: measured fastest (docs/design.md, "Loop kernels and tape strategies")
TAPE_BYTES = 1 << 20  # but fewer where their tape would pass 1 MiB (rows_of): the scratch buffer grows with them
REDUCE = ('reassoc', 'nsz', 'contract')  # a dot product's sum may be reordered (vectorised)
UNROLL, ACCUMULATORS = 32, 4  # a dot product of up to UNROLL vectors is unrolled, summed in ACCUMULATORS chains
# A tile's weight gradient W̄ += Σ_t ȳ_t x_tᵀ in blocks of 4 rows of W̄ by 4 columns, 16 sums in registers along
# the lanes (lane_gradient); by 2 SIMD registers of columns along an array column's block (block_gradient)
GEMM_ROWS, GEMM_COLUMNS, GEMM_VECTORS = 4, 4, 2
# A lanes tile's loops are vectorised (along the rows) but never unrolled: LLVM unrolling each small loop by its trip
# count, every element loop around a vectorised loop over the rows, took 4-6 times the compile (Iris 4-20-3: 1.4 s,
# 0.3 s so) for no speed
LANES_HINTS = ('llvm.loop.unroll.disable',)
# W @ x over a tile (lane_product): 4 outputs by 2 SIMD registers of rows at a time, 8 sums in registers (4 by 4
# measured no faster on digits, 8 by 2 and 2 by 4 slower); the loop over x's elements written out up to 4 (up to 8
# or 16 ran no faster and compiled up to 2 times as long: 24 layers of 16 × 16, 7.3 s against 3.8)
PRODUCT_OUTPUTS, PRODUCT_LANES, PRODUCT_UNROLL = 4, 2, 4
SMALL = 1    # the most doubles one alloca() may hold: a scalar accumulator (a buffer is buffer()'s)
ALIGN = 8    # doubles in a cache line: each scratch buffer starts on one
# The bytes of buffers a kernel keeps on its stack, the first that fit: small ones, which LLVM keeps in registers (a
# logistic loss of 8 columns over 200,000 rows took 37–39 ms with 'recompute' and 35–36 ms with 'store' with every
# buffer on the heap, 5.6–9.6 and 10–24 ms so, the same run); the rest on the heap.
STACK_BYTES = 16 << 10

# How a step runs backwards, exactly: given its value and the other arguments, the argument at each position. Only
# negation is exact for every double: x = out − y, x = out / y, ln(exp(x)), atanh(tanh(x)), logit(sigmoid(x)) round,
# and lose the value outright where the step did (x + y with |y| ≫ |x|, x·0, exp underflowing to 0 or overflowing,
# tanh and sigmoid saturating at ±1): a gradient from such a value is wrong or NaN, so those steps are not run
# backwards (plan_recovery()).
INVERSES = {
    ('neg', 0): lambda e, out, x: e.b.fneg(out),
}
LEAVES = ('const', 'weight', 'column')


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


@functools.lru_cache(maxsize=None)
def partial_programs(op):
    """The partials of primitive op as a small DAG over the leaves '#0', '#1', … (its arguments) and '#out', and the
    node of each partial (None where there is none)."""
    graph = Graph()
    args = [graph.weight(f'#{k}') for k in range(len(PRIMITIVES[op].args))]
    result = PRIMITIVES[op].partials(*args, graph.weight('#out'))
    result = result if isinstance(result, tuple) else (result,)
    return graph, [None if p is None else (p if hasattr(p, 'graph') else graph.const(p)).id for p in result]


class _Kernel:
    """The IR of one kernel: an IRBuilder, the function's arguments, loops."""

    def __init__(self, program, name, tape, tile):
        self.program, self.tape, self.tile = program, tape, tile
        self.lay = layout(program)
        self.graph = program.tensor.graph
        self.module = ir.Module(name='pgad')
        self.module.triple = llvm.get_process_triple()
        scalars, arrays = column_arguments(program)
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I64, DOUBLE.as_pointer(), DOUBLE.as_pointer()]
                                                      + [DOUBLE.as_pointer()] * (len(scalars) + len(arrays) + 1)), name)
        self.fn = fn
        self.rows_arg, self.weights, self.sums, *pointers, self.scratch = fn.args
        for arg in pointers + [self.scratch]:
            arg.add_attribute('noalias')
        self.scratch_used = 0  # doubles of the scratch buffer carved out so far (heap())
        self.loops = 0         # loops given properties so far (loop())
        self.stack_bytes = 0   # bytes of buffers on the stack so far (buffer())
        self.cols = dict(zip(scalars, pointers))  # the index in program.columns of a number column → its array
        block = dict(zip(arrays, pointers[len(scalars):]))
        self.blocks = {i: (block[self.graph.nodes[i].value], self.lay.shape[i][0]) for i in self.lay.columns
                       if self.lay.shape[i]}  # an array column's node → its rows' block, and its length
        self.row = None  # the row whose values the forward and reverse steps read (an i64), where one is
        self.entry = fn.append_basic_block('entry')  # the allocas alone, then a branch to 'start'
        self.start = fn.append_basic_block('start')
        self.b = ir.IRBuilder(self.start)
        self.e = _Emitter(self.b, self.module)
        self.gradient = len(program.outputs) > 1
        self.width = max([w for _, w in vector_widths()] or [2])  # doubles in the widest SIMD register
        # a 'store' tile of more than a row keeps its tape lane by lane (rows_major below): each value's element the
        # tile's rows side by side, every step a loop over them that LLVM vectorises, rows to a SIMD register
        self.lanes = tape == 'store' and tile > 1
        if self.lanes:
            self.blocked = {i for i in self.lay.order if self.weight_product(i)}
            # the weights whose adjoints a step adds row by row (all but a blocked product's matrix): a lane each,
            # summed into the gradient at the end of the tile
            self.lane_of, at = {}, 0
            root = program.tensor.root
            if self.graph.nodes[root].op == 'weight':  # the loss a weight itself: its adjoint is 1 a row
                self.lane_of[root], at = 0, size_of(self.lay.shape[root])
            for i in self.lay.order:
                node = self.graph.nodes[i]
                if not self.lay.live[i] or node.op in LEAVES:
                    continue
                for position, a in enumerate(node.args):
                    if self.graph.nodes[a].op == 'weight' and a not in self.lane_of and not (
                            i in self.blocked and position == 0):
                        self.lane_of[a], at = at, at + size_of(self.lay.shape[a])
            self.lane_slots = at

    def buffers(self):
        """The doubles of each buffer the kernel carves out of its scratch buffer, in build()'s order: the tape (a
        tile's value records), the reversible tape's recovered values, the adjoint records, a lanes tile's weights'
        lanes, the gradient."""
        lay, records = self.lay, self.tile if self.tape == 'store' else 1
        return ([lay.record * records] + ([lay.record] if self.tape == 'reversible' else [])
                + [lay.adjoints * records] + ([max(1, self.lane_slots) * records] if self.lanes else [])
                + [max(1, len(self.program.weights))])

    # --- small IR helpers ---
    def i64(self, k):
        return ir.Constant(I64, k) if isinstance(k, int) else k

    def gep(self, ptr, k):
        return self.b.gep(ptr, [self.i64(k)])

    def alloca(self, n):
        """n doubles on the stack, allocated in the entry block: once per call, wherever it is asked for. For a
        few scalars only (LLVM keeps them in registers): a buffer that grows with the shapes is heap()'s."""
        assert n <= SMALL, n
        with self.b.goto_block(self.entry):
            return self.b.alloca(DOUBLE, size=ir.Constant(I64, n))

    def buffer(self, n):
        """n doubles, allocated once a call: on the stack while the buffers there take at most STACK_BYTES, else
        carved out of the scratch buffer on the heap (heap())."""
        if self.stack_bytes + 8 * n > STACK_BYTES:
            return self.heap(n)
        self.stack_bytes += 8 * n
        with self.b.goto_block(self.entry):
            return self.b.alloca(DOUBLE, size=ir.Constant(I64, n))

    def heap(self, n):
        """n doubles of the scratch buffer, the kernel's last argument (allocated by its caller once a call, sized
        by scratch_doubles): each buffer starts on a cache line of its own."""
        at = self.scratch_used
        self.scratch_used = at + -(-n // ALIGN) * ALIGN
        with self.b.goto_block(self.entry):
            return self.b.gep(self.scratch, [ir.Constant(I64, at)])

    def loop(self, count, body, hints=None):
        """for k in range(count): body(k) — count a Python int or an IR i64; no loop at all for a count of 1. hints:
        the names of LLVM loop properties for it; a lanes tile's loops by default LANES_HINTS."""
        hints = (LANES_HINTS if self.lanes else ()) if hints is None else hints
        if isinstance(count, int) and count == 1:
            body(ir.Constant(I64, 0))
            return
        b = self.b
        before = b.block
        head, inside, after = (self.fn.append_basic_block(n) for n in ('loop', 'body', 'next'))
        b.branch(head)
        b.position_at_end(head)
        k = b.phi(I64)
        k.add_incoming(ir.Constant(I64, 0), before)
        b.cbranch(b.icmp_signed('<', k, self.i64(count)), inside, after)
        b.position_at_end(inside)
        body(k)
        k.add_incoming(b.add(k, ir.Constant(I64, 1)), b.block)
        back = b.branch(head)
        if hints:  # a loop's properties hang off its ID, a distinct node that names itself (build() writes it so)
            self.loops += 1
            back.set_metadata('llvm.loop', self.module.add_metadata(
                [ir.MetaDataString(self.module, f'pgad.loop.{self.loops}')]
                + [self.module.add_metadata([ir.MetaDataString(self.module, h)]) for h in hints]))
        b.position_at_end(after)

    # --- explicit SIMD for the products: dot products and axpys along contiguous memory ---
    def vector_type(self):
        return ir.VectorType(DOUBLE, self.width)

    def vload(self, ptr):
        return self.load_lanes(ptr, self.width)

    def vstore(self, value, ptr):
        self.store_lanes(value, ptr, self.width)

    def splat(self, x):
        return self.splat_lanes(x, self.width)

    def reduce_sum(self, vector, width):
        """The sum of a vector's width lanes (LLVM's reduction, which may reassociate)."""
        name = f'llvm.vector.reduce.fadd.v{width}f64'
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(
            DOUBLE, [DOUBLE, ir.VectorType(DOUBLE, width)]), name)
        return self.b.call(fn, [ir.Constant(DOUBLE, -0.0), vector], fastmath=REDUCE)

    def preload(self, pb, n):
        """The run of n doubles at pb as whole vectors and the tail's doubles, loaded once (for dot products that
        share it: stores between them could otherwise make LLVM load it again), or None where it is too long."""
        chunks = n // self.width
        if chunks > UNROLL:
            return None
        return ([self.vload(self.gep(pb, c * self.width)) for c in range(chunks)],
                [self.b.load(self.gep(pb, t)) for t in range(chunks * self.width, n)])

    def dot(self, pa, pb, n, loaded=None):
        """Σ_{k < n} pa[k]·pb[k] over two contiguous runs of doubles (pb's run as preload gives it, if loaded):
        whole vectors into ACCUMULATORS independent sums (unrolled up to UNROLL vectors, so the adds do not wait
        on each other), then the tail."""
        b, width = self.b, self.width
        chunks, tail = divmod(n, width)
        total = ir.Constant(DOUBLE, 0.0)
        if chunks:
            zero = ir.Constant(self.vector_type(), [0.0] * width)

            def term(c):
                at = self.i64(c * width) if isinstance(c, int) else b.mul(c, ir.Constant(I64, width))
                other = loaded[0][c] if loaded is not None else self.vload(self.gep(pb, at))
                return b.fmul(self.vload(self.gep(pa, at)), other, flags=REDUCE)
            if chunks <= UNROLL:
                sums = [zero] * min(ACCUMULATORS, chunks)
                for c in range(chunks):
                    sums[c % len(sums)] = b.fadd(sums[c % len(sums)], term(c), flags=REDUCE)
                while len(sums) > 1:
                    pairs = [b.fadd(x, y, flags=REDUCE) for x, y in zip(sums[::2], sums[1::2])]
                    sums = pairs + sums[len(sums) // 2 * 2:]
                vector = sums[0]
            else:
                with b.goto_block(self.entry):
                    acc = b.alloca(self.vector_type())
                b.store(zero, acc)
                self.loop(chunks, lambda c: b.store(b.fadd(b.load(acc), term(c), flags=REDUCE), acc))
                vector = b.load(acc)
            total = self.reduce_sum(vector, width)
        for t in range(chunks * width, n):
            other = loaded[1][t - chunks * width] if loaded is not None else b.load(self.gep(pb, t))
            total = b.fadd(total, b.fmul(b.load(self.gep(pa, t)), other, flags=REDUCE), flags=REDUCE)
        return total

    def axpy(self, py, a, px, n):
        """py[k] += a·px[k] for k < n, over contiguous runs: whole vectors, then the tail."""
        b, width = self.b, self.width
        chunks, _ = divmod(n, width)
        if chunks:
            av = self.splat(a)

            def chunk(c):
                at = b.mul(c, ir.Constant(I64, width))
                y = self.gep(py, at)
                self.vstore(b.fadd(self.vload(y), b.fmul(av, self.vload(self.gep(px, at)), flags=REDUCE),
                                   flags=REDUCE), y)
            self.loop(chunks, chunk)
        for t in range(chunks * width, n):
            y = self.gep(py, t)
            b.store(b.fadd(b.load(y), b.fmul(a, b.load(self.gep(px, t)), flags=REDUCE), flags=REDUCE), y)

    def exps(self, v, n, top, put):
        """put(k, e) for e = exp(v[k] − top), k < n, over v's contiguous elements: whole vectors through libmvec's
        vector exp where this process has it (8 at once for AVX-512: a softmax's exps took a sixth of a digits
        step one by one), the rest one by one."""
        b, width = self.b, self.width
        name = next((f'_ZGV{isa}N{w}v_exp' for isa, w in vector_widths() if w == width), None)
        chunks = n // width if name in link_math() and not self.lanes else 0
        if chunks:
            fn = self.module.globals.get(name) or ir.Function(
                self.module, ir.FunctionType(self.vector_type(), [self.vector_type()]), name)
            shift = self.splat(top)

            def chunk(c):
                at = b.mul(c, ir.Constant(I64, width))
                e = b.call(fn, [b.fsub(self.vload(self.ptr(v, at)), shift)])
                for j in range(width):
                    put(b.add(at, ir.Constant(I64, j)), b.extract_element(e, ir.Constant(ir.IntType(32), j)))
            self.loop(chunks, chunk)
        self.loop(n - chunks * width, lambda k: put(
            b.add(k, ir.Constant(I64, chunks * width)),
            self.e.call('exp', b.fsub(self.val(v, b.add(k, ir.Constant(I64, chunks * width))), top))))

    def extra(self, i, k):
        """A pointer to slot k of node i's value, its extra slots past its elements (EXTRA) among them."""
        if self.lanes:
            return self.lane(self.tape_base, self.lay.value[i], k)
        return self.gep(self.values, self.b.add(ir.Constant(I64, self.lay.value[i]), self.i64(k)))

    def ptr(self, i, k=0):
        """A pointer to element k of node i's value (a weight's in the weight vector; an array column's in its
        block, at the current row)."""
        assert not self.lanes or self.graph.nodes[i].op == 'weight', i  # a lane's elements are not contiguous
        if i in self.blocks:
            return self.block_at(i, self.row, k)
        if self.graph.nodes[i].op == 'weight':
            return self.gep(self.weights, self.b.add(ir.Constant(I64, self.lay.weight[i]), self.i64(k)))
        return self.gep(self.values, self.b.add(ir.Constant(I64, self.lay.value[i]), self.i64(k)))

    def reduce(self, count, term):
        """Σ_{k < count} term(k), reassociable (LLVM vectorises it)."""
        acc = self.alloca(1)
        self.b.store(ir.Constant(DOUBLE, 0.0), acc)
        self.loop(count, lambda k: self.b.store(self.b.fadd(self.b.load(acc), term(k), flags=REDUCE), acc))
        return self.b.load(acc)

    def index(self, *parts):
        """Σ a·b of (a, b) pairs, as an i64: a flat index."""
        total = ir.Constant(I64, 0)
        for k, stride in parts:
            if stride == 0:
                continue
            term = self.i64(k) if stride == 1 else self.b.mul(self.i64(k), ir.Constant(I64, stride))
            total = self.b.add(total, term)
        return total

    def block_at(self, i, row, k):
        """A pointer to element k of array column i at row (an i64): its block is row-major."""
        block, n = self.blocks[i]
        return self.gep(block, self.index((row, n), (k, 1)))

    # --- values and adjoints ---
    def lane(self, base, at, k, t=None):
        """A pointer to element k of the slots from at in a lanes tape (base): the tile's rows side by side, row t
        (the current row, self.t, if None)."""
        return self.gep(base, self.b.add(self.b.mul(self.b.add(ir.Constant(I64, at), self.i64(k)),
                                                    ir.Constant(I64, self.tile)), self.t if t is None else self.i64(t)))

    def val(self, i, k):
        """Element k of node i's value (a number broadcasts: element 0)."""
        node, lay = self.graph.nodes[i], self.lay
        k = ir.Constant(I64, 0) if not lay.shape[i] else k
        if self.lanes and i in lay.value:
            value = self.b.load(self.lane(self.tape_base, lay.value[i], k))
            return self.b.fcmp_ordered('!=', value, ir.Constant(DOUBLE, 0.0)) if self.graph.type_of(i) == 'b' \
                else value
        if i in self.blocks:
            return self.b.load(self.block_at(i, self.row, k))
        if node.op == 'const':
            return ir.Constant(BOOL, int(node.value)) if isinstance(node.value, bool) else \
                ir.Constant(DOUBLE, node.value)
        if node.op == 'weight':
            return self.b.load(self.gep(self.weights, self.b.add(ir.Constant(I64, lay.weight[i]), self.i64(k))))
        value = self.b.load(self.gep(self.values, self.b.add(ir.Constant(I64, lay.value[i]), self.i64(k))))
        return self.b.fcmp_ordered('!=', value, ir.Constant(DOUBLE, 0.0)) if self.graph.type_of(i) == 'b' else value

    def put(self, i, k, v):
        if v.type == BOOL:
            v = self.b.uitofp(v, DOUBLE)
        if self.lanes:
            self.b.store(v, self.lane(self.tape_base, self.lay.value[i], k))
            return
        self.b.store(v, self.gep(self.values, self.b.add(ir.Constant(I64, self.lay.value[i]), self.i64(k))))

    def adj_ptr(self, i, k):
        lay = self.lay
        k = ir.Constant(I64, 0) if not lay.shape[i] else k
        if self.lanes:
            if self.graph.nodes[i].op == 'weight':
                return self.lane(self.lanes_base, self.lane_of[i], k)
            return self.lane(self.adjoint_base, lay.adjoint[i], k)
        if self.graph.nodes[i].op == 'weight':
            return self.gep(self.grad, self.b.add(ir.Constant(I64, lay.weight[i]), self.i64(k)))
        return self.gep(self.adjoints, self.b.add(ir.Constant(I64, lay.adjoint[i]), self.i64(k)))

    def adj(self, i, k):
        return self.b.load(self.adj_ptr(i, k))

    def add_adj(self, i, k, v):
        """adj(i)[k] += v, where node i takes an adjoint (it depends on a weight)."""
        if self.lay.live[i]:
            ptr = self.adj_ptr(i, k)
            self.b.store(self.b.fadd(self.b.load(ptr), v), ptr)

    # --- the kernel ---
    def build(self):
        b, lay = self.b, self.lay
        program = self.program
        records = self.tile if self.tape == 'store' else 1
        # every buffer that grows with the shapes, past STACK_BYTES, is carved out of the scratch buffer, on the heap
        # (a backend's stack is 8 MB, shared with the executor): the tape, the recovered values, the adjoints, the
        # weights' lanes, the gradient sums
        self.tape_base = self.buffer(lay.record * records)
        self.values = self.tape_base
        if self.tape == 'reversible':  # the reverse sweep's values: the loss's, then what it recovers
            self.recovery = self.buffer(lay.record)
        self.adjoint_base = self.adjoints = self.buffer(lay.adjoints * records)
        if self.lanes:
            self.lanes_base = self.buffer(max(1, self.lane_slots) * records)
        self.grad = self.buffer(max(1, len(program.weights)))
        self.loss = self.alloca(1)
        b.store(ir.Constant(DOUBLE, 0.0), self.loss)
        self.loop(max(1, len(program.weights)), lambda k: b.store(ir.Constant(DOUBLE, 0.0), self.gep(self.grad, k)))
        if self.tape == 'reversible':
            self.check_reversible()
        tiles = b.sdiv(b.add(self.rows_arg, ir.Constant(I64, self.tile - 1)), ir.Constant(I64, self.tile))
        self.loop(tiles, self.lanes_tile if self.lanes else self.one_tile)
        b.store(b.load(self.loss), self.sums)
        if self.gradient:
            self.loop(len(program.weights), lambda k: b.store(b.load(self.gep(self.grad, k)),
                                                              self.gep(self.sums, b.add(k, ir.Constant(I64, 1)))))
        b.ret_void()
        b.position_at_end(self.entry)
        b.branch(self.start)
        assert self.scratch_used == _on_the_heap(self.buffers()), (self.scratch_used, self.buffers())
        text = re.sub(r'^(!\d+) = !\{ !"pgad\.loop\.\d+"', r'\1 = distinct !{ \1', str(self.module), flags=re.M)
        return vectorised(text, vector_widths())

    def one_tile(self, t):
        b = self.b
        start = b.mul(t, ir.Constant(I64, self.tile))
        left = b.sub(self.rows_arg, start)
        count = b.select(b.icmp_signed('<', left, ir.Constant(I64, self.tile)), left, ir.Constant(I64, self.tile))
        record = self.lay.record

        def forward_row(r):
            self.values = self.gep(self.tape_base, b.mul(r, ir.Constant(I64, record))) if self.tape == 'store' \
                else self.tape_base
            self.forward(b.add(start, r))
            b.store(b.fadd(b.load(self.loss), self.val(self.program.tensor.root, 0), flags=REDUCE), self.loss)

        def reverse_row(r):
            if self.tape == 'store':
                self.values = self.gep(self.tape_base, b.mul(r, ir.Constant(I64, record)))
                self.adjoints = self.gep(self.adjoint_base, b.mul(r, ir.Constant(I64, self.lay.adjoints)))
            elif self.tape == 'recompute':
                self.values = self.tape_base
                self.forward(b.add(start, r))  # redundant execution: the row's forward sweep again
            else:  # reversible: nothing of the forward sweep but the loss; the inputs read again
                root = self.program.tensor.root
                loss = self.val(root, 0)
                self.values = self.recovery
                for i in self.lay.columns:
                    self.forward_node(i, b.add(start, r))
                if root in self.lay.value:
                    self.put(root, 0, loss)
            self.reverse(b.add(start, r))
        self.loop(count, forward_row)
        if self.gradient:
            self.loop(count, reverse_row)

    # --- a tile lane by lane: each value's element the tile's rows side by side ---
    def rows(self, body, count=None):
        """body() for each row of the tile (self.t, from 0): the innermost loop, along a lane, which LLVM
        vectorises. All the tile's rows unless count (an i64): a short last tile's rows past its count repeat its
        first (lanes_forward), so every step runs over the whole tile, a loop of a known count (no remainder loop,
        which compiled in twice the time), and only the sums over rows stop at the count."""
        def row(t):
            self.t = t
            body()
        self.loop(self.tile if count is None else count, row)

    def lanes_tile(self, t):
        """One tile of a 'store' tape kept lane by lane: each node's step for all the tile's rows, node after node
        (the forward sweep, then the reverse), each a loop over the rows, innermost; the products of a weight
        matrix and a vector blocked (lane_product, lane_gradient)."""
        b, lay, root = self.b, self.lay, self.program.tensor.root
        self.start_row = b.mul(t, ir.Constant(I64, self.tile))
        left = b.sub(self.rows_arg, self.start_row)
        self.count = b.select(b.icmp_signed('<', left, ir.Constant(I64, self.tile)), left,
                              ir.Constant(I64, self.tile))
        for i in lay.order:
            limits.tick()
            self.lanes_forward(i)
        self.rows(lambda: b.store(b.fadd(b.load(self.loss), self.val(root, 0), flags=REDUCE), self.loss), self.count)
        if not self.gradient:
            return
        zero = ir.Constant(DOUBLE, 0.0)
        self.loop(lay.adjoints * self.tile, lambda k: b.store(zero, self.gep(self.adjoint_base, k)))
        self.loop(self.lane_slots * self.tile, lambda k: b.store(zero, self.gep(self.lanes_base, k)))
        if lay.live[root] and self.graph.nodes[root].op != 'weight':
            self.rows(lambda: b.store(ir.Constant(DOUBLE, 1.0), self.adj_ptr(root, 0)), self.count)
        elif lay.live[root]:
            self.rows(lambda: self.add_adj(root, 0, ir.Constant(DOUBLE, 1.0)), self.count)
        for i in self.swept():
            if i in self.blocked:
                self.product_reverse(i)
            elif self.graph.nodes[i].op in PRIMITIVES:
                self.reverse_primitive(i, self.graph.nodes[i])
            elif self.graph.nodes[i].op in LANES_REVERSE:
                LANES_REVERSE[self.graph.nodes[i].op](self, i, self.graph.nodes[i].args)
            else:
                self.rows(lambda i=i: REVERSE[self.graph.nodes[i].op](self, i, self.graph.nodes[i].args))
        for w, at in self.lane_of.items():  # the weights' lanes, each summed into its gradient
            def element(k, w=w, at=at):
                total = self.reduce(self.count, lambda t: b.load(self.lane(self.lanes_base, at, k, t)))
                ptr = self.gep(self.grad, b.add(ir.Constant(I64, lay.weight[w]), k))
                b.store(b.fadd(b.load(ptr), total), ptr)
            self.loop(size_of(lay.shape[w]), element)

    def lanes_forward(self, i):
        node, lay, b = self.graph.nodes[i], self.lay, self.b
        if node.op in ('const', 'weight'):
            return
        if node.op == 'column':  # into its lanes: a number column's rows, an array column's block transposed; a
            # short tile's rows past its count the tile's first row again
            def row():
                return b.add(self.start_row, b.select(b.icmp_signed('<', self.t, self.count), self.t,
                                                      ir.Constant(I64, 0)))
            if i in self.blocks:
                self.loop(self.blocks[i][1], lambda k: self.rows(lambda: self.put(i, k, b.load(
                    self.block_at(i, row(), k)))))
            else:
                column = self.cols[lay.columns[i][0]]
                self.rows(lambda: self.put(i, 0, b.load(self.gep(column, row()))))
        elif node.op in PRIMITIVES:
            self.loop(size_of(lay.shape[i]), lambda k: self.rows(lambda: self.put(
                i, k, EMIT[node.op](self.e, *[self.val(a, k) for a in node.args]))))
        elif i in self.blocked:
            w, x = node.args
            m, n = lay.shape[w]
            self.lane_product(w, lambda o, t: self.lane(self.tape_base, lay.value[i], o, t),
                              lambda q, t: self.lane(self.tape_base, lay.value[x], q, t), m, n,
                              lambda o, q: self.index((o, n), (q, 1)), False)
        elif node.op in LANES_FORWARD:
            LANES_FORWARD[node.op](self, i, node.args)
        else:  # a row at a time
            self.rows(lambda: FORWARD[node.op](self, i, node.args))

    def weight_product(self, i):
        """Is node i W @ x, W a weight matrix and x a vector with a value (blocked: lane_product)?"""
        node, lay = self.graph.nodes[i], self.lay
        if node.op != 'matmul':
            return False
        w, x = node.args
        return self.graph.nodes[w].op == 'weight' and len(lay.shape[w]) == 2 and len(lay.shape[x]) == 1 \
            and x in lay.value

    def product_reverse(self, i):
        """W @ x's vector-Jacobian product: x̄ += Wᵀȳ (lane_product), W̄ += Σ_t ȳ_t x_tᵀ (lane_gradient)."""
        w, x = self.graph.nodes[i].args
        lay = self.lay
        m, n = lay.shape[w]
        if lay.live[x]:
            self.lane_product(w, lambda o, t: self.lane(self.adjoint_base, lay.adjoint[x], o, t),
                              lambda q, t: self.lane(self.adjoint_base, lay.adjoint[i], q, t), n, m,
                              lambda o, q: self.index((q, n), (o, 1)), True)
        self.lane_gradient(i, w, x)

    def lane_vectors(self, body, count=None, group=1):
        """body(t, width, n) over the tile's rows (the first count, an i64, if given): n whole SIMD registers of
        rows at a time (width self.width, t the first row; n = group, then the rest of them one by one), then the
        rest one by one (width 1, n 1)."""
        b, width = self.b, self.width
        if count is None:  # the whole tile: counts known here, no loop that would never run
            whole = self.tile // width
            done = whole // group * group
            for first, count, step, width_, group_ in ((0, whole // group, group * width, width, group),
                                                       (done * width, whole - done, width, width, 1),
                                                       (whole * width, self.tile - whole * width, 1, 1, 1)):
                if count:
                    self.loop(count, lambda v, first=first, step=step, width_=width_, group_=group_: body(
                        b.add(ir.Constant(I64, first), b.mul(v, ir.Constant(I64, step))), width_, group_))
            return
        whole = b.sdiv(count, ir.Constant(I64, width))
        self.loop(whole, lambda v: body(b.mul(v, ir.Constant(I64, width)), width, 1))
        done = b.mul(whole, ir.Constant(I64, width))
        self.loop(b.sub(count, done), lambda r: body(b.add(done, r), 1, 1))

    def load_lanes(self, ptr, width):
        return self.b.load(ptr) if width == 1 else self.b.load(
            self.b.bitcast(ptr, ir.VectorType(DOUBLE, width).as_pointer()), align=8)

    def store_lanes(self, value, ptr, width):
        if width == 1:
            self.b.store(value, ptr)
        else:
            self.b.store(value, self.b.bitcast(ptr, ir.VectorType(DOUBLE, width).as_pointer()), align=8)

    def lane_sums(self, count, width, start=None):
        """count accumulators of width doubles (allocas LLVM keeps in registers), set to start[j] or 0."""
        kind = DOUBLE if width == 1 else ir.VectorType(DOUBLE, width)
        with self.b.goto_block(self.entry):
            sums = [self.b.alloca(kind) for _ in range(count)]
        for j, acc in enumerate(sums):
            self.b.store(ir.Constant(kind, 0.0 if width == 1 else [0.0] * width) if start is None else start[j], acc)
        return sums

    def blocks_of(self, total, size, body):
        """body(first, n) over 0 … total − 1 in blocks of size (first an i64), the last block the rest."""
        b = self.b
        if total // size:
            self.loop(total // size, lambda k: body(b.mul(k, ir.Constant(I64, size)), size))
        if total % size:
            body(ir.Constant(I64, total // size * size), total % size)

    def lane_product(self, w, out, inp, outs, ins, windex, accumulate):
        """out[o] (+)= Σ_q W[windex(o, q)]·inp[q] for o < outs, lane by lane (out(o, t), inp(q, t) pointers to
        row t's element): PRODUCT_OUTPUTS outputs at a time by PRODUCT_LANES SIMD registers of rows, their sums in
        registers, each weight loaded once for them all."""
        b = self.b

        def block(o0, size, t0, width, group):
            os_ = [b.add(o0, ir.Constant(I64, j)) for j in range(size)]
            ts = [b.add(t0, ir.Constant(I64, g * width)) for g in range(group)]
            accs = self.lane_sums(size * group, width, [self.load_lanes(out(o, t), width) for o in os_ for t in ts]
                                  if accumulate else None)

            def step(q):
                xs = [self.load_lanes(inp(q, t), width) for t in ts]
                for j, o in enumerate(os_):
                    wv = b.load(self.gep(self.weights, b.add(ir.Constant(I64, self.lay.weight[w]), windex(o, q))))
                    wv = wv if width == 1 else self.splat_lanes(wv, width)
                    for g, x in enumerate(xs):
                        acc = accs[j * group + g]
                        b.store(b.fadd(b.load(acc), b.fmul(wv, x, flags=REDUCE), flags=REDUCE), acc)
            if ins <= PRODUCT_UNROLL:
                for q in range(ins):
                    step(ir.Constant(I64, q))
            else:
                self.loop(ins, step)
            for j, o in enumerate(os_):
                for g, t in enumerate(ts):
                    self.store_lanes(b.load(accs[j * group + g]), out(o, t), width)
        self.blocks_of(outs, PRODUCT_OUTPUTS, lambda o0, size: self.lane_vectors(
            lambda t0, width, group: block(o0, size, t0, width, group), group=PRODUCT_LANES))

    def splat_lanes(self, x, width):
        vt = ir.VectorType(DOUBLE, width)
        one = self.b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                     ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))

    def lane_gradient(self, i, w, x):
        """W̄ += Σ_t ȳ_t x_tᵀ over the tile's rows t (y = W @ x): blocks of GEMM_ROWS rows by GEMM_COLUMNS columns
        of W̄, each a sum along the lanes in a register (whole SIMD registers of rows, then the rest one by one),
        added to W̄ once a tile. Where x is an array column, its whole SIMD registers of columns from its
        row-major block instead (block_gradient), no sum along a register."""
        b, lay, width = self.b, self.lay, self.width
        m, n = lay.shape[w]
        first = 0
        if x in self.blocks and n >= width:
            first = self.block_gradient(i, w, x)

        def block(r0, rows):
            def columns(k0, cols):
                vector_sums = self.lane_sums(rows * cols, width)
                scalar_sums = self.lane_sums(rows * cols, 1)

                def at(t, lanes, _):
                    sums = vector_sums if lanes == width else scalar_sums
                    gs = [self.load_lanes(self.lane(self.adjoint_base, lay.adjoint[i], b.add(r0, ir.Constant(
                        I64, j)), t), lanes) for j in range(rows)]
                    xs = [self.load_lanes(self.lane(self.tape_base, lay.value[x], b.add(k0, ir.Constant(
                        I64, l)), t), lanes) for l in range(cols)]
                    for j in range(rows):
                        for l in range(cols):
                            acc = sums[j * cols + l]
                            b.store(b.fadd(b.load(acc), b.fmul(gs[j], xs[l], flags=REDUCE), flags=REDUCE), acc)
                self.lane_vectors(at, self.count)
                for j in range(rows):
                    for l in range(cols):
                        total = b.fadd(self.reduce_sum(b.load(vector_sums[j * cols + l]), width),
                                       b.load(scalar_sums[j * cols + l]))
                        ptr = self.gep(self.grad, self.index((ir.Constant(I64, lay.weight[w]), 1),
                                                             (b.add(r0, ir.Constant(I64, j)), n),
                                                             (b.add(k0, ir.Constant(I64, l)), 1)))
                        b.store(b.fadd(b.load(ptr), total), ptr)
            self.blocks_of(n - first, GEMM_COLUMNS, lambda k0, cols: columns(b.add(k0, ir.Constant(I64, first)), cols))
        self.blocks_of(m, GEMM_ROWS, block)

    def block_gradient(self, i, w, x):
        """W̄[r, k…] += Σ_t ȳ_t[r]·x_t[k…] for x an array column, along its row-major block: GEMM_ROWS rows of W̄
        by GEMM_VECTORS SIMD registers of its columns at a time, their sums in registers across the tile's rows.
        The columns it covers (whole registers)."""
        b, lay, width = self.b, self.lay, self.width
        m, n = lay.shape[w]
        chunks = n // width

        def block(r0, rows):
            def columns(c0, vectors):
                sums = self.lane_sums(rows * vectors, width)

                def row(t):
                    xs = [self.load_lanes(self.block_at(x, b.add(self.start_row, t), b.mul(b.add(
                        c0, ir.Constant(I64, v)), ir.Constant(I64, width))), width) for v in range(vectors)]
                    for j in range(rows):
                        g = self.splat_lanes(b.load(self.lane(self.adjoint_base, lay.adjoint[i], b.add(
                            r0, ir.Constant(I64, j)), t)), width)
                        for v in range(vectors):
                            acc = sums[j * vectors + v]
                            b.store(b.fadd(b.load(acc), b.fmul(g, xs[v], flags=REDUCE), flags=REDUCE), acc)
                self.loop(self.count, row)
                for j in range(rows):
                    for v in range(vectors):
                        at = self.index((ir.Constant(I64, lay.weight[w]), 1), (b.add(r0, ir.Constant(I64, j)), n),
                                        (b.mul(b.add(c0, ir.Constant(I64, v)), ir.Constant(I64, width)), 1))
                        ptr = self.gep(self.grad, at)
                        self.store_lanes(b.fadd(self.load_lanes(ptr, width), b.load(sums[j * vectors + v]),
                                                flags=REDUCE), ptr, width)
            return columns
        self.blocks_of(m, GEMM_ROWS, lambda r0, rows: self.blocks_of(
            chunks, GEMM_VECTORS, lambda c0, vectors: block(r0, rows)(c0, vectors)))
        return chunks * width

    # --- the forward sweep ---
    def forward(self, row):
        self.row = row
        for i in self.lay.order:
            limits.tick()
            self.forward_node(i, row)

    def forward_node(self, i, row):
        node, lay, b = self.graph.nodes[i], self.lay, self.b
        if node.op in ('const', 'weight'):
            return
        n = size_of(lay.shape[i])
        if node.op == 'column':  # a number into the record; an array column is read in its block, in place
            if i not in self.blocks:
                self.put(i, 0, b.load(self.gep(self.cols[lay.columns[i][0]], row)))
            return
        if node.op in PRIMITIVES:
            self.loop(n, lambda k: self.put(i, k, EMIT[node.op](self.e, *[self.val(a, k) for a in node.args])))
            return
        FORWARD[node.op](self, i, node.args)

    # --- the reverse sweep ---
    def reverse(self, row):
        """One row's reverse sweep."""
        self.row = row
        self.reverse_start()
        for i in self.swept():
            if self.tape == 'reversible':
                self.recover(i)
            self.reverse_node(i)

    def reverse_start(self):
        """The row's adjoints zeroed, the loss's set to 1."""
        b, lay, root = self.b, self.lay, self.program.tensor.root
        self.loop(lay.adjoints, lambda k: b.store(ir.Constant(DOUBLE, 0.0), self.gep(self.adjoints, k)))
        if lay.live[root] and self.graph.nodes[root].op != 'weight':
            b.store(ir.Constant(DOUBLE, 1.0), self.adj_ptr(root, 0))
        elif lay.live[root]:
            self.add_adj(root, 0, ir.Constant(DOUBLE, 1.0))

    def swept(self):
        """The nodes the reverse sweep visits, in its order: those that depend on a weight, but the leaves."""
        for i in reversed(self.lay.order):
            limits.tick()
            if self.lay.live[i] and self.graph.nodes[i].op not in ('weight', 'const', 'column'):
                yield i

    def reverse_node(self, i):
        node = self.graph.nodes[i]
        if node.op in PRIMITIVES:
            self.reverse_primitive(i, node)
        else:
            REVERSE[node.op](self, i, node.args)

    def reverse_primitive(self, i, node):
        graph, partials = partial_programs(node.op)
        n = size_of(self.lay.shape[i])
        for position, (a, p) in enumerate(zip(node.args, partials)):
            if p is None or not self.lay.live[a]:
                continue

            def body(k, a=a, p=p):
                leaves = {f'#{m}': (lambda m=m: self.val(node.args[m], k)) for m in range(len(node.args))}
                leaves['#out'] = lambda: self.val(i, k)
                self.add_adj(a, k, self.b.fmul(self.emit(graph, p, leaves), self.adj(i, k)))
            self.loop(n, (lambda k, body=body: self.rows(lambda: body(k))) if self.lanes else body)

    def emit(self, graph, root, leaves):
        """Node root of a small scalar graph (a partial) as IR, its weight leaves read by leaves[name]()."""
        values = {}
        for j in graph.ancestors([root]):
            node = graph.nodes[j]
            if node.op == 'const':
                values[j] = ir.Constant(BOOL, int(node.value)) if isinstance(node.value, bool) else \
                    ir.Constant(DOUBLE, node.value)
            elif node.op == 'weight':
                values[j] = leaves[node.value]()
            else:
                values[j] = EMIT[node.op](self.e, *[values[x] for x in node.args])
        return values[root]

    # --- 'reversible': the values a step's reverse reads, recovered exactly before it ---
    def recover(self, i):
        """Make the values node i's reverse reads available, as plan_recovery() planned: each recomputed by its own
        step from values at hand, or recovered from its consumer's value by an exact inverse."""
        for action in self.recovery_plan.get(i, ()):
            if action[0] == 'recompute':
                self.forward_node(action[1], self.row)
                continue
            _, a, consumer, position = action
            node = self.graph.nodes[consumer]
            invert = INVERSES[(node.op, position)]
            self.loop(size_of(self.lay.shape[a]), lambda k: self.put(a, k, invert(
                self.e, self.val(consumer, k), *[self.val(x, k) for x in node.args])))

    def check_reversible(self):
        """The plan of what the reverse sweep recovers before each step, or the error for the first value it cannot
        recover exactly."""
        self.recovery_plan = plan_recovery(self.program.tensor, self.lay)


def reads(graph, lay, i):
    """The nodes whose values (i itself: its value and its extra slots) the reverse of node i reads."""
    node = graph.nodes[i]
    if node.op in PRIMITIVES:
        pgraph, partials = partial_programs(node.op)
        found = []
        for a, p in zip(node.args, partials):
            if p is None or not lay.live[a]:
                continue
            for j in pgraph.ancestors([p]):
                leaf = pgraph.nodes[j]
                if leaf.op == 'weight':
                    found.append(i if leaf.value == '#out' else node.args[int(leaf.value[1:])])
        return list(dict.fromkeys(found))
    return READS[node.op](lay, node.args, i)


def plan_recovery(lam, lay):
    """For the 'reversible' tape: {node: [action, …]}, what the reverse sweep does before node's reverse so that every
    value it reads is exact — ('recompute', a): a's own step again, its arguments at hand (leaves, the loss's value,
    or values recovered before); ('invert', a, consumer, position): a from its consumer's value by an exact inverse
    (INVERSES). Else the 0A000 error naming the step whose reverse needs a value that neither gives."""
    graph = lam.graph
    have = {i for i in lay.order if graph.nodes[i].op in LEAVES}
    if graph.nodes[lam.root].op not in EXTRA:
        have.add(lam.root)  # the loss's value crosses from the forward sweep (a logsumexp's extra slots do not)
    consumers = {}
    for i in lay.order:
        for position, a in enumerate(graph.nodes[i].args):
            consumers.setdefault(a, []).append((i, position))
    plan = {}
    for i in reversed(lay.order):
        node = graph.nodes[i]
        if not lay.live[i] or node.op in LEAVES:
            continue
        for a in reads(graph, lay, i):
            if a in have:
                continue
            if all(x in have for x in graph.nodes[a].args):
                plan.setdefault(i, []).append(('recompute', a))
                have.add(a)
                continue
            way = next(((c, position) for c, position in consumers.get(a, ()) if c in have
                        and (graph.nodes[c].op, position) in INVERSES and lay.shape[a] == lay.shape[c]
                        and all(x in have for k, x in enumerate(graph.nodes[c].args) if k != position)), None)
            if way is None:  # named: the step that would have to run backwards (a's consumer at hand), else i
                step = next((c for c, _ in consumers.get(a, ()) if c in have), i)
                pos = lam.places.get(step)
                what = vectors.SYMBOLS.get(graph.nodes[step].op, graph.nodes[step].op)
                raise PgadError('0A000', f'tape "reversible" cannot run "{what}" backwards',
                                detail=None if pos is None else caret(lam.text, pos),
                                hint="The reverse sweep of this step reads a value that is neither recomputed from "
                                     "values at hand nor recovered exactly (only negation inverts exactly: x = out "
                                     "− y, ln(exp(x)), atanh(tanh(x)) round or lose the value): use tape 'store' "
                                     "or 'recompute'.")
            plan.setdefault(i, []).append(('invert', a, *way))
            have.add(a)
    return plan


# --- vector operations: forward, and their vector-Jacobian products --------------------------------------------------

def _dims(shape_a, shape_b):
    """(M, N, P) of a @ b: a is M×N (M = 1 for a vector), b is N×P (P = 1 for a vector)."""
    m = shape_a[0] if len(shape_a) == 2 else 1
    n = shape_a[-1]
    p = shape_b[1] if len(shape_b) == 2 else 1
    return m, n, p


def _matmul_forward(kn, i, args):
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


def _matmul_reverse(kn, i, args):
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


def _sum_forward(kn, i, args):
    v, = args
    kn.put(i, 0, kn.reduce(size_of(kn.lay.shape[v]), lambda k: kn.val(v, k)))


def _sum_reverse(kn, i, args):
    v, = args
    g = kn.adj(i, 0)
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.add_adj(v, k, g))


def _greatest(kn, v, n):
    top = kn.alloca(1)
    kn.b.store(kn.val(v, 0), top)
    kn.loop(n, lambda k: kn.b.store(EMIT['greatest'](kn.e, kn.b.load(top), kn.val(v, k)), top))
    return kn.b.load(top)


def _logsumexp_forward(kn, i, args):  # L = m + ln Σ e, e = exp(v − m) kept (slots 1…n) with Σ e (slot n + 1)
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    top = _greatest(kn, v, n)
    kn.exps(v, n, top, lambda k, e: kn.put(i, b.add(k, ir.Constant(I64, 1)), e))
    total = kn.reduce(n, lambda k: b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1)))))
    kn.put(i, n + 1, total)
    kn.put(i, 0, b.fadd(top, kn.e.call('log', total)))


def _logsumexp_reverse(kn, i, args):  # v̄ += L̄ · e / Σ e: the softmax, from the forward sweep's exps
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    scale = b.fdiv(kn.adj(i, 0), b.load(kn.extra(i, n + 1)))
    kn.loop(n, lambda k: kn.add_adj(v, k, b.fmul(scale, b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1)))))))


def _softmax_forward(kn, i, args):
    v, = args
    n = kn.lay.shape[v][0]
    top = _greatest(kn, v, n)
    kn.exps(v, n, top, lambda k, e: kn.put(i, k, e))
    total = kn.reduce(n, lambda k: kn.val(i, k))
    kn.loop(n, lambda k: kn.put(i, k, kn.b.fdiv(kn.val(i, k), total)))


def _softmax_reverse(kn, i, args):  # v̄ += s ⊙ (s̄ − s̄·s)
    v, = args
    n = kn.lay.shape[v][0]
    inner = kn.reduce(n, lambda k: kn.b.fmul(kn.adj(i, k), kn.val(i, k)))
    kn.loop(n, lambda k: kn.add_adj(v, k, kn.b.fmul(kn.val(i, k), kn.b.fsub(kn.adj(i, k), inner))))


def _stack_forward(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.put(i, kn.index((t * inner, 1), (k, 1)), kn.val(a, k)))


def _stack_reverse(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.add_adj(a, k, kn.adj(i, kn.index((t * inner, 1), (k, 1)))))


def _position(kn, v, index):
    """(the 0-based row of v that index picks, as an i64, clamped into range; is it a position of v, an i1)."""
    b, n = kn.b, kn.lay.shape[v][0]
    x = kn.val(index, 0)
    whole = b.fcmp_ordered('==', x, kn.e.call('llvm.floor.f64', x))
    inside = b.and_(b.fcmp_ordered('>=', x, ir.Constant(DOUBLE, 1.0)), b.fcmp_ordered('<=', x, ir.Constant(DOUBLE, n)))
    ok = b.and_(whole, inside)
    k = b.fptosi(b.select(ok, x, ir.Constant(DOUBLE, 1.0)), I64)
    return b.sub(k, ir.Constant(I64, 1)), ok


def _index_forward(kn, i, args):
    v, index = args
    inner = size_of(kn.lay.shape[v][1:])
    at, ok = _position(kn, v, index)
    node = kn.program.tensor.graph.nodes[index]  # a categorical column's code 0, a category never trained: 0
    categorical = node.op == 'column' and node.value in kn.program.dims.categorical
    nan = ir.Constant(DOUBLE, 0.0 if categorical else math.nan)
    kn.loop(inner, lambda k: kn.put(i, k, kn.b.select(ok, kn.val(v, kn.index((at, inner), (k, 1))), nan)))


def _index_reverse(kn, i, args):
    v, index = args
    inner = size_of(kn.lay.shape[v][1:])
    at, ok = _position(kn, v, index)
    zero = ir.Constant(DOUBLE, 0.0)
    kn.loop(inner, lambda k: kn.add_adj(v, kn.index((at, inner), (k, 1)), kn.b.select(ok, kn.adj(i, k), zero)))


def _transpose_forward(kn, i, args):
    v, = args
    m, n = kn.lay.shape[v]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.put(i, kn.index((k, m), (r, 1)), kn.val(v, kn.index((r, n), (k, 1))))))


def _transpose_reverse(kn, i, args):
    v, = args
    m, n = kn.lay.shape[v]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.add_adj(v, kn.index((r, n), (k, 1)),
                                                         kn.adj(i, kn.index((k, m), (r, 1))))))


def _outer_forward(kn, i, args):
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    kn.loop(m, lambda r: kn.loop(n, lambda k: kn.put(i, kn.index((r, n), (k, 1)), kn.b.fmul(kn.val(a, r),
                                                                                          kn.val(c, k)))))


def _outer_reverse(kn, i, args):  # ā[r] += Ȳ[r, :]·b, b̄ += a[r]·Ȳ[r, :]
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    if kn.lay.live[a]:
        kn.loop(m, lambda r: kn.add_adj(a, r, kn.dot(kn.adj_ptr(i, kn.index((r, n))), kn.ptr(c), n)))
    if kn.lay.live[c]:
        kn.loop(m, lambda r: kn.axpy(kn.adj_ptr(c, 0), kn.val(a, r), kn.adj_ptr(i, kn.index((r, n))), n))


FORWARD = {'matmul': _matmul_forward, 'dot': _matmul_forward, 'sum': _sum_forward, 'logsumexp': _logsumexp_forward,
           'softmax': _softmax_forward, 'stack': _stack_forward, 'index': _index_forward,
           'transpose': _transpose_forward, 'outer': _outer_forward}
REVERSE = {'matmul': _matmul_reverse, 'dot': _matmul_reverse, 'sum': _sum_reverse, 'logsumexp': _logsumexp_reverse,
           'softmax': _softmax_reverse, 'stack': _stack_reverse, 'index': _index_reverse,
           'transpose': _transpose_reverse, 'outer': _outer_reverse}
# The values each vector operation's reverse reads (reads()): of its arguments, or its own (with its extra slots).
READS = {'matmul': lambda lay, args, i: [args[1]] * lay.live[args[0]] + [args[0]] * lay.live[args[1]],
         'sum': lambda lay, args, i: [], 'logsumexp': lambda lay, args, i: [i], 'softmax': lambda lay, args, i: [i],
         'stack': lambda lay, args, i: [], 'index': lambda lay, args, i: [args[1]],
         'transpose': lambda lay, args, i: []}
READS['dot'] = READS['outer'] = READS['matmul']
assert set(FORWARD) == set(REVERSE) == set(READS) == set(OPERATIONS), set(OPERATIONS) ^ set(FORWARD)


# --- the same operations on a tile kept lane by lane: each a loop nest with the tile's rows innermost -----------------

def _lanes_matmul_forward(kn, i, args):
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


def _lanes_matmul_reverse(kn, i, args):
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


def _lanes_outer_reverse(kn, i, args):  # ā[r] += Ȳ[r, k]·b[k], b̄[k] += a[r]·Ȳ[r, k]
    a, c = args
    m, n = kn.lay.shape[a][0], kn.lay.shape[c][0]
    b = kn.b
    if kn.lay.live[a]:
        kn.loop(m, lambda r: kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(
            a, r, b.fmul(kn.adj(i, kn.index((r, n), (k, 1))), kn.val(c, k))))))
    if kn.lay.live[c]:
        kn.loop(m, lambda r: kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(
            c, k, b.fmul(kn.val(a, r), kn.adj(i, kn.index((r, n), (k, 1))))))))


def _lanes_logsumexp_forward(kn, i, args):  # as _logsumexp_forward: the greatest, the exps, their sum, lane by lane
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


def _lanes_logsumexp_reverse(kn, i, args):  # v̄ += L̄ · e / Σ e
    v, = args
    n, b = kn.lay.shape[v][0], kn.b
    kn.loop(n, lambda k: kn.rows(lambda: kn.add_adj(v, k, b.fmul(
        b.fdiv(kn.adj(i, 0), b.load(kn.extra(i, n + 1))), b.load(kn.extra(i, b.add(k, ir.Constant(I64, 1))))))))


def _lanes_stack_forward(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.rows(lambda: kn.put(i, kn.index((t * inner, 1), (k, 1)), kn.val(a, k))))


def _lanes_stack_reverse(kn, i, args):
    inner = size_of(kn.lay.shape[args[0]])
    for t, a in enumerate(args):
        kn.loop(inner, lambda k, t=t, a=a: kn.rows(lambda: kn.add_adj(a, k, kn.adj(i, kn.index((t * inner, 1),
                                                                                                (k, 1))))))


def _lanes_sum_forward(kn, i, args):
    v, = args
    kn.rows(lambda: kn.put(i, 0, ir.Constant(DOUBLE, 0.0)))
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.rows(lambda: kn.put(i, 0, kn.b.fadd(kn.val(i, 0), kn.val(v, k)))))


def _lanes_sum_reverse(kn, i, args):
    v, = args
    kn.loop(size_of(kn.lay.shape[v]), lambda k: kn.rows(lambda: kn.add_adj(v, k, kn.adj(i, 0))))


# The operations a lanes tile runs lane by lane; the others (index, transpose, softmax, outer's forward) a row at a time
LANES_FORWARD = {'matmul': _lanes_matmul_forward, 'dot': _lanes_matmul_forward, 'logsumexp': _lanes_logsumexp_forward,
                 'stack': _lanes_stack_forward, 'sum': _lanes_sum_forward}
LANES_REVERSE = {'matmul': _lanes_matmul_reverse, 'dot': _lanes_matmul_reverse, 'outer': _lanes_outer_reverse,
                 'logsumexp': _lanes_logsumexp_reverse, 'stack': _lanes_stack_reverse, 'sum': _lanes_sum_reverse}


def column_arguments(program):
    """(the indexes in program.columns of the number columns, the names of the array columns it reads): a loop kernel
    takes a pointer to each number column, then one to each array column's row-major block (blocks() makes them). An
    array column the lambda names but never reads (in a branch never taken) has no elements in program.columns, and
    no argument: the loader loads program.columns alone."""
    elements = dict(program.columns_of)
    return ([k for k, c in enumerate(program.columns) if c not in elements],
            list(dict.fromkeys(elements[c][0] for c in program.columns if c in elements)))


def _members(program, arrays):
    """{array column: the indexes in program.columns of its elements}, for each of arrays."""
    elements = dict(program.columns_of)
    return {name: [k for k, c in enumerate(program.columns) if c in elements and elements[c][0] == name]
            for name in arrays}


def widths(program):
    """The doubles of a row in each of a loop kernel's column arguments: 1 for a number column, an array column's
    length for its block."""
    scalars, arrays = column_arguments(program)
    members = _members(program, arrays)
    return [1] * len(scalars) + [len(members[name]) for name in arrays]


def blocks(program):
    """A function from the kernel's columns (program.columns' arrays, as every backend is given them) to a loop
    kernel's arguments: the number columns as they are, each array column's elements as one row-major block. The
    blocks of the last columns seen are kept: the descent gives the same arrays at every step."""
    scalars, arrays = column_arguments(program)
    members = _members(program, arrays)
    kept = {}  # 'of': weak references to the column arrays the blocks copy; 'blocks'

    def arguments(columns):
        if not arrays:
            return list(columns)
        of = kept.get('of')
        # the very arrays (an identity test, a few µs: their addresses took 75 µs, a tenth of a digits step)
        if of is None or len(of) != len(columns) or any(r() is not a for r, a in zip(of, columns)):
            kept.clear()
            kept.update(of=[weakref.ref(a) for a in columns],
                        blocks=[np.ascontiguousarray(np.stack([columns[k] for k in members[name]], axis=1),
                                                     dtype=np.float64).ravel() for name in arrays])
            # dropped with the columns they copy (the call's table), not kept by the cached kernel past the call
            weakref.finalize(columns[members[arrays[0]][0]], kept.clear)
        return [columns[k] for k in scalars] + kept['blocks']
    arguments.kept = kept
    return arguments


def _on_the_heap(sizes):
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


def scratch_doubles(program, tape, tile=None):
    """The doubles of the scratch buffer program's loop kernel takes as its last argument: its tape — the value
    records the reverse sweep reads, a tile's for 'store', a row's for 'recompute', a row's for 'reversible' to
    recover into — its adjoint records, a lanes tile's weights' lanes, and the gradient sums. Its
    caller allocates it, on the heap, once a call."""
    kn = _Kernel(program, 'pgad_scratch', tape, rows_of(program, tape, tile))
    return _on_the_heap(kn.buffers())


def buffer_bytes(program, tape, tile=None):
    """The bytes a loop kernel's buffers take, once per call: on its stack (at most STACK_BYTES) and in its scratch
    buffer on the heap."""
    return 8 * sum(_Kernel(program, 'pgad_scratch', tape, rows_of(program, tape, tile)).buffers())


def kernel_ir(program, name, tape='store', tile=None):
    """The LLVM IR module (text) of program's loop kernel, a function called name; a 'store' tape's tiles of tile
    rows (None: rows_of's)."""
    if tape not in TAPES:
        raise ValueError(tape)
    return _Kernel(program, name, tape, rows_of(program, tape, tile)).build()
