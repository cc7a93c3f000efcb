"""A linear recurrence as a parallel prefix scan (Futhark's scan rule), the python backend (docs/design.md,
"Linear recurrences").

A Step is linear where each field's next value is affine in the state: s_{t+1} = A_t s_t + b_t, A_t and b_t
functions of the row and the weights alone. linear() decides it once per Step from the graph: every node of a next
value that depends on the state is a sum, difference or negation of such nodes, a product of one with a node that
does not, a quotient of one by a node that does not, or a case whose condition does not; and ∂next_k/∂s_j
(Step.jacobian()) reads no state node. Composition of affine maps is associative, so

  - the states are a prefix scan: A_t = the Jacobian's nodes and b_t = next at s = 0, evaluated for all the rows at
    once (one numpy call a node over the column), then composed by scan();
  - the adjoints are the same scan backwards: λ_t = A_tᵀ λ_{t+1} + ∂loss_t/∂s_t (the step's vjp at λ = 0), λ after a
    sequence's last row 0;
  - the gradient is one sum over the rows of the step's vjp by the weights at (s_t, λ_{t+1}), and each sequence's
    start_vjp at its λ_0.

Many sequences are one column of rows, sequence after sequence; the map of a sequence's first row reads nothing of
the state before it, u = A_t start + b_t (m_t false cuts the chain there, not a product by 0, so that a sequence
whose states overflow leaves the next alone), and one scan runs over all of them.

scan() is blocked, of a fixed shape: the rows in blocks of BLOCK; each block's total map (its matrix product, and
its offset from a zero start) by the rows in order, vectorised across the blocks; the totals scanned the same way
(recursively, down to a few blocks done in order); each block's states from its start. A is one matrix where the
Jacobian reads no column (every recurrence of docs/sql.md: the matrix products then are powers of A, and a row
costs K² operations, not K³). The blocks of the top level go in pieces of PIECE_BLOCKS to the pool's threads
(pgad/jit/threads.py: numpy only, nothing of PostgreSQL); the pieces depend on the rows alone and each writes its
own place, so the results are the same bits run to run and on any number of threads. The rows go through in
chunks (memory bounded by the budget, refused past it with 54000 before anything is allocated), the state carried
from chunk to chunk; where there is more than one, the backward pass evaluates a chunk's maps and states again
from its carried start (one more forward pass, no tape). Interrupts are checked between pieces and chunks.
"""
import math

import numpy as np

from . import limits, python_backend
from .python_backend import as_rows, named_plan
from .errors import PgadError
from .jit import threads
from .lang import parser

STATE = parser.STATE
BLOCK = 32              # rows a block, at each level of the scan
PIECE_BLOCKS = 2048     # blocks a piece: what one thread takes at once (65,536 rows)
CHUNK_PIECES = 4        # pieces a chunk at most: 262,144 rows between a chunk's carried states
AFFINE = ('add', 'sub', 'neg')  # a node of these over nodes affine in the state is affine in it


def linear(step):
    """Is every field's next value affine in the state (decided on the graph, once per Step)?"""
    found = step.__dict__.get('_linear')
    if found is None:
        found = step.__dict__['_linear'] = _affine(step) and _constant_jacobian(step)
    return found


def _affine(step):
    graph = step.graph
    state = {}  # node → does it depend on the state
    for i in graph.ancestors(list(step.next)):
        node = graph.nodes[i]
        if node.op == 'weight':
            state[i] = str(node.value).startswith(STATE)
            continue
        on = [state.get(a, False) for a in node.args]
        state[i] = any(on)
        if not state[i] or node.op in AFFINE:
            continue
        if node.op == 'mul' and sum(on) == 1 or node.op == 'div' and not on[1] or node.op == 'case' and not on[0]:
            continue
        return False
    return True


def _constant_jacobian(step):
    return not any(step.graph.nodes[i].op == 'weight' and str(step.graph.nodes[i].value).startswith(STATE)
                   for i in step.graph.ancestors(_maps(step)))


def _maps(step):
    """The nodes of A: ∂next_i/∂s_j (Step.jacobian()), i by i."""
    rows, _ = step.jacobian()
    p, k = len(step.weights), len(step.states)
    return [rows[1 + i][p + j] for i in range(k) for j in range(k)]


def takes(step, seqs):
    """Does the scan pay for step over seqs: a linear step whose sequences are few (the time-major reference runs a
    numpy call a node a row of the longest, over all the sequences at once; the scan a numpy call a node over all
    the rows, and K² or more operations a row)? Additive Holt-Winters (K = 9, 104 nodes) over sequences of 730
    rows: the scan 30 times faster at 10 sequences, 3 times at 100, the reference faster from about 250."""
    if not linear(step) or not len(step.states) or seqs.longest < 2 * BLOCK:
        return False
    k = len(step.states)
    return seqs.count * k * k <= 128 * len(step.graph)


def fits(step, seqs, budget):
    """Does the scan's least chunk of step over seqs fit budget bytes (its layout's check, nothing allocated)?"""
    try:
        _Layout(step, seqs, np.zeros(len(step.weights)), budget)
    except PgadError as e:
        if e.sqlstate != '54000':
            raise
        return False
    return True


# ---- the scan


def scan(a, m, b, carry, count=1):
    """u (rows × K): u_t = A_t u_{t−1} + b_t where m_t, else b_t, from u_{−1} = carry; a is one K × K matrix, or one a
    row (rows × K × K); m (rows, booleans): does the row read the state before (not a sequence's first row);
    count threads."""
    n = len(b)
    blocks = n // BLOCK
    out = np.empty(b.shape)
    if blocks < 2:
        _in_order(a, m, b, carry, out, 0, n)
        return out
    full = blocks * BLOCK
    # row r of every block side by side (the r-th rows of the blocks contiguous): a step of a loop over r below is a
    # few numpy calls over all the blocks of a piece
    ab = _across(a[:full], blocks) if a.ndim == 3 else None
    mb, bb = _across(m[:full, None], blocks), _across(b[:full], blocks)
    pieces = [(i, min(i + PIECE_BLOCKS, blocks)) for i in range(0, blocks, PIECE_BLOCKS)]
    total_a = np.empty((blocks, *a.shape[1:])) if a.ndim == 3 else _power(a, BLOCK)
    total_m, total_b = np.empty(blocks, dtype=bool), np.empty((blocks, b.shape[1]))

    def totals(i, j):
        cut = _cut if not mb[:, i:j].all() else _whole  # most pieces have no sequence's first row
        c = bb[0, i:j].copy()
        if ab is not None:
            prod = cut(ab[0, i:j], mb[0, i:j, :, None])
        for r in range(1, BLOCK):
            ar = ab[r, i:j] if ab is not None else a
            c = cut(_apply(ar, c), mb[r, i:j]) + bb[r, i:j]
            if ab is not None:
                prod = cut(np.matmul(ar, prod), mb[r, i:j, :, None])
        total_b[i:j] = c
        if ab is not None:
            total_a[i:j], total_m[i:j] = prod, True
        else:
            total_m[i:j] = np.all(mb[:, i:j, 0], axis=0)

    _pieces(totals, pieces, count)
    ends = scan(total_a, total_m, total_b, carry)     # each block's last state
    begins = np.concatenate([np.asarray(carry, dtype=np.float64)[None], ends[:-1]])
    found = np.empty_like(bb)

    def states(i, j):
        cut = _cut if not mb[:, i:j].all() else _whole
        u = begins[i:j]
        for r in range(BLOCK):
            u = cut(_apply(ab[r, i:j] if ab is not None else a, u), mb[r, i:j]) + bb[r, i:j]
            found[r, i:j] = u

    _pieces(states, pieces, count)
    out[:full].reshape(blocks, BLOCK, -1)[...] = found.swapaxes(0, 1)
    if full < n:
        _in_order(a, m, b, ends[-1], out, full, n)
    return out


def _across(x, blocks):
    """x (blocks·BLOCK rows × …) as BLOCK × blocks × …: x[r, i] the r-th row of block i, a copy."""
    return np.ascontiguousarray(np.swapaxes(x.reshape(blocks, BLOCK, *x.shape[1:]), 0, 1))


def _cut(x, m):
    """x where m, else 0 (not x·0: a state or product that overflowed in one sequence stays out of the next)."""
    return np.where(m, x, 0.0)


def _whole(x, m):
    """_cut where every m holds: x."""
    return x


def _apply(a, u):
    """A u for each row of u (rows × K): a one matrix, or one a row."""
    return u @ a.T if a.ndim == 2 else np.matmul(a, u[:, :, None])[:, :, 0]


def _power(a, n):
    """A^n by n − 1 products in order."""
    found = a
    for _ in range(n - 1):
        found = a @ found
    return found


def _in_order(a, m, b, carry, out, begin, end):
    u = np.asarray(carry, dtype=np.float64)
    for t in range(begin, end):
        u = ((a[t] if a.ndim == 3 else a) @ u if m[t] else 0.0) + b[t]
        out[t] = u


def _pieces(work, pieces, count):
    """work(i, j) of each piece: on count threads (the pool's, each piece its own part), or in order on this one,
    interrupts checked between pieces."""
    if count > 1 and len(pieces) > 1:
        threads.run(lambda first, last: [work(*p) for p in pieces[first:last]], len(pieces), count, limits.check,
                    threads.PIECE_NS)
        return
    for p in pieces:
        work(*p)
        limits.check()


# ---- the rows, chunk by chunk


class _Layout:
    """The sequences' rows as one column, sequence after sequence, in chunks: each row's sequence, its row of the
    data's columns, and whether it is its sequence's first or last."""

    def __init__(self, step, seqs, weights, budget, keep=False):
        self.step, self.seqs = step, seqs
        self.w = np.asarray(weights, dtype=np.float64)
        self.lengths = np.asarray(seqs.lengths, dtype=np.int64)
        self.ends = np.cumsum(self.lengths)
        self.offsets = self.ends - self.lengths
        self.rows = int(self.ends[-1]) if len(self.ends) else 0
        k = len(step.states)
        maps = _maps(step)  # built (step.jacobian()) before the flags of the graph's nodes are
        reads_data = step.graph.depends_on_data()
        self.constant = self.w.ndim == 1 and not any(reads_data[i] for i in maps)
        # a row's numbers in a chunk: its maps (A a row where it is not one matrix), states, adjoints, offsets and
        # scans (u, λ), its sequence, and a number a node of the step's plans
        per_row = 8 * ((0 if self.constant else 3 * k * k) + 10 * k + 4 + len(step.weights) + _arrays(step))
        fixed = 8 * (k + 2) * max(1, seqs.count) * (2 + len(step.weights))
        # the states kept from the forward pass for the backward one, where A is one matrix and they take at most
        # half the budget and leave the least chunk room (what fits() checked, without them); else the backward pass
        # runs each chunk's states again from its carried start
        states = 8 * k * self.rows
        least = per_row * BLOCK * 4  # the least chunk: four blocks
        self.keep = keep and self.constant and (budget is None or states <= min(budget // 2, budget - fixed - least))
        fixed += states if self.keep else 0
        most = (budget - fixed) // per_row if budget is not None else CHUNK_PIECES * PIECE_BLOCKS * BLOCK
        if most < BLOCK * 4:
            need = fixed + least
            raise PgadError('54000', f'the scan of the linear recurrence needs {math.ceil(need / 2 ** 20)} MB, more '
                                     f'than its share of pgad.memory_limit ({(budget or 0) >> 20} MB)',
                            detail=f'{seqs.count} sequences, {k} state fields, {len(step.graph)} nodes a row.',
                            hint='Train with fewer groups at once, or have a superuser raise pgad.memory_limit.')
        self.chunk = int(min(CHUNK_PIECES * PIECE_BLOCKS * BLOCK, most // BLOCK * BLOCK))
        self.count = threads.count(self.rows, PIECE_BLOCKS * BLOCK)

    def chunks(self):
        return [(r, min(r + self.chunk, self.rows)) for r in range(0, self.rows, self.chunk)]

    def inputs(self, begin, end, states=None, adjoint=None, adjoint_names=()):
        """(columns, weights, the rows' sequences, first, last) of rows begin … end, {name: array} for the plans;
        states and adjoint rows × K, or 0."""
        rows, seq, first, last = self.where(begin, end)
        at = np.asarray(self.seqs.starts, dtype=np.int64)[seq] + rows - self.offsets[seq]
        columns = {c: self.seqs.columns[c][at] for c in self.step.columns}
        for j, name in enumerate(adjoint_names):
            columns[name] = 0.0 if adjoint is None else adjoint[:, j]
        weights = {e: (self.w[j] if self.w.ndim == 1 else self.w[j, seq]) for j, e in enumerate(self.step.weights)}
        weights.update({STATE + f: (0.0 if states is None else states[:, j]) for j, f in enumerate(self.step.states)})
        return columns, weights, seq, first, last

    def where(self, begin, end):
        """(the rows begin … end, their sequences, whether each is its sequence's first, its last)."""
        rows = np.arange(begin, end)
        seq = np.searchsorted(self.ends, rows, side='right') if len(self.ends) > 1 else np.zeros(end - begin, int)
        return rows, seq, rows == self.offsets[seq], rows == self.ends[seq] - 1

    def first_rows(self):
        """(columns, weights) of each sequence's first row, for the starts and start_vjp."""
        at = np.asarray(self.seqs.starts, dtype=np.int64)
        columns = {c: self.seqs.columns[c][at] for c in self.step.columns}
        weights = {e: self.w[j] for j, e in enumerate(self.step.weights)}
        return columns, weights


def _arrays(step):
    """The most arrays of rows a plan of the step holds at once, at most: its nodes that change from row to row
    (counted once per Step)."""
    found = step.__dict__.get('_arrays')
    if found is None:
        found = step.__dict__['_arrays'] = _count_arrays(step)
    return found


def _count_arrays(step):
    graph = step.graph
    rows, _ = step.jacobian()
    per_row = graph.depends_on_data()
    on_state = [False] * len(graph)
    for i, node in enumerate(graph.nodes):
        on_state[i] = node.op == 'weight' and str(node.value).startswith(STATE) or any(on_state[a] for a in node.args)
    roots = [*step.vjp, step.loss, step.prediction, *step.next, *(n for row in rows[1:] for n in row)]
    return sum(1 for i in graph.ancestors(roots) if per_row[i] or on_state[i])


class _Pass:
    """The plans of a linear Step and what each chunk's forward pass gives."""

    def __init__(self, layout):
        self.layout, self.step = layout, layout.step
        step = self.step
        k, g = len(step.states), layout.seqs.count
        self.jacobian = _maps(step)
        self.maps = named_plan(step.graph, [*([] if layout.constant else self.jacobian), *step.next])
        columns, weights = layout.first_rows()
        weights.update({STATE + f: 0.0 for f in step.states})
        values = python_backend.evaluate(named_plan(step.graph, step.start), columns, weights)
        self.starts = np.array([as_rows(values[r], g) for r in step.start]).reshape(k, g)
        if layout.constant:
            values = python_backend.evaluate(named_plan(step.graph, self.jacobian), {}, weights)
            self.a = np.array([float(values[r]) for r in self.jacobian]).reshape(k, k)

    def forward(self, begin, end, carry):
        """(the states before each row (rows × K), after each row, (each row's sequence, first, last), A: one
        matrix or one a row) of rows begin … end from carry, the state after row begin − 1."""
        step, k = self.step, len(self.step.states)
        n = end - begin
        columns, weights, seq, first, last = self.layout.inputs(begin, end)
        values = python_backend.evaluate(self.maps, columns, weights)
        b = np.empty((n, k))
        for j, r in enumerate(step.next):
            b[:, j] = as_rows(values[r], n)
        if self.layout.constant:
            a = self.a
        else:
            a = np.empty((n, k, k))
            for e, r in enumerate(self.jacobian):
                a[:, e // k, e % k] = as_rows(values[r], n)
        del values
        m = ~first
        starts = self.starts[:, seq[first]].T
        b[first] += _apply(a if a.ndim == 2 else a[first], starts)
        u = scan(a, m, b, carry, self.layout.count)
        states = np.empty_like(u)
        states[0] = carry
        states[1:] = u[:-1]
        states[first] = starts
        return states, u, (seq, first, last), a


def _evaluate(layout, plan, roots, begin, end, states, adjoint=None, names=()):
    columns, weights, _, _, _ = layout.inputs(begin, end, states, adjoint, names)
    values = python_backend.evaluate(plan, columns, weights)
    return [as_rows(values[r], end - begin) for r in roots]


def run(step, seqs, weights, keep=None, budget=None):
    """sequences.run's (loss per sequence, last states K × G, predictions or None) of a linear step, by the scan."""
    layout = _Layout(step, seqs, weights, budget)
    k, g = len(step.states), seqs.count
    work = _Pass(layout)
    loss, last_states = np.zeros(g), np.zeros((k, g))
    predictions = np.empty(len(next(iter(seqs.columns.values())))) if keep == 'predictions' and seqs.columns else \
        np.empty(layout.rows) if keep == 'predictions' else None
    plan = named_plan(step.graph, [step.loss, step.prediction])
    carry = np.zeros(k)
    for begin, end in layout.chunks():
        states, u, (seq, first, last), _ = work.forward(begin, end, carry)
        row_loss, prediction = _evaluate(layout, plan, [step.loss, step.prediction], begin, end, states)
        loss += np.bincount(seq, weights=row_loss, minlength=g)
        last_states[:, seq[last]] = u[last].T
        if predictions is not None:
            rows = np.arange(begin, end)
            predictions[np.asarray(seqs.starts, dtype=np.int64)[seq] + rows - layout.offsets[seq]] = prediction
        carry = u[-1]
        limits.check()
    return loss, last_states, predictions


def gradient(step, seqs, weights, adjoint_names, budget=None):
    """sequences.gradient's (loss per sequence G, gradient P × G) of a linear step in reverse mode, by the scan
    forwards and backwards; adjoint_names: the columns through which step.vjp reads λ."""
    layout = _Layout(step, seqs, weights, budget, keep=True)
    k, g, p = len(step.states), seqs.count, len(step.weights)
    work = _Pass(layout)
    loss, grad, first_adjoint = np.zeros(g), np.zeros((p, g)), np.zeros((k, g))
    losses = named_plan(step.graph, [step.loss])
    by_state = step.vjp[p:]
    slopes = named_plan(step.graph, by_state)
    by_weight = step.vjp[:p]
    terms = named_plan(step.graph, by_weight)
    chunks = layout.chunks()
    carries, kept = [], []
    carry = np.zeros(k)
    for begin, end in chunks:  # forwards: the states, the loss, each chunk's carried start
        carries.append(carry)
        forward = work.forward(begin, end, carry)
        seq = forward[2][0]
        loss += np.bincount(seq, weights=_evaluate(layout, losses, [step.loss], begin, end, forward[0])[0],
                            minlength=g)
        carry = forward[1][-1]
        if len(chunks) == 1:
            kept.append(forward)
        elif layout.keep:
            kept.append(forward[0])
        limits.check()
    after = np.zeros(k)  # λ at the first row of the chunk after
    for c in range(len(chunks) - 1, -1, -1):  # backwards: ∂loss/∂s, the adjoints by the scan, the vjp's sums
        begin, end = chunks[c]
        if len(chunks) == 1:
            states, _, (seq, first, last), a = kept.pop()
        elif layout.keep:
            states, (_, seq, first, last), a = kept.pop(), layout.where(begin, end), work.a
        else:
            states, _, (seq, first, last), a = work.forward(begin, end, carries[c])
        n = end - begin
        slope = np.array(_evaluate(layout, slopes, by_state, begin, end, states, None, adjoint_names)).T.reshape(n, k)
        back = a.T if a.ndim == 2 else a[::-1].transpose(0, 2, 1)
        m = ~last[::-1]
        adjoint = scan(back, m, slope[::-1], after, layout.count)[::-1]
        following = np.empty_like(adjoint)  # λ_{t+1}, 0 after a sequence's last row
        following[:-1] = adjoint[1:]
        following[-1] = after
        following[last] = 0.0
        for j, row in enumerate(_evaluate(layout, terms, by_weight, begin, end, states, following, adjoint_names)):
            grad[j] += np.bincount(seq, weights=row, minlength=g)
        first_adjoint[:, seq[first]] = adjoint[first].T
        after = adjoint[0]
        limits.check()
    columns, weights = layout.first_rows()
    columns.update({name: first_adjoint[j] for j, name in enumerate(adjoint_names)})
    values = python_backend.evaluate(named_plan(step.graph, step.start_vjp), columns, weights)
    for j in range(p):
        grad[j] += as_rows(values[step.start_vjp[j]], g)
    return loss, grad
