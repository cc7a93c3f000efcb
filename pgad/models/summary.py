"""A trained model's coefficient table, from the exact Hessian of its objective: pgad.summary's statistics.

For an unregularised 'squared' model the table is ordinary least squares': with H the Hessian of the summed loss
Σ (model − y)² (2·XᵀX for a model linear in its weights), the covariance is σ²·(H/2)⁻¹ with σ² = RSS/(n − p), the
statistic t = estimate / std_error on n − p degrees of freedom, and the 95% interval estimate ± t₀.₉₇₅(n − p)·se.
For an unregularised 'logistic' model it is the Wald table: the covariance is H⁻¹ (H = Xᵀdiag(σ(1−σ))X, the Fisher
information), z = estimate / std_error against the normal distribution, the interval ± 1.96·se. These are what
statsmodels' OLS and Logit (and MADlib's linregr and logregr summaries) report. The distributions are the few lines
below (the normal's by math.erf; Student's t by the regularised incomplete beta function's continued fraction),
tested against scipy through statsmodels in tests/test_summary.py, so the server needs no scipy.
"""
import json
import math
from dataclasses import replace

import numpy as np

from .. import arguments, calls, categorical, loader, program, server
from ..errors import PgadError
from ..lang import hessian as second
from . import catalog, objective, separation

LOSSES = ('squared', 'logistic', 'poisson', 'gamma')
LEVEL = 0.95

# The log-link losses, by name: the dispersion φ from (labels y, fitted means μ̂ = exp(prediction), rows n, weights
# p). Their covariance is φ·I⁻¹ with I the expected (Fisher) information, what statsmodels' GLM inverts: the Hessian
# of the summed loss at the fitted weights with each label replaced by its fitted mean (expected), for any model —
# for a model linear in its weights Xᵀdiag(μ̂)X (poisson: the observed Hessian too, the log link being its canonical
# one) and XᵀX (gamma, whose observed Hessian Σ x·xᵀ·y/μ̂ is another). Gamma's φ is Pearson's χ²/(n − p).
EXPECTED = {
    'poisson': lambda y, mu, n, p: 1.0,
    'gamma': lambda y, mu, n, p: float(np.sum(((y - mu) / mu) ** 2)) / (n - p),
}


def coefficients(name, unconverged='error'):
    """pgad.summary's rows: (group_key, weight, estimate, std_error, statistic, p_value, ci_low, ci_high) of model
    name, from the exact Hessian of its objective at the fitted weights over its data query, run again as the caller;
    per group for a grouped model. Only the role that trained the model may: the data query is that role's SQL text,
    and running it as another role (a superuser above all) would run whatever functions it calls with that role's
    privileges."""
    config = calls.settings()
    found = catalog.rows(name)
    me = catalog.current_user()
    for owner in {row['trained_by'] for row in found} - {me}:
        raise PgadError('42501', f'model "{name}" belongs to role "{owner}"',
                        detail='pgad.summary runs the model\'s data query again, and that query is the text of the '
                               'role that trained it: only that role may run it.',
                        hint='Ask that role for the summary, or train a model of your own on the data.')
    first = found[0]
    options = json.loads(first['options'])
    check_model(name, first['loss'], options)
    goal = objective.build(first['model'], first['loss'], options.get('label', 'y'), config.limits)
    lam = objective.labelled(program.parsed(goal.text, config.limits), goal, first['loss'])
    w, unread = arguments.unread(arguments.weights(first['weights'], goal.model, config.memory_limit), lam)
    w, cats = categorical.stored(w, goal.model)  # the stored categories; a row of another category is skipped
    prog = program.build_hessian(goal.text, tuple(w), config.limits,
                                 calls.shapes_of(w, loader.lengths(first['data'], lam.columns, cats.codes), cats))
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, first['loss']))
    names = categorical.element_names(prog, cats)
    backend = options.get('backend', 'auto')
    groups = options.get('group_by') or []
    if groups:
        _, parts = loader.load_groups(first['data'], list(prog.columns), groups, config.memory_limit, cats.codes)
        tables = {json.dumps(json.loads(part.key), sort_keys=True): part.table for part in parts}
    else:
        tables = {None: calls.some_rows(loader.load(first['data'], list(prog.columns), config.chunk_rows,
                                               config.memory_limit, dict(prog.columns_of), cats.codes))}
    out = []
    for row in found:
        key = None if row['group_key'] is None else json.dumps(json.loads(row['group_key']), sort_keys=True)
        part = tables.get(key)
        if part is None or part.rows == 0:
            continue  # the group is no longer in the data
        w, unread = arguments.unread(arguments.weights(row['weights'], goal.model, config.memory_limit), lam)
        w = categorical.as_vectors(w, cats)
        vector = calls.vector_of(w)
        where = '' if row['group_key'] is None else f', group {row["group_key"]}'
        part, dispersion = _at_the_fit(name, first['loss'], goal, prog, part, w, options.get('label', 'y'), where)
        sums = calls.second_sums(calls.Call(prog, part, calls.compiled(prog, backend, 'float64', config, part.rows), vector, unread))
        p = len(prog.weights)
        for line in table(name, first['loss'], vector, sums[0], second.full(sums[1 + p:], p),
                                      part.rows, names, dispersion):
            out.append((row['group_key'], *line))
    return out



def _at_the_fit(name, loss, goal, prog, part, w, label, where):
    """(the rows the Hessian is summed over, the dispersion or None) for a named likelihood loss at the fitted
    weights w: the labels checked (objective.check_labels), a logistic model refused where its predictions separate
    its labels (separation.py), and for a log-link loss (EXPECTED) its rows with each label its fitted mean and φ."""
    names = [str(c) for c in prog.columns]
    if objective.base(loss) not in ('logistic', *EXPECTED) or label not in names:
        return part, None
    columns = dict(zip(names, part.columns))
    y = columns[label]
    objective.check_labels(loss, label, y, f'model "{name}"{where}: ')
    z = separation.predictions(goal.model, columns, w, part.rows, server.check_interrupts)
    separation.refuse(name, loss, y, z, where, separation.grams(goal.model, columns, w, part.rows,
                                                               server.check_interrupts))
    if loss not in EXPECTED:
        return part, None
    if label in goal.columns:
        raise PgadError('0A000', f'pgad.summary takes no \'{loss}\' model that reads its label column "{label}" too',
                        detail='Its expected information replaces each label with its fitted mean.',
                        hint='Give the model a copy of the column under another name in the data query.')
    p = len(prog.weights)
    if part.rows <= p and loss == 'gamma':
        raise PgadError('22000', f'model "{name}" has {p} weights and only {part.rows} rows: no residual degrees of '
                                 'freedom for its dispersion')
    with np.errstate(over='ignore'):
        mu = np.exp(z)
    if not np.all(np.isfinite(mu)):
        raise PgadError('22003', f'model "{name}"{where} predicts a mean past float64\'s range (exp of '
                                 f'{float(np.max(z)):g})', hint='Check the fit: its weights may have diverged.')
    rows = loader.Table([mu if c == label else v for c, v in zip(names, part.columns)], part.rows, part.skipped)
    return rows, EXPECTED[loss](y, mu, part.rows, p)


def check_model(name, loss, options):
    """SQLSTATE 0A000 unless the model's loss and options give a summary: a loss of LOSSES, no penalty."""
    if loss not in LOSSES:
        raise PgadError('0A000', 'pgad.summary takes a \'squared\', \'logistic\', \'poisson\' or \'gamma\' model, '
                                 f'not model "{name}" with loss {_loss_name(loss)}',
                        detail='Standard errors need the likelihood the loss is: least squares, or the Bernoulli, '
                               'Poisson or gamma log-likelihood.',
                        hint="Train the model with loss => 'squared', 'logistic', 'poisson' or 'gamma'.")
    for penalty in ('l1', 'l2'):
        if float(options.get(penalty) or 0) > 0:
            raise PgadError('0A000', f'pgad.summary takes an unregularised model, not model "{name}" with '
                                     f'{penalty} = {options[penalty]}',
                            detail='A penalised fit is not the maximum-likelihood estimate the standard errors are '
                                   'of.',
                            hint=f'Train the model again without {penalty}.')


def _loss_name(loss):
    return f"'{loss}'" if objective.base(loss) is not None else 'a lambda'


def table(name, loss, estimate, loss_sum, hessian_sum, rows, names, dispersion=None):
    """[(weight, estimate, std_error, statistic, p_value, ci_low, ci_high)] of each weight element `names[k]` at the
    fitted `estimate` (a vector), given the summed loss over the `rows` rows and its Hessian (p × p), and for a
    log-link loss the dispersion (EXPECTED: the Hessian is then the expected information)."""
    p = len(names)
    h = np.asarray(hessian_sum, dtype=np.float64)
    if loss == 'squared':
        dof = rows - p
        if dof <= 0:
            raise PgadError('22000', f'model "{name}" has {p} weights and only {rows} rows: no residual degrees of '
                                     'freedom for its standard errors')
        h = h / 2  # XᵀX
        scale = loss_sum / dof
    else:
        dof, scale = None, 1.0 if dispersion is None else dispersion
    inverse = _inverse(name, h)
    se = np.sqrt(np.maximum(np.diag(inverse) * scale, 0.0))
    out = []
    for k, weight in enumerate(names):
        stat = estimate[k] / se[k] if se[k] > 0 else math.copysign(math.inf, estimate[k])
        if dof is None:
            pvalue, q = 2 * normal_sf(abs(stat)), normal_quantile(0.5 + LEVEL / 2)
        else:
            pvalue, q = 2 * t_sf(abs(stat), dof), t_quantile(0.5 + LEVEL / 2, dof)
        out.append((weight, float(estimate[k]), float(se[k]), float(stat), float(pvalue),
                    float(estimate[k] - q * se[k]), float(estimate[k] + q * se[k])))
    return out


def _inverse(name, h):
    """H⁻¹, or SQLSTATE 22000 where H is singular (or too near it to invert in float64)."""
    p = len(h)
    if p and (not np.all(np.isfinite(h)) or np.linalg.matrix_rank(h) < p or np.linalg.cond(h) > 1e14):
        raise PgadError('22000', f'the Hessian of model "{name}" is singular: its weights are not identified by '
                                 'the data',
                        detail='A weight the data does not move, two columns that are one another\'s multiple, or '
                               'a logistic model that separates its labels perfectly.',
                        hint='Drop the weight or the column that repeats another, or add rows.')
    return np.linalg.inv(h)


# --- the normal and Student's t distributions ------------------------------------------------------------------------

def normal_sf(z):
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def normal_quantile(q):
    """z with P(Z ≤ z) = q, by bisection then Newton steps on the cdf (to float64's precision)."""
    return _solve(lambda z: 1 - normal_sf(z) - q, lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi))


def t_sf(t, dof):
    """P(T > t) for Student's t on dof degrees of freedom, t ≥ 0: ½·I_{dof/(dof+t²)}(dof/2, ½)."""
    return 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))


def t_quantile(q, dof):
    """t with P(T ≤ t) = q (q > ½)."""
    density = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)
    return _solve(lambda t: 1 - t_sf(t, dof) - q, lambda t: density * (1 + t * t / dof) ** (-(dof + 1) / 2))


def _solve(f, df, low=0.0, high=64.0):
    """The root of the increasing f on [low, high]: bisection to 1e-6, then Newton's steps."""
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    x = (low + high) / 2
    for _ in range(8):
        x -= f(x) / df(x)
    return x


def _incomplete_beta(a, b, x):
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _incomplete_beta(b, a, 1 - x)
    tiny, c, d = 1e-300, 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-16:
            break
    return front * f / a
