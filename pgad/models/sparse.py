"""Mini-batch optimizers over a keyed model that touch only what a batch reads (issue 48): 'sgd', 'adagrad', 'adam'.

A batch of rows reads a few keys of each keyed weight: its gradient is the global weights' and those keys' values'
(each row's local derivative added at its key), and a step moves only them, so a step costs the batch, not the
weight's size. The penalty's term is the batch's unbiased share of l2's: a key that the data reads n_k times in n rows
and the batch b times in B rows takes 2·l2·w·(b/B)·(n/n_k), whose mean over the batches is 2·l2·w, the objective's
own; with the batch all the rows it is exactly the objective's gradient, so one epoch of one batch is a step of 'gd'.
'adagrad' and 'adam' keep their moments per element and update a key's only when a batch reads it (lazily, as
PyTorch's SparseAdam), with Adam's bias correction by the global step count.

Each epoch shuffles the rows, steps through them, then one pass without derivatives gives the objective for the
history; the fit is judged at the end as every fit is (descent.judged, on the full gradient).
"""
import numpy as np

from .. import python_backend
from . import descent

RULES = ('sgd', 'adagrad', 'adam')
DEFAULT_RATE = {'sgd': 0.01, 'adagrad': 0.1, 'adam': 0.01}
EPSILON = 1e-8


class Rule:
    """A step rule over positions of the weight vector: step(w, at, g) moves w[at] by the gradient g there."""

    def __init__(self, optimizer, rate, n):
        self.optimizer, self.rate, self.t = optimizer, rate, 0
        self.first = np.zeros(n) if optimizer == 'adam' else None
        self.second = np.zeros(n) if optimizer in ('adam', 'adagrad') else None

    def step(self, w, at, g):
        self.t += 1
        if self.optimizer == 'sgd':
            w[at] -= self.rate * g
        elif self.optimizer == 'adagrad':
            self.second[at] += g * g
            w[at] -= self.rate * g / (np.sqrt(self.second[at]) + EPSILON)
        else:
            self.first[at] = descent.BETA1 * self.first[at] + (1 - descent.BETA1) * g
            self.second[at] = descent.BETA2 * self.second[at] + (1 - descent.BETA2) * g * g
            m = self.first[at] / (1 - descent.BETA1 ** self.t)
            v = self.second[at] / (1 - descent.BETA2 ** self.t)
            w[at] -= self.rate * m / (np.sqrt(v) + descent.EPSILON)


def gradient(kernel, columns, n, w, penalty, counts, rows):
    """(the positions a batch of n rows moves, the objective's gradient there) (counts: {keyed weight: its keys'
    rows in all the data}; rows: all the data's)."""
    values, codes = kernel.values(columns, n, w)
    layout, prog, l2 = kernel.layout, kernel.prog, 2 * penalty.l2
    at, g = [], []
    found = {}
    for name in layout.keyed:
        found[name] = np.unique(codes[name], return_inverse=True)
    for o, (name, j) in zip(prog.outputs[1:], kernel.targets):
        v = python_backend.as_rows(values[o], n)
        span = layout.spans[name]
        if name in layout.keyed:
            keys, inverse = found[name]
            size = int(np.prod(layout.shapes[name], dtype=np.int64))
            where = span.start + keys * size + j
            share = np.bincount(inverse, minlength=len(keys)) / n * rows / counts[name][keys]
            at.append(where)
            g.append(np.bincount(inverse, weights=v, minlength=len(keys)) / n
                     + l2 * penalty.scale[name] * w[where] * share)
        else:
            where = span.start + j
            at.append(np.array([where]))
            g.append(np.array([np.sum(v) / n + l2 * penalty.scale[name] * w[where]]))
    return np.concatenate(at), np.concatenate(g)


def fit(kernel, table, w, layout, penalty, optimizer, rate, iterations, batch, rng, tolerance, clock):
    """The descent.Fit of the sparse mini-batch optimizer from w (moved in place): iterations epochs of batches of
    batch rows; penalty a keyed.Ridge."""
    w = np.asarray(w, dtype=np.float64)
    rows = table.rows
    names = list(kernel.columns)
    counts = {n: np.bincount(table.columns[names.index(c)].astype(np.int64) - 1, minlength=k)
              for n, (c, k) in layout.keyed.items()}
    counts = {n: np.where(c > 0, c, 1) for n, c in counts.items()}
    rule, history = Rule(optimizer, rate, len(w)), []
    divergence = descent.Divergence(rate, clock.warning)
    start = _objective(kernel, table, w, penalty, clock)
    divergence.see(start, 0)
    stopped = 'cap'
    for epoch in range(1, iterations + 1):
        order = rng.permutation(rows)
        shuffled = [c[order] for c in table.columns]
        for begin in range(0, rows, batch):
            n = min(batch, rows - begin)
            at, g = gradient(kernel, [c[begin:begin + n] for c in shuffled], n, w, penalty, counts, rows)
            if not np.all(np.isfinite(g)):
                descent.check_finite(np.array([np.nan]), w, epoch, [str(k) for k in range(len(w))], rate)
            rule.step(w, at, g)
            clock.rows += n
            clock.poll()
        history.append(_objective(kernel, table, w, penalty, clock))
        divergence.see(history[-1], epoch)
        clock.iteration(epoch, history[-1])
        if descent.stalled(history, tolerance):
            stopped = 'tolerance'
            break
    sums = descent.evaluate(kernel, table, w, clock.interrupts)
    f = sums[0] / rows + penalty.value(w)
    g = sums[1:]
    g /= rows
    penalty.add_gradient(g, w)
    measure, converged = descent.judged(float(g @ g), f, descent.FLOOR * abs(start), rows)
    return descent.Fit(w, f, history or [f], len(history), clock.seconds(), converged, measure, stopped)


def _objective(kernel, table, w, penalty, clock):
    """The objective at w: the mean loss over all the rows plus the penalty."""
    total = kernel.loss(table.columns, table.rows, w, clock.poll)
    return total / table.rows + penalty.value(w)
