"""Explicit SIMD for a loop kernel's products: dot products and axpys along contiguous memory, a vector's sum, libmvec's
vector exp, and loads, stores and broadcasts of a register's lanes — methods of the kernel (kernel.py), which gives
them its IRBuilder (b), its loop(), gep() and values.
"""
from llvmlite import ir

from ..codegen import DOUBLE, I64, link_math, vector_widths

REDUCE = ('reassoc', 'nsz', 'contract')  # a dot product's sum may be reordered (vectorised)
UNROLL, ACCUMULATORS = 32, 4  # a dot product of up to UNROLL vectors is unrolled, summed in ACCUMULATORS chains


class Simd:
    """The kernel's SIMD helpers (a mixin of kernel._Kernel): self.width doubles to a register."""

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

    def load_lanes(self, ptr, width):
        return self.b.load(ptr) if width == 1 else self.b.load(
            self.b.bitcast(ptr, ir.VectorType(DOUBLE, width).as_pointer()), align=8)

    def store_lanes(self, value, ptr, width):
        if width == 1:
            self.b.store(value, ptr)
        else:
            self.b.store(value, self.b.bitcast(ptr, ir.VectorType(DOUBLE, width).as_pointer()), align=8)

    def splat_lanes(self, x, width):
        vt = ir.VectorType(DOUBLE, width)
        one = self.b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                     ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))
