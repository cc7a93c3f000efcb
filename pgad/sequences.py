"""A sequence model: a state carried along ordered rows (docs/sql.md, "Sequences").

    model => 'λ(d, w, s) s.level'        state => '{"level": {"start": "d.y", "next": "s.level + w.alpha*(d.y - s.level)"}}'

The model reads the state the row before left (s.level) and predicts the row; each field's `next` gives the value
the next row reads, and its `start` the value the first row reads (an expression of the weights and of the first
row's columns). All fields are updated at once, each from the state before the row. Step holds the DAGs of one row
— the objective (the prediction under the loss), the prediction, each field's next value and start — and their
derivatives; run() and gradient() take them along many sequences at once, time-major: at row t, every sequence that
has a row t, each node one numpy call over them (the python reference backend).

- reverse mode (backpropagation through the recurrence, Futhark's rule for a scan): the states go forward and the
  adjoints back. The gradient is the sum over rows of the step's vector–Jacobian product with the cotangent
  (1, λ_{t+1}), λ_{t+1} the adjoint of the next state; one reverse sweep of the DAG of loss_t + Σ_k λ_k·next_k (vjp)
  gives both its part of ∂/∂w and λ_t. The states are kept for the backward pass in tiles: all of them where they
  fit tile_bytes, else one every C rows (C ≈ √T), each segment recomputed from its checkpoint before its backward
  pass (TapeFlow's tiles, Griewank's checkpoints): memory (T/C + C)·K a sequence, against one more forward pass.
- forward mode (real-time recurrent learning): the tangents ∂s_t/∂w (K × P a sequence) go forward with the states,
  by the step's Jacobians; no tape at all, about P times the arithmetic.
"""
import json
import math
from dataclasses import dataclass, replace

import numpy as np

from . import lang, limits as bounds, python_backend, scan_linear
from .python_backend import as_rows
from .errors import PgadError
from .lang import parser, vectors
from .lang.dag import Graph

STATE = parser.STATE        # the node of state field f is weight(STATE + f)
ADJOINT = '\x00adjoint '    # the vjp's cotangent of state field k is column(ADJOINT + k): no data column is so named
GAP = '\x00gap'             # 1 at a missing period's row, else 0 (models/periods.py, filled): no data column so named
SPEC_HINT = 'Write the state as {"level": {"start": "d.y", "next": "s.level + w.alpha*(d.y - s.level)"}}: each field ' \
            'with the value the first row reads and the value the next row reads.'
TILE_BYTES = 64 << 20       # the states kept for a backward pass, at most, before it recomputes from checkpoints


@dataclass(frozen=True)
class Step:
    """One row of a sequence model, as DAGs in one graph (node ids)."""
    graph: Graph
    columns: tuple          # the data's columns the step and the starts read, in order
    weights: tuple          # the weights' elements (a vector's 'v[1]', …), in the order of a weight vector
    states: tuple           # the state's fields, in order
    loss: int               # the row's objective: the loss of the prediction
    prediction: int         # the model's prediction
    next: tuple             # each field's value after the row
    start: tuple            # each field's value before the first row
    vjp: tuple              # ∂(loss + Σ_k λ_k·next_k)/∂(weights…, states…), λ_k = column(ADJOINT + k)
    start_vjp: tuple        # ∂(Σ_k λ_k·start_k)/∂weights
    shapes: tuple = ()      # each weight's (name, shape)

    def jacobian(self):
        """Forward mode's nodes: (rows (loss, next…) × (weights…, states…), starts × weights), built once."""
        found = self.__dict__.get('_jacobian')
        if found is None:
            names = (*self.weights, *(STATE + f for f in self.states))
            rows = [derivatives(self.graph, o, names) for o in (self.loss, *self.next)]
            starts = [derivatives(self.graph, o, self.weights) for o in self.start]
            found = self.__dict__['_jacobian'] = (rows, starts)
        return found


def fields(state, limits=bounds.DEFAULT):
    """The state argument (jsonb text) as [(field, start text, next text), …], in the order jsonb keeps them."""
    try:
        value = json.loads(state)
    except ValueError:
        raise PgadError('22023', 'state must be a JSON object', hint=SPEC_HINT) from None
    if not isinstance(value, dict) or not value:
        raise PgadError('22023', 'state must be a JSON object of at least one field', hint=SPEC_HINT)
    if len(value) > max(1, limits.lambda_nodes // 10):
        raise PgadError('54000', f'the state has {len(value)} fields, more than pgad.max_lambda_nodes / 10 '
                                 f'({max(1, limits.lambda_nodes // 10)})',
                        hint='Carry fewer fields, or have a superuser raise pgad.max_lambda_nodes.')
    found = []
    for name, spec in value.items():
        if not isinstance(spec, dict) or set(spec) != {'start', 'next'}:
            raise PgadError('22023', f'state field "{name}" must be an object of "start" and "next"',
                            detail=f'It is {json.dumps(spec)[:200]}.', hint=SPEC_HINT)
        texts = []
        for key in ('start', 'next'):
            text = spec[key]
            if isinstance(text, (int, float)) and not isinstance(text, bool):
                text = repr(float(text))
            if not isinstance(text, str):
                raise PgadError('22023', f'the {key} of state field "{name}" must be an expression (a JSON string) '
                                         'or a number', hint=SPEC_HINT)
            texts.append(text)
        found.append((name, *texts))
    return found


def build(model, loss, state, given, limits=bounds.DEFAULT, shapes=vectors.Shapes(), gaps=None):
    """The Step of model (a Lambda λ(d, w, s), parsed with state=True) whose objective is the node loss of its graph
    (the loss of its prediction), with the state fields [(field, start, next), …] (fields()); given the
    names of the weights given (the ones read become the Step's weights, in given's order), at shapes. gaps: the
    label column's name where some rows are missing periods (column GAP 1, the label 0): there the next states read
    the prediction for the label, as a forecast does, and the row's objective is 0 (without_update)."""
    graph = model.graph
    declared = [f for f, _, _ in state]
    nexts, starts, reads, columns = [], [], set(model.weights), dict.fromkeys(model.columns)
    read_states = dict.fromkeys(model.states)
    for field, start, after in state:
        root, cols, weights, states = parser.parse_state(after, model, f'the next value of state "{field}"', limits)
        nexts.append(root)
        columns.update(dict.fromkeys(cols))
        reads.update(weights)
        read_states.update(dict.fromkeys(states))
        root, cols, weights, _ = parser.parse_state(start, model, f'the start of state "{field}"', limits,
                                                    state=False)
        starts.append(root)
        columns.update(dict.fromkeys(cols))
        reads.update(weights)
    for name in read_states:
        if name not in declared:
            raise PgadError('42703', f'state field "{name}" is not in the state',
                            detail='The state has: ' + ', '.join(f'"{f}"' for f in declared) + '.',
                            hint=f'Give it a start and a next value in state, or read one of those as '
                                 f'{model.state}.<field>.')
    for name in reads:
        if name not in given:
            raise PgadError('22023', f'weight "{name}" is not in the weights',
                            hint=f'Give every weight the model and its state read a starting value: '
                                 f'{json.dumps({**{k: 0 for k in given}, name: 0})}.')
    weights = [n for n in given if n in reads]
    if any(n.startswith(STATE) for n in weights):
        raise PgadError('42P08', f'weight "{next(n for n in weights if n.startswith(STATE))}" is named as pgad names '
                                 'a state field', hint=f'Rename the weights that start with "{STATE}".')
    roots = [loss, model.root, *nexts, *starts]
    lam = replace(model, root=graph.apply('stack', *[graph.expr(r) for r in roots]).id, weights=weights,
                  columns=list(columns))
    lam = replace(lam, weights=weights + [STATE + f for f in declared])
    weight_shape = dict(shapes.weights)
    if shapes or vectors.needed(model) or any(graph.nodes[r].op in vectors.OPERATIONS for r in roots):
        unrolled, values = vectors.unrolled_value(lam, shapes, limits)
        if values.shape != (len(roots),):
            raise PgadError('42804', 'the prediction, each state\'s start and next value must be numbers, not vectors',
                            hint='Keep a vector\'s elements as fields of their own: {"h1": …, "h2": …}.')
        graph, roots = unrolled.graph, [int(v.id) for v in values]
        columns = dict.fromkeys(vectors.with_folded(unrolled.columns, columns))  # what the texts read: NULL skips
    else:
        graph = graph.copy()
        columns = dict.fromkeys(columns)
    loss, prediction, nexts, starts = roots[0], roots[1], roots[2:2 + len(declared)], roots[2 + len(declared):]
    if gaps is not None:
        loss, nexts = without_update(graph, gaps, prediction, loss, nexts)
        columns[GAP] = None
    flat = tuple(e for n in weights for e in vectors.elements(n, tuple(weight_shape.get(n, ()))))
    state_names = tuple(STATE + f for f in declared)
    adjoint = [graph.column(ADJOINT + str(k)) for k in range(len(declared))]
    augmented = graph.expr(loss)
    for a, n in zip(adjoint, nexts):
        augmented = augmented + a * graph.expr(n)
    grad = derivatives(graph, augmented.id, (*flat, *state_names))
    started = graph.const(0.0)
    for a, n in zip(adjoint, starts):
        started = started + a * graph.expr(n)
    start_grad = derivatives(graph, started.id, flat)
    return Step(graph, tuple(c for c in columns if not str(c).startswith(ADJOINT)), flat, tuple(declared), loss,
                prediction, tuple(nexts), tuple(starts), tuple(grad), tuple(start_grad),
                tuple((n, tuple(weight_shape.get(n, ()))) for n in weights))


def without_update(graph, label, prediction, loss, nexts):
    """(the objective, the next states) of a step over rows of which some are missing periods (column GAP): the label
    read as y·(1 − gap) + ŷ·gap, the state advancing at a missing period as a forecast's does (no update: an ETS's
    error is 0 there), and the objective (its loss of that label) times 1 − gap. A node that reads no label is
    itself; the prediction keeps its own read (an AR's first rows predict their own label)."""
    gap = graph.column(GAP)
    kept = 1.0 - gap
    y = graph.column(label)
    values = {y.id: y * kept + graph.expr(prediction) * gap}

    def read(root):
        for i in graph.ancestors([root]):
            node = graph.nodes[i]
            if i in values or node.op in ('const', 'column', 'weight'):
                continue
            args = [values.get(a) for a in node.args]
            if any(a is not None for a in args):
                values[i] = graph.apply(node.op, *[v if v is not None else graph.expr(a)
                                                   for v, a in zip(args, node.args)])
        return values[root].id if root in values else root
    return (graph.expr(read(loss)) * kept).id, [read(n) for n in nexts]


def derivatives(graph, root, names):
    """[node of ∂root/∂name for each name] in graph, by reverse mode."""
    lam = parser.Lambda('', graph, root, 'd', 'w')
    found = lang.gradient(lam, list(names), 'reverse')
    return [found[n] for n in names]


@dataclass(frozen=True)
class Sequences:
    """Rows of many sequences, time-major: sequence g's rows are rows[starts[g]:starts[g] + lengths[g]] of each
    column, in order. order lists the sequences longest first, so that the sequences with a row t are a prefix of
    it, active[t] long."""
    columns: dict           # name → float64 array of all the rows, sequence after sequence
    starts: np.ndarray      # each sequence's first row
    lengths: np.ndarray     # each sequence's rows (≥ 1)

    @property
    def order(self):
        return np.argsort(-self.lengths, kind='stable')

    @property
    def count(self):
        return len(self.lengths)

    @property
    def longest(self):
        return int(self.lengths.max()) if len(self.lengths) else 0

    def active(self):
        """active[t]: how many sequences have a row t (the prefix of order that has)."""
        ordered = self.lengths[self.order]
        return np.searchsorted(-ordered, -np.arange(self.longest), side='left')


def joined(parts, lengths, names):
    """The Sequences of parts, one after another: each part a sequence's rows ({column: array}, lengths[k] of them,
    in order), the columns names of each."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return Sequences({c: np.concatenate([part[c][:n] for part, n in zip(parts, lengths)]) for c in names},
                     np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64), lengths)


class _Run:
    """The plans of a Step over Sequences: each row t's columns and weights and states as numpy arrays over the
    sequences that have a row t (in Sequences.order), evaluated by python_backend's plan."""

    def __init__(self, step, seqs, weights):
        self.step, self.seqs = step, seqs
        self.order = seqs.order
        self.first = seqs.starts[self.order]
        self.active = seqs.active()
        w = np.asarray(weights, dtype=np.float64)
        # a weight vector for all the sequences, or one column a sequence (P × G: each group's own)
        self.w = w if w.ndim == 1 else w[:, self.order]

    def plan(self, roots):
        return python_backend.named_plan(self.step.graph, roots)

    def inputs(self, t, states, n, adjoint=None):
        """(columns, weights) of row t for the first n sequences: {name: array}."""
        at = self.first[:n] + t
        columns = {c: self.seqs.columns[c][at] for c in self.step.columns}
        if adjoint is not None:
            columns.update({ADJOINT + str(k): adjoint[k, :n] for k in range(len(self.step.states))})
        weights = {e: (self.w[k] if self.w.ndim == 1 else self.w[k, :n]) for k, e in enumerate(self.step.weights)}
        weights.update({STATE + f: states[k, :n] for k, f in enumerate(self.step.states)})
        return columns, weights

    def starts(self):
        """The states before each sequence's first row: K × G."""
        k, g = len(self.step.states), self.seqs.count
        values = python_backend.evaluate(self.plan(self.step.start), *self.inputs(0, np.zeros((k, g)), g))
        return np.array([as_rows(values[r], g) for r in self.step.start]).reshape(k, g)


def not_finite(step, seqs, weights):
    """Where the first sequence of seqs first leaves the finite numbers at weights (a vector), run by this module:
    (its row t, the node that is not finite there while what it reads is — a start (t = 0), the loss or a next value
    — and the states before each of its rows up to t, K × (t + 1)); None where it never does."""
    one = Sequences(seqs.columns, seqs.starts[:1], seqs.lengths[:1])
    r = _Run(step, one, weights)
    k = len(step.states)
    with np.errstate(all='ignore'):
        states = r.starts()
        for node, value in zip(step.start, states[:, 0]):
            if not math.isfinite(value):
                return 0, node, np.zeros((k, 1))
        plan, kept = r.plan([step.loss, *step.next]), []
        for t in range(int(one.lengths[0])):
            kept.append(states[:, 0].copy())
            values = python_backend.evaluate(plan, *r.inputs(t, states, 1))
            for node in (step.loss, *step.next):
                if not math.isfinite(float(as_rows(values[node], 1)[0])):
                    return t, node, np.array(kept).T.reshape(k, t + 1)
            states[:, :1] = np.array([as_rows(values[o], 1) for o in step.next]) if k else states[:, :1]
    return None


def check_tape(seqs, states, memory_limit):
    """The error where even the checkpoints of a backward pass (2·√T states a sequence, K numbers each) pass
    memory_limit; before anything is allocated."""
    t = max(1, seqs.longest)
    need = 2 * math.isqrt(t) * max(1, states) * max(1, seqs.count) * 8 + 2 * t * 8
    if memory_limit is not None and need > memory_limit:
        raise PgadError('54000', f'the states of the backward pass need {need >> 20} MB, more than pgad.memory_limit '
                                 f'({memory_limit >> 20} MB)',
                        detail=f'{seqs.count} sequences of up to {t} rows, {states} state fields: a checkpoint every '
                               f'{math.isqrt(t)} rows.',
                        hint="Train on shorter sequences, or with mode => 'forward' (no tape), or have a superuser "
                             "raise pgad.memory_limit.")


def llvm(step, backend, tangents=False):
    """Does backend ('python', 'llvm', 'auto'; 'cuda' has no sequence kernel and is taken as 'auto') run step on
    the llvm backend (jit/scan.py; forward mode's kernel where tangents)? 'llvm' where the step is too large is
    54001; 'auto' runs python there."""
    if backend == 'python':
        return False
    from .jit import scan
    if backend == 'llvm':
        return True
    return scan.fits(step, tangents)


def run(step, seqs, weights, keep=None, backend='python', cache=None, parallel=None, tile_bytes=TILE_BYTES):
    """(each sequence's summed loss (G), its final state (K × G), predictions or None) along all the rows, in the
    sequences' own order; keep: 'predictions' also gives each row's prediction (an array like a column). backend:
    'python' (this module, the reference), 'llvm' (jit/scan.py) or 'auto' (llvm where it compiles); cache: the llvm
    backend's jit.cache.DiskCache; parallel: on python, a linear step's rows by the parallel scan (scan_linear.py)
    where it pays (None), always (True), or never (False: the reference, in order)."""
    if llvm(step, backend):
        from .jit import cache as disk, scan
        return scan.run(step, seqs, weights, ADJOINT, keep, cache or disk.NONE)
    if _scans(step, seqs, parallel, tile_bytes):
        return scan_linear.run(step, seqs, weights, keep, tile_bytes)
    r = _Run(step, seqs, weights)
    k, g = len(step.states), seqs.count
    states = r.starts()
    loss = np.zeros(g)
    predictions = np.empty(len(next(iter(seqs.columns.values())))) if keep == 'predictions' and seqs.columns else \
        np.empty(int(seqs.lengths.sum())) if keep == 'predictions' else None
    roots = [step.loss, step.prediction, *step.next]
    plan = r.plan(roots)
    for t, n in enumerate(r.active):
        values = python_backend.evaluate(plan, *r.inputs(t, states, n))
        loss[:n] += as_rows(values[step.loss], n)
        if predictions is not None:
            predictions[r.first[:n] + t] = as_rows(values[step.prediction], n)
        # all at once: a next value may be a view of the states (a field that shifts, s.s2)
        states[:, :n] = np.array([as_rows(values[o], n) for o in step.next]) if k else states[:, :n]
    back = np.empty_like(r.order)
    back[r.order] = np.arange(g)
    return loss[back], states[:, back], predictions


def gradient(step, seqs, weights, mode='reverse', tile_bytes=TILE_BYTES, backend='python', cache=None,
             parallel=None):
    """(each sequence's summed loss (G), the gradient of it by the weights (P × G)), in the sequences' own order,
    by reverse mode (states kept in tiles, or recomputed from checkpoints past tile_bytes) or forward mode. backend
    and parallel as run() takes them (parallel: reverse mode only)."""
    if llvm(step, backend, tangents=mode != 'reverse'):
        from .jit import cache as disk, lanes, scan
        if mode == 'reverse' and lanes.pays(step, seqs):  # W sequences at once, side by side in SIMD lanes
            return lanes.gradient(step, seqs, weights, tile_bytes, ADJOINT, cache or disk.NONE)
        if mode == 'reverse':
            return scan.gradient(step, seqs, weights, tile_bytes, ADJOINT, cache or disk.NONE)
        return scan.forward_mode(step, seqs, weights, ADJOINT, cache or disk.NONE)
    if mode == 'reverse' and _scans(step, seqs, parallel, tile_bytes):
        return scan_linear.gradient(step, seqs, weights, tuple(ADJOINT + str(k) for k in range(len(step.states))),
                                    tile_bytes)
    r = _Run(step, seqs, weights)
    loss, grad = (_reverse if mode == 'reverse' else _forward)(r, tile_bytes)
    back = np.empty_like(r.order)
    back[r.order] = np.arange(seqs.count)
    return loss[back], grad[:, back]


def _scans(step, seqs, parallel, tile_bytes):
    """Does the parallel scan run step over seqs: always where parallel (a linear step), never where it is False,
    and by default where it pays (scan_linear.takes) and its least chunk fits tile_bytes (else the reference, whose
    checkpoints take less)."""
    if parallel:
        return scan_linear.linear(step) and len(step.states) > 0
    return parallel is None and scan_linear.takes(step, seqs) and scan_linear.fits(step, seqs, tile_bytes)


def _reverse(r, tile_bytes):
    step, seqs = r.step, r.seqs
    k, g, p = len(step.states), seqs.count, len(step.weights)
    length = seqs.longest
    every = length if length * max(k, 1) * g * 8 <= tile_bytes else max(1, math.isqrt(length))
    forward = r.plan([step.loss, *step.next])
    loss = np.zeros(g)
    checkpoints, states = {}, r.starts()
    kept = {}

    def advance(t, states, tape=None):
        n = r.active[t]
        values = python_backend.evaluate(forward, *r.inputs(t, states, n))
        if tape is not None:
            tape[t] = states[:, :n].copy()
        out = states.copy()
        if k:
            out[:, :n] = [as_rows(values[o], n) for o in step.next]
        return out, as_rows(values[step.loss], n)

    for t in range(length):
        if t % every == 0:
            checkpoints[t] = states
        states, row_loss = advance(t, states, kept if every >= length else None)
        loss[:r.active[t]] += row_loss
    adjoint, grad = np.zeros((k, g)), np.zeros((p, g))
    backward = r.plan(step.vjp)
    for begin in sorted(checkpoints, reverse=True):
        end = min(begin + every, length)
        if every < length:  # the segment's states again, from its checkpoint
            kept, states = {}, checkpoints[begin]
            for t in range(begin, end):
                states, _ = advance(t, states, kept)
        for t in range(end - 1, begin - 1, -1):
            n = r.active[t]
            values = python_backend.evaluate(backward, *r.inputs(t, kept[t], n, adjoint))
            for j in range(p):
                grad[j, :n] += as_rows(values[step.vjp[j]], n)
            if k:  # all at once: a field's adjoint may be a view of another's (s1 ← s.s2: λ_s2 is λ_s1)
                adjoint[:, :n] = np.array([as_rows(values[step.vjp[p + j]], n) for j in range(k)])
        kept = {}
    if k:
        values = python_backend.evaluate(r.plan(step.start_vjp), *r.inputs(0, np.zeros((k, g)), g, adjoint))
        for j in range(p):
            grad[j] += as_rows(values[step.start_vjp[j]], g)
    return loss, grad


def _forward(r, tile_bytes):
    step, seqs = r.step, r.seqs
    k, g, p = len(step.states), seqs.count, len(step.weights)
    rows, starts = step.jacobian()
    values = python_backend.evaluate(r.plan([n for row in starts for n in row]), *r.inputs(0, np.zeros((k, g)), g))
    tangent = np.array([[as_rows(values[n], g) for n in row] for row in starts]).reshape(k, p, g)
    plan = r.plan([step.loss, *step.next, *[n for row in rows for n in row]])
    states, loss, grad = r.starts(), np.zeros(g), np.zeros((p, g))
    for t, n in enumerate(r.active):
        values = python_backend.evaluate(plan, *r.inputs(t, states, n))
        jac = np.array([[as_rows(values[e], n) for e in row] for row in rows]).reshape(k + 1, p + k, n)
        loss[:n] += as_rows(values[step.loss], n)
        tan = tangent[:, :, :n]
        grad[:, :n] += jac[0, :p] + np.einsum('kn,kpn->pn', jac[0, p:], tan)
        if k:
            tangent[:, :, :n] = jac[1:, :p] + np.einsum('ijn,jpn->ipn', jac[1:, p:], tan)
            states[:, :n] = np.array([as_rows(values[o], n) for o in step.next])  # all at once, as in run()
    return loss, grad
