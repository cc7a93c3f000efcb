"""pgad.importance: how much each feature of a stored model matters over any rows, per group.

The model's rows in pgad.models give its lambda, weights and baseline (options.baseline, the training rows' means,
stored by pgad.train since 0.15.0). The columns the objective reads are loaded once by pgad's loader, as pgad.evaluate
loads them (rows with a NULL in one of them skipped, or filled where the model imputes the column: options.impute; a
categorical column coded by the stored categories, a category the model never saw as 0, contributing 0), and each row's
contributions are the integrated gradients of <name>_explain computed over whole numpy columns
(attribution.contributions): the mean of their absolute values and their mean, per feature (and per element of a vector
prediction: `output`, by class name where the model has options.classes). With permutation, each feature's permutation
importance: the mean loss (the model's objective without regularisation, pgad.evaluate's `loss`) with that feature's
column shuffled, less the mean loss on the rows as they are; the shuffle is numpy's default_rng(seed) permutation, one
per feature in order.
"""
import json
from dataclasses import replace

import numpy as np

from .. import categorical, loader, program, python_backend, server
from ..errors import PgadError
from ..lang import vectors
from . import attribution, catalog, objective, preprocess


def importance(name, data, permutation, seed, config):
    """pgad.importance's rows: (group_key as jsonb text or None, output, feature, mean |contribution|, mean
    contribution, permutation importance or None)."""
    if name is None or data is None:
        raise PgadError('22004', f'argument "{"name" if name is None else "data"}" of pgad.importance must not be NULL')
    stored = catalog.rows(name)
    first = stored[0]
    options = {r['group_key']: json.loads(r['options']) for r in stored}
    if any('baseline' not in o for o in options.values()):
        raise PgadError('0A000', f'model "{name}" has no baseline to explain its predictions from',
                        detail='pgad.train stores the training rows\' means (options.baseline) since pgad 0.15.0, '
                               'where the model gets a _explain function.',
                        hint='Train the model again.')
    label = options[first['group_key']]['label']  # stored by every pgad.train that stores a baseline
    classes = options[first['group_key']].get('classes')  # a 'logistic' label of classes: the objective takes its code
    goal = objective.build(first['model'], first['loss'], label, config.limits, coded=bool(classes))
    weights = {r['group_key']: json.loads(r['weights']) for r in stored}
    cats = categorical.Categories()
    if categorical.indexed(weights[first['group_key']], goal.model):
        _, cats = categorical.stored(weights[first['group_key']], goal.model)
        weights = {key: categorical.as_vectors(v, cats) for key, v in weights.items()}
    weights = {key: {n: np.asarray(v, dtype=np.float64) for n, v in w.items()} for key, w in weights.items()}
    baseline = options[first['group_key']]['baseline']
    lengths = tuple((c, sum(1 for k in baseline if k.startswith(f'{c}[')))
                    for c in goal.model.columns if c not in baseline and f'{c}[1]' in baseline)
    # a label of classes (options.classes: a 'softmax' model's, a 'logistic' model's of text): read as each row's
    # class code 1 … K, 0 for a class the model never saw (those rows are left out of the losses)
    coded = {label: [str(k) for k in classes]} if classes else {}
    shapes = vectors.Shapes(tuple((n, v.shape) for n, v in weights[first['group_key']].items() if v.ndim),
                            lengths, tuple({**cats.codes, **coded}))
    prog = program.build(goal.text, tuple(weights[first['group_key']]), 'reverse', False, config.limits, shapes)
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, first['loss']))  # a boolean label too
    lam = prog.lam
    model = vectors.unrolled_value(goal.model, shapes, config.limits) if shapes or vectors.needed(goal.model) else \
        (goal.model, np.array(goal.model.graph.expr(goal.model.root), dtype=object))
    try:
        ex = attribution.explainer(*model, cats.codes)
    except attribution.Unexplained as e:
        raise PgadError('0A000', f'model "{name}" cannot be explained: {e}') from None
    outputs = [None] if not ex.vector else \
        [str(c) for c in classes] if classes and len(classes) == len(ex.outputs) else \
        [str(k + 1) for k in range(len(ex.outputs))]
    columns = list(prog.columns)
    group_by = options[first['group_key']].get('group_by') or []
    if group_by:
        _, parts = loader.load_groups(data, columns, group_by, config.memory_limit, {**cats.codes, **coded},
                                      unseen=True)
    else:
        imputed = preprocess.of(options[first['group_key']])  # NULLs replaced as training replaced them
        parts = [loader.Group(None, None, preprocess.fill(loader.load(
            data, columns, config.chunk_rows, config.memory_limit, dict(prog.columns_of), {**cats.codes, **coded},
            unseen=True, missing=set(imputed)), list(map(str, columns)), imputed, cats.codes))]
    if not any(part.table.rows for part in parts):
        raise PgadError('22000', 'the data has no rows without NULL in the columns the model reads',
                        hint=f'pgad.importance explains model "{name}" on the rows of the data.')
    out = []
    for part in parts:
        key, table = part.key, part.table
        if key not in weights or not table.rows:
            continue
        _check_memory(table.rows, len(ex.leaves), len(ex.outputs), len(ex.features), config.memory_limit)
        cols = dict(zip(map(str, columns), table.columns))
        flat = vectors.by_element(weights[key])
        found = attribution.contributions(ex, cols, flat, options[key]['baseline'], table.rows)
        drops = dict.fromkeys((f for f, _ in ex.features), None)
        if permutation:
            known = np.ones(table.rows, dtype=bool)
            if coded:  # a class the model never saw (code 0) has no loss; the objective takes a code, as trained
                known = cols[label] != 0
            elif label in cols:
                objective.check_labels(first['loss'], label, cols[label], f'model "{name}": ')
            rng = np.random.default_rng(seed)
            before = _mean_loss(lam, cols, flat, table.rows, known)
            for feature, _ in ex.features if before is not None else ():
                server.check_interrupts()
                shuffled = dict(cols)
                shuffled[feature] = cols[feature][rng.permutation(table.rows)]
                drops[feature] = _mean_loss(lam, shuffled, flat, table.rows, known) - before
        for output, by_feature in zip(outputs, found):
            for feature, _ in ex.features:
                phi = np.broadcast_to(by_feature[feature], (table.rows,))
                out.append((key, output, feature, float(np.mean(np.abs(phi))), float(np.mean(phi)), drops[feature]))
    return out


def _mean_loss(lam, cols, weights, rows, known):
    """The mean of the objective over the rows that are known (those whose label the model has)."""
    per_row, = python_backend.values(lam.graph, [lam.root], cols, weights, rows)
    return float(np.mean(per_row[known])) if known.any() else None


# The arrays one group's explanation holds at once, each of its rows × 8 bytes: the leaves' values, differences and
# path points, the gradients summed over the quadrature (one a leaf and output), a column copy while shuffling, and
# the contributions (one a feature and output).
def _check_memory(rows, leaves, outputs, features, memory_limit):
    size = 8 * rows * (3 * leaves + leaves * outputs + features * outputs + 2)
    if memory_limit is not None and size > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the explanation of the data needs {loader.megabytes(size)}, more than '
                                              f'pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail=f'{rows} rows, {features} features, {outputs} outputs.',
                        hint='Explain fewer rows at a time, or have a superuser raise pgad.memory_limit.')
