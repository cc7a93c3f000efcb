"""A 'store' tile of more than a row, kept lane by lane (structure-of-arrays): each element of each value the tile's
rows side by side, each step a loop over the rows, innermost, which LLVM vectorises; W @ x, W a weight matrix, as a
small matrix product over the tile, blocked (lane_product), and its weight gradient as sums along the lanes
(lane_gradient) or along an array column's row-major block (block_gradient).
"""
from llvmlite import ir

from ... import limits
from ...lang.rules import PRIMITIVES
from ..codegen import DOUBLE, EMIT, I64
from .layout import size_of
from .operations import FORWARD, LANES_FORWARD, LANES_REVERSE, REVERSE
from .simd import REDUCE

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


class Lanes:
    """A lanes tile's sweeps and blocked products (a mixin of kernel._Kernel)."""

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
