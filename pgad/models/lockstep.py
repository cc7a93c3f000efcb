"""L-BFGS for many independent fits at once, in lockstep: the groups of a sequence model (sequence.py).

descent.fit fits one group at a time, and its Python costs about 60 µs an evaluation: 12 ms a fit of 200
evaluations, two minutes for 10,000 groups before any row is read. Here every evaluation is one call over all the
groups still running — each with its own weights, a column of a P × G array — and every step of descent._lbfgs is
done for all of them with numpy: the scaling by the Hessian's diagonal (descent.curvature's gradient differences,
one weight at a time for all the groups), the two-loop recursion over each group's own curvature pairs, the
backtracking line search (a group whose trial step fails the Armijo condition halves its own step, and only the
groups still searching are evaluated again), and the same stopping rules and judgement (descent.judged). So a group
is fitted exactly as descent.fit's 'lbfgs' fits it, to the rounding of the sums; groups that stop early drop out of
the evaluations.
"""
import numpy as np

from . import descent


def fit(objective, start, rows, names, iterations, tolerance, penalty, clock, precision='float64', why=None,
        bounds=None):
    """[descent.Fit of each group] of objective(W, at) → (each group's summed loss, its summed gradient, P × len(at))
    at W (P × len(at): the weights of the groups at, an index array), from start (P × G), the groups having rows[g]
    rows; penalty a descent.Penalty (l2 only); clock a descent.Clock (interrupts, progress); why(k), if given,
    group k's descent.check_finite why, which explains a sum not finite at the starting weights; bounds (a
    descent.Bounds of the P weights, the same for every group) as descent._lbfgs takes them."""
    p, g_count = start.shape
    limited, bounds = bounds is not None, _columns(bounds, p)
    rows = np.asarray(rows, dtype=np.float64)
    raw = _means(objective, rows, penalty, clock, bounds)

    everyone = np.arange(g_count)
    w = start.astype(np.float64).copy()
    f, g = raw(w, everyone)
    _check(f, g, w, names, why)
    first = f.copy()
    scale = 1 / np.sqrt(_curvature(raw, w, f, g, everyone, descent.FLOOR * np.abs(f), bounds))
    box = bounds.scaled(scale)  # P × G: each group's bounds of u
    u, g = w / scale, scale * g
    memory = descent.MEMORY
    s_pairs, y_pairs, rho = np.zeros((memory, p, g_count)), np.zeros((memory, p, g_count)), np.zeros((memory, g_count))
    kept = np.zeros(g_count, dtype=np.int64)  # each group's pairs, the newest last
    history = [[] for _ in range(g_count)]
    stopped = np.array(['cap'] * g_count, dtype=object)
    running = everyone.copy()
    for it in range(1, iterations + 1):
        if not len(running):
            break
        at = running
        held = _part(box, at).held(u[:, at], g[:, at]) if limited else np.zeros((p, len(at)), dtype=bool)
        free = np.where(held, 0.0, g[:, at])
        kkt = ~np.any(free, axis=0)  # a bound holds every weight the gradient would move
        stopped[at[kkt]] = 'optimum'
        at, held, free = at[~kkt], held[:, ~kkt], free[:, ~kkt]
        if not len(at):
            break
        d = np.where(held, 0.0, -_two_loop(free, s_pairs[:, :, at], y_pairs[:, :, at], rho[:, at], kept[at]))
        if limited:  # a weight at a bound the direction pushes out stays there
            d = np.where(_part(box, at).pushed(u[:, at], d), 0.0, d)
        slope = np.sum(d * free, axis=0)
        restart = ~(slope < 0)
        if restart.any():  # not a descent direction: start again from the gradient
            kept[at[restart]] = 0
            d[:, restart] = -free[:, restart]
            slope = np.sum(d * free, axis=0)
        t = np.where(kept[at] > 0, 1.0, 1.0 / np.maximum(1.0, np.sqrt(np.sum(free ** 2, axis=0))))
        found = _line_search(lambda uu, idx: _scaled(raw, uu, idx, scale), u[:, at], d, f[at], slope, t, at,
                             box if limited else None, g[:, at])
        new_u, new_f, new_g, ok = found
        failed = ~ok | ~(new_f < f[at])
        stopped[at[failed]] = 'search'
        moved = at[~failed]
        step, nf, ng = new_u[:, ~failed], new_f[~failed], new_g[:, ~failed]
        s, y = step - u[:, moved], ng - g[:, moved]
        sy = np.sum(s * y, axis=0)
        good = sy > 1e-12 * np.sqrt(np.sum(s * s, axis=0) * np.sum(y * y, axis=0))
        _push(s_pairs, y_pairs, rho, kept, moved[good], s[:, good], y[:, good], 1.0 / sy[good])
        u[:, moved], f[moved], g[:, moved] = step, nf, ng
        running = _stepped(it, moved, nf, box.free(u, g) if limited else g, history, stopped, tolerance, clock, f[at])
    w = bounds.unscaled(u, scale) if limited else scale * u
    _check(f, g, w, names)
    # the judgement: the gradient (what the bounds leave) scaled by the Hessian's diagonal at the fitted weights, as
    # descent.fit's
    _, f_end, g_end = (None, *raw(w, everyone))
    curvature = _curvature(raw, w, f_end, g_end, everyone, descent.FLOOR * np.abs(first), bounds)
    g_end = bounds.free(w, g_end)
    decrement = np.sum(g_end * g_end / curvature, axis=0)
    return _judged(w, f, first, decrement, rows, history, stopped, precision, clock.seconds())


def _columns(bounds, p):
    """bounds (a descent.Bounds of P weights, or None: none) as a column, P × 1, for the groups' P × G arrays."""
    bounds = descent.unbounded(p) if bounds is None else bounds
    return descent.Bounds(np.asarray(bounds.lower, dtype=np.float64)[:, None],
                          np.asarray(bounds.upper, dtype=np.float64)[:, None])


def _means(objective, rows, penalty, clock, bounds):
    """raw(w, at): the groups at's objectives (mean loss plus penalty) and gradients at w, from objective's sums, the
    gradient 0 along a weight whose bounds (P × 1) are one value (it never moves: L-BFGS's pairs and Newton's
    Hessian see only the others); each call counts its rows and lets the server check for interrupts (clock)."""
    mask = penalty.mask[:, None] if penalty.mask is not None else 1.0
    moving = ~bounds.fixed()  # P × 1

    def raw(w, at):
        f, grad = objective(w, at)
        clock.rows += int(rows[at].sum())
        clock.poll()
        if not penalty.l2:  # as descent.Penalty: none, not 0·w² (NaN for a weight that is not finite)
            return f / rows[at], np.where(moving, grad / rows[at], 0.0)
        return (f / rows[at] + penalty.l2 * np.sum(mask * w * w, axis=0),
                np.where(moving, grad / rows[at] + 2 * penalty.l2 * mask * w, 0.0))
    return raw


def _stepped(it, moved, values, g, history, stopped, tolerance, clock, accepted):
    """After iteration it, in which the groups moved reached the objectives values (g their gradients): their
    histories, the progress report (the mean of accepted, the objectives of the iteration's groups at the weights
    each kept, a step taken or not), and which of them go on — not those that tolerance or a zero gradient stops
    (stopped says which)."""
    for k, value in zip(moved, values):
        history[k].append(float(value))
    clock.iteration(it, float(np.mean(accepted)))
    done = np.zeros(len(moved), dtype=bool)
    if tolerance > 0:
        done |= np.array([len(history[k]) > 1 and history[k][-2] - history[k][-1] < tolerance * abs(history[k][-2])
                          for k in moved], dtype=bool)
        stopped[moved[done]] = 'tolerance'
    optimum = ~np.any(g[:, moved], axis=0) & ~done
    stopped[moved[optimum]] = 'optimum'
    return moved[~(done | optimum)]


def _judged(w, f, first, decrement, rows, history, stopped, precision, seconds):
    """Each group's descent.Fit, judged by descent.judged on its decrement (the criterion's gᵀM⁻¹g)."""
    fits = []
    for k in range(w.shape[1]):
        measure, converged = descent.judged(float(decrement[k]), float(f[k]), descent.FLOOR * abs(float(first[k])),
                                            int(rows[k]), precision)
        fits.append(descent.Fit(w[:, k].copy(), float(f[k]), history[k], len(history[k]), seconds, converged,
                                measure, str(stopped[k])))
    return fits


def _scaled(raw, u, at, scale):
    f, g = raw(scale[:, at] * u, at)
    return f, scale[:, at] * g


def _curvature(raw, w, f, g, at, floor, bounds):
    """descent.curvature for every group at once: each weight's step along it for all the groups together, turned
    back where it would leave the bounds (P × 1); a fixed weight's none (_positive's fill)."""
    fixed = bounds.fixed()[:, 0]  # a weight of one value, held: no call spent on it
    h = descent.DIFFERENCE * np.maximum(np.abs(w), 1.0)
    for _ in range(2):
        h = bounds.outward(w, h)
        d = np.where(fixed[:, None], np.nan, 0.0) * np.ones_like(w)
        for i in np.flatnonzero(~fixed):
            moved = w.copy()
            moved[i] += h[i]
            with np.errstate(all='ignore'):
                d[i] = (raw(moved, at)[1][i] - g[i]) / h[i]
        d = _positive(d)
        with np.errstate(all='ignore'):
            h = descent.DIFFERENCE * np.sqrt((np.abs(f) + floor) / d)
        h = np.where(np.isfinite(h) & (h > 0), h, 1.0)
    return d


def _positive(d):
    """descent._positive for each group (a column of d)."""
    return np.stack([descent._positive(d[:, k]) for k in range(d.shape[1])], axis=1) if d.size else d


def _two_loop(g, s, y, rho, kept):
    """descent._two_loop for each group (a column), each with its own kept newest pairs (the last kept of memory)."""
    memory = s.shape[0]
    q = g.copy()
    alphas = np.zeros((memory, g.shape[1]))
    for j in range(memory - 1, -1, -1):
        live = j >= memory - kept
        alpha = np.where(live, rho[j] * np.sum(s[j] * q, axis=0), 0.0)
        q -= alpha * y[j]
        alphas[j] = alpha
    last = kept > 0
    with np.errstate(all='ignore'):
        gamma = np.where(last, np.sum(s[-1] * y[-1], axis=0) / np.sum(y[-1] * y[-1], axis=0), 1.0)
    q *= gamma
    for j in range(memory):
        live = j >= memory - kept
        beta = rho[j] * np.sum(y[j] * q, axis=0)
        q += np.where(live, s[j] * (alphas[j] - beta), 0.0)
    return q


def _push(s_pairs, y_pairs, rho, kept, at, s, y, r):
    """Append a curvature pair to the groups at: the pairs shift towards the front, the newest last."""
    if not len(at):
        return
    for pairs, new in ((s_pairs, s), (y_pairs, y)):
        shifted = pairs[:, :, at]  # memory × P × len(at)
        pairs[:, :, at] = np.concatenate([shifted[1:], new[None]])
    rho[:, at] = np.concatenate([rho[1:, at], r[None]])
    kept[at] = np.minimum(kept[at] + 1, s_pairs.shape[0])


def _line_search(objective, u, d, f, slope, t, at, box=None, g=None):
    """descent._line_search for each group: (the accepted u, its objective and gradient, found) where each group's
    first step of t, t/2, … meets the Armijo condition; only the groups still searching are evaluated again. With
    box (the groups' descent.Bounds, P × G) and their gradients g, the search within the bounds, as descent's."""
    new_u, new_f, new_g = u.copy(), np.full(len(at), np.inf), np.zeros_like(u)
    ok = np.zeros(len(at), dtype=bool)
    searching = np.arange(len(at))
    t = t.copy()
    if box is not None:  # no further than each group's first bound (descent._line_search's)
        t = np.minimum(t, _part(box, at).reach(u, d))
    for _ in range(descent.HALVINGS):
        if not len(searching):
            break
        with np.errstate(over='ignore', invalid='ignore'):
            trial = u[:, searching] + t[searching] * d[:, searching]
            if box is not None:
                trial = np.minimum(np.maximum(trial, box.lower[:, at[searching]]), box.upper[:, at[searching]])
                change = np.sum(g[:, searching] * (trial - u[:, searching]), axis=0)
            else:
                change = t[searching] * slope[searching]
            tf, tg = objective(trial, at[searching])
        good = np.isfinite(tf) & np.all(np.isfinite(tg), axis=0) & (tf <= f[searching] + descent.ARMIJO * change)
        if box is not None:
            good &= change < 0
        chosen = searching[good]
        new_u[:, chosen], new_f[chosen], new_g[:, chosen], ok[chosen] = trial[:, good], tf[good], tg[:, good], True
        t[searching[~good]] /= 2
        searching = searching[~good]
    return new_u, new_f, new_g, ok


def _check(f, g, w, names, why=None):
    """descent.check_finite's error where a group's objective, gradient or weights are not finite; why as fit()
    takes it, at the starting weights only."""
    bad = ~(np.isfinite(f) & np.all(np.isfinite(g), axis=0) & np.all(np.isfinite(w), axis=0))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        descent.check_finite(np.concatenate([[f[k]], g[:, k]]), w[:, k], 1, names, 0.0,
                             None if why is None else why(k))


STEP = 1e-6  # newton's Hessian by forward differences of the gradient: each weight moved by STEP·max(|w|, 1)
# The least squared pivot of newton's equilibrated Hessian (descent.PIVOT's, for a Hessian from differences): their
# error, about STEP relative, makes a direction the objective does not see (Holt-Winters' level against its seasons)
# a curvature of ±1e-6 or so, along which an undamped step would wander by the gradient's rounding over it
DIFFERENCE_PIVOT = 1e-5


def newton(objective, start, rows, names, iterations, tolerance, penalty, clock, precision='float64', why=None,
           bounds=None):
    """[descent.Fit of each group] by damped Newton (descent._newton's steps: the direction in the equilibrated basis,
    a backtracking search for the Armijo condition, the stop where the decrement is below the objective's precision
    or no step lowers it), every group at once, for recurrences whose second derivatives pgad does not build: the
    Hessian by forward differences of the gradient (P more calls of objective, one a weight, all the groups together)
    at the start and every REFRESH iterations, BFGS's update of it by each step between (no call); a stop or a failed
    search on an updated Hessian is judged again on one by differences, so that every group stops as Newton's would.
    objective, start, rows, names, penalty, clock, why and bounds as fit() takes them."""
    p, g_count = start.shape
    limited, bounds = bounds is not None, _columns(bounds, p)
    rows = np.asarray(rows, dtype=np.float64)
    eps = np.finfo(np.float64).eps
    raw = _means(objective, rows, penalty, clock, bounds)

    fixed = bounds.fixed()[:, 0]  # a weight of one value: held, its part of H never read

    def hessians(w, g, at):
        """Each group's Hessian (len(at) × P × P), symmetrised, by forward differences of the gradient: a call a
        weight that is not fixed (a fixed one's row 0: _newton_directions replaces its row and column)."""
        h = np.zeros((len(at), p, p))
        for i in np.flatnonzero(~fixed):
            step = STEP * np.maximum(np.abs(w[i]), 1.0)
            step = np.where(w[i] + step > bounds.upper[i], -step, step)  # not out of the bounds
            moved = w.copy()
            moved[i] += step
            with np.errstate(all='ignore'):
                h[:, i, :] = ((raw(moved, at)[1] - g) / step).T
        return (h + h.transpose(0, 2, 1)) / 2

    def differenced(some):  # the groups some's Hessians by differences at their weights
        if len(some):
            kept[some], exact[some], age[some] = hessians(w[:, some], g[:, some], some), True, 0

    everyone = np.arange(g_count)
    w = start.astype(np.float64).copy()
    f, g = raw(w, everyone)
    _check(f, g, w, names, why)
    first = f.copy()
    history = [[] for _ in range(g_count)]
    stopped = np.array(['cap'] * g_count, dtype=object)
    running = everyone.copy()
    kept = np.zeros((g_count, p, p))         # each group's Hessian at its weights w: by differences where exact,
    exact = np.zeros(g_count, dtype=bool)    # else BFGS's update of one since (age steps ago)
    age = np.full(g_count, REFRESH)
    for it in range(1, iterations + 1):
        if not len(running):
            break
        at = running
        differenced(at[age[at] >= REFRESH])
        d = _directions(g[:, at], kept[at], w[:, at], bounds if limited else None)
        slope = np.sum(d * g[:, at], axis=0)
        small = ~(-slope > 4 * eps * np.abs(f[at]))
        again = small & ~exact[at]  # a stop on an updated Hessian: judged again on one by differences
        if again.any():
            differenced(at[again])
            d[:, again] = _directions(g[:, at[again]], kept[at[again]], w[:, at[again]], bounds if limited else None)
            slope[again] = np.sum(d[:, again] * g[:, at[again]], axis=0)
            small[again] = ~(-slope[again] > 4 * eps * np.abs(f[at[again]]))
        stopped[at[small]] = 'optimum'
        at, d, slope = at[~small], d[:, ~small], slope[~small]
        if not len(at):
            break
        new_w, new_f, new_g, ok = _line_search(raw, w[:, at], d, f[at], slope, np.ones(len(at)), at,
                                               _wide(bounds, g_count) if limited else None, g[:, at])
        failed = ~ok | ~(new_f < f[at])
        retried = at[failed & ~exact[at]]  # a failed search on an updated Hessian: again on one by differences
        age[retried] = REFRESH
        stopped[at[failed & exact[at]]] = 'search'
        moved = at[~failed]
        _update(kept, moved, new_w[:, ~failed] - w[:, moved], new_g[:, ~failed] - g[:, moved])
        exact[moved] = False
        age[moved] += 1
        w[:, moved], f[moved], g[:, moved] = new_w[:, ~failed], new_f[~failed], new_g[:, ~failed]
        running = np.concatenate([_stepped(it, moved, new_f[~failed], bounds.free(w, g) if limited else g, history,
                                           stopped, tolerance, clock, f[at]), retried])
    _check(f, g, w, names)
    # the judgement at the fitted weights: the Newton decrement there, as descent.fit's of 'newton', on a Hessian by
    # differences (that of a group that stopped where it last took one, at the optimum or a failed search: the same
    # bits)
    differenced(np.flatnonzero(~exact))
    decrement = np.maximum(-np.sum(_directions(g, kept, w, bounds if limited else None) * g, axis=0), 0.0)
    return _judged(w, f, first, decrement, rows, history, stopped, precision, clock.seconds())


REFRESH = 4  # newton's iterations on BFGS's updates of a Hessian before it takes one by differences again


def _update(h, at, s, y):
    """BFGS's update of the Hessians h[at] (in place) by the steps s and the gradients' changes y (P × len(at)):
    H + y·yᵀ/(yᵀs) − (Hs)(Hs)ᵀ/(sᵀHs), where both curvatures are positive (else H as it was)."""
    if not len(at):
        return
    hs = np.einsum('gij,jg->gi', h[at], s)
    ys, shs = np.sum(y * s, axis=0), np.einsum('ig,gi->g', s, hs)
    scale = np.sqrt(np.sum(s * s, axis=0) * np.sum(y * y, axis=0))
    good = (ys > 1e-10 * scale) & (shs > 0) & np.isfinite(ys) & np.isfinite(shs)
    at, hs, ys, shs, y = at[good], hs[good], ys[good], shs[good], y[:, good]
    h[at] += np.einsum('ig,jg->gij', y, y) / ys[:, None, None] - np.einsum('gi,gj->gij', hs, hs) / shs[:, None, None]


def _directions(g, h, w, bounds):
    """newton's directions at w (P × G): _newton_directions on the weights no bound holds, those at a bound the
    direction pushes out held too, solved again until none is."""
    if bounds is None:
        return _newton_directions(g, h, DIFFERENCE_PIVOT)
    fixed = bounds.fixed()[:, 0]
    if fixed.any():  # a weight of one value is held in every group: solved without it, its part 0
        free, d = np.flatnonzero(~fixed), np.zeros_like(g)
        d[free] = _directions(g[free], h[:, free][:, :, free], w[free],
                              descent.Bounds(bounds.lower[free], bounds.upper[free]))
        return d
    held = bounds.held(w, g)
    for _ in range(w.shape[0]):
        d = _newton_directions(g, h, DIFFERENCE_PIVOT, held)
        more = held | bounds.pushed(w, d)
        if np.array_equal(more, held):
            break
        held = more
    return d


def _part(bounds, at):
    """bounds (P × G) of the groups at."""
    return descent.Bounds(bounds.lower[:, at], bounds.upper[:, at])


def _wide(bounds, count):
    """bounds (P × 1) as P × count: the line search's columns, one a group."""
    return descent.Bounds(np.repeat(bounds.lower, count, axis=1), np.repeat(bounds.upper, count, axis=1))


def _newton_directions(g, h, pivot=descent.PIVOT, held=None):
    """descent._newton_direction for each group (g a column, h[k] its Hessian) at once: −(H + μI)⁻¹·g in the
    equilibrated basis, μ the least of 0, 1e-10·10^k whose factor's pivots are all above pivot (a batched
    factorisation for the groups that take each μ: the least eigenvalue says which can), −g where none does or H is
    not finite. held (P × G, or None): the weights a bound holds in each group, whose part of the direction is 0 (their
    rows and columns of H those of the identity, their part of g 0)."""
    if not len(g):
        return np.zeros_like(g)  # a model that reads no weight: no direction, and no Hessian to factor
    if held is not None and held.any():
        mask = held.T  # G × P
        h = np.where(mask[:, :, None] | mask[:, None, :], 0.0, h)
        index = np.arange(h.shape[1])
        h[:, index, index] = np.where(mask, 1.0, h[:, index, index])
        return np.where(held, 0.0, _newton_directions(np.where(held, 0.0, g), h, pivot))
    diagonal = np.abs(np.diagonal(h, axis1=1, axis2=2))
    root = np.sqrt(np.where(np.isfinite(diagonal) & (diagonal > 0), diagonal, 1.0))  # hessian.equilibrated's
    scaled = h / (root[:, :, None] * root[:, None, :])
    d = np.empty_like(g)
    left = np.flatnonzero(np.all(np.isfinite(scaled), axis=(1, 2)))
    lowest = None  # each of left's least eigenvalue: taken only where one factorisation of them all fails
    mu = 0.0
    for _ in range(40):  # descent._newton_direction's damping: 0, then 1e-10, 1e-9, …, the least that serves
        if not len(left):
            break
        damped = scaled[left] + mu * np.eye(scaled.shape[1])
        at, factor = left, None
        if lowest is None:  # all definite (the common case): one batched factorisation, no eigenvalues
            try:
                factor, made = np.linalg.cholesky(damped), np.ones(len(left), dtype=bool)
            except np.linalg.LinAlgError:
                lowest = np.linalg.eigvalsh(scaled[left])[:, 0]
        if factor is None:
            possible = lowest + mu > 0  # those whose factorisation may exist at this damping
            at, factor, made = left[possible], *_cholesky(damped[possible])
        solved = made & (np.min(np.diagonal(factor, axis1=1, axis2=2), axis=1) ** 2 > pivot)
        at, factor = at[solved], factor[solved]
        if len(at):
            gs = (g[:, at] / root[at].T).T[:, :, None]
            inner = np.linalg.solve(factor, gs)
            d[:, at] = -(np.linalg.solve(np.transpose(factor, (0, 2, 1)), inner)[:, :, 0] / root[at]).T
            keep = ~np.isin(left, at)
            left, lowest = left[keep], None if lowest is None else lowest[keep]
        mu = 1e-10 if mu == 0 else mu * 10
    for k in np.setdiff1d(np.arange(g.shape[1]), np.flatnonzero(np.all(np.isfinite(scaled), axis=(1, 2)))):
        d[:, k] = -g[:, k]  # a Hessian not finite: the gradient, as descent._newton_direction gives
    for k in left:
        d[:, k] = -g[:, k]
    return d


def _cholesky(a):
    """(the Cholesky factors of the matrices a, which of them have one): one batched call, or where one of them has
    none (rounding at the edge of definiteness), one call each."""
    if not len(a):
        return a.copy(), np.zeros(0, dtype=bool)
    try:
        return np.linalg.cholesky(a), np.ones(len(a), dtype=bool)
    except np.linalg.LinAlgError:
        factor, made = np.zeros_like(a), np.zeros(len(a), dtype=bool)
        for k in range(len(a)):
            try:
                factor[k], made[k] = np.linalg.cholesky(a[k]), True
            except np.linalg.LinAlgError:
                pass
        return factor, made
