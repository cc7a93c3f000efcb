"""The training loops on loaded columns: pgad.gradient_descent's batch gradient descent and pgad.train's optimizers.

Every step is one call of the kernel (loss and gradient fused in one pass over the rows it is given): over all the
rows for 'gd' and 'lbfgs', over a mini-batch of a shuffled copy of the columns for 'sgd', 'momentum' and 'adam'.
Python runs per step, never per row. Between steps the loop lets the server check for interrupts, so
statement_timeout and pg_cancel_backend stop it, and reports progress. NaN or infinity in the loss, the gradient or
the weights stops it with an error. A loss that stays finite but grows past GROWTH times its starting value's
magnitude gets one WARNING per fit (Divergence), and the training goes on.

The objective is the mean loss over the rows plus l2·Σ w² and l1·Σ |w| over the weights the penalty's mask names.
l2 is a term of the gradient; l1 is applied as a proximal step (soft thresholding by the step's size, so that a
weight that l1 drives to zero stays exactly 0), which L-BFGS, a method for smooth objectives, does not take.

Whatever ends the loop (its cap, a line search that finds no lower objective, tolerance, or the optimizer's own stop
at the rounding of the sums), fit() then judges the weights by one scale-free criterion (CRITERION, judged): the
Newton decrement relative to the objective, in the optimizer's scaled coordinates. Its verdict and measure go into
the Fit (converged, gradient_norm); where it fails, a WARNING says why and which option to change (unconverged).
"""
import time
import warnings
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PgadError
from ..lang import hessian as second

CHUNK_ROWS = 1 << 20  # rows per kernel call on big tables: between calls, the server may cancel (and an llvm
#                       kernel lets it between the pieces of a call, jit/threads.py, however dear its rows)
OPTIMIZERS = ('gd', 'sgd', 'momentum', 'adam', 'lbfgs', 'newton', 'interior_point')  # the last: piecewise.py's
MINI_BATCH = ('sgd', 'momentum', 'adam')  # the ones that step once per mini-batch of batch_size shuffled rows
BETA = 0.9                                # momentum's
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8  # Adam's, as in its paper and every framework
MEMORY = 10                               # L-BFGS's curvature pairs
ARMIJO = 1e-4                             # the line search's sufficient decrease
HALVINGS = 60                             # the line search's steps, each half the last, before it gives up
GROWTH = 1e6                              # a rise of the loss past GROWTH·|starting loss| is divergence: a WARNING
# Convergence (judge): at the final weights w, with f the objective, f₀ the starting one, g the full-batch gradient
# and M the optimizer's scaling (newton: its damped, equilibrated Hessian; the others: the Hessian's diagonal, from
# differences of the gradient), the measure r = gᵀM⁻¹g / (|f| + FLOOR·|f₀|), the Newton decrement relative to
# the objective (about twice the objective's excess over its minimum, relative); converged when r ≤ CRITERION, or
# NOISE·(ε·√rows)² where the sums' rounding is larger (ε the kernel's precision: float32 on a GPU).
CRITERION = 1e-10
FLOOR = 1e-8
NOISE = 100.0
DIFFERENCE = 1e-3      # a gradient difference's step: about DIFFERENCE² of the objective in the quadratic model
SCALED_BLOCKS = 200    # weights (blocks) beyond which L-BFGS is not scaled, and the criterion takes M = I
REFINEMENTS = 3        # newton's full steps judged by their decrement, not the objective (iterative refinement)
PIVOT = 1e-13          # the least squared pivot of the equilibrated Hessian's Cholesky factor newton solves with


@dataclass
class Fit:
    weights: np.ndarray  # the fitted weights, in the order of names
    loss: float          # the objective at them
    history: list        # the objective after each iteration (epoch), history[-1] == loss
    iterations: int      # the iterations run: fewer than asked when tolerance (or L-BFGS) stopped early
    seconds: float       # how long the loop took
    converged: bool = None        # whether the convergence criterion held at weights (None: not judged)
    gradient_norm: float = None   # the criterion's measure r at weights (judge)
    stopped: str = None           # why the loop ended: 'cap', 'search', 'tolerance' or 'optimum'


# --- the step rules: w, the gradient g → the next w and the size of the step each weight took (for l1) ---------
class Plain:
    """gd and sgd: w ← w − learning_rate·g."""
    def __init__(self, learning_rate, n):
        self.rate = learning_rate

    def step(self, w, g):
        return w - self.rate * g, self.rate


class Momentum:
    """Heavy-ball momentum: v ← β·v + g, w ← w − learning_rate·v."""
    def __init__(self, learning_rate, n):
        self.rate, self.v = learning_rate, np.zeros(n)

    def step(self, w, g):
        self.v = BETA * self.v + g
        return w - self.rate * self.v, self.rate


class Adam:
    """Adam: steps of learning_rate·m̂/(√v̂ + ε), m and v the moving averages of g and g², bias-corrected."""
    def __init__(self, learning_rate, n):
        self.rate, self.m, self.v, self.t = learning_rate, np.zeros(n), np.zeros(n), 0

    def step(self, w, g):
        self.t += 1
        self.m = BETA1 * self.m + (1 - BETA1) * g
        self.v = BETA2 * self.v + (1 - BETA2) * g * g
        size = self.rate / (np.sqrt(self.v / (1 - BETA2 ** self.t)) + EPSILON)
        return w - size * (self.m / (1 - BETA1 ** self.t)), size


STEPS = {'gd': Plain, 'sgd': Plain, 'momentum': Momentum, 'adam': Adam}


@dataclass
class Penalty:
    """l2·Σ w² + l1·Σ |w| over the weights mask names (1.0 for those, 0.0 for the others)."""
    l1: float = 0.0
    l2: float = 0.0
    mask: np.ndarray = None

    def value(self, w):
        if not (self.l1 or self.l2):
            return 0.0
        return float(self.l2 * np.sum(self.mask * w * w) + self.l1 * np.sum(self.mask * np.abs(w)))

    def gradient(self, g, w):
        """g plus the l2 term's gradient (l1's is a proximal step: shrink)."""
        return g + 2 * self.l2 * self.mask * w if self.l2 else g

    def shrink(self, w, size):
        """The proximal step of l1 after a step of `size`: soft thresholding towards 0."""
        if not self.l1:
            return w
        shrunk = np.sign(w) * np.maximum(np.abs(w) - size * self.l1, 0.0)
        return np.where(self.mask > 0, shrunk, w)


@dataclass
class Bounds:
    """Each weight's interval [lower, upper] (−∞ and ∞ where it has none; arrays of the weights' shape, or P × 1 for
    lockstep's P × G): every optimizer keeps the weights in it (a line search goes no further than the first bound,
    reach; a fixed step is clipped, clip), and a weight at a bound whose gradient points out of the interval, or
    whom the direction would push out, is held there: its part of the gradient does not count in the direction,
    the stopping rules or the convergence criterion (the KKT conditions)."""
    lower: np.ndarray
    upper: np.ndarray

    def clip(self, w):
        return np.minimum(np.maximum(w, self.lower), self.upper)

    def held(self, w, g):
        """The weights a bound holds: at their lower bound with a positive gradient, or at their upper with a
        negative one (the descent direction −g leaves the interval), and those whose interval is one value (fixed:
        families.py's choice of a family among the candidates of 'auto')."""
        return (w <= self.lower) & (g > 0) | (w >= self.upper) & (g < 0) | self.fixed()

    def fixed(self):
        """The weights whose interval is one value, in the bounds' shape: held wherever they are, never moved."""
        return self.lower == self.upper

    def pushed(self, w, d):
        """The weights at a bound that the direction d would push out of it."""
        return (w <= self.lower) & (d < 0) | (w >= self.upper) & (d > 0)

    def free(self, w, g):
        """g without the parts of the weights a bound holds: the projected gradient, 0 at a KKT point."""
        return np.where(self.held(w, g), 0.0, g)

    def scaled(self, scale):
        """The bounds of u = w / scale (scale > 0)."""
        return Bounds(self.lower / scale, self.upper / scale)

    def unscaled(self, u, scale):
        """w = scale·u from u within self.scaled(scale): at a bound where u is at its scaled one (exactly, so that the
        weight is held there and stored within its interval)."""
        return np.where(u <= self.lower / scale, self.lower, np.where(u >= self.upper / scale, self.upper, scale * u))

    def reach(self, w, d):
        """The step t (≥ 0, along d from w, axis 0 the weights) at which the first weight reaches its bound, a
        hair past so that clip puts it there exactly; ∞ where none does."""
        with np.errstate(divide='ignore', invalid='ignore'):
            t = np.where(d > 0, (self.upper - w) / d, np.where(d < 0, (self.lower - w) / d, np.inf))
        t = np.where(np.isnan(t), np.inf, t)
        return np.min(t, axis=0) * (1 + 1e-12) if len(t) else np.inf

    def outward(self, w, h):
        """The differences' steps h from w, turned back where w + h would leave the interval (a weight at its upper
        bound is differenced below it)."""
        return np.where(w + h > self.upper, -h, h)


def unbounded(n):
    """The Bounds of n weights that have none."""
    return Bounds(np.full(n, -np.inf), np.full(n, np.inf))


def bounded(given, spans, start, names):
    """The Bounds of the weight vector start (its elements named names; or P × G, a column a group's) whose weights
    take spans ((name, shape, slice), program.spans), from arguments.bounds' {weight: (lower, upper)}, each an
    array's elements alike; None where none is given. The error where a starting weight lies outside its bounds."""
    if not given:
        return None
    bounds = unbounded(len(start))
    for name, _, at in spans:
        if name in given:
            bounds.lower[at], bounds.upper[at] = given[name]
    begun = np.asarray(start, dtype=np.float64).reshape(len(bounds.lower), -1)  # a column a group's, or one
    outside = np.flatnonzero(np.any((begun < bounds.lower[:, None]) | (begun > bounds.upper[:, None]), axis=1))
    if len(outside):
        k = int(outside[0])
        value = float(begun[k][(begun[k] < bounds.lower[k]) | (begun[k] > bounds.upper[k])][0])
        raise PgadError('22023', f'the starting value {value:g} of weight "{names[k]}" lies outside its bounds',
                        detail=f'Its bounds are [{bounds.lower[k]:g}, {bounds.upper[k]:g}].',
                        hint='Start it within its bounds.')
    return bounds


def stored_bounds(limits):
    """arguments.bounds' {weight: (lower, upper)} as options record them: JSON, null for an open side."""
    return {n: [None if np.isinf(lo) else lo, None if np.isinf(hi) else hi] for n, (lo, hi) in limits.items()}


def at_bounds(limits, fitted):
    """The names of the fitted weights ({name: value}, an element's name for an array's) that sit at a bound."""
    if not limits:
        return []
    out = []
    for name, value in fitted.items():
        base = name.split('[')[0]
        if base in limits and value in limits[base]:
            out.append(name)
    return out


class DivergenceWarning(UserWarning):
    """A loss that grows by orders of magnitude; hint says what to do (server.entry shows the message alone)."""
    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


def python_warning(message, hint):
    """Clock's warning outside the server: a Python warning (DivergenceWarning)."""
    warnings.warn(DivergenceWarning(message, hint), stacklevel=2)


class Clock:
    """Interrupt checks every `check` seconds, and progress(message) every `every` seconds, or every
    `every_iterations` iterations when that is more than 0; the rows the kernel ran in the iterations reported
    (every call's, mini-batches, line search and epoch-end passes alike), for rows/s; warning(message, hint) for a
    loss that diverges (Divergence), and unconverged(message, hint) for a fit that did not converge (warning's by
    default: a call of many groups counts them in one, tally.py)."""
    def __init__(self, interrupts, progress, iterations, every=1.0, check=0.01, every_iterations=0, warning=None,
                 unconverged=None):
        self.interrupts, self.progress, self.iterations = interrupts, progress, iterations
        self.warning = warning or python_warning
        self.unconverged = unconverged  # (message, hint) of a fit judged not converged; warning where None
        self.every, self.check, self.every_iterations = every, check, every_iterations
        self.started = self.reported = self.checked = time.monotonic()
        self.rows = 0
        self.at = 1  # the iteration running: the one after the last reported
        self.watch = None  # validation.Watch: given the weights and the objective after each iteration

    def poll(self, now=None):
        """Between kernel calls: check for interrupts once `check` seconds have passed since the last check."""
        now = time.monotonic() if now is None else now
        if now - self.checked >= self.check:
            self.interrupts()
            self.checked = now
        return now

    def iteration(self, it, loss):
        """After iteration it, whose loss is loss: the check, and a progress report when one is due."""
        now = self.poll()
        self.at = it + 1
        due = it % self.every_iterations == 0 if self.every_iterations > 0 else now - self.reported >= self.every
        if due:
            seconds = now - self.started
            rate = f'{self.rows / seconds:.0f}' if seconds > 0 else '-'
            self.progress(f'iteration {it} of {self.iterations}, loss {loss:.6g}, {seconds:.1f} s, {rate} rows/s')
            self.reported = now

    def seconds(self):
        return time.monotonic() - self.started

    def validate(self, w, loss):
        """After an iteration whose weights are w and objective loss: the validation loss, when there is a watch
        (validation.Watch, which may end the training)."""
        if self.watch is not None:
            self.watch(w, loss)


def run(kernel, table, weights, learning_rate, iterations, names, interrupts, progress, every=1.0, check=0.01,
        why=None, warning=None):
    """pgad.gradient_descent's loop, fit's 'gd': (fitted weights, loss at them, iterations run)."""
    fitted = fit(kernel, table, weights, names, 'gd', learning_rate, iterations,
                 clock=Clock(interrupts, progress, iterations, every, check, warning=warning), why=why, judge=False)
    return fitted.weights, fitted.loss, fitted.iterations


def fit(kernel, table, weights, names, optimizer='gd', learning_rate=0.05, iterations=100, batch_size=256, seed=None,
        tolerance=0.0, penalty=Penalty(), clock=None, why=None, judge=True, blocks=None, precision='float64',
        bounds=None, loss=None):
    """The Fit of the kernel's objective over table from weights (a vector in the order of names) by optimizer.

    tolerance > 0 stops after an iteration that improved the objective by less than tolerance relative to the one
    before; clock (a Clock) checks interrupts, reports progress and warns of divergence (Divergence); why(w, k), if
    given, explains a sum k that is not finite at the starting weights (check_finite). With no weight to fit (a model
    that reads none, R's glm of y ~ 0 + offset(x)) no optimizer has anything to do: the objective once, 0
    iterations. judge: the Fit's converged and gradient_norm by the criterion (judged), and a WARNING through
    clock.warning where it does not hold; blocks (index arrays) are the weights whose curvatures the gradient's
    differences may take together (a categorical weight's entries: one category a row), each weight alone by
    default; precision is the kernel's ('float32' on a GPU: more rounding in its sums); bounds (Bounds) the interval
    of each weight, None for none: the weights start within it (arguments.bounds checks); loss the base name of the
    loss, for the hint of a fit that did not converge (unconverged)."""
    w = np.array(weights, dtype=np.float64)
    if penalty.mask is None:
        penalty = Penalty(penalty.l1, penalty.l2, np.ones(len(w)))
    clock = clock or Clock(lambda: None, lambda message: None, iterations)
    placed = place(kernel, table)
    if hasattr(kernel, 'watch'):  # a sharded table's kernel: its shards' errors name the iteration
        kernel.watch(clock)
    if not len(w):
        sums = evaluate(kernel, placed, w, clock.interrupts)
        check_finite(sums, w, 1, names, 0.0, why)
        loss = sums[0] / table.rows + penalty.value(w)
        return Fit(w, loss, [], 0, clock.seconds(), True if judge else None, 0.0 if judge else None, 'optimum')
    blocks = [np.array([i]) for i in range(len(w))] if blocks is None else blocks
    decrement, start = None, None
    if optimizer == 'lbfgs':
        result, start = _lbfgs(kernel, placed, w, names, iterations, tolerance, penalty, clock, why, blocks, bounds)
    elif optimizer == 'newton':
        result, start, decrement = _newton(kernel, placed, w, names, iterations, tolerance, penalty, clock, why,
                                           bounds)
    else:
        rule = STEPS[optimizer](learning_rate, len(w))
        clip = None if bounds is None else bounds.clip
        if optimizer in MINI_BATCH and batch_size < table.rows and iterations > 0:
            result = _mini_batches(kernel, table, placed, w, names, rule, learning_rate, iterations, batch_size,
                                   np.random.default_rng(seed), tolerance, penalty, clock, why, clip)
        else:
            result = _full_batches(kernel, placed, w, names, rule, learning_rate, iterations, tolerance, penalty,
                                   clock, why, clip)
    if not judge:
        return result
    objective = _objective(kernel, placed, penalty, clock)
    if start is None:
        start = objective(w)[1]
    floor = FLOOR * abs(start)
    if decrement is None:  # the gradient at the fitted weights (what bounds leave), scaled by the Hessian's diagonal
        _, f, g = objective(result.weights)
        d = curvature(objective, result.weights, f, g, blocks, floor, bounds)
        g = g if bounds is None else bounds.free(result.weights, g)
        decrement = float(g @ (g / d))
    measure, converged = judged(decrement, result.loss, floor, table.rows, precision)
    result = replace(result, converged=converged, gradient_norm=measure)
    if not converged:
        (clock.unconverged or clock.warning)(*unconverged(optimizer, result, iterations, penalty, loss))
    return result


def judged(decrement, f, floor, rows, precision='float64'):
    """(r, converged) of a fit whose objective is f, whose gradient g gives decrement = gᵀM⁻¹g: r = decrement /
    (|f| + floor), converged where r ≤ CRITERION, or NOISE·(ε·√rows)² where the sums' rounding is larger."""
    scale = abs(f) + floor
    r = decrement / scale if scale > 0 else 0.0 if decrement == 0 else float('inf')
    return float(r), bool(r <= threshold(rows, precision))


def threshold(rows, precision='float64'):
    """The criterion's bound on r over `rows` rows summed at `precision`."""
    eps = float(np.finfo(np.float32 if precision == 'float32' else np.float64).eps)
    return max(CRITERION, NOISE * eps * eps * rows)


# The named losses whose objective may have no minimum for the labels' sake: separated classes (logistic, softmax,
# hinge), a category of zero counts (poisson). For the others, a weight that runs off has no minimum of its own.
SEPARABLE = ('logistic', 'softmax', 'hinge', 'poisson')


def unconverged(optimizer, result, iterations, penalty, loss=None):
    """(message, hint) of the WARNING of a fit that did not converge: why it stopped, and what to do. loss (its
    base name, objective.base; None where it is not known) says which cause of no minimum the hint names:
    separated labels for SEPARABLE, a weight that runs off (bounds) for the others."""
    separable = loss is None or loss in SEPARABLE
    nowhere = ('no minimum (separated labels)' if separable else
               'no minimum within the weights\' range (a weight that runs off: give it bounds => '
               '\'{"w": [lower, upper]}\')')
    measure = f'its gradient measure {result.gradient_norm:.3g} is above the criterion\'s bound'
    if result.stopped == 'cap':
        message = f'optimizer "{optimizer}" did not converge in its {iterations} iterations: {measure}'
    elif result.stopped == 'tolerance':
        message = f'tolerance stopped optimizer "{optimizer}" before it converged: {measure}'
    elif result.stopped == 'search':
        message = f'optimizer "{optimizer}" found no lower objective along its direction before it converged: ' \
                  f'{measure}'
    else:
        message = f'optimizer "{optimizer}" did not converge: {measure}'
    more = f'iterations => {max(10 * iterations, 1000)}'
    if optimizer not in ('lbfgs', 'newton'):
        hint = (f"l1 takes {optimizer}'s proximal steps, which converge slowly: train with {more}, or with l2 instead "
                'of l1 and the optimizer left out.' if penalty.l1 else
                f'Leave optimizer and learning_rate out (the default converges on columns of any scale), or train '
                f'with {more}.')
    elif result.stopped == 'search':
        hint = (f"The objective may have {nowhere} or be flat along some weights (collinear "
                "columns); check the model and the data, or add a small l2" +
                (", or try optimizer => 'newton'." if optimizer == 'lbfgs' else '.'))
    elif optimizer == 'lbfgs':
        hint = f"Train with {more}, or with optimizer => 'newton' (at most 300 weights) or standardize => true."
    else:
        hint = f'Train with {more}; a model that needs many may have {nowhere}.'
    if result.stopped == 'tolerance':
        hint = 'Train with a smaller tolerance, or none. ' + hint
    return message, hint


def _objective(kernel, table, penalty, clock):
    """objective(at): (the kernel's sums at the weights at, the objective, its gradient), over all of table's rows;
    each call lets the server check for interrupts (the curvature's passes run between iterations)."""
    def objective(at):
        sums = evaluate(kernel, table, at, clock.interrupts)
        clock.rows += table.rows
        clock.poll()
        return sums, sums[0] / table.rows + penalty.value(at), penalty.gradient(sums[1:len(at) + 1] / table.rows, at)
    return objective


def curvature(objective, w, f, g, blocks, floor, bounds=None):
    """The Hessian's diagonal at w (positive: its magnitude), from differences of the gradient g along each block
    of weights (a block's weights together: blocks whose weights no row reads together have a diagonal Hessian),
    each step h_i first DIFFERENCE·max(|w_i|, 1), then DIFFERENCE·√((|f| + floor)/D_i) by the first round's D (a
    change of about DIFFERENCE² of the objective along each weight: exact for a quadratic, and far above the
    gradient's rounding); ones where the blocks are more than SCALED_BLOCKS (too many passes over the rows). With
    bounds, a weight's step is turned back where it would leave them (Bounds.outward)."""
    if len(blocks) > SCALED_BLOCKS:
        return np.ones(len(w))
    h = DIFFERENCE * np.maximum(np.abs(w), 1.0)
    for _ in range(2):
        h = h if bounds is None else bounds.outward(w, h)
        d = np.zeros(len(w))
        for block in blocks:
            at = w.copy()
            at[block] += h[block]
            with np.errstate(all='ignore'):
                moved = objective(at)[2]
                d[block] = (moved[block] - g[block]) / h[block]
        d = _positive(d)
        h = DIFFERENCE * np.sqrt((abs(f) + floor) / d)
        h = np.where(np.isfinite(h) & (h > 0), h, 1.0)
    return d


def _positive(d):
    """|d|, where an entry is 0 or not finite (no curvature along that weight) the geometric mean of the others."""
    d = np.abs(d)
    good = np.isfinite(d) & (d > 0)
    fill = float(np.exp(np.mean(np.log(d[good])))) if good.any() else 1.0
    return np.where(good, d, fill)


def place(kernel, table):
    """table with its columns where the kernel reads them: copied to the GPU once for the whole fit by a cuda
    kernel (kernel.place), the arrays themselves for the others."""
    if not hasattr(kernel, 'place'):
        return table
    return replace(table, columns=kernel.place(table.columns))


def _full_batches(kernel, table, w, names, rule, learning_rate, iterations, tolerance, penalty, clock, why, clip=None):
    """One step per iteration over all the rows. The objective at the weights of step k is known when iteration
    k + 1 evaluates there, so the history runs one behind, and the last entry is an evaluation after the loop."""
    history, divergence = [], Divergence(learning_rate, clock.warning)
    for it in range(1, iterations + 1):
        sums = evaluate(kernel, table, w, clock.interrupts)
        check_finite(sums, w, it, names, learning_rate, why)
        loss = sums[0] / table.rows + penalty.value(w)
        divergence.see(loss, it)
        if it > 1:
            history.append(loss)
            clock.validate(w, loss)
            if stalled(history, tolerance):
                return Fit(w, loss, history, it - 1, clock.seconds(), stopped='tolerance')
        w = _step(rule, penalty, w, sums, table.rows, clip)
        clock.rows += table.rows
        clock.iteration(it, loss)
    final = evaluate(kernel, table, w, clock.interrupts)  # the loss at the weights of the last step: iteration n + 1's
    check_finite(final, w, iterations + 1, names, learning_rate, why)
    loss = final[0] / table.rows + penalty.value(w)
    divergence.see(loss, iterations + 1)
    if iterations:
        clock.validate(w, loss)
    return Fit(w, loss, history + [loss] if iterations else [], iterations, clock.seconds(), stopped='cap')


def _mini_batches(kernel, table, placed, w, names, rule, learning_rate, iterations, batch_size, rng, tolerance,
                  penalty, clock, why, clip=None):
    """Epochs (one at least) of mini-batch steps: each epoch shuffles the rows (one gather per column of table) and
    steps once per slice of batch_size rows; then one pass over all the rows (placed) gives the objective at the
    epoch's weights, for the
    history, the tolerance and the progress report (a pass costs less than an epoch's many kernel calls). The
    first mini-batch's loss stands for the starting loss, to watch for divergence."""
    rows, history, divergence = table.rows, [], Divergence(learning_rate, clock.warning)
    for epoch in range(1, iterations + 1):
        order = rng.permutation(rows)
        shuffled = [column[order] for column in table.columns]
        for start in range(0, rows, batch_size):
            end = min(start + batch_size, rows)
            sums = kernel([column[start:end] for column in shuffled], end - start, w)
            check_finite(sums, w, epoch, names, learning_rate, why, at_start=epoch == 1 and start == 0)
            if epoch == 1 and start == 0:
                divergence.see(sums[0] / (end - start) + penalty.value(w), 1)
            w = _step(rule, penalty, w, sums, end - start, clip)
            clock.rows += end - start
            clock.poll()
        sums = evaluate(kernel, placed, w, clock.interrupts)
        check_finite(sums, w, epoch + 1, names, learning_rate, why)
        clock.rows += rows
        history.append(sums[0] / rows + penalty.value(w))
        clock.validate(w, history[-1])
        divergence.see(history[-1], epoch)
        clock.iteration(epoch, history[-1])
        if stalled(history, tolerance):
            return Fit(w, history[-1], history, len(history), clock.seconds(), stopped='tolerance')
    return Fit(w, history[-1], history, len(history), clock.seconds(), stopped='cap')


def _step(rule, penalty, w, sums, rows, clip=None):
    """The weights after one step of rule from w, given the kernel's sums over `rows` rows: the mean gradient with
    l2's term, then l1's proximal shrink, then clip (Bounds.clip: the proximal step of the bounds, last)."""
    with np.errstate(over='ignore'):  # an overflow is divergence, found on the next check (w, sums are finite)
        w, size = rule.step(w, penalty.gradient(sums[1:] / rows, w))
        w = penalty.shrink(w, size)
        return w if clip is None else clip(w)


def _lbfgs(kernel, table, w, names, iterations, tolerance, penalty, clock, why, blocks=None, bounds=None):
    """(the Fit, the starting objective) of L-BFGS (two-loop recursion over the last MEMORY pairs) with a
    backtracking line search for the Armijo condition, in scaled coordinates u = √D·w, D the Hessian's diagonal at
    the start (curvature; blocks as fit's): on columns of any scale, as on standardised ones. It stops early where
    no step along its direction lowers the objective: the optimum, to the precision of the sums. Its objective never
    rises, so it never warns of divergence. With bounds (Bounds): the weights a bound holds take no part in the
    direction, and the line search goes no further than the first bound (_line_search)."""
    raw = _objective(kernel, table, penalty, clock)
    sums, f, g = raw(w)
    check_finite(sums, w, 1, names, 0.0, why)
    start = f
    blocks = [np.array([i]) for i in range(len(w))] if blocks is None else blocks
    scale = 1 / np.sqrt(curvature(raw, w, f, g, blocks, FLOOR * abs(f), bounds))
    box = None if bounds is None else bounds.scaled(scale)

    def objective(u):
        sums, value, gradient = raw(scale * u)
        return sums, value, scale * gradient

    u, g = w / scale, scale * g
    pairs, history, stopped = deque(maxlen=MEMORY), [], 'cap'
    for it in range(1, iterations + 1):
        held = np.zeros(len(g), dtype=bool) if box is None else box.held(u, g)
        free = np.where(held, 0.0, g)
        d = np.where(held, 0.0, -_two_loop(free, pairs))
        if box is not None:  # a weight at a bound the direction pushes out stays there
            d = np.where(box.pushed(u, d), 0.0, d)
        if not d @ free < 0:  # not a descent direction (or NaN): start again from the gradient
            pairs.clear()
            d = -free
        if not np.any(free):
            stopped = 'optimum'  # a bound holds every weight the gradient would move: the KKT point
            break
        slope = d @ g
        found = _line_search(objective, u, d, f, slope, 1.0 if pairs else 1.0 / max(1.0, float(np.sqrt(free @ free))),
                             box, g)
        if found is None:
            stopped = 'search'  # no step lowers the objective
            break
        step, (new_sums, new_f, new_g) = found
        if not new_f < f:
            stopped = 'search'  # the objective no longer changes: the optimum, to the precision of the sums
            break
        s, y = step - u, new_g - g
        if s @ y > 1e-12 * np.sqrt((s @ s) * (y @ y)):  # curvature, as the update needs it
            pairs.append((s, y, 1.0 / (s @ y)))
        u, f, g = step, new_f, new_g
        history.append(f)
        clock.validate(scale * u, f)
        clock.iteration(it, f)
        if stalled(history, tolerance):
            stopped = 'tolerance'
            break
        if not np.any(g if box is None else box.free(u, g)):
            stopped = 'optimum'
            break
    w = scale * u if bounds is None else bounds.unscaled(u, scale)
    check_finite(np.array([f, *g]), w, len(history) + 1, names, 0.0, why)
    return Fit(w, f, history, len(history), clock.seconds(), stopped=stopped), start


def _newton(kernel, table, w, names, iterations, tolerance, penalty, clock, why, bounds=None):
    """(the Fit, the starting objective, the Newton decrement gᵀ(H + μI)⁻¹g at its weights) of damped Newton: the
    kernel is program.build_hessian's (sums of the loss, the gradient and the upper half of the Hessian, one pass
    over the rows); each iteration solves (H + μI)·d = −g in the equilibrated basis (_newton_direction), then
    backtracks from the full step for the Armijo condition. It stops where the decrement −g·d is below the
    precision of the objective, or no step lowers it. Where the decrement is already below 1e-6 of the objective,
    which the rounding of its sums may hide, the full step comes first, taken (REFINEMENTS times at most) where its
    own decrement is smaller, before any line search (iterative refinement: the gradient is computed afresh, the
    solve's error shrinks). l2 adds 2·l2 on the diagonal; l1, not differentiable, is not taken
    (arguments refuses it). With bounds (Bounds): the direction solves for the weights no bound holds
    (_newton_direction's held), and the line search goes no further than the first bound (_line_search)."""
    p = len(w)
    def direction(w, g, h):  # on the weights no bound holds: those at a bound the direction pushes out are held too
        if bounds is None:
            return _newton_direction(g, h)
        held = bounds.held(w, g)
        for _ in range(len(w)):
            d = _newton_direction(g, h, held)
            more = held | bounds.pushed(w, d)
            if np.array_equal(more, held):
                break
            held = more
        return d

    def objective(at):
        sums = evaluate(kernel, table, at, clock.interrupts)
        clock.rows += table.rows
        h = second.full(sums[1 + p:] / table.rows, p) + 2 * penalty.l2 * np.diag(penalty.mask)
        return sums, sums[0] / table.rows + penalty.value(at), penalty.gradient(sums[1:1 + p] / table.rows, at), h

    eps = np.finfo(np.float64).eps
    sums, f, g, h = objective(w)
    check_finite(sums, w, 1, names, 0.0, why)
    start, history, stopped, refined = f, [], 'cap', 0
    for it in range(1, iterations + 1):
        d = direction(w, g, h)
        slope = d @ g
        if not -slope > 4 * eps * abs(f):
            stopped = 'optimum'  # the decrement is below the precision of the objective
            break
        # a decrement this small may be below the rounding of the objective's sums, and a line search would take
        # whichever point of the step the rounding favours: the full step first, judged by its own decrement
        found = None
        if refined < REFINEMENTS and -slope <= 1e-6 * (abs(f) + FLOOR * abs(start)) and \
                (bounds is None or bounds.reach(w, d) >= 1):
            with np.errstate(over='ignore', invalid='ignore'):
                at = w + d if bounds is None else bounds.clip(w + d)
                tried = objective(at)
            if np.all(np.isfinite(tried[0])) and -(direction(at, tried[2], tried[3]) @ tried[2]) < -slope:
                found, refined = (at, tried), refined + 1
        if found is None:
            found = _line_search(objective, w, d, f, slope, 1.0, bounds, g)
            if found is None or not found[1][1] < f:
                stopped = 'search'
                break
        step, (new_sums, new_f, new_g, new_h) = found
        w, f, g, h = step, new_f, new_g, new_h
        history.append(f)
        clock.validate(w, f)
        clock.iteration(it, f)
        if stalled(history, tolerance):
            stopped = 'tolerance'
            break
        if not np.any(g if bounds is None else bounds.free(w, g)):
            stopped = 'optimum'
            break
    check_finite(np.array([f, *g]), w, len(history) + 1, names, 0.0, why)
    decrement = float(-(direction(w, g, h) @ g))
    return Fit(w, f, history, len(history), clock.seconds(), stopped=stopped), start, max(decrement, 0.0)


def _line_search(objective, w, d, f, slope, t, box=None, g=None):
    """(the step w + t·d, objective(step)) for the first t of t, t/2, … (HALVINGS of them) where the objective is
    finite and meets the Armijo condition against f and the slope g·d; None where no such step is found.
    objective(at) gives (the kernel's sums, the objective, …). With box (Bounds) and the gradient g, the search
    within the bounds: the first t no further than where the first weight reaches its bound (Bounds.reach: it lands
    there, and a bound holds it from the next iteration on, while the gradient points out), each step clipped
    into the bounds, its decrease against g·(step − w), which must be negative. (A step bent along the bounds by
    the clip would jump onto a face of them far from the path, and a projected Newton step may stop there, at a
    worse optimum.)"""
    clip = None if box is None else box.clip
    if box is not None:
        t = min(t, float(box.reach(w, d)))
    for _ in range(HALVINGS):
        with np.errstate(over='ignore', invalid='ignore'):
            step = w + t * d if clip is None else clip(w + t * d)
            found = objective(step)
            change = t * slope if clip is None else g @ (step - w)
        if np.isfinite(found[1]) and np.all(np.isfinite(found[0])) and (clip is None or change < 0) and \
                found[1] <= f + ARMIJO * change:
            return step, found
        t /= 2
    return None


def _newton_direction(g, h, held=None):
    """−(H + μI)⁻¹·g solved in the equilibrated basis S·H·S, S = diag(H)^-½ (so that the columns' units do not
    matter: a diagonal of ones), μ the least of 0, 1e-10·10^k that makes the factor's pivots all above PIVOT (H
    positive definite, and not singular to the precision of its sums: collinear weights take no huge step along
    the directions the data do not see); −g where none does (H not finite). held (a mask, or None): the weights a
    bound holds, whose part of the direction is 0: the others' solves H's block of theirs."""
    if held is not None and held.any():
        free = ~held
        d = np.zeros_like(g)
        if free.any():
            d[free] = _newton_direction(g[free], h[np.ix_(free, free)])
        return d
    root, scaled = second.equilibrated(h)
    gs = g / root
    mu = 0.0
    for _ in range(40):
        try:
            factor = np.linalg.cholesky(scaled + mu * np.eye(len(h)))
        except np.linalg.LinAlgError:
            factor = None
        if factor is None or not np.min(np.diag(factor)) ** 2 > PIVOT:
            mu = 1e-10 if mu == 0 else mu * 10
            continue
        return -np.linalg.solve(factor.T, np.linalg.solve(factor, gs)) / root
    return -g


def _two_loop(g, pairs):
    """The L-BFGS approximation of the inverse Hessian times g, from the curvature pairs (s, y, 1/(s·y))."""
    q, alphas = g.copy(), []
    for s, y, rho in reversed(pairs):
        alpha = rho * (s @ q)
        q -= alpha * y
        alphas.append(alpha)
    if pairs:
        s, y, _ = pairs[-1]
        q *= (s @ y) / (y @ y)
    for (s, y, rho), alpha in zip(pairs, reversed(alphas)):
        q += s * (alpha - rho * (y @ q))
    return q


class Divergence:
    """Watches the loss of one fit: the first loss seen is the starting one; the first later loss that exceeds it by
    more than GROWTH times its magnitude (six orders of magnitude) gets warning(message, hint), once. A start of
    exactly 0 has no magnitude to grow from, and gets none. NaN and infinity are check_finite's: errors."""
    def __init__(self, learning_rate, warning):
        self.rate, self.warning, self.start, self.warned = learning_rate, warning, None, False

    def see(self, loss, it):
        """The loss at iteration it (as the progress report numbers them)."""
        if self.start is None:
            self.start = loss
        elif not self.warned and self.start and loss - self.start > GROWTH * abs(self.start):
            self.warned = True
            self.warning(f'the loss grew from {self.start:.6g} to {loss:.6g} by iteration {it}: gradient descent is '
                         'diverging', diverging(self.rate))


def stalled(history, tolerance):
    """Did the last iteration improve the objective by less than tolerance, relative to the one before?"""
    return tolerance > 0 and len(history) > 1 and history[-2] - history[-1] < tolerance * abs(history[-2])


def evaluate(kernel, table, w, interrupts, chunk=CHUNK_ROWS):
    """The kernel's sums over all rows, a chunk of rows at a time, checking for interrupts between chunks; in one
    call for a kernel that says it takes them whole (kernel.whole: a GPU's pass over 1e8 rows takes milliseconds)."""
    if table.rows <= chunk or getattr(kernel, 'whole', False):
        return kernel(table.columns, table.rows, w)
    sums = 0
    for start in range(0, table.rows, chunk):
        end = min(start + chunk, table.rows)
        sums = sums + kernel([c[start:end] for c in table.columns], end - start, w)
        interrupts()
    return sums


def check_finite(sums, w, it, names, learning_rate, why=None, at_start=None):
    """An error unless the sums and the weights are finite; at the starting weights (it = 1, unless at_start says
    otherwise), why(w, k) may name the operation that made sum k not finite (domain.diagnose)."""
    if np.all(np.isfinite(sums)) and np.all(np.isfinite(w)):
        return
    at_start = it == 1 if at_start is None else at_start
    if at_start and why is not None and np.all(np.isfinite(w)):
        explained = why(w, int(np.argmin(np.isfinite(sums))))
        if explained is not None:
            raise explained
    what = ('the loss' if not np.isfinite(sums[0]) else
            f'the gradient by "{names[int(np.argmin(np.isfinite(sums[1:])))]}"' if not np.all(np.isfinite(sums[1:]))
            else f'weight "{names[int(np.argmin(np.isfinite(w)))]}"')
    value = 'NaN' if np.isnan(sums).any() or np.isnan(w).any() else 'infinite'
    if at_start:
        raise PgadError('22003', f'{what} is {value} at the starting weights',
                        hint='Check that the lambda is defined on every row (ln and sqrt of the data, division).')
    raise PgadError('22003', f'training diverged at iteration {it}: {what} is {value}',
                    hint=diverging(learning_rate))


def diverging(learning_rate):
    """The hint of a training that diverges: a smaller learning rate, or what converges on columns of any scale."""
    return (f"Try a smaller learning_rate than {learning_rate:g}, or pgad.train's optimizer => 'lbfgs' (a line search "
            "instead of a learning rate) or standardize => true.")
