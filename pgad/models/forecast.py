"""pgad.forecast and pgad.evaluate of a sequence model (docs/sql.md, "Forecasts"): the recurrence run on from each
group's stored last state (models/sequence.py stores it).

A forecast runs `horizon` steps past the last training row with the model's own prediction standing in for the
label column (d.<label> := the prediction, in the next-state expressions), the other columns the model or its
state reads (exogenous) taken from the data query's first `horizon` rows after the training's last row, per group.
Its prediction intervals at `level`:
- analytic where the model is linear-Gaussian: loss 'squared', and the prediction and every next state linear in
  the state and the label (their derivatives by those read neither). With F_h = ∂next/∂s + ∂next/∂y·∂ŷ/∂s and
  b_h = ∂next/∂y at step h, the states' covariance goes P_{h+1} = F_h P_h F_hᵀ + σ²·b_h b_hᵀ from P_1 = 0,
  and the h-step variance is ∂ŷ/∂s P_h ∂ŷ/∂sᵀ + σ² — σ²·Σ_{j<h} c_j², c_j the impulse response — around
  the point forecast, ± the normal quantile of level times its root. σ² is the stored sigma2, the mean squared
  one-step error over the training rows (SSE/n), the divisor of statsmodels' ETSModel (mse = sse/nobs) and
  AutoReg (sigma2 = ssr/nobs, nobs the rows it predicts: all of pgad's rows have a prediction);
- by simulation otherwise (loss 'squared', a recurrence not linear): `simulations` paths, each step's label the
  prediction plus a normal error of variance σ² (numpy's Generator seeded by `seed`), the bounds the empirical
  quantiles of the paths' values at each step; the value is still the point forecast (the errors set to 0);
- none for any other loss, which gives no σ: the bounds are NULL, and a NOTICE says why.

pgad.evaluate of a sequence model (evaluate() below) runs from each group's last state along the data's rows after
the training's last row, the state updated with the actual label: one-step-ahead errors.
"""
import datetime
import json
import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np

from .. import arguments, calls, limits, python_backend, sequences, server
from ..python_backend import as_rows
from ..errors import PgadError
from . import catalog, families, objective, periods, sequence

LABEL = '\x00label'     # the label column read as a weight (the prediction, or the actual label), in Forecaster's graph
ROW_BYTES = 256         # what one row of pgad.forecast's result costs, counted against pgad.memory_limit


class Forecaster:
    """A stored sequence model's step with the label column read as the weight LABEL: its prediction, next states
    and their derivatives by the state and the label (for the analytic intervals), as nodes of one graph."""

    def __init__(self, name, stored, config):
        first = stored[0]
        self.options = options = json.loads(first['options'])
        if 'order_by' not in options:
            raise PgadError('0A000', f'model "{name}" is not a sequence model',
                            hint='pgad.forecast runs a model trained with order_by and state.')
        self.label, self.loss = options.get('label', 'y'), first['loss']
        self._step_of = lambda gaps=False: sequence.step_of(first['model'], first['loss'], self.label,
                                                            json.dumps(options['state']), first['weights'],
                                                            config.limits, config.memory_limit, gaps)
        step, model, _, w, _, _ = self._step_of()
        self.step, self.names = step, list(w)
        graph, values = step.graph.rebuilt([step.loss, step.prediction, *step.next], lambda node, g: g.weight(LABEL)
                                           if node.op == 'column' and node.value == self.label else None)
        self.graph = graph
        self.loss_node = values[step.loss].id
        self.prediction = values[step.prediction].id
        self.next = [values[n].id for n in step.next]
        self.name = name
        read = [graph.nodes[i].value for i in graph.ancestors([self.prediction, *self.next])
                if graph.nodes[i].op == 'column']
        self.exogenous = list(dict.fromkeys(read))
        self.read = [c for c in step.columns if c != self.label] + ([self.label] if self.label in step.columns
                                                                      else [])
        self.weights = {r['group_key']: self.vector(r['weights'], model, config) for r in stored}
        self.options_of = {r['group_key']: json.loads(r['options']) for r in stored}
        self._frequencies = {}  # frequency(): {stored text: periods.Frequency}

    def filled(self, groups, kind, key_of, memory_limit):
        """(groups with their missing periods filled as training filled them, each by its group's stored
        frequency (periods.filled), the step that runs them: its state advancing there without an update): groups
        and self.step where the model reads a column beside its label, or no group has a missing period."""
        if not periods.fills(self.step, self.label):
            return groups, self.step
        out, missing = [], 0
        for group in groups:
            text = self.options_of.get(key_of(group), {}).get('frequency')
            if text is not None and len(group.order):
                group, n = periods.filled(group, self.frequency(text, kind), kind, self.label,
                                          periods.budget(self.step, memory_limit))
                missing += n
            out.append(group)
        return out, self._step_of(True)[0] if missing else self.step

    def frequency(self, text, kind):
        """The periods.Frequency of a group's stored frequency, each text parsed once a call (a query each)."""
        found = self._frequencies.get(text)
        if found is None:
            found = self._frequencies[text] = periods.declared(text, kind)
        return found

    def vector(self, text, model, config):
        given = arguments.weights(text, model, config.memory_limit)
        return calls.vector_of({n: given[n] for n in self.names})

    def linear(self):
        """Whether the prediction and each next state are linear in the state and the label along every path a
        forecast takes, with the nodes of (∂ŷ/∂s, ∂next/∂s, ∂next/∂y) when they are: their derivatives read
        neither the label nor a random field of the state (random: one whose next reads the label or a random
        field). A field that is not random (a counter, s.n + 1) takes the same values on every path, so the
        derivatives may read it: an AR(p) whose first p rows predict their own label (CASE WHEN s.n < p THEN d.y
        ELSE … END) is linear along the forecast, which runs past its first p rows."""
        found = self.jacobians()
        if any(_reads(self.graph, row, self.random()) for row in found):
            return None
        return found

    def jacobians(self):
        """The nodes of (∂ŷ/∂s, ∂next/∂s, ∂next/∂y), whether they read the state or not."""
        by = [sequences.STATE + f for f in self.step.states]
        return [sequences.derivatives(self.graph, root, [*by, LABEL]) for root in [self.prediction, *self.next]]

    def random(self):
        """The label and the state's random fields (weights' names): those whose next reads the label or a random
        field; the others take the same values on every path."""
        by = [sequences.STATE + f for f in self.step.states]
        random = {LABEL}
        while True:
            more = {name for name, root in zip(by, self.next) if _reads(self.graph, [root], random)} - random
            if not more:
                return random
            random |= more

    def plan(self, roots):
        return python_backend.named_plan(self.graph, roots)

    def inputs(self, columns, states, weights, label):
        """The plan's (columns, weights) for n paths: weights P × n, states K × n."""
        found = {e: weights[k] for k, e in enumerate(self.step.weights)}
        found.update({sequences.STATE + f: states[k] for k, f in enumerate(self.step.states)})
        found[LABEL] = label
        return columns, found


def _reads(graph, roots, names):
    """Whether any of roots reads a weight of names."""
    return any(graph.nodes[i].op == 'weight' and graph.nodes[i].value in names for i in graph.ancestors(list(roots)))


def order_value(text, kind):
    """The stored last_order (the text sequence.shown wrote) as the float8 the loader reads the order column as."""
    if kind == 'date':
        return float((datetime.date.fromisoformat(text) - datetime.date(2000, 1, 1)).days)
    if kind.startswith('timestamp'):
        moment = datetime.datetime.fromisoformat(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        return moment.timestamp()
    return float(text)


def _after(name, data, fc, columns, config):
    """{group key: (its columns' arrays, rows after the training's last row; how many rows at or before it; the rows
    skipped; their order values)} of the data, each group's rows in order (ties an error, as in training), a row with
    NULL in a column read skipped."""
    options = fc.options
    group_types, groups, kind = sequence.load(data, columns, options['order_by'], options.get('group_by') or [],
                                              config.memory_limit)
    trained = options.get('order_type', kind)  # (a model of 0.16.0 stored none: the data's)
    if _unit(trained) != _unit(kind):
        raise PgadError('42804', f'column "{options["order_by"]}" of order_by is of type {kind} in the data, and '
                                 f'model "{name}" was trained on {trained}',
                        detail='A date, a timestamp and a timestamp with time zone order rows on different scales.',
                        hint=f'Cast it in the data query: SELECT {options["order_by"]}::{trained} AS '
                             f'{options["order_by"]}, ….')
    found = {}
    for group in groups:
        key = group.key if options.get('group_by') else None
        if key not in fc.options_of:
            found[key] = (None, len(group.order), group.skipped, None)
            continue
        last = order_value(fc.options_of[key]['last_order'], trained)
        later = group.order > last
        found[key] = ({c: v[later] for c, v in group.columns.items()}, int(np.sum(~later)), group.skipped,
                      group.order[later])
    return found, trained


def _unit(kind):
    """The scale the loader reads an order column of type kind on: days, seconds, or the number itself."""
    return kind if kind == 'date' or kind.startswith('timestamp') else 'number'


LEVEL_MOST = 1 - 2 ** -52  # the greatest level whose (1 + level)/2 is below 1 in float8: 0.9999999999999998


def forecast(name, horizon, data, level, simulations, seed, config, levels=None):
    """pgad.forecast's rows, (group_key as jsonb text or None, step, at, value, lower, upper): at the order value of
    the step, the group's last row's stepped by its frequency (periods.ahead; NULL for a group without one)."""
    if name is None or horizon is None or level is None or simulations is None or seed is None:
        return []
    if horizon < 1:
        raise PgadError('22023', f'horizon must be at least 1, not {horizon}', hint='Forecast 1 or more steps.')
    _check_level(level)
    levels = [level] if levels is None else _levels(levels)
    if simulations < 1:
        raise PgadError('22023', f'simulations must be at least 1, not {simulations}',
                        hint='Simulate 1000 paths (the default), or more for steadier bounds.')
    stored = catalog.rows(name)
    fc = Forecaster(name, stored, config)
    keys = [r['group_key'] for r in stored]
    g, k = len(keys), len(fc.step.states)
    need = g * horizon * (len(levels) * ROW_BYTES + 8 * len(fc.exogenous))
    if need > config.memory_limit:
        raise PgadError('54000', f'a forecast of {horizon} steps for {g} group{"s" * (g != 1)} needs {need >> 20} MB, '
                                 f'more than pgad.memory_limit ({config.memory_limit >> 20} MB)',
                        hint='Forecast fewer steps, or have a superuser raise pgad.memory_limit.')
    columns = _future(name, data, fc, keys, horizon, config)
    sigma2 = np.array([fc.options_of[key].get('sigma2', math.nan) for key in keys])
    relative = np.array([families.relative(fc.options_of[key].get('family')) for key in keys], dtype=bool)
    how = _how(fc, sigma2, simulations, config, relative)
    if how == 'none':
        server.notice(f'model "{name}" has no prediction intervals: its loss \'{fc.loss}\' gives no variance of the '
                      'one-step error (only loss \'squared\' does); lower and upper are NULL')
    weights = np.array([fc.weights[key] for key in keys]).T.reshape(len(fc.step.weights), g)
    states = np.array([[fc.options_of[key]['last_state'][f] for key in keys] for f in fc.step.states]).reshape(k, g)
    values, lower, upper = _ahead(fc, columns, weights, states, horizon, sigma2, levels, simulations, seed, how,
                                  relative, config.memory_limit)
    each = [fc.options_of[key] for key in keys]
    at = periods.ahead([o.get('first_order') for o in each], [o.get('frequency') for o in each],
                       [o.get('last_period') for o in each], fc.options.get('order_type'), horizon)
    return [(key, h + 1, at[j][h], float(values[h, j]), _number(lower[i, h, j]), _number(upper[i, h, j]),
             float(level)) for j, key in enumerate(keys) for h in range(horizon) for i, level in enumerate(levels)]


MAX_LEVELS = 100  # the levels one forecast takes at most


def _levels(levels):
    """The levels argument (a float8[]) checked: 1 to MAX_LEVELS of them, none NULL, each as level's."""
    if not levels or len(levels) > MAX_LEVELS:
        raise PgadError('22023', f'levels must hold 1 to {MAX_LEVELS} levels, not {len(levels)}',
                        hint="Give the coverages of the intervals: levels => '{0.8, 0.95}'.")
    if any(v is None for v in levels):
        raise PgadError('22004', 'levels must not hold NULL', hint="Give the coverages: levels => '{0.8, 0.95}'.")
    for level in levels:
        _check_level(level)
    return list(levels)


def _how(fc, sigma2, simulations, config, relative=None):
    """How the intervals are made: 'none' (no σ: a loss other than 'squared'), 'analytic' (linear as written) or
    'simulation' (each group's linear along its path analytic all the same: _ahead); the error where the paths
    simulated for one group would pass pgad.memory_limit (the groups are simulated a batch at a time: _ahead)."""
    how = 'none' if not len(sigma2) or np.isnan(sigma2).any() or objective.base(fc.loss) != 'squared' else \
        'analytic' if fc.linear() is not None else 'simulation'
    simulated = how == 'simulation' or (how == 'analytic' and relative is not None and relative.any())
    if simulated and _path_bytes(fc, simulations) > config.memory_limit:
        raise PgadError('54000', f'{simulations} simulated paths of a group need '
                                 f'{_path_bytes(fc, simulations) >> 20} MB, more than pgad.memory_limit '
                                 f'({config.memory_limit >> 20} MB)',
                        hint='Simulate fewer paths, or have a superuser raise pgad.memory_limit.')
    return how


def _path_bytes(fc, simulations):
    """What one group's simulated paths hold at once: a float8 of each node, state field and weight a path."""
    return simulations * 8 * (len(fc.graph.nodes) + len(fc.step.states) + len(fc.step.weights) + 2)


def _ahead(fc, columns, weights, states, horizon, sigma2, levels, simulations, seed, how, relative=None,
           memory_limit=1 << 62, ids=None):
    """(values, horizon × G; lower and upper, L × horizon × G): the forecast from states (K × G) at weights (P × G),
    the exogenous columns' horizon × G values, its intervals at each of levels (L of them; one simulation for all)
    made as how (_how) says; relative (G booleans, or None) the groups of a multiplicative error, whose intervals
    are simulated with relative errors, as many groups at a time as memory_limit holds their paths; ids (G) each
    group's number, which with seed chooses its draws (its position by default)."""
    ids = np.arange(weights.shape[1]) if ids is None else np.asarray(ids)
    relative = np.zeros(weights.shape[1], dtype=bool) if relative is None else relative
    # a recurrence that is not linear as written may be, at a group's weights, along its forecast (the choice of
    # 'auto': a multiplicative season's weight 0): those groups' intervals are analytic too (_paths' check)
    jac = None if how == 'none' else fc.linear() if how == 'analytic' else fc.jacobians()
    values, variance, linear = _paths(fc, columns, weights, states, horizon, sigma2, jac, how == 'simulation')
    z = np.array([NormalDist().inv_cdf((1 + level) / 2) for level in levels])[:, None, None]
    if how == 'none':
        lower = upper = np.full((len(levels), *values.shape), None, dtype=object)
    else:
        with np.errstate(invalid='ignore'):
            half = z * np.sqrt(variance)
        lower, upper = values - half, values + half
        drawn = np.flatnonzero(~linear | relative)
        batch = max(1, memory_limit // _path_bytes(fc, simulations))
        for begin in range(0, len(drawn), batch):  # the others, by simulation, a batch of groups at a time
            some = drawn[begin:begin + batch]
            lower[:, :, some], upper[:, :, some] = _simulated(
                fc, {c: v[:, some] for c, v in columns.items()}, weights[:, some], states[:, some], horizon,
                sigma2[some], levels, simulations, seed, relative[some], ids[some])
    return values, lower, upper


def _number(value):
    return None if value is None else float(value)


def _future(name, data, fc, keys, horizon, config):
    """{exogenous column: horizon × G array}: each group's first horizon rows of the data after its last row."""
    if not fc.exogenous:
        return {}
    if data is None:
        raise PgadError('22023', f'model "{name}" reads {", ".join(f"column {c!r}" for c in fc.exogenous)} '
                                 'beside its state: a forecast takes their future values from data',
                        hint=f'Give data => \'SELECT {fc.options["order_by"]}, {", ".join(fc.exogenous)} FROM …\', '
                             f'with at least the horizon\'s rows after the training\'s last row.')
    found, _ = _after(name, data, fc, fc.exogenous, config)
    out = {c: np.empty((horizon, len(keys))) for c in fc.exogenous}
    for j, key in enumerate(keys):
        columns = found.get(key, (None,))[0]
        rows = 0 if columns is None else len(columns[fc.exogenous[0]])
        if rows < horizon:
            where = f' of group {key}' if key is not None else ''
            raise PgadError('22023', f'the data has {rows} row{"s" * (rows != 1)}{where} after the training\'s '
                                     f'last row, fewer than the horizon ({horizon})',
                            detail=f'The training\'s last row{where} is at {fc.options_of[key]["last_order"]}.',
                            hint=f'Give the future values of {", ".join(fc.exogenous)} for every step.')
        for c in fc.exogenous:
            out[c][:, j] = columns[c][:horizon]
    return out


# A group's recurrence is linear along its forecast where its Jacobians at each step do not move when the random
# fields and the label move by PERTURBATION of their size (plus 1): within AGREE, relative.
PERTURBATION = 1e-2
AGREE = 1e-9


def _paths(fc, columns, weights, states, horizon, sigma2, jac, check=False):
    """(the point forecasts, horizon × G; their variances, horizon × G, where jac (Forecaster.linear's or
    jacobians' nodes) is given, else None; which groups are linear along their path, G): the recurrence with the
    prediction for the label, the states' covariance carried by the step's Jacobians. check: the Jacobians are
    evaluated again at each step with the random fields and the label perturbed, and a group is linear where they
    agree (else every group is, as linear() found)."""
    g, k = weights.shape[1], len(fc.step.states)
    flat = [n for row in jac for n in row] if jac else []
    prediction = fc.plan([fc.prediction])
    after = fc.plan([*fc.next, *flat])
    values = np.empty((horizon, g))
    variance = np.empty((horizon, g)) if jac else None
    linear = np.ones(g, dtype=bool)
    moved = np.array([sequences.STATE + f in fc.random() for f in fc.step.states]) if check else None
    cov = np.zeros((g, k, k))
    for h in range(horizon):
        limits.tick(g)
        at = {c: v[h] for c, v in columns.items()}
        y = _predicted(fc, prediction, at, states, weights, g, h)
        values[h] = y
        found = python_backend.evaluate(after, *fc.inputs(at, states, weights, y))
        if check:
            with np.errstate(all='ignore'):
                shifted = states + np.where(moved[:, None], PERTURBATION * (1 + np.abs(states)), 0.0)
                other = python_backend.evaluate(after, *fc.inputs(at, shifted, weights,
                                                                   y + PERTURBATION * (1 + np.abs(y))))
                for n in flat:
                    a, b = as_rows(found[n], g), as_rows(other[n], g)
                    linear &= np.abs(a - b) <= AGREE * (np.abs(a) + np.abs(b)) + 1e-300
        if jac:
            c = np.array([as_rows(found[n], g) for n in jac[0][:k]]).reshape(k, g).T
            variance[h] = np.einsum('gi,gij,gj->g', c, cov, c) + sigma2
            a = np.array([[as_rows(found[n], g) for n in row[:k]] for row in jac[1:]]).reshape(k, k, g)
            b = np.array([as_rows(found[row[k]], g) for row in jac[1:]]).reshape(k, g)
            f = np.transpose(a, (2, 0, 1)) + np.einsum('ig,gj->gij', b, c)
            cov = f @ cov @ np.transpose(f, (0, 2, 1)) + sigma2[:, None, None] * np.einsum('ig,jg->gij', b, b)
        states = np.array([as_rows(found[n], g) for n in fc.next]).reshape(k, g)
    return values, variance, linear


def _predicted(fc, plan, columns, states, weights, n, h):
    """The prediction of step h (0-based) of n paths, the label read as NaN: a model whose prediction reads the label
    (an AR(p)'s first rows predicting their own) forecasts where that branch is not taken, and is an error where it
    is (22000), as is any prediction that is not finite."""
    with np.errstate(all='ignore'):
        y = as_rows(python_backend.evaluate(plan, *fc.inputs(columns, states, weights, np.nan))[fc.prediction], n)
    if not np.all(np.isfinite(y)):
        raise PgadError('22000', f'the forecast of model "{fc.name}" is not a finite number at step {h + 1}',
                        hint=f'A prediction that reads the label column "{fc.label}" past the training\'s last row '
                             'has no value to read: read the label through the state (its next values), as the '
                             'examples in docs/sql.md ("Sequences") do.')
    return y


def _simulated(fc, columns, weights, states, horizon, sigma2, levels, simulations, seed, relative=None, ids=None):
    """(lower, upper), L × horizon × G: the empirical quantiles of each of levels at each step of `simulations`
    paths whose labels are the
    prediction plus a normal error of variance sigma2 (times the prediction's size for a group of relative, a
    multiplicative error: ŷ·(1 + σ·z)), drawn by numpy's Generator seeded by (seed, the group's id), so that a
    group's draws are its own whichever groups are simulated with it."""
    g, k, s = weights.shape[1], len(fc.step.states), simulations
    rngs = [np.random.default_rng([seed % (1 << 64), int(i)]) for i in (range(g) if ids is None else ids)]
    weights = np.repeat(weights, s, axis=1)       # group j's paths are columns j·s … j·s + s − 1
    states = np.repeat(states, s, axis=1)
    sigma = np.repeat(np.sqrt(sigma2), s)
    scaled = np.repeat(np.zeros(g, dtype=bool) if relative is None else relative, s)
    plan = fc.plan([fc.prediction])
    after = fc.plan(fc.next)
    lower, upper = np.empty((len(levels), horizon, g)), np.empty((len(levels), horizon, g))
    quantiles = [q for level in levels for q in ((1 - level) / 2, (1 + level) / 2)]
    for h in range(horizon):
        limits.tick(g * s)
        at = {c: np.repeat(v[h], s) for c, v in columns.items()}
        y = _predicted(fc, plan, at, states, weights, g * s, h)
        z = np.concatenate([rng.standard_normal(s) for rng in rngs])
        y = y + sigma * z * np.where(scaled, np.abs(y), 1.0)
        bounds = np.quantile(y.reshape(g, s), quantiles, axis=1)
        lower[:, h], upper[:, h] = bounds[0::2], bounds[1::2]
        found = python_backend.evaluate(after, *fc.inputs(at, states, weights, y))
        states = np.array([as_rows(found[n], g * s) for n in fc.next]).reshape(k, g * s)
    return lower, upper


def evaluate(name, data, config, stored, rules_of):
    """pgad.evaluate's rows for a sequence model, (group_key, metric, value): from each group's last state along the
    data's rows after the training's last row, in order, the state updated with the actual label (one step ahead):
    rows, loss (the mean objective), the loss's metrics; earlier_rows (rows at or before the training's last row,
    left out), skipped_rows (a NULL in a column read); unseen_rows of a group the model does not have. rules_of:
    evaluate.rules_of, the metrics of a named loss; of loss 'squared' mse, rmse and mae (no r2: the data's mean
    is no forecast the model could have made). The recurrence runs in the kernel (sequences.run), all the groups at
    once, each from its stored last state (resumed), the periods missing before a row as training ran them."""
    fc = Forecaster(name, stored, config)
    found, order_kind = _after(name, data, fc, fc.read, config)
    kind, metrics = rules_of(fc.loss)
    if kind == 'squared':
        metrics = {m: metrics[m] for m in ('mse', 'rmse', 'mae')}
    if fc.label not in fc.read:
        metrics = {}
    keys = sorted(found, key=lambda key: (key is not None, key))
    runs = {}  # key: (its rows, gaps among them filled, which are the data's)
    for key in keys:
        columns, _, _, order = found[key]
        if columns is not None and len(order):
            runs[key] = _resumed_rows(fc, columns, _missing(fc, key, order, order_kind, config.memory_limit))
    scored = _resumed_run(fc, runs, config) if runs else {}
    out = []
    for key in keys:
        columns, earlier, skipped, order = found[key]
        if columns is None:
            out.append((key, 'unseen_rows', float(earlier)))
            continue
        out.append((key, 'rows', float(len(order))))
        if key in scored:
            label, z, loss = scored[key]
            out.append((key, 'loss', loss))
            for metric, rule in metrics.items():
                with np.errstate(over='ignore'):
                    value = rule(label, z)
                out.append((key, metric, None if value is None else float(value)))
        out.append((key, 'earlier_rows', float(earlier)))
        out.append((key, 'skipped_rows', float(skipped)))
    if not any(m == 'rows' and v for _, m, v in out):
        raise PgadError('22000', 'the data has no rows after the training\'s last row',
                        hint=f'pgad.evaluate scores sequence model "{name}" one step ahead on the rows after the ones '
                             'it was trained on.')
    return out


RESUME = '\x00resume '  # the weight a resumed step's field starts at (its stored last state): no weight is so named


def _resumed_rows(fc, columns, missing):
    """({column: array} of a group's rows after the training's last, with a row for each period missing before a row
    (the label 0, sequences.GAP 1 there, as periods.filled makes them), which of them are the data's)."""
    n = len(missing)
    columns = {**columns}
    if fc.label not in columns:
        columns[fc.label] = np.full(n, math.nan)  # a model whose loss reads a label the data lacks: no metrics
    if not missing.any():
        return {**columns, sequences.GAP: np.zeros(n)}, np.ones(n, dtype=bool)
    at = np.arange(n) + np.cumsum(missing)
    out = periods.spread(columns, at, n + int(missing.sum()))
    return out, out[sequences.GAP] == 0


def _resumed_run(fc, runs, config):
    """{key: (the data's labels, their one-step predictions, the mean objective)} of runs ({key: _resumed_rows'}),
    the recurrence run in the kernel from each group's stored last state: its step with each field's start the
    weight RESUME + field, given the state as weights beside the model's."""
    step = fc._step_of(any(not seen.all() for _, seen in runs.values()))[0]
    graph = step.graph.copy()
    start = tuple(graph.weight(RESUME + f).id for f in step.states)
    zero, p = graph.const(0.0).id, len(step.weights)
    # the derivatives the kernel's module holds beside the run: a row's by the new weights 0 (it reads none of them),
    # the starts' Σ λ_k·start_k by RESUME + field k its λ_k, by the model's weights 0
    resumed = replace(step, graph=graph, start=start, weights=step.weights + tuple(RESUME + f for f in step.states),
                      vjp=step.vjp[:p] + (zero,) * len(step.states) + step.vjp[p:],
                      start_vjp=(zero,) * p + tuple(graph.column(sequences.ADJOINT + str(k)).id
                                                    for k in range(len(step.states))))
    keys = list(runs)
    weights = np.array([np.concatenate([fc.weights[key], [fc.options_of[key]['last_state'][f] for f in step.states]])
                        for key in keys]).T
    lengths = [len(seen) for _, seen in runs.values()]
    seqs = sequences.joined([columns for columns, _ in runs.values()], lengths, resumed.columns)
    losses, _, predictions = sequences.run(resumed, seqs, weights, keep='predictions',
                                           backend=fc.options.get('backend', 'auto'), cache=config.cache)
    out = {}
    for k, (key, (columns, seen)) in enumerate(runs.items()):
        z = predictions[seqs.starts[k]:seqs.starts[k] + lengths[k]][seen]
        out[key] = (columns[fc.label][seen], z, float(losses[k]) / int(seen.sum()))
    return out


def _missing(fc, key, order, kind, memory_limit):
    """The missing periods before each of a group's rows after the training's last (order: their order values), by
    its stored frequency; none for a model that reads a column beside its label (training filled none). Each is a
    forecast step, bounded as a forecast's steps are (ROW_BYTES each within memory_limit) before any runs."""
    text = fc.options_of[key].get('frequency')
    if text is None or not periods.fills(fc.step, fc.label) or not len(order):
        return np.zeros(len(order), dtype=np.int64)
    frequency = fc.frequency(text, kind)
    at = periods.periods(np.concatenate([[order_value(fc.options_of[key]['last_order'], kind)], order]), frequency,
                         kind)
    if at is None:
        raise PgadError('22023', f'the rows{f" of group {key}" if key is not None else ""} after the training\'s last '
                                 f'are not one per period of frequency "{text}"',
                        hint='Give rows at the periods the model was trained on.')
    gaps = np.diff(at) - 1
    if int(gaps.sum()) * ROW_BYTES > memory_limit:
        raise PgadError('54000', f'the rows{f" of group {key}" if key is not None else ""} after the training\'s '
                                 f'last leave {int(gaps.sum())} periods of frequency "{text}" missing, more steps than '
                                 f'pgad.memory_limit allows a forecast ({memory_limit // ROW_BYTES})',
                        hint='Evaluate on the rows that follow the training\'s, or train on rows nearer them.')
    return gaps


def anomalies(name, data, level, config):
    """pgad.anomalies' rows, (group_key, at, value, predicted, lower, upper, anomaly): sequence model name's
    recurrence run with its stored weights along each group's rows of the data from the start, as training runs it
    (the state from the start expressions and the group's first row; sequences.run, in the kernel), each row's
    one-step prediction and its interval at level, ŷ ± z·σ (σ² the group's stored sigma2), the row an anomaly where
    its label lies outside: as BigQuery ML's ML.DETECT_ANOMALIES. `at` is the order column's value as its type
    prints it. A row that predicts its own label (an AR(p)'s first p) has no interval and is no anomaly; a group
    the model lacks is left out, and a NOTICE counts its rows."""
    if name is None or data is None or level is None:
        return []
    _check_level(level)
    stored = catalog.rows(name)
    fc = Forecaster(name, stored, config)
    if objective.base(fc.loss) != 'squared' or any('sigma2' not in o for o in fc.options_of.values()):
        raise PgadError('0A000', f'model "{name}" has no variance of its one-step error',
                        detail=f'Its loss is \'{fc.loss}\'; only loss \'squared\' gives one (sigma2).',
                        hint='Train it with loss \'squared\' to flag the rows outside its intervals.')
    options = fc.options
    label = fc.label
    _, groups, kind = sequence.load(data, list(fc.step.columns), options['order_by'], options.get('group_by') or [],
                                    config.memory_limit)
    key_of = (lambda group: group.key) if options.get('group_by') else (lambda group: None)
    known = [g for g in groups if key_of(g) in fc.weights and len(g.order)]
    lacking = sum(len(g.order) for g in groups if key_of(g) not in fc.weights)
    known, step = fc.filled(known, kind, key_of, config.memory_limit)
    if lacking:
        server.notice(f'model "{name}" has no group for {lacking} row{"s" * (lacking != 1)} of the data: left out')
    total = sum(len(g.order) for g in known)
    if total * ROW_BYTES > config.memory_limit:
        raise PgadError('54000', f'the anomalies of {total} rows need {(total * ROW_BYTES) >> 20} MB, more than '
                                 f'pgad.memory_limit ({config.memory_limit >> 20} MB)',
                        hint='Give fewer rows, or have a superuser raise pgad.memory_limit.')
    if not known:
        return []
    seqs = sequences.joined([g.columns for g in known], [len(g.order) for g in known], step.columns)
    weights = np.array([fc.weights[key_of(g)] for g in known]).T.reshape(len(step.weights), len(known))
    _, _, predicted = sequences.run(step, seqs, weights, keep='predictions',
                                    backend=options.get('backend', 'auto'), cache=config.cache)
    z = NormalDist().inv_cdf((1 + level) / 2)
    own = sequence.reads_label(fc.step, label)
    out = []
    for g, start in zip(known, seqs.starts):
        y = g.columns[label]
        yhat = predicted[start:start + len(y)]
        half = z * math.sqrt(fc.options_of[key_of(g)]['sigma2'])  # of a multiplicative error, times |ŷ|
        half = half * np.abs(yhat) if families.relative(fc.options_of[key_of(g)].get('family')) else \
            np.full(len(y), half)
        guarded = (y == yhat) if own else np.zeros(len(y), dtype=bool)
        at = shown_all(g.order, kind)
        for t in np.flatnonzero(sequence.observed(g)):  # not the missing periods
            if guarded[t]:
                out.append((key_of(g), at[t], float(y[t]), float(yhat[t]), None, None, False))
            else:
                lower, upper = float(yhat[t] - half[t]), float(yhat[t] + half[t])
                out.append((key_of(g), at[t], float(y[t]), float(yhat[t]), lower, upper,
                            bool(y[t] < lower or y[t] > upper)))
        limits.tick(len(y))
    return out


def shown_all(values, kind):
    """sequence.shown of each value, a timestamp's in one query for all of them."""
    if not kind.startswith('timestamp'):
        return [sequence.shown(v, kind) for v in values]
    moment = 'pg_catalog.to_timestamp(v)' + ('' if kind.endswith('with time zone') else " AT TIME ZONE 'UTC'")
    rows = server.query(f'SELECT ({moment})::pg_catalog.text AS t FROM pg_catalog.unnest($1) WITH ORDINALITY '
                        'AS u(v, k) ORDER BY k', [[float(v) for v in values]], ['pg_catalog.float8[]'])
    return [r['t'] for r in rows]


def _check_level(level):
    """The errors of a level that is not between 0 and 1, or whose upper quantile rounds to 1 in float8."""
    if not 0 < level < 1:
        raise PgadError('22023', f'level must be between 0 and 1, not {arguments.float8(level)}',
                        hint='Give the coverage of the intervals as a fraction: level => 0.95.')
    if (1 + level) / 2 == 1:  # the upper quantile rounds to 1 in float8: its normal quantile is infinite
        raise PgadError('22023', 'level must be between 0 and 1, and distinguishable from 1 in float8, not '
                                 f'{arguments.float8(level)}',
                        hint=f'Give a level of at most {LEVEL_MOST}.')


CV_METRICS = ('windows', 'points', 'mae', 'rmse', 'mase', 'coverage')


def cross_validation(name, data, horizon, windows, step, level, config):
    """pgad.cross_validation's rows, (group_key, metric, value): rolling-origin evaluation of sequence model name on
    the data with its stored weights (no refit: statsforecast's cross_validation with refit=False). For each group
    and each of `windows` origins, the last `horizon` rows and then every `step` rows before (the latest window
    last), the recurrence runs from the start along the rows before the origin (sequences.run, all the groups at
    once), then forecasts `horizon` rows (the exogenous columns the data's own), its intervals at level as
    pgad.forecast's; each forecast is scored against the rows' labels. Per group: windows and points (the windows and
    rows scored), mae, rmse, mase (each window's MAE over the in-sample MAE of the seasonal naive forecast before its
    origin, m the group's family's season or 1, averaged) and coverage (NULL without intervals); with group_by, the
    same over all groups with group_key {} (mase and coverage their means over the windows and rows)."""
    if name is None or data is None or horizon is None or windows is None or level is None:
        return []
    step = horizon if step is None else step
    for what, value in (('horizon', horizon), ('windows', windows), ('step', step)):
        if value < 1:
            raise PgadError('22023', f'{what} must be at least 1, not {value}',
                            hint='Give a horizon, windows and a step of 1 or more rows.')
    _check_level(level)
    stored = catalog.rows(name)
    fc = Forecaster(name, stored, config)
    options, label = fc.options, fc.label
    if label not in fc.step.columns:
        raise PgadError('0A000', f'model "{name}" reads no label column "{label}" to score its forecasts against',
                        hint='Cross-validate a model trained with a label.')
    _, groups, kind = sequence.load(data, list(fc.step.columns), options['order_by'], options.get('group_by') or [],
                                    config.memory_limit)
    key_of = (lambda group: group.key) if options.get('group_by') else (lambda group: None)
    known = [g for g in groups if key_of(g) in fc.weights]
    known, runner = fc.filled(known, kind, key_of, config.memory_limit)  # windows of periods, scored where observed
    season = [families.season(fc.options_of[key_of(g)].get('family')) for g in known]  # each group's own
    sigma2 = np.array([fc.options_of[key_of(g)].get('sigma2', math.nan) for g in known])
    relative = np.array([families.relative(fc.options_of[key_of(g)].get('family')) for g in known], dtype=bool)
    how = _how(fc, sigma2, 1000, config, relative)
    k = len(fc.step.states)
    found = {key_of(g): {'windows': 0, 'points': 0, 'abs': 0.0, 'sq': 0.0, 'scaled': [], 'inside': 0}
             for g in known}
    for w in range(windows):
        back = horizon + (windows - 1 - w) * step
        some = [j for j, g in enumerate(known) if len(g.order) - back > season[j]]
        if not some:
            continue
        server.check_interrupts()
        origins = np.array([len(known[j].order) - back for j in some])
        seqs = sequences.joined([known[j].columns for j in some], origins, runner.columns)  # the rows before
        weights = np.array([fc.weights[key_of(known[j])] for j in some]).T.reshape(len(runner.weights), len(some))
        _, states, _ = sequences.run(runner, seqs, weights, backend=options.get('backend', 'auto'),
                                     cache=config.cache)
        columns = {c: np.stack([known[j].columns[c][o:o + horizon] for j, o in zip(some, origins)], axis=1)
                   for c in fc.exogenous}
        values, lower, upper = _ahead(fc, columns, weights, states.reshape(k, len(some)), horizon, sigma2[some],
                                      [level], 1000, 0, how, relative[some], config.memory_limit, some)
        lower, upper = lower[0], upper[0]
        for i, (j, o) in enumerate(zip(some, origins)):
            y, seen = known[j].columns[label], sequence.observed(known[j])
            ahead = seen[o:o + horizon]  # a missing period is forecast, not scored
            actual, error = y[o:o + horizon][ahead], (y[o:o + horizon] - values[:, i])[ahead]
            m = season[j]
            pairs = seen[m:o] & seen[:o - m]
            scale = float(np.mean(np.abs(y[m:o] - y[:o - m])[pairs])) if pairs.any() else 0.0
            r = found[key_of(known[j])]
            if not len(actual):
                continue
            r['windows'] += 1
            r['points'] += len(actual)
            r['abs'] += float(np.sum(np.abs(error)))
            r['sq'] += float(np.sum(error ** 2))
            r['scaled'].append(float(np.mean(np.abs(error))) / scale if scale > 0 else math.nan)
            if how != 'none':
                low, high = lower[:, i][ahead].astype(float), upper[:, i][ahead].astype(float)
                r['inside'] += int(np.sum((actual >= low) & (actual <= high)))
    out = []
    for key, r in found.items():
        out += _scored(key, r, how)
    if options.get('group_by') and found:
        every = [r for r in found.values() if r['points']]
        total = {'windows': sum(r['windows'] for r in every), 'points': sum(r['points'] for r in every),
                 'abs': sum(r['abs'] for r in every), 'sq': sum(r['sq'] for r in every),
                 'scaled': [v for r in every for v in r['scaled']], 'inside': sum(r['inside'] for r in every)}
        out += _scored('{}', total, how)
    return out


def _scored(key, r, how):
    """A group's (or all groups') rows of cross_validation from its sums r."""
    if not r['points']:
        return [(key, 'windows', 0.0), (key, 'points', 0.0)]
    n = r['points']
    return [(key, 'windows', float(r['windows'])), (key, 'points', float(n)), (key, 'mae', r['abs'] / n),
            (key, 'rmse', math.sqrt(r['sq'] / n)), (key, 'mase', float(np.mean(r['scaled']))),
            (key, 'coverage', None if how == 'none' else r['inside'] / n)]
