"""A loop kernel's IR: the function, its buffers, its loops, the values and adjoints its steps read and write, and
the forward and reverse sweeps over the nodes of the parsed lambda (each vector operation's step from
operations.py, each primitive's from codegen.EMIT and the rules' partials). _Kernel is built of the SIMD helpers
(simd.py), a lanes tile's sweeps (lanes.py) and the tapes' (tapes.py).
"""
import re

from llvmlite import ir
import llvmlite.binding as llvm

from ... import limits
from ...lang.rules import PRIMITIVES
from ..codegen import BOOL, DOUBLE, EMIT, I64, _Emitter, vectorised, vector_widths
from .calling import column_arguments
from .lanes import LANES_HINTS, Lanes
from .layout import ALIGN, SMALL, STACK_BYTES, layout, on_the_heap, rows_of, size_of
from .operations import FORWARD, REVERSE, partial_programs
from .simd import REDUCE, Simd
from .tapes import LEAVES, TAPES, Tapes


class _Kernel(Simd, Lanes, Tapes):
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
        assert self.scratch_used == on_the_heap(self.buffers()), (self.scratch_used, self.buffers())
        text = re.sub(r'^(!\d+) = !\{ !"pgad\.loop\.\d+"', r'\1 = distinct !{ \1', str(self.module), flags=re.M)
        return vectorised(text, vector_widths())

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


def scratch_doubles(program, tape, tile=None):
    """The doubles of the scratch buffer program's loop kernel takes as its last argument: its tape — the value
    records the reverse sweep reads, a tile's for 'store', a row's for 'recompute', a row's for 'reversible' to
    recover into — its adjoint records, a lanes tile's weights' lanes, and the gradient sums. Its
    caller allocates it, on the heap, once a call."""
    kn = _Kernel(program, 'pgad_scratch', tape, rows_of(program, tape, tile))
    return on_the_heap(kn.buffers())


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
