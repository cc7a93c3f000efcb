"""pgad.evaluate: a stored model scored on any data, as metrics per group.

The model's rows in pgad.models give its lambda, loss, label, group_by and fitted weights (stored in the columns'
units: standardize => true trains on scaled columns but stores the weights scaled back, standardize.py). The columns
the objective reads are loaded once by pgad's loader (rows with a NULL in one of them skipped, as pgad.train skips
them; a NULL in a column the model imputes filled with its stored statistic, options.impute, as pgad.train filled
it: models/preprocess.py), per group with group_by (loader.load_groups). The prediction and the objective of every
row are then the model's DAG evaluated over whole numpy columns with the rules table's numpy functions (values,
below): the compiled kernels give sums over the rows only, and the metrics need each row's prediction. No Python
runs per row.

`loss` is the model's objective on the data without regularisation, the mean over the rows (pgad.models.final_loss's
convention, which adds the penalty). The other metrics follow the named loss (METRICS); a lambda loss has no label
that pgad knows the meaning of, so it gets rows and loss only. A group of the data that the model has no weights for
is reported as its `unseen_rows`; the rows skipped for a NULL as `skipped_rows`. A categorical weight's column is
coded by the stored model's categories (categorical.stored, loader's unseen): a category the model never saw
contributes 0, as in the scoring function, and the rows with one are counted as `unseen_category_rows`.

A 'softmax' model predicts a vector of K logits, one per class (the classes stored in its options). Its label column
is loaded as each row's class code 1 … K by those classes (loader.category_code, unseen=True: 0 for a label the
model never saw), its logits are the unrolled model's K roots evaluated over the columns (vectors.unrolled_value, as
the scoring function's), and multiclass() gives scikit-learn's metrics over the rows whose label the model knows;
the others are counted as `unseen_label_rows`.
"""
import json

import numpy as np

from .. import categorical, limits, loader, program, server
from ..python_backend import values
from ..errors import PgadError
from ..lang import parser, vectors
from . import catalog, forecast, objective, preprocess

SOFTMAX = 'softmax'

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


def rules_of(loss):
    """(the kind of a named loss, None for a lambda loss; its metrics: METRICS' rules, its parameter applied)."""
    kind, parameter = objective.named(loss) or (None, None)
    rules = METRICS.get(kind, {})
    return kind, rules(parameter) if callable(rules) else rules


def _xlogy(x, y):
    """x·ln y, 0 where x = 0."""
    return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


def class_name(text):
    """A class as the metrics' names write it: its text JSON-quoted, "setosa" (a quote or bracket in it escaped or
    inside the quotes, so confusion["a]"]["b"] reads one way only)."""
    return json.dumps(text, ensure_ascii=False)


# What a cell of the confusion matrix costs pgad.evaluate as a row (its tuple, its name, PostgreSQL's row): with more
# classes than the full matrix of cells fits in pgad.memory_limit, only the cells that count a row are given.
CELL_BYTES = 256


def multiclass(y, z, classes, cells=None):
    """[(metric, value)] of a softmax model over rows whose labels it knows: y their class codes (1 … K), z their
    logits (rows × K), classes the model's K classes (as text). scikit-learn's definitions over the model's classes
    (labels=classes): the predicted class is the argmax of the logits, the first class on a tie; log_loss the mean
    of logsumexp(z) − z[y] (natural log, no clipping); a ratio with nothing to divide by is 0 (zero_division=0), so
    that a class with no rows and no predictions has precision, recall and f1 0 and counts so in the macro means and
    not at all in the weighted ones (its support is 0). The confusion matrix's rows are the actual classes, its
    columns the predicted: every cell, or where K² is more than cells (None: no bound), the cells that count a row."""
    k = len(classes)
    y = np.asarray(y, dtype=np.int64) - 1
    rows = len(y)
    if rows == 0:  # every row's label unseen: no metric to give
        names = ['log_loss', 'accuracy', *(f'{m}_{a}' for a in ('macro', 'weighted') for m in
                                           ('precision', 'recall', 'f1'))]
        return [(m, None) for m in names]
    predicted = np.argmax(z, axis=1)
    tp = np.bincount(y[predicted == y], minlength=k).astype(np.float64)
    support = np.bincount(y, minlength=k).astype(np.float64)
    chosen = np.bincount(predicted, minlength=k).astype(np.float64)
    divide = np.vectorize(_ratio, otypes=[np.float64])
    precision, recall, f1 = divide(tp, chosen), divide(tp, support), divide(2 * tp, chosen + support)
    out = [('log_loss', float(np.mean(np.logaddexp.reduce(z, axis=1) - z[np.arange(rows), y]))),
           ('accuracy', float(np.mean(predicted == y)))]
    for average, weights in (('macro', np.full(k, 1 / k)), ('weighted', support / rows)):
        out += [(f'{m}_{average}', float(np.dot(weights, v))) for m, v in
                (('precision', precision), ('recall', recall), ('f1', f1))]
    names = [class_name(c) for c in classes]
    for c, name in enumerate(names):
        out += [(f'precision[{name}]', float(precision[c])), (f'recall[{name}]', float(recall[c])),
                (f'f1[{name}]', float(f1[c])), (f'support[{name}]', float(support[c]))]
    pairs, counts = np.unique(y * k + predicted, return_counts=True)  # the cells that count a row, in order
    if cells is not None and k * k > cells:
        return out + [(f'confusion[{names[a]}][{names[g]}]', float(n))
                      for a, g, n in zip(pairs // k, pairs % k, counts)]
    found = dict(zip(pairs.tolist(), counts.tolist()))
    for a, actual in enumerate(names):
        limits.tick(k)
        out += [(f'confusion[{actual}][{guess}]', float(found.get(a * k + g, 0))) for g, guess in enumerate(names)]
    return out


def logits(lam, root, columns, weights, rows):
    """The logits (rows × K) of an unrolled vector model (lam, root: vectors.unrolled_value's) over the columns
    ({element column: array}), the weights {name: number or nested lists} read element by element."""
    found = values(lam.graph, [node.id for node in root.flat], columns, vectors.by_element(weights), rows)
    return np.stack(found, axis=1) if found else np.zeros((rows, 0))


def evaluate(name, data, config, version=None):
    """pgad.evaluate's rows, (group_key as jsonb text or None, metric, value), of the deployed version or of
    version `version`."""
    stored = catalog.rows(name, version)
    first = stored[0]
    options = json.loads(first['options'])
    label = options.get('label', 'y')
    if 'order_by' in options:  # a sequence model: one step ahead from its last state
        return forecast.evaluate(name, data, config, stored, rules_of)
    if first['loss'] == SOFTMAX:
        return _softmax(name, data, config, stored, options, label)
    classes = options.get('classes')  # a 'logistic' label of two classes: coded 1 or 2, the loss reads it less 1
    goal = objective.build(first['model'], first['loss'], label, config.limits, coded=bool(classes))
    lam = objective.labelled(program.parsed(goal.text, config.limits), goal,  # a boolean label too
                             None if classes else first['loss'])
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
    kind, metrics = rules_of(first['loss'])
    label = label if kind in METRICS else None
    imputed = preprocess.of(options)  # NULLs replaced as training replaced them (models/preprocess.py)
    parts = _load(name, data, config, columns, options, {**cats.codes, **({label: classes} if classes else {})},
                  missing=set(imputed))
    out = []
    for part in parts:
        key, table = part.key, part.table
        if key not in weights:
            out += _unseen(part)
            continue
        table = preprocess.fill(table, list(map(str, columns)), imputed, cats.codes)
        out.append((key, 'rows', float(table.rows)))
        cols = dict(zip(map(str, columns), table.columns))
        if classes:  # the rows of a class the model never saw (code 0) counted and left out
            seen = cols[label] > 0
            out.append((key, 'unseen_label_rows', float(np.sum(~seen))))
            cols = {c: v[seen] for c, v in cols.items()}
            table = loader.Table(list(cols.values()), int(np.sum(seen)), table.skipped)
        if table.rows:
            # the prediction from the model's DAG, each row's objective from the objective lambda's
            z, = values(goal.model.graph, [goal.model.root], cols, weights[key], table.rows)
            per_row, = values(lam.graph, [lam.root], cols, weights[key], table.rows)
            out.append((key, 'loss', float(np.mean(per_row))))
            if cats:
                out.append((key, 'unseen_category_rows', _unseen_categories(cols, cats)))
            y = cols[label] if label is not None else None
            if classes:
                y = y - 1  # the second class is 1, the positive class
            elif y is not None:
                where = f'model "{name}"' + (f', group {key}: ' if key else ': ')
                objective.check_labels(first['loss'], label, y, where)
            for metric, rule in metrics.items():
                with np.errstate(over='ignore'):  # exp(z) past float64: an infinite deviance
                    value = rule(y, z)
                out.append((key, metric, None if value is None else float(value)))
        out.append((key, 'skipped_rows', float(table.skipped)))
    return out


def _load(name, data, config, columns, options, codes, elements=None, missing=()):
    """The groups (loader.Group) of the data's rows, the columns coded by codes ({column: its categories}), a value
    the model never saw as 0, a column in missing (imputed) with −NaN for NULL; 22000 where no row is left."""
    group_by = options.get('group_by') or []
    if group_by:
        _, parts = loader.load_groups(data, columns, group_by, config.memory_limit, codes, unseen=True)
    else:
        parts = [loader.Group(None, None, loader.load(data, columns, config.chunk_rows, config.memory_limit, elements,
                                                      codes, unseen=True, missing=missing))]
    if not any(part.table.rows for part in parts):
        skipped = sum(part.table.skipped for part in parts)
        raise PgadError('22000', 'the data has no rows' if not skipped else
                        f'every row of the data has NULL in a column the model reads ({skipped} rows)',
                        hint=f'pgad.evaluate scores model "{name}" on the rows of the data.')
    return parts


def _unseen_categories(cols, cats):
    """The rows with a category the model never saw (code 0) in a categorical weight's column, whose weight
    contributed 0."""
    return float(np.sum(np.any([cols[c] == 0 for c in cats.codes], axis=0)))


def _unseen(part):
    """The rows of a group the model has no weights for."""
    out = [(part.key, 'unseen_rows', float(part.table.rows))]
    if part.table.skipped:
        out.append((part.key, 'skipped_rows', float(part.table.skipped)))
    return out


def _softmax(name, data, config, stored, options, label):
    """pgad.evaluate's rows for a 'softmax' model: rows, unseen_label_rows, loss and multiclass()'s metrics over the
    rows whose label is one of its classes, skipped_rows; per group."""
    first = stored[0]
    classes = options['classes']
    model = parser.parse(first['model'], config.limits)
    weights = {r['group_key']: json.loads(r['weights']) for r in stored}
    cats = categorical.Categories()
    if categorical.indexed(weights[first['group_key']], model):
        _, cats = categorical.stored(weights[first['group_key']], model)
    weights = {key: {n: v for n, v in categorical.as_vectors(w, cats).items() if n in model.weights}
               for key, w in weights.items()}
    codes = {**cats.codes, label: classes}
    lengths = loader.lengths(data, [c for c in model.columns if c not in codes], cats.codes)
    shapes = vectors.Shapes(tuple((n, np.shape(v)) for n, v in weights[first['group_key']].items() if np.ndim(v)),
                            lengths, tuple(cats.codes))
    lam, root = vectors.unrolled_value(model, shapes, config.limits)
    elements = {e: (c, k + 1) for c, n in lengths for k, e in enumerate(vectors.elements(c, (n,)))}
    columns = list(dict.fromkeys([*lam.columns, label]))
    imputed = preprocess.of(options)  # NULLs replaced as training replaced them
    parts = _load(name, data, config, columns, options, codes, elements, missing=set(imputed))
    cells = config.memory_limit // CELL_BYTES
    if len(classes) ** 2 > cells:
        server.notice(f'model "{name}" has {len(classes)} classes: the confusion matrix gives only its cells that '
                      f'count a row ({len(classes) ** 2} cells would take more than pgad.memory_limit)')
    out = []
    for part in parts:
        key, table = part.key, part.table
        if key not in weights:
            out += _unseen(part)
            continue
        out.append((key, 'rows', float(table.rows)))
        if table.rows:
            table = preprocess.fill(table, list(map(str, columns)), imputed, cats.codes)
            cols = dict(zip(map(str, columns), table.columns))
            y = np.asarray(cols[label])
            seen = y > 0
            z = logits(lam, root, cols, weights[key], table.rows)
            out.append((key, 'unseen_label_rows', float(np.sum(~seen))))
            found = multiclass(y[seen], z[seen], classes, cells)
            out.append((key, 'loss', found[0][1]))  # the mean objective over the rows with a known label
            out += [(key, m, v) for m, v in found]
            if cats:
                out.append((key, 'unseen_category_rows', _unseen_categories(cols, cats)))
        out.append((key, 'skipped_rows', float(table.skipped)))
    return out


# The metrics of a 'softmax' model that pgad.model_versions.metrics holds: multiclass()'s but those of each class
SOFTMAX_METRICS = ('log_loss', 'accuracy', 'precision_macro', 'recall_macro', 'f1_macro', 'precision_weighted',
                   'recall_weighted', 'f1_weighted')


def metrics_on(loss, model, label, weights, columns, rows, classes=None, unrolled=None):
    """{metric: value} of METRICS for a named loss (as pgad.evaluate gives them) of model (a Lambda) at weights (as
    stored: a dict from its jsonb) over rows whose columns are {name: array}, the label coded 1 or 2 where classes
    (a two-class 'logistic' label); of a 'softmax' model, its label coded 1 … K by classes (its K classes as text)
    and its logits from unrolled (vectors.unrolled_value's Lambda and root), SOFTMAX_METRICS; {} for a lambda loss or
    another model with vectors. A value that is not finite, or has nothing to divide by (r2 of a constant label,
    roc_auc of one class), is None."""
    if loss == SOFTMAX and unrolled is not None:
        if categorical.indexed(weights, model):
            weights = categorical.as_vectors(weights, categorical.stored(weights, model)[1])
        z = logits(*unrolled, columns, {n: v for n, v in weights.items() if n in model.weights}, rows)
        found = dict(multiclass(columns[label], z, classes))
        return {m: None if found[m] is None or not np.isfinite(found[m]) else float(found[m]) for m in SOFTMAX_METRICS}
    _, rules = rules_of(loss)
    cats = categorical.Categories()
    if rules and categorical.indexed(weights, model):
        _, cats = categorical.stored(weights, model)
        weights = categorical.as_vectors(weights, cats)
    if not rules or vectors.needed(model) and not categorical.only(model, cats) or any(
            isinstance(v, list) for v in weights.values()):
        return {}
    z, = values(model.graph, [model.root], columns, weights, rows)
    y = columns[label] - 1 if classes else columns[label]
    out = {}
    for metric, rule in rules.items():
        with np.errstate(over='ignore', invalid='ignore'):
            value = rule(y, z)
        out[metric] = None if value is None or not np.isfinite(value) else float(value)
    return out
