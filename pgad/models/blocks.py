"""Block Newton over a keyed model (keyed.py): each key's value solved exactly from pgad's own Hessian blocks, in turn.

The weights fall into groups: the global ones, and for each keyed column the keyed weights it indexes (for a
factorisation, a user's bias and vector, then an item's). With the other groups fixed, the objective of a group is
a sum over its keys of small problems, each reading only its key's rows: its Hessian is block-diagonal, one m×m
block a key. One pass over the rows gives every key's gradient and block at once: the local lambda's Hessian in the
group's weights (program.build_hessian, forward over reverse), each row's values added at its key (np.bincount).
Every key then takes its Newton step, (H_k + 2·l2·I)·d_k = g_k, solved batched, and a line search over the group
(the full step first, halved while the objective does not fall) keeps the objective from rising where a block is
not convex. For the bilinear squared loss a group's objective is quadratic, the full step its exact minimum:
alternating least squares; for the logistic and poisson losses each step is one Newton step of a convex block. Where
the local lambda is a polynomial of degree 2 in the group's values (degree(), read off its DAG) the step needs no
search: its objective is f − (gᵀd − ½dᵀHd), known without a pass (the fit's last objective is measured).
A group of CG_FROM values a key or more is solved by conjugate gradients instead (newton_step): on the llvm backend
every key's in one compiled kernel (jit/cg.py, Group.solved), else by numpy over passes of the Hessian-vector
product (conjugate_gradients).

A sweep steps every group once. The fit converges, as every fit does (descent.judged), where the sweep's Newton
decrement, Σ over the groups of gᵀH⁻¹g measured before each step, is below the criterion relative to the objective.
"""
import math

import numpy as np

from .. import program, python_backend
from ..lang import vectors
from . import descent

HALVINGS = 30
CG_FROM = 17       # the values a key from which a group's blocks are solved by conjugate gradients (a pass a step,
#                    m products a row) rather than from the whole Hessian (a pass, m(m+3)/2 sums a row)
CG_RESIDUAL = 0.1  # conjugate gradients stop where each key's residual is a tenth of its gradient (inexact Newton)
CG_TIGHT = 1e-4   # the residual conjugate gradients are solved to where the fit is judged converged
CG_MOST = 25       # the most steps of conjugate gradients a group takes (its block's values, where fewer)
CG_COPIES = 7      # the copies of the values a fit by conjugate gradients holds at once, at most: the weights, the
#                    sweep's start, and of a group's the step, the residual, the direction, its product and a term
MOVE_KEYS = 65_536  # the keys a step is taken at at once (its temporary's rows)
GROW, MOST_REACH, LEAST_REACH = 1.5, 16.0, 0.25  # how far past a sweep its extrapolation reaches, and how that adapts


class Group:
    """One group's Hessian program and where its elements sit in the weight vector: element k of key c (0-based; the
    globals' one key is 0) at base[k] + c·stride[k] (a keyed weight's table is row-major, a key a row)."""

    def __init__(self, text, names, layout, limits, dims, column=None):
        self.names, self.column = names, column
        size = sum(math.prod(layout.shapes[n]) for n in names)
        self.conjugate = size >= CG_FROM  # its blocks solved by conjugate gradients, not from the whole Hessian
        self.products_program = program.build_hvp(text, tuple(names), limits, dims) if self.conjugate else None
        self.prog = self.products_program or program.build_hessian(text, tuple(names), limits, dims)
        self.m = len(self.prog.weights)
        self.plans = {}  # the python backend's plan of each pass's outputs
        where = {e: (n, j) for n in names for j, e in enumerate(vectors.elements(n, layout.shapes[n]))}
        self.count = layout.keyed[names[0]][1] if column is not None else 1
        self.base = np.array([layout.spans[where[e][0]].start + where[e][1] for e in self.prog.weights], dtype=np.int64)
        self.stride = np.array([math.prod(layout.shapes[where[e][0]]) if column is not None else 0
                                for e in self.prog.weights], dtype=np.int64)
        self.element_weights = [where[e][0] for e in self.prog.weights]
        self.quadratic = degree(self.prog.graph, self.prog.outputs[0], set(self.prog.weights)) <= 2
        at = {e: k for k, e in enumerate(self.prog.weights)}  # each weight's elements' places among the group's
        self.columns_of = [(layout.spans[n], math.prod(layout.shapes[n]),
                            np.array([at[e] for e in vectors.elements(n, layout.shapes[n])]))
                           for n in names]
        self.rows = None  # the rows in the order of their keys, and where each key's begin (sorted)
        self.columns = None  # the table's columns in the order of its keys, where arrange made them so

    def at(self, v, k0, k1):
        """The group's elements of keys k0 … k1 − 1 in the vector v, a (k1 − k0)×m copy."""
        return np.stack([v[b + k0 * s:b + k1 * s:s] if s else v[b:b + 1] for b, s in zip(self.base, self.stride)], 1)

    def scale(self, penalty):
        """Each element's share of the penalty (keyed.Ridge's scale of its weight), an m-vector."""
        return np.array([penalty.scale[n] for n in self.element_weights])

    def move(self, v, d, t):
        """v less t·d at every key's elements (d: count×m), in place: a weight's table at once, MOVE_KEYS keys at a
        time."""
        for span, size, columns in self.columns_of:
            table = v[span].reshape(self.count, size)
            for k0 in range(0, self.count, MOVE_KEYS):
                k1 = min(k0 + MOVE_KEYS, self.count)
                table[k0:k1] -= t * d[k0:k1][:, columns]

    def chunks(self, budget):
        """Key ranges (k0, k1) whose blocks (gradient, Hessian's upper half and full, the solve's copy) fit budget
        bytes."""
        per_key = 8 * (2 * self.m * self.m + self.m * (self.m + 1) // 2 + 3 * self.m)
        step = max(1, budget // per_key)
        return [(k0, min(k0 + step, self.count)) for k0 in range(0, self.count, step)]

    def sorted(self, kernel, table):
        """The rows sorted by this group's key (np.argsort, once a fit), and where each key's rows begin."""
        if self.rows is None:
            codes = table.columns[kernel.columns.index(self.column)]
            order = np.argsort(codes, kind='stable')
            self.rows = order, np.searchsorted(codes[order], np.arange(1, self.count + 2))
        return self.rows

    def arrange(self, kernel, table, in_place):
        """Its rows made contiguous in its key order (arrange): the table's own columns permuted where in_place,
        else a copy of them."""
        self.rows = None
        order, begins = self.sorted(kernel, table)
        if in_place:
            for k, c in enumerate(table.columns):  # a column at a time: one column's copy alive beside the table
                table.columns[k] = c[order]
            self.columns, self.rows = list(table.columns), (None, begins)
        else:
            self.columns = [c[order] for c in table.columns]

    def sums(self, kernel, table, w, clock, k0=0, k1=None):
        """(the gradient sums (k1 − k0)×m, the Hessian sums (k1 − k0)×m×m) of keys k0 … k1 − 1 over their rows."""
        out = self.added(kernel, table, w, clock, self.prog, self.prog.outputs[1:], k0, k1)
        return out[:, :self.m], self.full(out[:, self.m:])

    def gradients(self, kernel, table, w, clock):
        """The gradient sums of every key, count×m (the Hessian-vector program's gradient: conjugate gradients)."""
        return self.added(kernel, table, w, clock, self.products_program, self.products_program.outputs[1:1 + self.m])

    def solved(self, kernel, table, w, rows, ridge, residual, most, clock):
        """(every key's Newton step, gᵀd) of a keyed conjugate group in one compiled kernel (jit/cg.py: each key's
        conjugate gradients over its rows, which lie together), as newton_step's numpy steps would give them; None
        on the python backend, for the globals, and where no tier compiles it ('auto')."""
        if self.column is None:
            return None
        order, begins = self.sorted(kernel, table)
        solver = self.solver(kernel, indexed=self.columns is None)
        if solver is None:
            return None
        steps, measures = solver(self.columns or table.columns, begins, w, kernel.keys, 1.0 / rows,
                                 residual * residual, ridge, most, index=order)
        clock.rows += int(np.diff(begins) @ (1 + measures[:, 1]))
        clock.poll()
        return steps, float(np.sum(measures[:, 0]))

    def solver(self, kernel, indexed):
        """The kernel's compiled Newton step of this keyed conjugate group (keyed.Kernel.solver), its rows read
        through their order where indexed; None where the kernel compiles none."""
        m, prog = self.m, self.products_program
        return kernel.solver(prog.graph, prog.outputs[1:1 + m], prog.outputs[1 + m:],
                             [program.DIRECTION + e for e in prog.weights], kernel.columns.index(self.column), indexed)

    def products(self, kernel, table, w, v, clock):
        """Each key's Hessian sum times its row of v (count×m, C-contiguous), count×m: one pass of the Hessian-vector
        program, the direction read as weights of its own (program.DIRECTION), a key's row of v gathered as its
        values are (from the kernel's other array)."""
        m, prog = self.m, self.products_program
        code = None if self.column is None else kernel.columns.index(self.column)
        reads = tuple((program.DIRECTION + e, (code, j, m if code is not None else 0))
                      for j, e in enumerate(prog.weights))

        def feed(codes):  # the python backend's: each row's key's direction
            return {program.DIRECTION + e: (v[codes[self.names[0]], j] if self.column is not None else v[0, j])
                    for j, e in enumerate(prog.weights)}
        return self.added(kernel, table, w, clock, prog, prog.outputs[1 + m:], reads=reads, feed=feed, other=v)

    def added(self, kernel, table, w, clock, prog, outputs, k0=0, k1=None, reads=(), feed=None, other=None):
        """Each of prog's outputs summed over the rows of each of keys k0 … k1 − 1, (k1 − k0)×len(outputs): one
        compiled pass on the llvm backend (each row's outputs added at its key's row), else the python plan over
        blocks of rows and np.bincount. reads: ((a leaf read from other, (column, base, stride)), …), and feed(codes)
        its values a block on python."""
        k1 = self.count if k1 is None else k1
        columns, rows, starts, total = table.columns, None, None, table.rows
        if self.column is not None:
            order, begins = self.sorted(kernel, table)
            starts, total = begins[k0:k1] - begins[k0], begins[k1] - begins[k0]
            if self.columns is not None:  # arranged: the key's rows are a slice
                columns = [c[begins[k0]:begins[k1]] for c in self.columns]
            else:
                rows = order[begins[k0]:begins[k1]]
        width = len(outputs)
        code = None if self.column is None else kernel.columns.index(self.column)
        compiled = kernel.compiled(prog.graph, outputs, [(code, k, width) for k in range(width)],
                                   indexed=rows is not None, reads=reads)
        out = np.zeros((k1 - k0, width))
        if compiled is not None:
            compiled(columns, total, w, out, kernel.keys, None if code is None else {code: (k0, k1 - k0)},
                     index=rows, starts=starts, other=other)
            clock.rows += total
            clock.poll()
            return out
        plan = self.plans.get((id(prog), tuple(outputs)))
        if plan is None:
            plan = self.plans[id(prog), tuple(outputs)] = python_backend.named_plan(prog.graph, outputs)
        step = kernel_block(self.m)
        for start in range(0, total, step):
            n = min(step, total - start)
            block = [c[start:start + n] for c in columns] if rows is None else \
                [c[rows[start:start + n]] for c in columns]
            values, codes = kernel.values(block, n, w, plan, feed)
            values = [python_backend.as_rows(values[o], n) for o in outputs]
            if self.column is None:
                out[0] += [np.sum(v) for v in values]
            else:
                at = codes[self.names[0]] - k0
                for k, v in enumerate(values):
                    out[:, k] += np.bincount(at, weights=v, minlength=k1 - k0)
            del values
            clock.rows += n
            clock.poll()
        return out

    def full(self, h):
        """Each key's m×m Hessian of its upper half (h: keys × m(m+1)/2, row by row): one gather."""
        at = np.zeros((self.m, self.m), dtype=np.intp)
        i, j = np.triu_indices(self.m)
        at[i, j] = at[j, i] = np.arange(len(i))
        return h[:, at]


def degree(graph, root, elements):
    """The degree of root as a polynomial in the weights named elements (the others, the columns and constants
    fixed), math.inf where it is not one (a node past +, −, ×, ÷ by what they do not reach, and whole powers)."""
    found = {}
    for n in graph.ancestors([root]):
        node = graph.nodes[n]
        if node.op in ('const', 'column', 'weight'):
            found[n] = 1 if node.op == 'weight' and node.value in elements else 0
            continue
        args = [found[a] for a in node.args]
        power = graph.nodes[node.args[-1]]
        found[n] = (0 if max(args) == 0 else max(args) if node.op in ('add', 'sub', 'neg') else
                    sum(args) if node.op == 'mul' else args[0] if node.op == 'div' and args[1] == 0 else
                    args[0] * int(power.value) if node.op == 'pow' and power.op == 'const' and
                    isinstance(power.value, (int, float)) and float(power.value).is_integer() and
                    0 <= power.value <= 2 else math.inf)
    return found[root]


def arrange(groups, kernel, table, spare=None):
    """Each keyed group's rows made contiguous in its key order, so that its passes read the columns in order,
    each key's rows together: the table itself permuted into the first group's order, and a copy of it in each other
    group's while the copies fit spare bytes (None: no bound); a group past it reads its rows through its order."""
    keyed = [g for g in groups if g.column is not None]
    size = 8 * table.rows * len(table.columns)
    for k, group in enumerate(keyed):
        if k == 0 or spare is None or size <= spare:
            group.arrange(kernel, table, in_place=k == 0)
            spare = spare if spare is None or k == 0 else spare - size
        else:
            group.rows = None


def kernel_block(m):
    """Rows a Hessian pass takes at once: its m(m+3)/2 outputs' arrays stay under 64 MB."""
    return max(1024, (64 << 20) // (8 * (m * (m + 3) // 2 + 1) * 4))


def newton_step(group, kernel, table, w, penalty, rows, clock, residual, most):
    """(every key's Newton step of a conjugate group, by conjugate gradients to `residual`, gᵀd) at w."""
    here = group.scale(penalty)
    solved = group.solved(kernel, table, w, rows, 2 * penalty.l2 * here, residual, most, clock)
    if solved is not None:
        return solved
    weights = group.at(w, 0, group.count)
    g = group.gradients(kernel, table, w, clock)
    g /= rows
    g += (2 * penalty.l2 * here) * weights
    del weights
    return conjugate_gradients(
        lambda p, scratch: product(group, kernel, table, w, p, scratch, clock, rows, here, penalty.l2), g, most,
        residual)


def tight_decrement(group, kernel, table, w, penalty, rows, clock):
    """gᵀH⁻¹g of a conjugate group at w, its blocks solved to CG_TIGHT (at most a step a value): what `converged`
    is judged on where the sweeps' looser solves say it has."""
    return newton_step(group, kernel, table, w, penalty, rows, clock, CG_TIGHT, group.m)[1]


def product(group, kernel, table, w, p, scratch, clock, rows, here, l2):
    """The objective's Hessian block of each key times its row of p: the mean loss's (one pass) and the penalty's
    (added through scratch, an array of p's shape, rather than a temporary)."""
    q = group.products(kernel, table, w, p, clock)
    q /= rows
    q += np.multiply(p, 2 * l2 * here, out=scratch)
    return q


def conjugate_gradients(product, g, most, residual=CG_RESIDUAL):
    """(d with H_k·d_k ≈ g_k for each key k (a row of g, which it takes over as its residual), gᵀd), by conjugate
    gradients run on every key at once, each step one product(p, scratch) (H_k·p_k of every key: a pass over the
    rows; scratch an array it may use), until each key's residual is within `residual` of its g's norm, or `most`
    steps. A key whose curvature along its direction is not positive stops there (its line search then guards the
    objective). gᵀd is Σ αᵢ·rᵢᵀrᵢ, each step's (from d = 0, gᵀpᵢ = rᵢᵀrᵢ), so g need not be kept. It holds d, r,
    p, the product and one scratch array at most (CG_COPIES counts them), each step's updates made in place."""
    d, r, measure = np.zeros_like(g), g, 0.0
    p, rs = r.copy(), np.einsum('ki,ki->k', r, r)
    scratch = np.empty_like(g)
    goal = residual * residual * rs
    for _ in range(most):
        going = rs > goal
        if not going.any():
            break
        p[~going] = 0.0
        q = product(p, scratch)
        curvature = np.einsum('ki,ki->k', p, q)
        alpha = np.where(going & (curvature > 0), rs / np.where(curvature > 0, curvature, 1.0), 0.0)
        measure += float(alpha @ rs)
        d += np.multiply(p, alpha[:, None], out=scratch)
        r -= np.multiply(q, alpha[:, None], out=scratch)
        del q
        following = np.einsum('ki,ki->k', r, r)
        beta = np.where(alpha > 0, following / np.where(rs > 0, rs, 1.0), 0.0)
        p *= beta[:, None]
        p += r
        rs = np.where(alpha > 0, following, 0.0)
    return d, measure


def solve(h, g):
    """d with h·d = g for each key's block (batched), the pseudo-inverse's where a block is singular (a key no row
    reads, with no l2)."""
    try:
        return np.linalg.solve(h, g[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.einsum('kij,kj->ki', np.linalg.pinv(h, hermitian=True), g)


def fit(kernel, table, w, groups, penalty, iterations, tolerance, clock, loss_only, budget=64 << 20, spare=None):
    """The descent.Fit of block Newton from w (a keyed.Ridge's penalty) over the groups (Group), and the objective at
    the start.
    loss_only(w) gives Σ loss over the rows (a pass without derivatives, for the line search and the extrapolation).
    A group's keys are solved a chunk at a time, each chunk's blocks within budget bytes (Group.chunks), over its
    rows alone: the table permuted into the first keyed group's key order, and copied into each other's while the
    copies fit spare bytes (arrange), so that each pass reads the rows in order. After each sweep its step is taken
    further, reach times again, where that lowers the objective (over-relaxation, as CP-ALS's line search: reach grows
    while it pays and halves where it does not), which shortens ALS's slow linear tail."""
    rows = table.rows
    arrange(groups, kernel, table, spare)
    w = np.array(w, dtype=np.float64)  # its own: a quadratic group's step is taken in place
    f = start = kernel_objective(loss_only, w, penalty, rows)
    history, stopped, decrement, reach = [], 'cap', math.inf, 1.0
    known = True  # f measured by a pass, not predicted from a quadratic group's step
    for it in range(1, iterations + 1):
        decrement, before = 0.0, w.copy()
        exact = 0.0  # the decrement of the groups solved from their whole Hessian blocks
        for group in groups:
            if group.conjugate:  # every key's step at once, by conjugate gradients on Hessian-vector products
                d, measure = newton_step(group, kernel, table, w, penalty, rows, clock, CG_RESIDUAL,
                                         min(group.m, CG_MOST))
                decrement += measure
                drop = measure / 2  # CG from 0: dᵀHd = Σ αᵢ²·pᵢᵀHpᵢ = Σ αᵢ·rᵢᵀrᵢ = gᵀd
            else:
                d, drop = np.zeros((group.count, group.m)), 0.0
            for k0, k1 in () if group.conjugate else group.chunks(budget):
                g, h = group.sums(kernel, table, w, clock, k0, k1)
                here, weights = group.scale(penalty), group.at(w, k0, k1)
                g = g / rows + 2 * penalty.l2 * here * weights
                h = h / rows + 2 * penalty.l2 * np.diag(here)
                step = solve(h, g)
                d[k0:k1] = np.where(np.isfinite(step), step, 0.0)
                part = float(np.sum(g * d[k0:k1]))
                decrement += part
                exact += part
                if group.quadratic:  # what the step lowers the objective by, where no line search measures it
                    drop += part - float(np.einsum('ki,kij,kj->', d[k0:k1], h, d[k0:k1])) / 2
            if group.quadratic and math.isfinite(drop) and drop >= 0:
                # the objective quadratic in the group's values: the full step's value is f − (gᵀd − ½dᵀHd), known
                # without a pass, and no higher than f
                group.move(w, d, 1.0)
                f, known = f - drop, False
                continue
            t = 1.0
            for _ in range(HALVINGS):
                trial = w.copy()
                group.move(trial, d, t)
                value = kernel_objective(loss_only, trial, penalty, rows)
                if value <= f:
                    w, f, known = trial, value, True
                    break
                t /= 2
        if it > 1:  # the sweep's step, taken further where that lowers the objective more (over-relaxation)
            trial = np.subtract(w, before, out=before)  # one copy: the sweep's start is not needed again
            trial *= reach
            trial += w
            value = kernel_objective(loss_only, trial, penalty, rows)
            if value < f:
                w, f, known, reach = trial, value, True, min(reach * GROW, MOST_REACH)
            else:
                reach = max(reach / 2, LEAST_REACH)
        history.append(f)
        clock.validate(w, f)
        clock.iteration(it, f)
        measure, converged = descent.judged(max(decrement, 0.0), f, descent.FLOOR * abs(start), rows)
        if converged and any(group.conjugate for group in groups):
            # conjugate gradients stopped at CG_RESIDUAL give a gᵀd below gᵀH⁻¹g: judged again, on tight solves at w
            decrement = exact + sum(tight_decrement(group, kernel, table, w, penalty, rows, clock)
                                    for group in groups if group.conjugate)
            measure, converged = descent.judged(max(decrement, 0.0), f, descent.FLOOR * abs(start), rows)
        if converged:
            stopped = 'optimum'
            break
        if descent.stalled(history, tolerance):
            stopped = 'tolerance'
            break
    if not known:  # the objective the fit reports is measured
        f = kernel_objective(loss_only, w, penalty, rows)
        if history:
            history[-1] = f
    measure, converged = descent.judged(max(decrement, 0.0), f, descent.FLOOR * abs(start), rows)
    return descent.Fit(w, f, history, len(history), clock.seconds(), converged, measure, stopped), start


def kernel_objective(loss_only, w, penalty, rows):
    return loss_only(w) / rows + penalty.value(w)
