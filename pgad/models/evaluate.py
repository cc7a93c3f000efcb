"""pgad.evaluate: a stored model scored on any data, as metrics per group.

The model's rows in pgad.models give its lambda, loss, label, group_by and fitted weights (stored in the columns'
units: standardize => true trains on scaled columns but stores the weights scaled back, standardize.py). The columns
the objective reads are loaded once by pgad's loader (rows with a NULL in one of them skipped, as pgad.train skips
them), per group with group_by (loader.load_groups). The prediction and the objective of every row are then the
model's DAG evaluated over whole numpy columns with the rules table's numpy functions (values, below): the compiled
kernels give sums over the rows only, and the metrics need each row's prediction. No Python runs per row.

`loss` is the model's objective on the data without regularisation, the mean over the rows (pgad.models.final_loss's
convention, which adds the penalty). The other metrics follow the named loss (METRICS); a lambda loss has no label
that pgad knows the meaning of, so it gets rows and loss only. A group of the data that the model has no weights for
is reported as its `unseen_rows`; the rows skipped for a NULL as `skipped_rows`. A categorical weight's column is
coded by the stored model's categories (categorical.stored, loader's unseen): a category the model never saw
contributes 0, as in the scoring function, and the rows with one are counted as `unseen_category_rows`.
"""
import json

import numpy as np

from .. import categorical, loader, program, python_backend
from ..errors import PgadError
from ..lang import vectors
from . import catalog, objective

def _ranks(x):
    """The rank (from 1) of each value of x, ties given their mean rank."""
    order = np.argsort(x, kind='mergesort')
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


def roc_auc(y, score):
    """The area under the ROC curve of score for labels y (0/1): Mann-Whitney's U, ties counted half; None with one
    class only."""
    positive = y == 1
    n1, n0 = int(positive.sum()), int((~positive).sum())
    if not n1 or not n0:
        return None
    return float((_ranks(score)[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def _ratio(a, b):
    return float(a / b) if b else 0.0  # scikit-learn's zero_division=0


def _classes(y, p):
    """(true positives, predicted positives, actual positives) of 0/1 predictions p."""
    return float(np.sum((p == 1) & (y == 1))), float(np.sum(p == 1)), float(np.sum(y == 1))


def _f1(y, p):
    tp, predicted, actual = _classes(y, p)
    return _ratio(2 * tp, predicted + actual)


# metric → its value from (label y, prediction z), for each named loss; one line each
REGRESSION = {
    'mse': lambda y, z: np.mean((z - y) ** 2),
    'rmse': lambda y, z: np.sqrt(np.mean((z - y) ** 2)),
    'mae': lambda y, z: np.mean(np.abs(z - y)),
    'r2': lambda y, z: 1 - np.sum((z - y) ** 2) / np.sum((y - np.mean(y)) ** 2) if np.ptp(y) else None,
}
METRICS = {
    'squared': REGRESSION,
    'absolute': REGRESSION,
    'logistic': {
        'log_loss': lambda y, z: np.mean(np.logaddexp(0, z) - y * z),  # −mean(y·ln σ(z) + (1−y)·ln(1−σ(z)))
        'accuracy': lambda y, z: np.mean((z >= 0) == (y == 1)),        # probability ≥ 0.5
        'precision': lambda y, z: _ratio(*_classes(y, (z >= 0) * 1.0)[:2]),
        'recall': lambda y, z: _ratio(_classes(y, (z >= 0) * 1.0)[0], _classes(y, (z >= 0) * 1.0)[2]),
        'f1': lambda y, z: _f1(y, (z >= 0) * 1.0),
        'roc_auc': lambda y, z: roc_auc(y, z),
    },
    'hinge': {
        'accuracy': lambda y, z: np.mean(np.where(z >= 0, 1.0, -1.0) == y),  # class 1 where the score is ≥ 0
    },
    # the prediction z of a log-link loss is ln of the mean μ: the deviances are scikit-learn's mean_poisson_deviance
    # and mean_gamma_deviance of μ = exp(z), written with z (y·ln(y/μ) = y·(ln y − z), 0 where y = 0)
    'poisson': {
        'poisson_deviance': lambda y, z: 2 * np.mean(_xlogy(y, y) - y * z - y + np.exp(z)),
        'mae': lambda y, z: np.mean(np.abs(np.exp(z) - y)),
    },
    'gamma': {
        'gamma_deviance': lambda y, z: 2 * np.mean(z - np.log(y) + y * np.exp(-z) - 1),
        'mae': lambda y, z: np.mean(np.abs(np.exp(z) - y)),
    },
    'huber': REGRESSION,
    # scikit-learn's mean_pinball_loss with alpha τ, the loss's parameter
    'quantile': lambda tau: {
        'mae': REGRESSION['mae'],
        'pinball_loss': lambda y, z: np.mean(tau * np.maximum(y - z, 0) + (1 - tau) * np.maximum(z - y, 0)),
    },
}


def _xlogy(x, y):
    """x·ln y, 0 where x = 0."""
    return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


def values(graph, roots, columns, weights, rows):
    """The value over the rows of each of graph's nodes roots, as float64 arrays of `rows` values: the python
    backend's evaluation over whole columns ({name: array}), the weights {name: number, or a categorical weight's
    vector of its categories' values}. A categorical weight is read as w.x[d.c] only (categorical.indexed), d.c each
    row's code 1 … K, 0 for a category the model never saw: the row's value is the vector's entry at the code, 0 at
    code 0, as the scoring function's CASE gives."""
    at = {n: np.concatenate([[0.0], np.asarray(v, dtype=np.float64)]) if np.ndim(v) else np.float64(v)
          for n, v in weights.items()}  # a categorical weight: 0, then its categories' values
    _, _, plan = python_backend.steps(graph, roots, {name: name for name in columns}, {name: name for name in at})
    found = python_backend.evaluate(plan, columns, at)
    return [np.broadcast_to(np.asarray(found[r], dtype=np.float64), (rows,)) for r in roots]


def evaluate(name, data, config):
    """pgad.evaluate's rows, (group_key as jsonb text or None, metric, value)."""
    stored = catalog.rows(name)
    first = stored[0]
    options = json.loads(first['options'])
    label = options.get('label', 'y')
    goal = objective.build(first['model'], first['loss'], label, config.limits)
    lam = objective.labelled(program.parsed(goal.text, config.limits), goal, first['loss'])  # a boolean label too
    weights = {r['group_key']: json.loads(r['weights']) for r in stored}
    cats = categorical.Categories()
    if categorical.indexed(weights[first['group_key']], goal.model):  # coded by the stored categories, unseen as 0
        _, cats = categorical.stored(weights[first['group_key']], goal.model)
        weights = {key: categorical.as_vectors(v, cats) for key, v in weights.items()}
    if vectors.needed(goal.model) and not categorical.only(goal.model, cats) or any(
            isinstance(v, list) for w in weights.values() for v in w.values()):
        raise PgadError('0A000', f'pgad.evaluate does not take model "{name}", a model with vectors',
                        hint=f'Score the data with pgad_models."{name}"(…) and compare in SQL.')
    columns = list(dict.fromkeys([*lam.columns, *goal.model.columns]))
    kind, parameter = objective.named(first['loss']) or (None, None)
    metrics = METRICS.get(kind, {})
    metrics = metrics(parameter) if callable(metrics) else metrics
    label = label if kind in METRICS else None
    group_by = options.get('group_by') or []
    if group_by:
        _, parts = loader.load_groups(data, columns, group_by, config.memory_limit, cats.codes, unseen=True)
    else:
        parts = [loader.Group(None, None, loader.load(data, columns, config.chunk_rows, config.memory_limit, None,
                                                      cats.codes, unseen=True))]
    if not any(part.table.rows for part in parts):
        skipped = sum(part.table.skipped for part in parts)
        raise PgadError('22000', 'the data has no rows' if not skipped else
                        f'every row of the data has NULL in a column the model reads ({skipped} rows)',
                        hint=f'pgad.evaluate scores model "{name}" on the rows of the data.')
    out = []
    for part in parts:
        key, table = part.key, part.table
        if key not in weights:
            out.append((key, 'unseen_rows', float(table.rows)))
            if table.skipped:
                out.append((key, 'skipped_rows', float(table.skipped)))
            continue
        out.append((key, 'rows', float(table.rows)))
        if table.rows:
            cols = dict(zip(map(str, columns), table.columns))
            # the prediction from the model's DAG, each row's objective from the objective lambda's
            z, = values(goal.model.graph, [goal.model.root], cols, weights[key], table.rows)
            per_row, = values(lam.graph, [lam.root], cols, weights[key], table.rows)
            out.append((key, 'loss', float(np.mean(per_row))))
            if cats:  # the rows with a category the model never saw (code 0), whose weight contributed 0
                codes = [cols[c] for c in cats.codes]
                out.append((key, 'unseen_category_rows', float(np.sum(np.any([c == 0 for c in codes], axis=0)))))
            y = cols[label] if label is not None else None
            if y is not None:
                where = f'model "{name}"' + (f', group {key}: ' if key else ': ')
                objective.check_labels(first['loss'], label, y, where)
            for metric, rule in metrics.items():
                with np.errstate(over='ignore'):  # exp(z) past float64: an infinite deviance
                    value = rule(y, z)
                out.append((key, metric, None if value is None else float(value)))
        out.append((key, 'skipped_rows', float(table.skipped)))
    return out
