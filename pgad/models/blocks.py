"""Block Newton over a keyed model (keyed.py): each key's value solved exactly from pgad's own Hessian blocks, in turn.

The weights fall into groups: the global ones, and for each keyed column the keyed weights it indexes (for a
factorisation, a user's bias and vector, then an item's). With the other groups fixed, the objective of a group is
a sum over its keys of small problems, each reading only its key's rows: its Hessian is block-diagonal, one m×m
block a key. One pass over the rows gives every key's gradient and block at once: the local lambda's Hessian in the
group's weights (program.build_hessian, forward over reverse), each row's values added at its key (np.bincount).
Every key then takes its Newton step, (H_k + 2·l2·I)·d_k = g_k, solved batched, and a line search over the group
(the full step first, halved while the objective does not fall) keeps the objective from rising where a block is
not convex. For the bilinear squared loss a group's objective is quadratic, the full step its exact minimum:
alternating least squares; for the logistic and poisson losses each step is one Newton step of a convex block.

A sweep steps every group once. The fit converges, as every fit does (descent.judged), where the sweep's Newton
decrement, Σ over the groups of gᵀH⁻¹g measured before each step, is below the criterion relative to the objective.
"""
import math

import numpy as np

from .. import program, python_backend
from ..lang import hessian as second, vectors
from . import descent

HALVINGS = 30
GROW, MOST_REACH, LEAST_REACH = 1.5, 16.0, 0.25  # how far past a sweep its extrapolation reaches, and how that adapts


class Group:
    """One group's Hessian program and where its elements sit: positions (K×m, or 1×m for the globals) in the
    weight vector."""

    def __init__(self, text, names, layout, limits, dims, column=None):
        self.names, self.column = names, column
        self.prog = program.build_hessian(text, tuple(names), limits, dims)
        self.m = len(self.prog.weights)
        self.plan = python_backend.named_plan(self.prog.graph, self.prog.outputs)
        where = {e: (n, j) for n in names for j, e in enumerate(vectors.elements(n, layout.shapes[n]))}
        count = layout.keyed[names[0]][1] if column is not None else 1
        self.positions = np.empty((count, self.m), dtype=np.int64)
        for k, e in enumerate(self.prog.weights):
            n, j = where[e]
            size = math.prod(layout.shapes[n])
            self.positions[:, k] = layout.spans[n].start + np.arange(count) * size + j

    def sums(self, kernel, table, w, clock):
        """(Σ loss, the group's gradient sums K×m, its Hessian sums K×m×m) over all the rows."""
        m, count = self.m, len(self.positions)
        upper = second.upper(range(m))
        g, h, loss = np.zeros((count, m)), np.zeros((count, len(upper))), 0.0
        for start in range(0, table.rows, kernel_block(m)):
            n = min(kernel_block(m), table.rows - start)
            values, codes = kernel.values([c[start:start + n] for c in table.columns], n, w, self.plan)
            outputs = [python_backend.as_rows(values[o], n) for o in self.prog.outputs]
            loss += float(np.sum(outputs[0]))
            if self.column is None:
                g[0] += [np.sum(v) for v in outputs[1:1 + m]]
                h[0] += [np.sum(v) for v in outputs[1 + m:]]
            else:
                at = codes[self.names[0]]
                for k, v in enumerate(outputs[1:1 + m]):
                    g[:, k] += np.bincount(at, weights=v, minlength=count)
                for k, v in enumerate(outputs[1 + m:]):
                    h[:, k] += np.bincount(at, weights=v, minlength=count)
            clock.rows += n
            clock.poll()
        full = np.zeros((count, m, m))
        i, j = np.triu_indices(m)
        full[:, i, j] = h
        full[:, j, i] = h
        return loss, g, full


def kernel_block(m):
    """Rows a Hessian pass takes at once: its m(m+3)/2 outputs' arrays stay under 64 MB."""
    return max(1024, (64 << 20) // (8 * (m * (m + 3) // 2 + 1) * 4))


def solve(h, g):
    """d with h·d = g for each key's block (batched), the pseudo-inverse's where a block is singular (a key no row
    reads, with no l2)."""
    try:
        return np.linalg.solve(h, g[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.einsum('kij,kj->ki', np.linalg.pinv(h, hermitian=True), g)


def fit(kernel, table, w, groups, penalty, iterations, tolerance, clock, loss_only):
    """The descent.Fit of block Newton from w over the groups (Group), and the objective at the start.
    loss_only(w) gives Σ loss over the rows (a pass without derivatives, for the line search and the extrapolation).
    After each sweep its step is taken further, reach times again, where that lowers the objective (over-relaxation,
    as CP-ALS's line search: reach grows while it pays and halves where it does not), which shortens ALS's slow
    linear tail."""
    rows = table.rows
    w = np.array(w, dtype=np.float64)
    mask = penalty.mask if penalty.mask is not None else np.ones(len(w))
    f = start = kernel_objective(loss_only, w, penalty, rows)
    history, stopped, decrement, reach = [], 'cap', math.inf, 1.0
    for it in range(1, iterations + 1):
        decrement, before = 0.0, w.copy()
        for group in groups:
            _, g, h = group.sums(kernel, table, w, clock)
            at = group.positions
            g = g / rows + 2 * penalty.l2 * mask[at] * w[at]
            h = h / rows + 2 * penalty.l2 * mask[at][:, :, None] * np.eye(group.m)
            d = solve(h, g)
            d = np.where(np.isfinite(d), d, 0.0)
            decrement += float(np.sum(g * d))
            t, found = 1.0, None
            for _ in range(HALVINGS):
                trial = w.copy()
                trial[at] -= t * d
                value = kernel_objective(loss_only, trial, penalty, rows)
                if value <= f:
                    found = trial, value
                    break
                t /= 2
            if found is not None:
                w, f = found
        if it > 1:  # the sweep's step, taken further where that lowers the objective more (over-relaxation)
            trial = w + reach * (w - before)
            value = kernel_objective(loss_only, trial, penalty, rows)
            if value < f:
                w, f, reach = trial, value, min(reach * GROW, MOST_REACH)
            else:
                reach = max(reach / 2, LEAST_REACH)
        history.append(f)
        clock.validate(w, f)
        clock.iteration(it, f)
        measure, converged = descent.judged(max(decrement, 0.0), f, descent.FLOOR * abs(start), rows)
        if converged:
            stopped = 'optimum'
            break
        if descent.stalled(history, tolerance):
            stopped = 'tolerance'
            break
    measure, converged = descent.judged(max(decrement, 0.0), f, descent.FLOOR * abs(start), rows)
    return descent.Fit(w, f, history, len(history), clock.seconds(), converged, measure, stopped), start


def kernel_objective(loss_only, w, penalty, rows):
    return loss_only(w) / rows + penalty.value(w)
