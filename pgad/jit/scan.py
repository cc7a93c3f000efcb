"""A sequence model's Step (pgad/sequences.py) → machine code that walks each sequence's rows in order (the llvm
backend of run() and gradient(); forward mode's functions are _tangents_ir's, in a module of their own).

One module of four functions, each over n sequences (first[g], count[g]: the rows of sequence g that the call
takes; its weights at w + g·wstride, wstride 0 where all share one vector; its state, adjoint, loss and gradient at
g·K, g·K, g and g·P of the arrays given):

    start(n, first, w, wstride, state, columns…)                      state ← each field's start (the first row's)
    forward(n, first, count, w, wstride, state, loss, tape, tape_at, predictions, columns…)
        for each row in order: tape[tape_at[g] + t·K + k] ← the state (where tape is not null); loss += the row's;
        predictions[row] ← the prediction (where not null); state ← next (all fields at once)
    backward(n, first, count, w, wstride, tape, tape_at, adjoint, gradient, columns…)
        for each row from the last: the state from the tape, then the step's vjp at the cotangent (1, adjoint):
        gradient += its part by the weights, adjoint ← its part by the state
    start_vjp(n, first, w, wstride, adjoint, gradient, columns…)       gradient += ∂(Σ adjoint·start)/∂w

The state, adjoint, loss and gradient live in the caller's arrays (K, K, 1 and P doubles a sequence) and the tape in
a buffer the caller sizes (TapeFlow's tile: a row's K states together); the machine code allocates nothing, so no
stack array grows with a sequence (docs/security.md). Every sum along a sequence is taken row after row, as
sequences.py's reference takes it (no reassociation), so the results are the python backend's to its libm's ulps,
and the same bits however a call is cut.

The driver (gradient(), run()) cuts the work in pieces of about threads.PIECE_NS by the step's estimated cost a row:
a piece is a run of short sequences whole (start, forward with the tape, backward, start_vjp), or some rows of a
long one, whose state, loss, adjoint and gradient carry from one piece to the next. The pieces run on pgad's thread
pool (threads.py) in rounds: each round takes the next piece of up to a few sequences' work, interrupts are checked
between pieces, and since each sequence's sums are its own, the bits do not depend on the threads or the cut. A long
sequence keeps all its states where they fit its share of the tile budget, else a checkpoint every C rows (C the
most that fit) and each segment recomputed from its checkpoint before its backward pass: one more forward pass for
T/C·K doubles.
"""
import ctypes
import functools
import hashlib
import math
import threading
import time
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from . import cache as disk, compiler, cost, frames, targets, threads
from .. import limits
from ..errors import PgadError
from ..lang import printer
from ..lang.parser import STATE
from .codegen import DOUBLE, EMIT, I64, _Emitter, emit_nodes
from .tiers import TIERS

POINTER, INDEX = DOUBLE.as_pointer(), I64.as_pointer()
# The tiers a scan compiles at: its loops are recurrences, which vectorise nowhere, so O3 without the vectorisers
# (their crashes are where LLVM aborted: compiler.machine_code), and O0 past O3's bound on the nodes
SCAN_TIERS = tuple(t for t in TIERS if not t.vectorise)


@dataclass
class Scan:
    """A Step's compiled functions, called through ctypes, and the estimated nanoseconds of a row."""
    start: object
    forward: object
    backward: object
    start_vjp: object
    forward_ns: float
    backward_ns: float
    tier: object
    ms: dict
    tangents: object = None  # forward mode's: the tangents' start (forward is then forward mode's row)


def nodes(step, tangents=False):
    """The nodes the functions evaluate, all together (forward mode's: and the products of its tangents' update, K + 1
    rows of K a weight)."""
    g = step.graph
    extra = 2 * (len(step.states) + 1) * len(step.states) if tangents else 0
    return sum(len(g.ancestors(list(r))) for r in _roots(step, tangents)) + extra


def _roots(step, tangents=False):
    """Each function's roots: reverse mode's start, forward, backward and start_vjp; or forward mode's start, the
    tangents' start and the rows with their Jacobian."""
    if tangents:
        rows, starts = step.jacobian()
        return (list(step.start), [n for row in starts for n in row],
                [step.loss, *step.next, *[n for row in rows for n in row]])
    return ([step.loss, step.prediction, *step.next], list(step.vjp), list(step.start), list(step.start_vjp))


def tier(step, tangents=False):
    """The tier that compiles the step's functions (forward mode's where tangents), or None where it is too large
    for any (54001 for 'llvm'); found once for the Step (kept with it)."""
    key = '_scan_tier' + '_tangents' * tangents
    if key not in step.__dict__:
        step.__dict__[key] = _tier(step, tangents)
    return step.__dict__[key]


def _tier(step, tangents):
    if any(step.graph.nodes[i].op not in EMIT and step.graph.nodes[i].op not in ('const', 'column', 'weight')
           for r in _roots(step, tangents) for i in step.graph.ancestors(list(r))):
        return None
    total = nodes(step, tangents)
    return next((t for t in SCAN_TIERS if total <= t.max_nodes), None)


def fits(step, tangents=False):
    return tier(step, tangents) is not None


def compiled(step, adjoint, cache=disk.NONE, tangents=False):
    """The Scan of step (forward mode's where tangents), compiled once for the Step and the target (kept with it), its
    object code from the disk cache where there; adjoint: the prefix of the vjp's cotangent columns (adjoint +
    str(k)). 54001 where it is too large."""
    key = '_scan' + '_tangents' * tangents + ' ' + targets.current().name
    found = step.__dict__.get(key)
    if found is None:
        found = step.__dict__[key] = _compile(step, adjoint, cache, tangents)
    return found


def _compile(step, adjoint, cache, tangents):
    level = tier(step, tangents)
    if level is None:
        total = nodes(step, tangents)
        raise PgadError('54001', f'the sequence model is too large for the llvm backend: {total} nodes with its '
                                 'derivatives', detail=f'The llvm backend compiles at most {SCAN_TIERS[-1].max_nodes}.',
                        hint="Use backend => 'python', or 'auto', which picks it for models this large.")
    ms, started = {}, time.perf_counter()
    key = cache_key(step, tangents)
    name = f'pgad_scan_{key[:24]}'
    names = [f'{name}_{f}' for f in (('start', 'tangents', 'forward_mode') if tangents else
                                     ('start', 'forward', 'backward', 'start_vjp'))]
    data = None if names[0] in compiler._loaded else cache.get(key)  # loaded already: in this process's engine
    if data is None and names[0] not in compiler._loaded:
        text = module_ir(step, adjoint, names, tangents)
        ms['IR generation'] = (time.perf_counter() - started) * 1e3
        here = not compiler.in_backend() and nodes(step, tangents) <= compiler.IN_PROCESS_NODES
        data, optimised = compiler.machine_code(None, text, level, ms, here=here)
        frames.check(optimised)
        cache.put(key, data)
    elif data is not None:
        ms['cache hit'] = (time.perf_counter() - started) * 1e3
    compiler.address(data, names[0], names[1:])
    columns = len(step.columns)
    p = ctypes.c_void_p
    i = ctypes.c_int64
    kinds = [[i, p, p, i, p], [i, p, p, i, p], [i, p, p, p, i, p, p, p, p, p]] if tangents else \
        [[i, p, p, i, p], [i, p, p, p, i, p, p, p, p, p], [i, p, p, p, i, p, p, p, p], [i, p, p, i, p, p]]
    functions = [ctypes.CFUNCTYPE(None, *kind, *[p] * columns)(compiler.address(data, n)) for kind, n in
                 zip(kinds, names)]
    node_ns = cost.SCALAR_NS if level.speed_level else cost.O0_NS
    if tangents:  # a row: its nodes, and 2·(K + 1)·K products a weight
        row = _roots(step, True)[2]
        k = len(step.states)
        ns = node_ns * (sum(cost.LIBM_UNITS if cost._dear(step.graph.nodes[n].op) else 1
                            for n in step.graph.ancestors(row)) + 2 * (k + 1) * (k + 1) * len(step.weights))
        return Scan(functions[0], functions[2], None, None, ns, 0.0, level, ms, functions[1])
    forward, backward = (node_ns * sum(cost.LIBM_UNITS if cost._dear(step.graph.nodes[n].op) else 1
                                       for n in step.graph.ancestors(list(r))) for r in _roots(step)[:2])
    return Scan(*functions, forward, backward, level, ms)


def cache_key(step, tangents=False):
    """The disk cache's key: the step's DAG listing, its columns, weights and fields in order, the mode, this module
    and the toolchain."""
    roots = [r for group in _roots(step, tangents) for r in group]
    what = '\n'.join(['forward mode' if tangents else 'reverse mode', printer.to_listing(step.graph, roots),
                      repr(roots), repr(step.columns), repr(step.weights), repr(step.states), _source(),
                      compiler._toolchain()])
    return hashlib.sha256(what.encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _source():
    with open(__file__, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


# --- the LLVM IR --------------------------------------------------------------------------------------------------

def _at(b, pointer, offset, *more):
    """The address pointer + offset + Σ more (i64 values or ints)."""
    def value(o):
        return ir.Constant(I64, o) if isinstance(o, int) else o
    total = value(offset)
    for o in more:
        total = b.add(total, value(o))
    return b.gep(pointer, [total])


def _loop(b, count, body, backwards=False):
    """Emit `for t in range(count)` (from the last where backwards) around body(t), at b."""
    fn = b.function
    head, inside, after = fn.append_basic_block('head'), fn.append_basic_block('body'), fn.append_basic_block('after')
    before = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(count if backwards else ir.Constant(I64, 0), before)
    b.cbranch(b.icmp_signed('>', i, ir.Constant(I64, 0)) if backwards else b.icmp_signed('<', i, count), inside, after)
    b.position_at_end(inside)
    t = b.sub(i, ir.Constant(I64, 1)) if backwards else i
    body(t)
    following = t if backwards else b.add(i, ir.Constant(I64, 1))
    i.add_incoming(following, b.block)
    b.branch(head)
    b.position_at_end(after)


def _function(module, name, kinds, columns):
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), kinds + [POINTER] * columns), name)
    for arg in fn.args:
        if isinstance(arg.type, ir.PointerType):
            arg.add_attribute('noalias')  # each array is written or read through its own pointer alone
    fn.append_basic_block('entry')
    return fn, ir.IRBuilder(fn.entry_basic_block)


def _module(name):
    """An empty LLVM module for this process's target."""
    module = ir.Module(name=name)
    module.triple = compiler.llvm.get_process_triple()
    return module


def _positions(step, adjoint):
    """({column: its argument}, {weight element: its place in a weight vector}, {state node: its field},
    {adjoint column: its field}) of step's leaves, as the kernels read them."""
    return ({c: j for j, c in enumerate(step.columns)}, {w: j for j, w in enumerate(step.weights)},
            {STATE + f: j for j, f in enumerate(step.states)}, {adjoint + str(j): j for j in range(len(step.states))})


def module_ir(step, adjoint, names, tangents=False):
    """The LLVM IR (text) of step's four functions, named names; or, where tangents, forward mode's three."""
    module, (column_at, weight_at, state_at, adjoint_at) = _module('pgad_scan'), _positions(step, adjoint)
    graph, columns = step.graph, len(step.columns)
    k_count, p_count = len(step.states), len(step.weights)
    K, P = ir.Constant(I64, k_count), ir.Constant(I64, p_count)

    def sequences(b, n, w, wstride, body):
        """for g in range(n): body(g, the weights' values) — the weights loaded once a sequence."""
        def each(g):
            w = _at(b, w_all, b.mul(g, wstride))
            body(g, [b.load(_at(b, w, j)) for j in range(p_count)])
        w_all = w
        _loop(b, n, each)

    def leaf(b, row, weights, state, adjoints=None):
        """The leaf nodes' values: columns at row, the weights, the state from state(j), adjoint j from adjoints."""
        cols = b.function.args[-columns:] if columns else []

        def value(node):
            name = node.value
            if node.op == 'column':
                if name in column_at:
                    return b.load(_at(b, cols[column_at[name]], row))
                return b.load(_at(b, adjoints, adjoint_at[name]))
            if name in weight_at:
                return weights[weight_at[name]]
            return state(state_at[name])
        return value

    def finish(b):
        b.ret_void()

    # start(n, first, w, wstride, state, columns…)
    fn, b = _function(module, names[0], [I64, INDEX, POINTER, I64, POINTER], columns)
    n, first, w, wstride, state = fn.args[:5]

    def start(g, weights):
        row = b.load(_at(b, first, g))
        values = emit_nodes(_Emitter(b, module), graph, list(step.start),
                            leaf(b, row, weights, lambda j: ir.Constant(DOUBLE, 0.0)))
        base = b.mul(g, K)
        for j, r in enumerate(step.start):
            b.store(values[r], _at(b, state, base, j))
    sequences(b, n, w, wstride, start)
    finish(b)
    if tangents:
        _tangents_ir(step, module, names[1:], sequences, leaf)
        return str(module)

    # forward(n, first, count, w, wstride, state, loss, tape, tape_at, predictions, columns…)
    fn, b = _function(module, names[1], [I64, INDEX, INDEX, POINTER, I64, POINTER, POINTER, POINTER, INDEX, POINTER],
                      columns)
    n, first, count, w, wstride, state, loss, tape, tape_at, predictions = fn.args[:10]
    keep_tape = b.icmp_unsigned('!=', tape, ir.Constant(POINTER, None))
    keep_predictions = b.icmp_unsigned('!=', predictions, ir.Constant(POINTER, None))

    def forward(g, weights):
        begin, rows, base = b.load(_at(b, first, g)), b.load(_at(b, count, g)), b.mul(g, K)
        taped = _at(b, tape, b.load(_at(b, tape_at, g)))
        sum_at = _at(b, loss, g)

        def row(t):
            at = b.add(begin, t)
            old = [b.load(_at(b, state, base, j)) for j in range(k_count)]
            with b.if_then(keep_tape):
                for j, v in enumerate(old):
                    b.store(v, _at(b, taped, b.mul(t, K), j))
            values = emit_nodes(_Emitter(b, module), graph, [step.loss, step.prediction, *step.next],
                                leaf(b, at, weights, lambda j: old[j]))
            b.store(b.fadd(b.load(sum_at), values[step.loss]), sum_at)
            prediction = values[step.prediction]
            with b.if_then(keep_predictions):
                b.store(prediction, _at(b, predictions, at))
            news = [values[r] for r in step.next]
            for j, v in enumerate(news):
                b.store(v, _at(b, state, base, j))
        _loop(b, rows, row)
    sequences(b, n, w, wstride, forward)
    finish(b)

    # backward(n, first, count, w, wstride, tape, tape_at, adjoint, gradient, columns…)
    fn, b = _function(module, names[2], [I64, INDEX, INDEX, POINTER, I64, POINTER, INDEX, POINTER, POINTER], columns)
    n, first, count, w, wstride, tape, tape_at, adjoints, grad = fn.args[:9]

    def backward(g, weights):
        begin, rows = b.load(_at(b, first, g)), b.load(_at(b, count, g))
        taped = _at(b, tape, b.load(_at(b, tape_at, g)))
        lam, grad_g = _at(b, adjoints, b.mul(g, K)), _at(b, grad, b.mul(g, P))

        def row(t):
            at = b.add(begin, t)
            old = [b.load(_at(b, taped, b.mul(t, K), j)) for j in range(k_count)]
            values = emit_nodes(_Emitter(b, module), graph, list(step.vjp), leaf(b, at, weights, lambda j: old[j], lam))
            for j in range(p_count):
                where = _at(b, grad_g, j)
                b.store(b.fadd(b.load(where), values[step.vjp[j]]), where)
            news = [values[r] for r in step.vjp[p_count:]]
            for j, v in enumerate(news):
                b.store(v, _at(b, lam, j))
        _loop(b, rows, row, backwards=True)
    sequences(b, n, w, wstride, backward)
    finish(b)

    # start_vjp(n, first, w, wstride, adjoint, gradient, columns…)
    fn, b = _function(module, names[3], [I64, INDEX, POINTER, I64, POINTER, POINTER], columns)
    n, first, w, wstride, adjoints, grad = fn.args[:6]

    def start_vjp(g, weights):
        row = b.load(_at(b, first, g))
        lam, grad_g = _at(b, adjoints, b.mul(g, K)), _at(b, grad, b.mul(g, P))
        values = emit_nodes(_Emitter(b, module), graph, list(step.start_vjp),
                            leaf(b, row, weights, lambda j: ir.Constant(DOUBLE, 0.0), lam))
        for j in range(p_count):
            where = _at(b, grad_g, j)
            b.store(b.fadd(b.load(where), values[step.start_vjp[j]]), where)
    sequences(b, n, w, wstride, start_vjp)
    finish(b)
    return str(module)


# --- the driver ---------------------------------------------------------------------------------------------------

def gradient(step, seqs, weights, tile_bytes, adjoint, cache=disk.NONE):
    """(each sequence's summed loss (G), its gradient by the weights (P × G)), as sequences.gradient gives them in
    reverse mode, by the Step's machine code; tile_bytes: the states kept at once, at most, all threads together."""
    call = _Call(compiled(step, adjoint, cache), step, seqs, weights)
    call.drive(tile_bytes, backward=True)
    return call.loss, call.grad.T.copy()


def forward_mode(step, seqs, weights, adjoint, cache=disk.NONE):
    """(each sequence's summed loss (G), its gradient (P × G)), as sequences.gradient gives them in forward mode (the
    tangents K × P a sequence carried along its rows: no tape), by the Step's machine code."""
    call = _Call(compiled(step, adjoint, cache, tangents=True), step, seqs, weights)
    call.tangent = np.zeros((len(seqs.lengths), call.k, call.p))
    call.drive(0, backward=False)
    return call.loss, call.grad.T.copy()


def run(step, seqs, weights, adjoint, keep=None, cache=disk.NONE):
    """(each sequence's summed loss (G), its final state (K × G), each row's prediction or None), as sequences.run
    gives them, by the Step's machine code."""
    call = _Call(compiled(step, adjoint, cache), step, seqs, weights)
    if keep == 'predictions':
        rows = len(next(iter(seqs.columns.values()))) if seqs.columns else int(seqs.lengths.sum())
        call.predictions = np.empty(rows)
    call.drive(0, backward=False)
    return call.loss, call.state.T.copy(), call.predictions


def _address(array, offset=0):
    """The address of array's element offset (array contiguous)."""
    return array.__array_interface__['data'][0] + array.itemsize * offset


class _Call:
    """One call's arrays (each sequence's state, loss, adjoint and gradient in rows of its own) and its pieces. The
    machine code is given addresses: an array's is found once a call (numpy takes a few µs to give one)."""

    def __init__(self, scan, step, seqs, weights):
        self.scan = scan
        self.k, self.p, g = len(step.states), len(step.weights), seqs.count
        self.columns = [np.ascontiguousarray(seqs.columns[c], dtype=np.float64) for c in step.columns]
        w = np.asarray(weights, dtype=np.float64)
        self.w = np.ascontiguousarray(w if w.ndim == 1 else w.T)  # G × P: each sequence's weights together
        self.wstride = 0 if w.ndim == 1 else self.p
        self.first = np.ascontiguousarray(seqs.starts, dtype=np.int64)
        self.lengths = np.ascontiguousarray(seqs.lengths, dtype=np.int64)
        self.state = np.zeros((g, self.k))
        self.loss = np.zeros(g)
        self.adjoint = np.zeros((g, self.k))
        self.grad = np.zeros((g, self.p))
        self.predictions = None
        self.tangent = None  # forward mode's, G × K × P
        self.buffers = {}  # a thread's id → (its buffer, the buffer's address): the tape of the whole sequences it
        # runs (reverse mode), or forward mode's scratch

    def drive(self, tile_bytes, backward):
        """Run every sequence, in pieces of about threads.PIECE_NS, on the pool's threads, in rounds."""
        self.columns_at = [_address(c) for c in self.columns]
        self.at = {name: _address(getattr(self, name)) if getattr(self, name) is not None else 0 for name in
                   ('w', 'first', 'lengths', 'state', 'loss', 'adjoint', 'grad', 'predictions', 'tangent')}
        g = len(self.lengths)
        n = threads.count(int(self.lengths.sum()), threads.LOOP_SHARE_ROWS)
        row_ns = self.scan.forward_ns + (self.scan.backward_ns if backward else 0)
        rows = max(1, int(threads.PIECE_NS / max(row_ns, 1e-3)))
        budget = max(self.k, tile_bytes // 8 // n) // max(self.k, 1) if backward else rows  # tape rows a job keeps
        whole = min(rows, budget)
        jobs, begin, taken = [], 0, 0
        for s in range(g + 1):
            length = int(self.lengths[s]) if s < g else 0
            if s == g or length > whole or taken + length > whole:
                if s > begin:
                    jobs.append(self._whole(begin, s, taken, backward))
                begin, taken = s, 0
            if s < g and length > whole:
                jobs.append(self._long(s, rows, budget, backward))
                begin = s + 1
            else:
                taken += length
        _rounds(jobs, n)

    def _of(self, name, a, size=1):
        """The address of sequence a's part of the call's array `name`, size numbers a sequence."""
        return self.at[name] + 8 * a * size

    def _buffer(self, doubles):
        """This thread's buffer of at least `doubles` doubles, and its address."""
        found = self.buffers.get(threading.get_ident())
        if found is None or len(found[0]) < doubles:
            buffer = np.empty(max(1, doubles))
            found = self.buffers[threading.get_ident()] = (buffer, _address(buffer))
        return found

    def _start(self, a, b):
        w, first = self._of('w', a, self.wstride), self._of('first', a)
        self.scan.start(b - a, first, w, self.wstride, self._of('state', a, self.k), *self.columns_at)
        if self.tangent is not None:
            self.scan.tangents(b - a, first, w, self.wstride, self._of('tangent', a, self.k * self.p),
                               *self.columns_at)

    def _forward(self, a, b, first, count, tape=0, tape_at=0, loss=0):
        """Rows of sequences a … b − 1 forward (first, count: the addresses of their first rows and row counts),
        their states kept in tape (an address, or 0) at the offsets tape_at (an address), the loss added to
        loss's (an address, or 0: their own)."""
        w, state = self._of('w', a, self.wstride), self._of('state', a, self.k)
        loss = loss or self._of('loss', a)
        if self.tangent is not None:  # forward mode's row: the tangents carried with the state
            _, scratch = self._buffer((self.k + 1) * self.p)
            self.scan.forward(b - a, first, count, w, self.wstride, state, loss,
                              self._of('tangent', a, self.k * self.p), self._of('grad', a, self.p), scratch,
                              *self.columns_at)
        else:
            self.scan.forward(b - a, first, count, w, self.wstride, state, loss, tape, tape_at or self._of('first', a),
                              self.at['predictions'], *self.columns_at)  # tape_at: read only with a tape

    def _backward(self, a, b, first, count, tape, tape_at):
        self.scan.backward(b - a, first, count, self._of('w', a, self.wstride), self.wstride, tape, tape_at,
                           self._of('adjoint', a, self.k), self._of('grad', a, self.p), *self.columns_at)

    def _start_vjp(self, a, b):
        self.scan.start_vjp(b - a, self._of('first', a), self._of('w', a, self.wstride), self.wstride,
                            self._of('adjoint', a, self.k), self._of('grad', a, self.p), *self.columns_at)

    def _whole(self, a, b, rows, backward):
        """Sequences a … b − 1 whole, in one piece (their tape, rows·K doubles, in the thread's buffer)."""
        first, count = self._of('first', a), self._of('lengths', a)
        self._start(a, b)
        if not backward:
            self._forward(a, b, first, count)
            return
        _, tape = self._buffer(rows * self.k)
        offsets = np.zeros(b - a, dtype=np.int64)
        np.cumsum(self.lengths[a:b - 1] * self.k, out=offsets[1:])
        tape_at = _address(offsets)
        self._forward(a, b, first, count, tape, tape_at)
        self._backward(a, b, first, count, tape, tape_at)
        self._start_vjp(a, b)
        return
        yield  # a job of one piece

    def _long(self, s, rows, budget, backward):
        """Sequence s in pieces of at most `rows` rows, its state, loss, adjoint and gradient carried from piece to
        piece. Its tape: all its states where they fit `budget` rows, else a checkpoint at the start of each segment
        of `budget` rows (√T at least) and the segment's states recomputed from it before its backward pass."""
        length, start = int(self.lengths[s]), int(self.first[s])
        span = np.zeros(4, dtype=np.int64)  # a piece's first row, its rows, its tape offset
        first, count, tape_at = (_address(span, j) for j in range(3))
        scratch = np.zeros(1)  # the recomputations' loss, which is not added twice

        def piece(t0, t1, begin=0):
            span[:3] = start + t0, t1 - t0, (t0 - begin) * self.k
            return first, count

        def walk(begin, end, backwards=False):
            cuts = list(range(begin, end, rows)) + [end]
            spans = list(zip(cuts[:-1], cuts[1:]))
            return spans[::-1] if backwards else spans

        self._start(s, s + 1)
        if not backward:
            for t0, t1 in walk(0, length):
                self._forward(s, s + 1, *piece(t0, t1))
                yield
            return
        # the most rows that fit the budget, but never fewer than √T: the checkpoints, T/segment·K doubles, stay
        # within what sequences.check_tape allowed for (2·√T·K a sequence)
        segment = length if length <= budget else max(1, budget, math.isqrt(length))
        segments = [(b, min(b + segment, length)) for b in range(0, length, segment)]
        tape = np.empty(segment * self.k)
        checkpoints = np.empty((len(segments), self.k))
        for j, (b0, b1) in enumerate(segments):
            checkpoints[j] = self.state[s]
            for t0, t1 in walk(b0, b1):
                kept = (_address(tape), tape_at) if len(segments) == 1 else ()
                self._forward(s, s + 1, *piece(t0, t1, b0), *kept)
                yield
        last = self.state[s].copy()
        for j in range(len(segments) - 1, -1, -1):
            b0, b1 = segments[j]
            if len(segments) > 1:
                self.state[s] = checkpoints[j]
                for t0, t1 in walk(b0, b1):
                    self._forward(s, s + 1, *piece(t0, t1, b0), _address(tape), tape_at, _address(scratch))
                    yield
            for t0, t1 in walk(b0, b1, backwards=True):
                self._backward(s, s + 1, *piece(t0, t1, b0), _address(tape), tape_at)
                yield
        self.state[s] = last
        self._start_vjp(s, s + 1)


def _rounds(jobs, n):
    """Each job (a generator that yields after each piece) to its end: in rounds, each round the next piece of up to
    n jobs at once on the pool's threads (a new job taking a finished one's place), interrupts checked between
    rounds and, by threads.run, between pieces."""
    pending, active = iter(jobs), []
    while True:
        while len(active) < n:
            job = next(pending, None)
            if job is None:
                break
            active.append(job)
        if not active:
            return
        done = threads.run(lambda a, b: [next(active[i], True) for i in range(a, b)], len(active), n, limits.check,
                           threads.PIECE_NS)
        finished = {i for i, d in enumerate(x for part in done for x in part) if d}
        active = [j for i, j in enumerate(active) if i not in finished]
        limits.check()


def _tangents_ir(step, module, names, sequences, leaf):
    """Forward mode's functions (real-time recurrent learning), T the K × P tangents ∂state/∂w of a sequence:

    tangents(n, first, w, wstride, tangent, columns…)         T ← ∂start/∂w
    forward_mode(n, first, count, w, wstride, state, loss, tangent, gradient, scratch, columns…)
        for each row in order, J the Jacobian of (loss, next…) by (weights…, states…): loss += the row's;
        gradient += J[0, :P] + J[0, P:]·T; T ← J[1:, :P] + J[1:, P:]·T; state ← next
    J's columns by the weights go through scratch ((K + 1)·P doubles, the caller's), and T is updated a weight at a
    time: its column p depends on its column p alone. The sums in the order of sequences._forward's."""
    graph, columns = step.graph, len(step.columns)
    k_count, p_count = len(step.states), len(step.weights)
    K, P = ir.Constant(I64, k_count), ir.Constant(I64, p_count)
    rows, starts = step.jacobian()

    fn, b = _function(module, names[0], [I64, INDEX, POINTER, I64, POINTER], columns)
    n, first, w, wstride, tangent = fn.args[:5]

    def start(g, weights):
        row = b.load(_at(b, first, g))
        roots = [r for each in starts for r in each]
        values = emit_nodes(_Emitter(b, module), graph, roots,
                            leaf(b, row, weights, lambda j: ir.Constant(DOUBLE, 0.0)))
        base = b.mul(g, b.mul(K, P))
        for i, each in enumerate(starts):
            for j, r in enumerate(each):
                b.store(values[r], _at(b, tangent, base, i * p_count + j))
    sequences(b, n, w, wstride, start)
    b.ret_void()

    fn, b = _function(module, names[1], [I64, INDEX, INDEX, POINTER, I64, POINTER, POINTER, POINTER, POINTER,
                                         POINTER], columns)
    n, first, count, w, wstride, state, loss, tangent, grad, scratch = fn.args[:10]

    def forward(g, weights):
        begin, length, base = b.load(_at(b, first, g)), b.load(_at(b, count, g)), b.mul(g, K)
        t_g, grad_g, sum_at = _at(b, tangent, b.mul(g, b.mul(K, P))), _at(b, grad, b.mul(g, P)), _at(b, loss, g)

        def row(t):
            old = [b.load(_at(b, state, base, j)) for j in range(k_count)]
            values = emit_nodes(_Emitter(b, module), graph, [step.loss, *step.next, *[r for e in rows for r in e]],
                                leaf(b, b.add(begin, t), weights, lambda j: old[j]))
            b.store(b.fadd(b.load(sum_at), values[step.loss]), sum_at)
            by_state = [[values[r] for r in e[p_count:]] for e in rows]
            for o, e in enumerate(rows):
                for j, r in enumerate(e[:p_count]):
                    b.store(values[r], _at(b, scratch, o * p_count + j))

            def weight(p):
                before = [b.load(_at(b, t_g, b.mul(ir.Constant(I64, j), P), p)) for j in range(k_count)]

                def through(o):  # J[o, p] + Σ_j J[o, P + j]·T[j, p]
                    total = None
                    for j in range(k_count):
                        term = b.fmul(by_state[o][j], before[j])
                        total = term if total is None else b.fadd(total, term)
                    own = b.load(_at(b, scratch, b.mul(ir.Constant(I64, o), P), p))
                    return own if total is None else b.fadd(own, total)
                where = _at(b, grad_g, p)
                b.store(b.fadd(b.load(where), through(0)), where)
                for i in range(k_count):
                    b.store(through(1 + i), _at(b, t_g, b.mul(ir.Constant(I64, i), P), p))
            _loop(b, P, weight)
            for j, r in enumerate(step.next):
                b.store(values[r], _at(b, state, base, j))
        _loop(b, length, row)
    sequences(b, n, w, wstride, forward)
    b.ret_void()
