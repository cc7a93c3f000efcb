"""Separation: labels that a model's weights can classify perfectly, read from the model's prediction on each row.

Where a direction of the weights separates a logistic model's labels, the log-likelihood rises towards its bound
as the weights grow along it: there is no maximum-likelihood estimate, whatever an optimizer returns is where it
happened to stop, and standard errors of it mean nothing. R's glm warns "fitted probabilities numerically 0 or 1
occurred", statsmodels raises PerfectSeparationWarning. pgad reads the fitted model's prediction z on each row
(margin m = z for label 1, −z for label 0), whichever optimizer fitted it:
- complete separation: every row on its side (m > 0). No labels that are not separable are classified perfectly by
  any weights, so this holds only where they are separable, and for a model linear in its weights (any GLM) the
  loss then falls to 0 along w → c·w, c → ∞.
- quasi-complete separation: some rows fitted with a probability within 1e-6 of their label (m > CERTAIN), and a
  direction v of the weights that only those rows inform: the other rows' Jacobian J_R = ∂z/∂w (each row's
  gradient of the prediction, at the fit) has J_R·v = 0. Separated that way, the fit runs out along v (the rows
  that do not move along it stay where they are); a fit with the same confident rows whose other rows still pin
  down every direction is an ordinary one (a strong predictor), however large its margins: R's test, any fitted
  probability within 10·ε of 0 or 1, fires on many of those (breast-cancer fits with six raw features have margins
  near 100) and is not used. The share of information is the least generalised eigenvalue of (J_RᵀJ_R, JᵀJ),
  equilibrated: below SHARE, a direction that the other rows do not see. Models whose weights are all numbers only
  (the Jacobian's columns are the reverse-mode gradient of the model's DAG, evaluated over the rows).
A softmax model (models/classes.py) is checked class by class (classes_separated): a class whose fitted probability
is within 1e-6 of 1 on every row of it and of 0 on every other row is separated from the others, as the complete
separation of a logistic model's labels (iris's setosa by its petals): adding to that class's weights a direction
that separates it lowers the loss without end. Quasi-complete separation is not tested there.
A hinge model whose loss is 0 on every row (m ≥ 1) has separable data too: any weights that separate the rows by a
margin of 1 fit them as well, so the solution is not unique.

pgad.train warns (per model and group) and pgad.summary refuses (22000). The predictions are the model's DAG over
the loaded columns (python_backend.values), BLOCK rows at a time, so the memory stays bounded and a cancel is seen
between blocks.
"""
import math

import numpy as np

from .. import python_backend
from ..errors import PgadError
from ..lang import reverse
from . import objective

BLOCK = 1 << 14
CERTAIN = math.log(1e6)  # σ(m) > 1 − 1e-6
SHARE = 1e-9             # the rounding of a rank-deficient Gram matrix's eigenvalues sits far below; a weak one above
MAX_WEIGHTS = 300        # as the Hessian's: a Gram matrix of p² numbers


def _blocks(columns, rows, interrupts):
    """(start, end, {name: the column's rows start:end}) of each BLOCK rows of columns, interrupts() before each."""
    for start in range(0, rows, BLOCK):
        interrupts()
        end = min(start + BLOCK, rows)
        yield start, end, {c: v[start:end] for c, v in columns.items()}


def predictions(model, columns, weights, rows, interrupts=lambda: None):
    """The model's prediction on each of the rows (columns {name: array}, weights as python_backend.values takes them)."""
    out = np.empty(rows)
    for start, end, block in _blocks(columns, rows, interrupts):
        out[start:end], = python_backend.values(model.graph, [model.root], block, weights, end - start)
    return out


def grams(model, columns, weights, rows, interrupts=lambda: None):
    """grams(rows_mask) → (JᵀJ, J_RᵀJ_R) of the model's Jacobian by its weights at weights over the rows, and over the
    rows in rows_mask; None where a weight is not a number or there are more than MAX_WEIGHTS."""
    names = list(weights)
    if not names or len(names) > MAX_WEIGHTS or any(np.ndim(v) for v in weights.values()):
        return None
    lam = model.copy()
    try:
        ids = list(reverse.gradient(lam.graph, lam.root, names).values())
    except PgadError:  # the derivatives past pgad.max_lambda_nodes: no test
        return None

    def both(mask):
        everything, some = np.zeros((len(names), len(names))), np.zeros((len(names), len(names)))
        for start, end, block in _blocks(columns, rows, interrupts):
            jacobian = np.column_stack(python_backend.values(lam.graph, ids, block, weights, end - start))
            everything += jacobian.T @ jacobian
            kept = jacobian[mask[start:end]]
            some += kept.T @ kept
        return everything, some
    return both


def share(everything, some):
    """The least share, over the directions v, of vᵀ·everything·v that vᵀ·some·v holds (both equilibrated by
    everything's diagonal); None where everything is singular (collinear weights: pgad.summary's error, not this)."""
    scale = np.sqrt(np.diag(everything))
    if not np.all(np.isfinite(everything)) or not np.all(scale > 0):
        return None
    a, b = everything / np.outer(scale, scale), some / np.outer(scale, scale)
    try:
        low = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return None
    m = np.linalg.solve(low, np.linalg.solve(low, b).T)  # L⁻¹·B·L⁻ᵀ
    return float(np.linalg.eigvalsh((m + m.T) / 2)[0])


def found(loss, labels, z, gram=None):
    """None, or (what separates, how many rows show it) for the labels and predictions z of a model under loss:
    'complete' or 'quasi' (tested with gram, as grams gives it; without, complete only) for 'logistic', 'hinge' for
    a hinge model whose loss is 0 on every row."""
    kind, labels, z = objective.base(loss), np.asarray(labels, dtype=np.float64), np.asarray(z, dtype=np.float64)
    if kind not in ('logistic', 'hinge') or not len(z) or not np.all(np.isfinite(z)):
        return None
    margin = np.where(labels > 0, z, -z)
    if kind == 'hinge':
        return ('hinge', len(z)) if np.all(margin >= 1) else None
    if np.all(margin > 0):
        return 'complete', len(z)
    certain = margin > CERTAIN
    if not certain.any() or gram is None:
        return None
    least = share(*gram(~certain))
    return ('quasi', int(certain.sum())) if least is not None and least < SHARE else None


def says(separated, rows):
    """(message, detail) of found's answer, for rows rows."""
    kind, count = separated
    if kind == 'complete':
        return ('the labels are separated: every row is classified correctly, and the loss falls towards 0 as the '
                'weights grow without bound',
                f'All {rows} rows are on their side; there is no maximum-likelihood estimate, and the weights are '
                'where the optimizer stopped.')
    if kind == 'quasi':
        return (f'fitted probabilities numerically 0 or 1 occurred ({count} of {rows} rows within 1e-6): the labels '
                'are quasi-completely separated',
                'A direction of the weights that only those rows inform grows without bound; there is no '
                'maximum-likelihood estimate.')
    return ('the hinge loss is 0 on every row: the data are separable, and the solution is not unique',
            f'All {rows} rows are on their side by a margin of at least 1; any weights that keep them there fit as '
            'well.')


HINT = ('Drop or merge the column that separates the labels, add rows, or train with l2 => a penalty, whose '
        'estimate is finite.')


def classes_separated(model, logits, columns, label, weights, rows, interrupts=lambda: None):
    """(the positions, from 0, of the classes of a softmax model that its fit separates from the others, those of
    the classes that no row has): model, its unrolled prediction (a Lambda), logits its nodes of the logits in class
    order; columns {name: array} of the rows it was trained on, the label's the class's code 1 … K; weights
    {element: value}."""
    separated, seen = np.ones(len(logits), dtype=bool), np.zeros(len(logits), dtype=bool)
    for start, end, block in _blocks(columns, rows, interrupts):
        z = np.column_stack(python_backend.values(model.graph, [e.id for e in logits], block, weights, end - start))
        top = z.max(axis=1, keepdims=True)
        log_p = z - top - np.log(np.exp(z - top).sum(axis=1, keepdims=True))
        own = block[label][:, None] == np.arange(1, len(logits) + 1)[None, :]
        separated &= np.all(np.where(own, log_p > np.log1p(-1e-6), log_p < np.log(1e-6)), axis=0)
        seen |= own.any(axis=0)
    separated &= seen if seen.sum() > 1 else False  # a single class is no separation: its rows alone are there
    return [int(k) for k in np.flatnonzero(separated)], [int(k) for k in np.flatnonzero(~seen)]


def warn_classes(keys, found, warning):
    """warning(message, hint) naming the classes a softmax fit separates, and those without a row (found, as
    classes_separated gives them; keys the classes)."""
    separated, absent = found
    if separated:
        named = ', '.join(f'"{keys[k]}"' for k in separated)
        warning(f'fitted probabilities numerically 0 or 1 occurred: class{"es" if len(separated) > 1 else ""} '
                f'{named} {"are" if len(separated) > 1 else "is"} separated from the others (every row of it within '
                '1e-6 of probability 1, every other row within 1e-6 of 0). A direction of the weights that separates '
                'it lowers the loss without end: there is no maximum-likelihood estimate, and the weights are where '
                'the optimizer stopped.', HINT)
    if absent:
        named = ', '.join(f'"{keys[k]}"' for k in absent)
        warning(f'no row has class{"es" if len(absent) > 1 else ""} {named}: the loss falls without end as '
                f'{"their logits fall" if len(absent) > 1 else "its logit falls"}, and the weights are where the '
                'optimizer stopped (the classes are the whole data\'s, shared by the groups).',
                'Train with l2 => a penalty, whose estimate is finite, or leave the class out of the data.')


def warn(loss, labels, z, warning, gram=None):
    """warning(message, hint) where the fitted model's predictions z on the labels show separation."""
    separated = found(loss, labels, z, gram)
    if separated is not None:
        message, detail = says(separated, len(z))
        warning(f'{message}. {detail}', HINT if separated[0] != 'hinge' else
                'Train with l2 => a penalty for the maximum-margin weights.')


def refuse(name, loss, labels, z, where='', gram=None):
    """22000 where a logistic model's predictions z on the labels show separation: no standard errors."""
    separated = found(loss, labels, z, gram)
    if separated is not None:
        message, detail = says(separated, len(z))
        raise PgadError('22000', f'model "{name}"{where} has no standard errors: {message}', detail=detail, hint=HINT)


def check_fit(loss, model, prog, table, label, weights, warning, interrupts=lambda: None):
    """warn for a fit of a logistic or hinge model: its weights ({weight: value}, as Program.nest gives) on table,
    the rows it was trained on (loaded by prog's columns)."""
    if objective.base(loss) not in ('logistic', 'hinge') or not table.rows:
        return
    names = [str(c) for c in prog.columns]
    if label not in names:
        return
    columns = dict(zip(names, table.columns))
    warn(loss, columns[label], predictions(model, columns, weights, table.rows, interrupts), warning,
         grams(model, columns, weights, table.rows, interrupts))
