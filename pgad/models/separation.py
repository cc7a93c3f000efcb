"""Separation: labels that a model's weights can classify perfectly, read from the model's prediction on each row.

Where a direction of the weights separates a logistic model's labels, the log-likelihood rises towards its bound
as the weights grow along it: there is no maximum-likelihood estimate, whatever an optimizer returns is where it
happened to stop, and standard errors of it mean nothing. R's glm warns "fitted probabilities numerically 0 or 1
occurred", statsmodels raises PerfectSeparationWarning. pgad looks at the fitted model's prediction z on each row
(margin m = z for label 1, −z for label 0), whichever optimizer fitted it:
- complete separation: every row on its side (m > 0). No set of labels that is not separable is classified
  perfectly by any weights, so this holds only where the labels are separable, and for a model linear in its
  weights (any GLM) the loss then falls to 0 along w → c·w, c → ∞.
- quasi-complete separation: some rows on their side with a fitted probability numerically 1 (m beyond QUASI,
  σ(−m) < 10·ε, R's glm.fit's test): the weights that separate those rows have gone far out along the direction.
A hinge model whose loss is 0 on every row (m ≥ 1) has separable data too: any weights that separate the rows by a
margin of 1 fit them as well, so the solution is not unique.

pgad.train warns (per model and group) and pgad.summary refuses (22000). The predictions are the model's DAG over
the loaded columns (evaluate.values), BLOCK rows at a time, so the memory stays bounded and a cancel is seen
between blocks.
"""
import math

import numpy as np

from ..errors import PgadError
from . import evaluate, objective

BLOCK = 1 << 16
QUASI = math.log((1 - 10 * np.finfo(np.float64).eps) / (10 * np.finfo(np.float64).eps))  # σ(m) > 1 − 10·ε past ≈ 33.7


def predictions(model, columns, weights, rows, interrupts=lambda: None):
    """The model's prediction on each of the rows (columns {name: array}, weights as evaluate.values takes them)."""
    out = np.empty(rows)
    for start in range(0, rows, BLOCK):
        interrupts()
        end = min(start + BLOCK, rows)
        block = {c: v[start:end] for c, v in columns.items()}
        out[start:end], = evaluate.values(model.graph, [model.root], block, weights, end - start)
    return out


def found(loss, labels, z):
    """None, or (what separates, how many rows show it) for the labels and predictions z of a model under loss:
    'complete' or 'quasi' for 'logistic', 'hinge' for a hinge model whose loss is 0 on every row."""
    kind, labels, z = objective.base(loss), np.asarray(labels, dtype=np.float64), np.asarray(z, dtype=np.float64)
    if kind not in ('logistic', 'hinge') or not len(z) or not np.all(np.isfinite(z)):
        return None
    margin = np.where(labels > 0, z, -z)
    if kind == 'hinge':
        return ('hinge', len(z)) if np.all(margin >= 1) else None
    if np.all(margin > 0):
        return 'complete', len(z)
    certain = int(np.sum(margin > QUASI))
    return ('quasi', certain) if certain else None


def says(separated, rows):
    """(message, detail) of found's answer, for rows rows."""
    kind, count = separated
    if kind == 'complete':
        return ('the labels are separated: every row is classified correctly, and the loss falls towards 0 as the '
                'weights grow without bound',
                f'All {rows} rows are on their side; there is no maximum-likelihood estimate, and the weights are '
                'where the optimizer stopped.')
    if kind == 'quasi':
        return (f'fitted probabilities numerically 0 or 1 occurred ({count} of {rows} rows): the labels are '
                'quasi-completely separated',
                'The weights that separate those rows grow without bound; there is no maximum-likelihood estimate.')
    return ('the hinge loss is 0 on every row: the data are separable, and the solution is not unique',
            f'All {rows} rows are on their side by a margin of at least 1; any weights that keep them there fit as '
            'well.')


HINT = ('Drop or merge the column that separates the labels, add rows, or train with l2 => a penalty, whose '
        'estimate is finite.')


def warn(loss, labels, z, warning):
    """warning(message, hint) where the fitted model's predictions z on the labels show separation."""
    separated = found(loss, labels, z)
    if separated is not None:
        message, detail = says(separated, len(z))
        warning(f'{message}. {detail}', HINT if separated[0] != 'hinge' else
                'Train with l2 => a penalty for the maximum-margin weights.')


def refuse(name, loss, labels, z, where=''):
    """22000 where a logistic model's predictions z on the labels show separation: no standard errors."""
    separated = found(loss, labels, z)
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
    warn(loss, columns[label], predictions(model, columns, weights, table.rows, interrupts), warning)
