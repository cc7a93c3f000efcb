"""scan.py's reverse-mode gradient with W sequences side by side, one in each SIMD lane (W doubles: the target's
vector width, codegen.vector_widths()).

A row of a sequence depends on the row before (the level on the last level), so scan.py's kernels, which walk one
sequence at a time, run a chain of dependent scalar operations whatever the CPU's width. Here a pack of W sequences
of similar length (Sequences.order's neighbours) walks its rows together: each function's body is a loop over the W
lanes whose iterations are independent, and LLVM's loop vectoriser turns it into vector instructions (the optimised
IR shows <W x double>). Each lane computes what scan.py computes for its sequence, the same operations in the same
order (no reassociation), with libm's scalar functions, so the results are scan.py's bits, the python reference's to
its libm's ulps.

    start(n, first, length, w, state, columns…)                           state ← each field's start
    forward(n, first, length, rows, w, state, loss, tape, tape_at, columns…)
    backward(n, first, length, rows, w, tape, tape_at, adjoint, gradient, columns…)
    start_vjp(n, first, w, adjoint, gradient, columns…)
    gradient(n, first, length, rows, w, state, loss, tape, tape_at, adjoint, gradient, columns…)    the four in turn

over n packs, pack p's lane l the sequence whose rows are first[p·W + l] … + length[p·W + l] − 1 of the columns
(read where they are: a gather); rows[2p] the longest of the pack, rows[2p + 1] its shortest. Its weights are
w[p·P·W + j·W + l], its state and adjoint [p·K·W + k·W + l], its loss [p·W + l], its gradient [p·P·W + j·W + l], its
tape at tape_at[p] (row t's field k at t·K·W + k·W + l). Past the shortest lane's end, a lane whose sequence has
ended (t ≥ its length) reads its last row again and keeps its state, adjoint, loss and gradient (a select); the rows
before run without the selects. A ragged pack costs its longest sequence's rows.

The driver packs the sequences longest first, W a pack (the last pack's spare lanes run its last sequence again,
whose copies are dropped); a pack whose tape (rows·K·W doubles) passes a thread's share of the tile budget, or whose
work passes threads.PIECE_NS, goes to scan.py's kernel (which checkpoints and cuts long sequences). The packs run on
the pool's threads in pieces of whole packs (runs of them whose tape stays in a core's cache), interrupts checked
between pieces; each sequence's sums are its own, so the bits depend neither on the threads nor on the cut. The
machine code allocates nothing; the tape is a buffer of the caller's.
"""
import ctypes
import functools
import hashlib
import threading
import time
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from . import cache as disk, compiler, frames, scan, targets, threads
from .. import limits
from .codegen import DOUBLE, I64, _Emitter, emit_nodes, vector_widths, vectorised
from .scan import INDEX, POINTER, _at, _function, _loop, _module, _positions
from .tiers import Tier

# The tier a lane kernel compiles at: O3 with the loop vectoriser (the lane loop is what it vectorises), up to
# MAX_NODES nodes of the four functions together (Holt-Winters' 114 took 0.27 s to compile, the tanh cell's 173
# 0.23 s, scan.py's kernels of them 0.33 and 0.12 s); a larger step runs on scan.py's kernel alone
MAX_NODES = 1000
LANE_TIER = Tier('O3, lanes', 3, True, 3, MAX_NODES, MAX_NODES, 64_000_000)
# The tape a run of packs keeps at most, where the budget allows more: what stays in a core's L2 cache between the
# forward pass that writes it and the backward pass that reads it (a tape of all the packs, 52 MB for 1,000
# Holt-Winters series of 730 rows, was written to and read from memory: 48 ns a row, against 14 with this)
RUN_BYTES = 1 << 20


def width():
    """Doubles in the target's widest vector register that libmvec has variants for (2 at least: targets.py)."""
    return max([w for _, w in vector_widths()] or [2])


def pays(step, seqs):
    """Does reverse mode's gradient of step over seqs run on the lanes: the step compiles there, and there are W
    sequences at least (fewer run on scan.py's kernel alone)."""
    if seqs.count < width():
        return False
    if '_lanes_fits' not in step.__dict__:
        step.__dict__['_lanes_fits'] = scan.fits(step) and scan.nodes(step) <= MAX_NODES
    return step.__dict__['_lanes_fits']


@dataclass
class Lanes:
    """A Step's lane function `gradient` (the four in turn), called through ctypes, W lanes; the optimised IR where
    compiled here (not loaded from the disk cache)."""
    gradient: object
    width: int
    optimised_ir: str
    ms: dict


def compiled(step, adjoint, cache=disk.NONE):
    """The Lanes of step, compiled once for the Step and the target (kept with it), its object code from the
    disk cache where there."""
    key = '_lanes ' + targets.current().name
    found = step.__dict__.get(key)
    if found is None:
        found = step.__dict__[key] = _compile(step, adjoint, cache, width())
    return found


def _compile(step, adjoint, cache, lanes):
    ms, started, optimised = {}, time.perf_counter(), ''
    key = hashlib.sha256(f'{scan.cache_key(step)} lanes {lanes} {_source()}'.encode()).hexdigest()
    name = f'pgad_lanes_{key[:24]}'
    names = [f'{name}_{f}' for f in ('start', 'forward', 'backward', 'start_vjp', 'gradient')]
    data = None if names[0] in compiler._loaded else cache.get(key)
    if data is None and names[0] not in compiler._loaded:
        # libm's calls pure but without their vector variants: each lane calls the scalar function scan.py calls, so
        # a sequence's bits are the same whichever kernel runs it (the tile budget, the count of sequences decide)
        text = vectorised(module_ir(step, adjoint, names, lanes), [])
        ms['IR generation'] = (time.perf_counter() - started) * 1e3
        here = not compiler.in_backend() and scan.nodes(step) <= compiler.IN_PROCESS_NODES
        data, optimised = compiler.machine_code(None, text, LANE_TIER, ms, here=here)
        frames.check(optimised)
        cache.put(key, data)
    elif data is not None:
        ms['cache hit'] = (time.perf_counter() - started) * 1e3
    compiler.address(data, names[0], names[1:])
    kind = [ctypes.c_int64] + [ctypes.c_void_p] * (10 + len(step.columns))
    return Lanes(ctypes.CFUNCTYPE(None, *kind)(compiler.address(data, names[4])), lanes, optimised, ms)


@functools.lru_cache(maxsize=None)
def _source():
    with open(__file__, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


# --- the LLVM IR --------------------------------------------------------------------------------------------------

def module_ir(step, adjoint, names, lanes):
    """The LLVM IR (text) of step's four lane functions, named names, W = lanes."""
    module, (column_at, weight_at, state_at, adjoint_at) = _module('pgad_lanes'), _positions(step, adjoint)
    graph, columns = step.graph, len(step.columns)
    k_count, p_count = len(step.states), len(step.weights)
    W = ir.Constant(I64, lanes)
    KW, PW = ir.Constant(I64, k_count * lanes), ir.Constant(I64, p_count * lanes)

    def packs(b, n, body):
        """for p in range(n): for l in range(W): body(p, l, p·W + l) — the lane loop innermost."""
        _loop(b, n, lambda p: _loop(b, W, lambda l: body(p, l, b.add(b.mul(p, W), l))))

    def rows_then_lanes(b, n, rows, body, backwards=False):
        """for p in range(n): for t in range(rows[2p]) (from the last where backwards): for l in range(W):
        body(p, t, l, p·W + l, masked) — masked from row rows[2p + 1] on (the shortest lane's end), where a lane may
        have ended: the rows before, where none has, without the selects."""
        def pack(p):
            longest, shortest = b.load(_at(b, rows, b.add(p, p))), b.load(_at(b, rows, b.add(p, p), 1))

            def part(offset, masked):
                return lambda u: _loop(b, W, lambda l: body(p, b.add(u, offset), l, b.add(b.mul(p, W), l), masked))
            zero = ir.Constant(I64, 0)
            parts = [(shortest, part(zero, False)), (b.sub(longest, shortest), part(shortest, True))]
            for count, each in parts[::-1] if backwards else parts:
                _loop(b, count, each, backwards)
        _loop(b, n, pack)

    def field(b, array, p, size, j, l):
        """The address of lane l's field j in pack p of an array of `size` fields a lane."""
        return _at(b, array, b.mul(p, size), j * lanes, l)

    def leaf(b, row, p, l, w, state, adjoints=None):
        cols = b.function.args[-columns:] if columns else []

        def value(node):
            name = node.value
            if node.op == 'column':
                if name in column_at:
                    return b.load(_at(b, cols[column_at[name]], row))
                return b.load(field(b, adjoints, p, KW, adjoint_at[name], l))
            if name in weight_at:
                return b.load(field(b, w, p, PW, weight_at[name], l))
            return state(state_at[name])
        return value

    def where(b, first, length, t, at, masked):
        """(is row t the lane's, None where not masked: it is; the row it reads: its last where t is past it)."""
        begin = b.load(_at(b, first, at))
        if not masked:
            return None, b.add(begin, t)
        count = b.load(_at(b, length, at))
        live = b.icmp_signed('<', t, count)
        return live, b.add(begin, b.select(live, t, b.sub(count, ir.Constant(I64, 1))))

    def keep(b, live, new, old):
        """new where the lane is live, old where it has ended."""
        return new if live is None else b.select(live, new, old)

    zero = lambda j: ir.Constant(DOUBLE, 0.0)  # noqa: E731

    # start(n, first, length, w, state, columns…)
    fn, b = _function(module, names[0], [I64, INDEX, INDEX, POINTER, POINTER], columns)
    n, first, _, w, state = fn.args[:5]

    def start(p, l, at):
        values = emit_nodes(_Emitter(b, module), graph, list(step.start),
                            leaf(b, b.load(_at(b, first, at)), p, l, w, zero))
        for j, r in enumerate(step.start):
            b.store(values[r], field(b, state, p, KW, j, l))
    packs(b, n, start)
    b.ret_void()

    # forward(n, first, length, rows, w, state, loss, tape, tape_at, columns…)
    fn, b = _function(module, names[1], [I64, INDEX, INDEX, INDEX, POINTER, POINTER, POINTER, POINTER, INDEX],
                      columns)
    n, first, length, rows, w, state, loss, tape, tape_at = fn.args[:9]

    def forward(p, t, l, at, masked):
        live, row = where(b, first, length, t, at, masked)
        taped = _at(b, tape, b.load(_at(b, tape_at, p)), b.mul(t, KW))
        old = [b.load(field(b, state, p, KW, j, l)) for j in range(k_count)]
        for j, v in enumerate(old):
            b.store(v, _at(b, taped, j * lanes, l))
        values = emit_nodes(_Emitter(b, module), graph, [step.loss, *step.next],
                            leaf(b, row, p, l, w, lambda j: old[j]))
        sum_at = _at(b, loss, at)
        total = b.load(sum_at)
        b.store(keep(b, live, b.fadd(total, values[step.loss]), total), sum_at)
        for j, r in enumerate(step.next):
            b.store(keep(b, live, values[r], old[j]), field(b, state, p, KW, j, l))
    rows_then_lanes(b, n, rows, forward)
    b.ret_void()

    # backward(n, first, length, rows, w, tape, tape_at, adjoint, gradient, columns…)
    fn, b = _function(module, names[2], [I64, INDEX, INDEX, INDEX, POINTER, POINTER, INDEX, POINTER, POINTER],
                      columns)
    n, first, length, rows, w, tape, tape_at, adjoints, grad = fn.args[:9]

    def backward(p, t, l, at, masked):
        live, row = where(b, first, length, t, at, masked)
        taped = _at(b, tape, b.load(_at(b, tape_at, p)), b.mul(t, KW))
        old = [b.load(_at(b, taped, j * lanes, l)) for j in range(k_count)]
        before = [b.load(field(b, adjoints, p, KW, j, l)) for j in range(k_count)]
        values = emit_nodes(_Emitter(b, module), graph, list(step.vjp),
                            leaf(b, row, p, l, w, lambda j: old[j], adjoints))
        for j in range(p_count):
            at_j = field(b, grad, p, PW, j, l)
            total = b.load(at_j)
            b.store(keep(b, live, b.fadd(total, values[step.vjp[j]]), total), at_j)
        for j, r in enumerate(step.vjp[p_count:]):
            b.store(keep(b, live, values[r], before[j]), field(b, adjoints, p, KW, j, l))
    rows_then_lanes(b, n, rows, backward, backwards=True)
    b.ret_void()

    # start_vjp(n, first, w, adjoint, gradient, columns…)
    fn, b = _function(module, names[3], [I64, INDEX, POINTER, POINTER, POINTER], columns)
    n, first, w, adjoints, grad = fn.args[:5]

    def start_vjp(p, l, at):
        values = emit_nodes(_Emitter(b, module), graph, list(step.start_vjp),
                            leaf(b, b.load(_at(b, first, at)), p, l, w, zero, adjoints))
        for j in range(p_count):
            at_j = field(b, grad, p, PW, j, l)
            b.store(b.fadd(b.load(at_j), values[step.start_vjp[j]]), at_j)
    packs(b, n, start_vjp)
    b.ret_void()

    # gradient(n, first, length, rows, w, state, loss, tape, tape_at, adjoint, gradient, columns…): one call of the
    # driver's for a run of packs (a ctypes call costs microseconds)
    fn, b = _function(module, names[4], [I64, INDEX, INDEX, INDEX, POINTER, POINTER, POINTER, POINTER, INDEX, POINTER,
                                         POINTER], columns)
    n, first, length, rows, w, state, loss, tape, tape_at, adjoints, grad = fn.args[:11]
    cols = list(fn.args[11:])
    four = [module.globals[name] for name in names[:4]]
    b.call(four[0], [n, first, length, w, state, *cols])
    b.call(four[1], [n, first, length, rows, w, state, loss, tape, tape_at, *cols])
    b.call(four[2], [n, first, length, rows, w, tape, tape_at, adjoints, grad, *cols])
    b.call(four[3], [n, first, w, adjoints, grad, *cols])
    b.ret_void()
    return str(module)


# --- the driver ---------------------------------------------------------------------------------------------------

def gradient(step, seqs, weights, tile_bytes, adjoint, cache=disk.NONE):
    """(each sequence's summed loss (G), its gradient by the weights (P × G)), as scan.gradient gives them: the
    packs of W sequences by the lane kernel, the rest by scan.py's."""
    compiled_lanes = compiled(step, adjoint, cache)
    function, lanes = compiled_lanes.gradient, compiled_lanes.width
    k, p, g = len(step.states), len(step.weights), seqs.count
    order = seqs.order
    lengths = np.asarray(seqs.lengths, dtype=np.int64)
    n = threads.count(int(lengths.sum()), threads.LOOP_SHARE_ROWS)
    scalar = scan.compiled(step, adjoint, cache)
    row_ns = (scalar.forward_ns + scalar.backward_ns) * lanes  # a pack's row, at most
    budget = max(1, tile_bytes // 8 // n)  # the tape doubles a thread keeps
    count = -(-g // lanes)  # the last pack's spare lanes run its last sequence again (the same bits: dropped)
    packs = np.concatenate([order, np.full(count * lanes - g, order[-1])]).reshape(count, lanes)
    longest = lengths[packs[:, 0]]
    laned = (longest * k * lanes <= budget) & (longest * row_ns <= threads.PIECE_NS)
    packed, rest = packs[laned], np.unique(packs[~laned])
    loss, grad = np.zeros(g), np.zeros((p, g))
    w = np.asarray(weights, dtype=np.float64)
    if len(rest):
        part = type(seqs)(seqs.columns, np.asarray(seqs.starts)[rest], lengths[rest])
        loss[rest], grad[:, rest] = scan.gradient(step, part, w if w.ndim == 1 else w[:, rest], tile_bytes,
                                                  adjoint, cache)
    if len(packed):
        loss[packed.ravel()], grad[:, packed.ravel()] = _packs(function, lanes, step, seqs, w, packed, n, row_ns,
                                                             budget)
    return loss, grad


def _packs(function, lanes, step, seqs, w, packed, n, row_ns, budget):
    """(the loss, the gradient) of the sequences packed (m × W indices) by the lane kernel. Their arrays are parts
    of two blocks (numpy takes a few µs to give an array's address: two a call)."""
    k, p, m = len(step.states), len(step.weights), len(packed)
    columns = [np.ascontiguousarray(seqs.columns[c], dtype=np.float64) for c in step.columns]
    columns_at = [scan._address(c) for c in columns]
    sizes = {'w': p, 'state': k, 'adjoint': k, 'loss': 1, 'grad': p}  # doubles a lane: [pack][field][lane]
    block = np.zeros(m * lanes * sum(sizes.values()))
    parts, at, used = {}, {}, 0
    for name, size in sizes.items():
        parts[name] = block[used:used + m * size * lanes].reshape(m, size, lanes)
        at[name], used = 8 * used, used + m * size * lanes
    # each pack's weights, [pack][weight][lane]
    parts['w'][:] = w[None, :, None] if w.ndim == 1 else w[:, packed].transpose(1, 0, 2)
    # first, length: [pack][lane]; rows: [pack][its longest, its shortest]; the tape offsets: [pack]
    indices = np.empty((2 * lanes + 3) * m, dtype=np.int64)
    first, length = indices[:m * lanes].reshape(m, lanes), indices[m * lanes:2 * m * lanes].reshape(m, lanes)
    first[:] = np.asarray(seqs.starts, dtype=np.int64)[packed]
    length[:] = np.asarray(seqs.lengths, dtype=np.int64)[packed]
    longest_shortest = indices[2 * m * lanes:2 * m * lanes + 2 * m].reshape(m, 2)
    longest_shortest[:, 0], longest_shortest[:, 1] = length.max(axis=1), length.min(axis=1)
    rows, offsets = longest_shortest[:, 0], indices[2 * m * lanes + 2 * m:]
    base, ints = scan._address(block), scan._address(indices)
    at = {name: base + a for name, a in at.items()}
    at.update(first=ints, length=ints + 8 * m * lanes, rows=ints + 16 * m * lanes,
              offsets=ints + 8 * (2 * lanes + 2) * m)
    # the tape offsets of the packs of each run of them whose tape fits a thread's budget
    runs, begin, kept, spent = [], 0, 0, 0.0
    most = min(budget, RUN_BYTES // 8)
    for j in range(m + 1):
        need = int(rows[j]) * k * lanes if j < m else 0
        if j == m or (j > begin and (kept + need > most or spent + rows[j] * row_ns > threads.PIECE_NS)):
            runs.append((begin, j, kept))
            begin, kept, spent = j, 0, 0.0
        if j < m:
            offsets[j], kept, spent = kept, kept + need, spent + rows[j] * row_ns
    offsets_at = at['offsets']
    buffers = {}

    def of(name, a, size=1):
        return at[name] + 8 * a * size

    def run(a, b):
        for r0, r1, doubles in runs[a:b]:
            found = buffers.get(threading.get_ident())
            if found is None or len(found[0]) < doubles:
                buffer = np.empty(max(1, doubles))
                found = buffers[threading.get_ident()] = (buffer, scan._address(buffer))
            tape = found[1]
            function(r1 - r0, of('first', r0, lanes), of('length', r0, lanes), of('rows', r0, 2),
                     of('w', r0, p * lanes), of('state', r0, k * lanes), of('loss', r0, lanes), tape,
                     offsets_at + 8 * r0, of('adjoint', r0, k * lanes), of('grad', r0, p * lanes), *columns_at)

    per_run = max(int(rows.sum()) * row_ns / max(len(runs), 1), 1e-3)
    threads.run(run, len(runs), n, limits.check, per_run)
    limits.check()
    return parts['loss'].ravel(), parts['grad'].transpose(1, 0, 2).reshape(p, m * lanes)
