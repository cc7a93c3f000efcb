"""The piecewise-linear losses ('quantile(τ)', 'absolute', 'hinge') of a model linear in its weights, as the linear
programme they are: pgad.train's optimizer 'interior_point', its default for them.

Each of these losses is, per row, ρ(r) = α·max(r, 0) + β·max(−r, 0) of a residual r = a − b·w affine in the weights
(LOSSES: quantile r = y − p, α = τ, β = 1 − τ; absolute α = β = 1; hinge r = 1 − y·p, α = 1, β = 0). Newton's Hessian
of such a loss is zero almost everywhere and L-BFGS stops on a kink; the linear programme has an exact optimum. The
design (b, a) of each row comes from pgad's own derivatives of the prediction p = c + x·w: x = ∂p/∂w, c = p(0), in
one pass of the python backend over the rows (design); the model is linear in its weights where no node of ∂p/∂w
depends on a weight (linear), which the DAG says exactly.

The objective mean ρ + l2·Σ w² + l1·Σ |w| (over the weights the penalty's mask names) times the rows is

  min Σ α·u + β·v + n·l2·wᵀMw + n·l1·Σ|w|   such that   B·w + u − v = a,  u, v ≥ 0,

l1 as a row of its own per weight (b = e_j, a = 0, α = β = n·l1). solve() runs Mehrotra's primal-dual
predictor-corrector (Koenker and Portnoy's Frisch–Newton for quantile regression): each iteration one factor of the
p × p weighted normal equations (BᵀQ⁻¹B + 2n·l2·M), equilibrated (the columns' units do not matter), solved for the
affine and the centring step; the dual d lies in [−β, α] and, with l2, Bᵀd = 2n·l2·Mw. It stops where the
complementarity gap (u·s + v·t) and the residuals of both feasibilities are below GAP relative to the objective: then
the objective is the optimum's to about that (converged); interrupts are checked between iterations and between
blocks of rows.

For a model the programme does not take (not linear in its weights, vectors, too many weights), and for a lambda loss
with kinks of its own, continued() smooths the loss's kinks (objective.smoothed) and shrinks the smoothing in stages,
each fitted by newton or lbfgs from the last one's weights.
"""
from dataclasses import dataclass

import numpy as np

from .. import loader, program, python_backend
from ..errors import PgadError
from ..lang import printer
from . import descent, objective

# name → (α, β) of its parameter, and the residual r = a − b·w of prediction p = c + x·w and label y, as (a, b)
LOSSES = {
    'quantile': (lambda tau: (tau, 1 - tau), lambda c, x, y: (y - c, x)),
    'absolute': (lambda _: (1.0, 1.0), lambda c, x, y: (y - c, x)),
    'hinge': (lambda _: (1.0, 0.0), lambda c, x, y: (1 - y * c, y[:, None] * x)),
}
GAP = 1e-12        # the relative gap and residuals at which solve() stops
CRITERION = 1e-9   # the relative gap and residuals at which a fit has converged (Fit.gradient_norm)
STEP = 0.99995     # the fraction of the way to the boundary each step goes
BLOCK_ROWS = 1 << 16  # rows per pass of the design's evaluation and the normal equations' sums, interrupts between
ITERATIONS = 200   # the cap on iterations left out: the optimum takes 8 to 30 (tests/test_piecewise.py)


@dataclass(frozen=True)
class Problem:
    """A model's prediction program (its outputs p and ∂p/∂w per weight element) and its loss's (α, β) and residual."""
    prediction: program.Program
    alpha: float
    beta: float
    residual: object   # (c, x, y) → (a, B)
    label: str


def takes(loss):
    """Is loss (as pgad.train stores it) one of LOSSES?"""
    return objective.base(loss) in LOSSES


def problem(goal, loss, label, names, shapes, limits):
    """The Problem of goal's model under loss, or None where the model is not linear in its weights (linear)."""
    kind, parameter = objective.named(loss)
    model = goal.model
    text = f'λ({printer.parameter(model.row)}, {printer.parameter(model.params)}) ' + \
        printer.to_lambda(model, model.root, printer.budget(limits))
    prediction = program.build(text, tuple(names), 'reverse', True, limits, shapes)
    if not linear(prediction):
        return None
    alpha, beta = LOSSES[kind][0](parameter)
    return Problem(prediction, alpha, beta, LOSSES[kind][1], label)


def linear(prediction):
    """Is the prediction affine in its weights: no node of its derivative by any weight depends on a weight?"""
    depends = prediction.graph.depends_on_weights()
    return all(not depends[i] for i in prediction.outputs[1:])


def refusal(loss, why):
    """The error of optimizer 'interior_point' where it does not apply: why says what is not so."""
    return PgadError('0A000', f'optimizer "interior_point" cannot train {why}',
                     detail="It solves the linear programme of loss 'quantile', 'absolute' or 'hinge' of a model "
                            'linear in its weights.',
                     hint="Leave optimizer out (the default smooths the loss where the programme does not apply), or "
                          "use optimizer 'lbfgs'." if takes(loss) else
                          "Leave optimizer out, or use optimizer 'lbfgs' or 'newton'.")


def check_memory(rows, p, memory_limit):
    """The error where the design (rows × p), its working copy and a dozen vectors of rows would pass memory_limit."""
    need = 8 * (rows * (2 * p + 14) + 4 * p * p)
    if need > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'optimizer "interior_point" needs {loader.megabytes(need)} for its '
                                              f'design, more than pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail=f'{rows} rows of {p} derivatives of the prediction, and its working vectors.',
                        hint="Train with optimizer => 'lbfgs', on fewer rows, or have a superuser raise "
                             'pgad.memory_limit.')


def design(problem, columns, rows, interrupts):
    """(a, B) of every row: the prediction's value at w = 0 and its derivatives, BLOCK_ROWS rows a pass; columns
    {name: array}, the label's among them."""
    prediction = problem.prediction
    p = len(prediction.weights)
    _, _, plan = python_backend.steps(prediction.graph, prediction.outputs, {c: c for c in prediction.columns},
                                      {w: k for k, w in enumerate(prediction.weights)})
    c, x = np.empty(rows), np.empty((rows, p))
    zero = np.zeros(p)
    for start in range(0, rows, BLOCK_ROWS):
        end = min(rows, start + BLOCK_ROWS)
        found = python_backend.evaluate(plan, {n: columns[n][start:end] for n in prediction.columns}, zero)
        values = [python_backend.as_rows(found[o], end - start) for o in prediction.outputs]
        c[start:end] = values[0]
        for k in range(p):
            x[start:end, k] = values[1 + k]
        interrupts()
    y = np.asarray(columns[problem.label], dtype=np.float64)
    return problem.residual(c, x, y)


def fit(problem, kernel, table, columns, start, names, iterations, penalty, clock, memory_limit, why=None):
    """(the descent.Fit, the starting objective) of the linear programme of table's rows (columns: their names): the
    objective checked finite at start (with why's explanation), the design, solve(); the objective at the weights
    found by the kernel, as every optimizer's."""
    p = len(start)
    check_memory(table.rows, p, memory_limit)
    start = np.asarray(start, dtype=np.float64)
    placed = descent.place(kernel, table)  # a GPU's columns, copied once
    sums = descent.evaluate(kernel, placed, start, clock.interrupts)
    descent.check_finite(sums, start, 1, names, 0.0, why)
    begun = sums[0] / table.rows + penalty.value(start)
    a, b = design(problem, {str(c): v for c, v in zip(columns, table.columns)}, table.rows,
                  clock.interrupts)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise PgadError('22003', 'the prediction or its derivatives are not finite on some row',
                        hint='Check that the model is defined on every row (ln and sqrt of the data, division).')
    mask = penalty.mask if penalty.mask is not None else np.ones(p)
    n = table.rows
    alpha, beta = np.full(n, problem.alpha), np.full(n, problem.beta)
    if penalty.l1:  # a row per weight the mask names: n·l1·|w_j|
        penalised = np.flatnonzero(mask)
        b = np.vstack([b, np.eye(p)[penalised]])
        a = np.concatenate([a, np.zeros(len(penalised))])
        alpha = np.concatenate([alpha, np.full(len(penalised), n * penalty.l1)])
        beta = np.concatenate([beta, np.full(len(penalised), n * penalty.l1)])
    ridge = 2 * n * penalty.l2 * mask

    def step(it, w, value):
        clock.rows += n
        clock.validate(w, value / n)
        clock.iteration(it, value / n)

    w, history, measure, stopped = solve(b, a, alpha, beta, ridge, iterations, step, clock.interrupts,
                                         descent.FLOOR * abs(begun) * n)
    history = [h / n for h in history]
    sums = descent.evaluate(kernel, placed, w, clock.interrupts)
    descent.check_finite(sums, w, len(history) + 1, names, 0.0, why)
    loss = sums[0] / n + penalty.value(w)
    converged = measure <= CRITERION
    result = descent.Fit(w, loss, history[:-1] + [loss] if history else [], len(history), clock.seconds(),
                         converged, measure, stopped)
    if not converged:
        clock.warning(*unconverged(result, iterations))
    return result, begun


def unconverged(result, iterations):
    """(message, hint) of the WARNING of a linear programme stopped short of its optimum."""
    measure = f'its relative gap {result.gradient_norm:.3g} is above {CRITERION:g}'
    if result.stopped == 'cap':
        return (f'optimizer "interior_point" did not converge in its {iterations} iterations: {measure}',
                f'Train with iterations => {max(10 * iterations, 1000)}, or leave iterations out.')
    return (f'optimizer "interior_point" stopped short of the optimum: {measure}',
            'The columns may be collinear, or too far apart in scale for float64: check the model and the data.')


def objective_of(b, a, alpha, beta, ridge, w):
    """Σ ρ(a − B·w) + ½·wᵀ·diag(ridge)·w."""
    return _value(a - b @ w, alpha, beta, ridge, w)


def solve(b, a, alpha, beta, ridge, iterations, each, interrupts, floor=0.0):
    """(w, the objective after each iteration, the relative gap at w, why it stopped: 'optimum', 'cap' or 'stalled')
    of min Σ ρ(a − B·w) + ½·wᵀ·diag(ridge)·w by Mehrotra's predictor-corrector; each(it, w, objective) after each
    iteration, interrupts() between blocks of rows; the gap is relative to |objective| + floor. An objective of 0
    is the optimum (none is lower): separable labels under 'hinge', whose dual has no interior. Where the iterates
    stop being finite (such a dual, near its boundary), the lowest objective's weights, stopped 'stalled'."""
    m, p = b.shape
    w = _normal_solve(b, np.ones(m), ridge, b.T @ a if m else np.zeros(p), interrupts)
    r = a - b @ w
    shift = max(float(np.mean(np.abs(r))), 1e-10 * float(np.max(np.abs(a), initial=0.0)), 1e-300)
    u, v = np.maximum(r, 0) + shift, np.maximum(-r, 0) + shift
    d = (alpha - beta) / 2
    size = np.abs(b)  # for the dual residual's scale (_measure)
    history, stopped, best = [], 'cap', (np.inf, w, np.inf)
    for it in range(1, iterations + 2):  # the last pass judges the weights of the cap's iteration
        interrupts()
        bw = b @ w
        r = a - bw
        s, t = alpha - d, beta + d
        primal, dual, gap = r - u + v, b.T @ d - ridge * w, u @ s + v @ t
        value = _value(r, alpha, beta, ridge, w)
        with np.errstate(all='ignore'):
            measure = _measure(size, a, bw, alpha, beta, ridge, w, d, primal, dual, gap, value, floor)
        if it > 1:
            history.append(value)
            each(it - 1, w, value)
        if value <= 0:
            measure = 0.0
        best = min(best, (value, w, measure), key=lambda found: found[0])
        if measure <= GAP:
            stopped = 'optimum'
            break
        if it > iterations:
            break
        with np.errstate(all='ignore'):  # an iterate at the boundary (separable hinge): found below, not finite
            q = u / s + v / t
            factor = _factor(b, 1 / q, ridge, interrupts)
            if factor is None:
                stopped = 'stalled'
                break
            mu = gap / (2 * len(u))

            def direction(ru, rv):
                r1 = primal - ru / s + rv / t
                dw = _solved(factor, dual + b.T @ (r1 / q))
                dd = (r1 - b @ dw) / q
                return dw, (ru + u * dd) / s, (rv - v * dd) / t, dd

            dw, du, dv, dd = direction(-u * s, -v * t)  # affine: σ = 0
            ap, ad = _steps(u, v, s, t, du, dv, dd, ridge.any())
            affine = (u + ap * du) @ (s - ad * dd) + (v + ap * dv) @ (t + ad * dd)
            sigma = (affine / gap) ** 3
            dw, du, dv, dd = direction(sigma * mu - u * s - du * -dd, sigma * mu - v * t - dv * dd)
            ap, ad = _steps(u, v, s, t, du, dv, dd, ridge.any())
            ap, ad = min(1.0, STEP * ap), min(1.0, STEP * ad)
            w, u, v, d = w + ap * dw, u + ap * du, v + ap * dv, d + ad * dd
        if not all(np.all(np.isfinite(x)) for x in (w, u, v, d)):
            stopped = 'stalled'
            break
    if stopped == 'stalled':
        _, w, measure = best
    return w, history, float(measure), stopped


def _value(r, alpha, beta, ridge, w):
    """objective_of, given the residuals r = a − B·w."""
    return float(alpha @ np.maximum(r, 0) + beta @ np.maximum(-r, 0) + 0.5 * (ridge * w) @ w)


def _measure(size, a, bw, alpha, beta, ridge, w, d, primal, dual, gap, value, floor=0.0):
    """The largest of the relative duality gap (the objective at w less the dual's at d, and the complementarity),
    the primal residual relative to the residuals' scale and the dual residual relative to |B|ᵀ|d|, each weight's."""
    scale = abs(value) + floor + 1e-300
    clipped = np.clip(d, -beta, alpha)
    lower = a @ clipped - 0.5 * (ridge * w) @ w
    relative_gap = max(abs(value - lower), gap) / scale
    scale_r = float(np.max(np.abs(a), initial=0.0)) + float(np.max(np.abs(bw), initial=0.0)) + 1e-300
    seen = size.T @ np.abs(d) + np.abs(ridge * w) + 1e-300
    return max(relative_gap, float(np.max(np.abs(primal), initial=0.0)) / scale_r,
               float(np.max(np.abs(dual) / seen, initial=0.0)))


def _steps(u, v, s, t, du, dv, dd, together):
    """The longest steps (primal, dual) at most 1 that keep u, v and s = α − d, t = β + d positive; the least of the
    two for both where the ridge ties w to d."""
    def longest(x, dx):
        falling = dx < 0
        return min(1.0, float(np.min(-x[falling] / dx[falling]))) if falling.any() else 1.0
    ap = min(longest(u, du), longest(v, dv))
    ad = min(longest(s, -dd), longest(t, dd))
    return (min(ap, ad),) * 2 if together else (ap, ad)


def _factor(b, weight, ridge, interrupts):
    """(the Cholesky factor of the equilibrated BᵀWB + diag(ridge), the equilibration's root), BLOCK_ROWS rows a sum;
    a ridge of 1e-14, 1e-13, … on the unit diagonal where the factor would be singular (collinear weights); None
    where none is found (the sums are not finite)."""
    p = b.shape[1]
    h = np.diag(ridge).astype(np.float64)
    for start in range(0, b.shape[0], BLOCK_ROWS):
        part = b[start:start + BLOCK_ROWS]
        h += part.T @ (weight[start:start + BLOCK_ROWS, None] * part)
        interrupts()
    diagonal = np.abs(np.diag(h))
    root = np.sqrt(np.where(np.isfinite(diagonal) & (diagonal > 0), diagonal, 1.0))
    scaled = h / np.outer(root, root)
    lift = 0.0
    for _ in range(30):
        try:
            return np.linalg.cholesky(scaled + lift * np.eye(p)), root
        except np.linalg.LinAlgError:
            lift = 1e-14 if lift == 0 else lift * 10
    return None


def _solved(factor, rhs):
    """The solution of (BᵀWB + ridge)·x = rhs by factor (_factor's)."""
    lower, root = factor
    return np.linalg.solve(lower.T, np.linalg.solve(lower, rhs / root)) / root


def _normal_solve(b, weight, ridge, rhs, interrupts):
    """(BᵀWB + diag(ridge))⁻¹·rhs: the least-squares start."""
    factor = _factor(b, weight, ridge, interrupts)
    if factor is None:
        raise PgadError('22003', 'the design of the linear programme is not finite',
                        hint='Check that the model is defined on every row, and the columns within float64.')
    return _solved(factor, rhs)


# --- smoothing with continuation: any model --------------------------------------------------------------------------
SHRINK = 10.0    # each stage's width μ is the last's over SHRINK
STAGES = 16      # at most: from μ₀ = the mean loss at the start down to 1e-15 of it
EXCESS = {'absolute': 2.0}  # the smoothed loss lies within EXCESS·μ·ln 2 above the loss (1 but for abs)


def continued(loss, smooth_columns, smooth, kernel, table, columns, start, names, optimizer, iterations, penalty,
              clock, why=None, blocks=None):
    """(the descent.Fit, the starting objective) of a piecewise-linear loss of any model by smoothing with
    continuation: the loss smoothed by a width μ (objective.smoothed, its kernel smooth reading smooth_columns, μ as
    the column objective.SMOOTHING), fitted by optimizer ('newton' or 'lbfgs') warm-started from the last stage's
    weights, μ shrunk SHRINK times a stage from the mean loss at the start until the smoothing's excess is below
    CRITERION of the objective: for a named loss its bound, EXCESS·μ·ln 2 a row; for a lambda, whose kinks may be
    scaled, the excess measured at the stage's weights, and the objective's change since the last stage. Converged
    where the last stage's fit has converged (descent.judged) and those are below the criterion: a stationary point
    of the loss to that precision (its optimum where the objective is convex in the weights). The objective is the
    loss's, evaluated by kernel."""
    n = table.rows
    w = np.asarray(start, dtype=np.float64)
    placed = descent.place(kernel, table)  # a GPU's columns, copied once
    sums = descent.evaluate(kernel, placed, w, clock.interrupts)
    descent.check_finite(sums, w, 1, names, 0.0, why)
    begun = sums[0] / n + penalty.value(w)
    mu = max(abs(sums[0] / n), np.finfo(np.float64).tiny)
    bound = EXCESS.get(objective.base(loss), 1.0) * np.log(2) if objective.base(loss) else None
    at = {str(c): k for k, c in enumerate(columns)}
    history, count, warned, value = [], 0, [], None
    warning = clock.warning
    clock.warning = lambda message, hint: warned.append((message, hint))  # a stage's: said once, of the last
    try:
        for stage in range(STAGES):
            warned.clear()
            widths = np.full(n, mu)
            stage_table = type(table)([widths if str(c) == objective.SMOOTHING else table.columns[at[str(c)]]
                                       for c in smooth_columns], n, table.skipped)
            fit = descent.fit(smooth, stage_table, w, names, optimizer, 0.0, iterations, penalty=penalty,
                              clock=clock, why=why, blocks=blocks)
            w, count, history = fit.weights, count + fit.iterations, history + fit.history
            sums = descent.evaluate(kernel, placed, w, clock.interrupts)
            last, value = value, sums[0] / n + penalty.value(w)
            left = bound * mu if bound is not None else max(abs(fit.loss - value), abs(value - last) if stage else
                                                             np.inf)
            left = float(left / abs(value)) if value else 0.0
            if left <= CRITERION:
                break
            mu /= SHRINK
    finally:
        clock.warning = warning
    descent.check_finite(sums, w, count + 1, names, 0.0, why)
    converged = bool(fit.converged) and left <= CRITERION
    result = descent.Fit(w, value, history[:-1] + [value] if history else [], count, clock.seconds(), converged,
                         float(max(fit.gradient_norm or 0.0, left)), fit.stopped)
    if not converged:
        clock.warning(*(warned[-1] if warned else (
            f'the smoothing of loss "{loss}" stopped at width {mu:.3g}, short of the optimum',
            "Train with optimizer => 'lbfgs' and more iterations, or check the model and the data.")))
    return result, begun
