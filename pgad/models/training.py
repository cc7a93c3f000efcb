"""pgad.train: the model and its loss make one objective lambda (objective.py), trained as the SQL functions train,
per group with group_by (the data loaded once: loader.load_groups), by the optimizer asked for (descent.fit), on
standardised columns with standardize (standardize.py), watched on held-out rows with validation (validation.py);
catalog.py stores the fits and writes the scoring function.
"""
import json
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np

from .. import arguments, calls, categorical, domain, keyed, loader, program, server, shards
from ..errors import PgadError
from ..lang import printer, vectors
from . import attribution, catalog, classes, descent, evaluate as evaluating, families, keyed_training, objective, \
    piecewise, preprocess, regression, separation, sequence, standardize as standardizing, summary, tally as counting, \
    validation as validating

REQUIRED = ('name', 'model', 'loss', 'data', 'weights', 'mode', 'backend', 'batch_size', 'tolerance', 'l1', 'l2',
            'label', 'progress_every', 'dtype')


def train(*args, **kwargs):
    """pgad.train (_train), the relations it reads noted as it runs (catalog.reading): what its model records as
    read_from is what this call read, nothing the transaction or the connection read before it."""
    with catalog.reading():
        return _train(*args, **kwargs)


def _train(name, model, loss, data, weights, learning_rate=None, iterations=None, mode='reverse', backend='auto',
           optimizer=None, batch_size=256, seed=None, tolerance=0.0, l1=0.0, l2=0.0, regularize=None,
           standardize=None, label='y', group_by=None, progress_every=0, dtype='float64', validation=None,
           early_stopping=None, likelihood=None, order_by=None, state=None, deploy='true', impute=None,
           bounds=None, frequency=None):
    generated = None
    loss, data = regression.arranged(model, loss, data)  # pgad.train(name, family, data)
    if regression.named(model):  # 'linear', 'softmax', 'mlp(16)': the lambda over the data's columns
        if data is not None and label is not None:
            generated = regression.generate(model, loss, data, label, arguments.group_by(group_by), seed,
                                            calls.settings().memory_limit)
            model, loss = generated.model, generated.loss
            weights = json.dumps(generated.weights) if weights is None else weights
            regularize = json.dumps(generated.regularize) if regularize is None else regularize
            standardize = True if standardize is None else standardize
    elif loss is None and families.named(model):
        loss = 'squared'
    given = dict(locals())
    if families.named(model):  # a family's starting weights are its own: weights may be left NULL
        given['weights'] = weights = '{}' if weights is None else weights
    for argument in REQUIRED:
        if given[argument] is None:
            raise PgadError('22004', f'argument "{argument}" of pgad.train must not be NULL')
    name = arguments.model_name(name)
    config = calls.settings()
    given['deploy'] = deploy = arguments.deploy(deploy, validation)
    parsed = arguments.weights_json(weights, config.memory_limit)  # once, for every path below that reads it
    if keyed.wanted(parsed):  # a vector per key (keyed_training.py)
        return keyed_training.train(name, model, loss, data, weights, parsed, given, config)
    if order_by is not None or state is not None or families.named(model):  # a sequence model (sequence.py)
        if impute is not None and json.loads(impute):
            raise PgadError('0A000', 'pgad.train takes no impute for a sequence model',
                            detail='A sequence model reads its rows in order, each from the state the one before left.',
                            hint='Replace the NULLs in the data query (coalesce), or leave impute out.')
        return sequence.train(name, model, loss, data, weights, given, config)
    if frequency is not None:
        raise PgadError('22023', 'frequency is the period of a sequence model\'s rows, and this model has no order_by',
                        hint="Give order_by => 'day' with it, or leave frequency out.")
    loss = objective.canonical(loss)  # 'huber' stored as 'huber(1.0)'
    goal = objective.build(model, loss, label, config.limits)
    w, unread = arguments.unread(arguments.weights(weights, goal.model, config.memory_limit,
                                                   objective.base(loss) == 'softmax', parsed),
                                 program.parsed(goal.text, config.limits))
    names = list(w)
    limits = arguments.bounds(bounds, [*names, *unread], config.memory_limit)  # {weight: (lower, upper)}, or None
    chosen = optimizer is None
    optimizer = arguments.optimizer(_default_optimizer(optimizer, learning_rate, l1, loss, limits))
    if learning_rate is not None and optimizer in ('lbfgs', 'newton', 'interior_point'):
        raise PgadError('22023', f'optimizer "{optimizer}" takes no learning_rate',
                        detail={'lbfgs': 'L-BFGS chooses its steps by a line search.',
                                'newton': 'Newton chooses its steps by a line search.',
                                'interior_point': 'It solves a linear programme.'}[optimizer],
                        hint="Leave learning_rate out, or use it with optimizer 'gd', 'sgd', 'momentum' or 'adam'.")
    learning_rate = DEFAULT_LEARNING_RATE if learning_rate is None else learning_rate
    until = iterations is None  # left out: until the criterion holds, within a generous cap (_iterations)
    iterations = DEFAULT_ITERATIONS if iterations is None else iterations
    options = dict(learning_rate=arguments.learning_rate(learning_rate), iterations=arguments.iterations(iterations),
                   mode=arguments.mode(mode), backend=arguments.backend(backend),
                   optimizer=optimizer, batch_size=arguments.positive('batch_size', batch_size),
                   seed=None if seed is None else arguments.non_negative('seed', seed),
                   tolerance=arguments.non_negative('tolerance', tolerance),
                   l1=arguments.penalty('l1', l1, optimizer), l2=arguments.penalty('l2', l2, optimizer),
                   regularize=arguments.regularize(regularize, [*names, *unread], config.memory_limit),
                   standardize=bool(standardize),
                   label=label, group_by=arguments.group_by(group_by),
                   progress_every=int(arguments.non_negative('progress_every', progress_every)),
                   dtype=arguments.dtype(dtype, backend),  # backend checked just above
                   validation=validating.option(validation), likelihood=bool(likelihood))
    if generated is not None:
        options['family'] = generated.family  # the lambda it stands for is the model's
    if limits:
        options['bounds'] = descent.stored_bounds(limits)
        _check_bounds(options, standardize, objective.base(loss))
    options['early_stopping'] = validating.early_stopping(early_stopping, options['validation'])
    summary.check_likelihood(loss, options['likelihood'])
    plan = standardizing.plan(goal.model) if standardize else None
    for column in goal.loss_columns if standardize else ():
        if column in goal.columns:
            raise PgadError('0A000', f'standardize => true changes column "{column}", which the loss reads too',
                            hint='Train without standardize, or give the loss a column of its own.')
    catalog.check_can_store(name, loss)
    with _label_errors(generated, name, label, goal, loss):
        candidate = classes.label_type(objective.base(loss), label, data) is not None  # a label of classes, maybe
    sized = classes.class_sized(w, goal.model) if objective.base(loss) == 'softmax' else []
    # the columns the objective reads, a label of classes as the keys it holds
    read = objective.labelled(program.parsed(goal.text, config.limits), goal, None if candidate else loss)
    features = replace(read, columns=[c for c in read.columns if not candidate or c != label])
    indexed = categorical.indexed({n: v for n, v in w.items() if n not in sized}, features)
    keys = {*indexed.values(), *([label] if candidate else [])}  # the columns read as keys: categories, classes
    impute = preprocess.parse(impute, goal.model.columns, keys)
    if impute and options['group_by']:
        raise PgadError('0A000', 'pgad.train takes no impute with group_by',
                        detail='The statistic would be taken per group, and the scoring function has one per column.',
                        hint='Replace the NULLs in the data query (coalesce), or train one model per group.')
    with _label_errors(None, name, label, goal, loss):
        lengths = loader.lengths(data, read.columns, keys)
        # the rows loaded once, the keys found in the same pass (with group_by, the groups' too)
        loaded = categorical.preload(data, read, indexed, lengths, config, set(impute),
                                     label if candidate else None, options['group_by'])
    with _label_errors(generated, name, label, goal, loss):
        found = classes.find(objective.base(loss), label, data, config.limits, config.memory_limit, loaded)
    if found is not None:  # a label of classes: 'softmax', or 'logistic' with a text, enum or integer label
        _check_class_label(goal, label, loss)
        goal = objective.build(model, loss, label, config.limits, coded=True)
        options.update(classes.options(found))
    checked_loss = loss if found is None else None  # a label of classes is coded: no check of its values
    read = objective.labelled(program.parsed(goal.text, config.limits), goal, checked_loss)  # a boolean label too
    w = classes.placeholders(w, sized, len(found.keys)) if sized else w
    w, cats = categorical.expand(w, read if found is None else replace(read, columns=[
        c for c in read.columns if c != label]), data, config.limits, config.memory_limit, loaded)
    if found is not None:
        cats.labels.update(found.codes)
    kinds = catalog.group_types(list(cats.types), list(cats.types.values()), 'a categorical weight')
    shapes = calls.shapes_of(w, lengths, cats)
    for column, _ in lengths if impute else ():
        if column in impute:
            raise PgadError('0A000', f'pgad.train takes no impute for column "{column}", an array',
                            hint='Replace the NULLs in the data query, or leave the column out of impute.')
    if sized:  # the class-sized weights' shapes, from the others'
        w = classes.sized(w, sized, goal.model, len(found.keys), shapes)
        shapes = calls.shapes_of(w, lengths, cats)
    by_class = []  # the weights of a row per class: class-sized, or so given
    if objective.base(loss) == 'softmax':
        classes.check_prediction(goal.model, shapes, found)
        by_class = [n for n, shape in shapes.weights if shape[0] == len(found.keys)]
    lp = None  # the linear programme of a piecewise-linear loss (piecewise.py)
    if options['optimizer'] == 'interior_point':
        lp = _linear_programme(goal, loss, label, names, shapes, cats, data, options, config, chosen)
        if lp is None:  # left out, where the programme does not apply: as before
            options['optimizer'] = 'gd' if options['l1'] else 'lbfgs'
    if chosen and options['optimizer'] == 'lbfgs' and options['dtype'] == 'float64' and \
            _newton_pays(calls.vector_of(w), shapes, cats, data, by_class):
        options['optimizer'] = 'newton'
    vectored = shapes.columns or any(n not in cats.keys and n not in by_class for n, _ in shapes.weights) or \
        vectors.needed(goal.model) and not categorical.only(goal.model, cats) and found is None
    if vectored and options['group_by']:
        raise PgadError('0A000', 'pgad.train takes no group_by for a model with vectors',
                        hint='Train one model per group.')
    if standardize and shapes.columns:
        raise PgadError('0A000', 'pgad.train takes no standardize for a model that reads an array column',
                        hint='Standardise the array\'s elements in the data query, or train without standardize.')
    smooth = None  # the smoothed objective's Program, where the default smooths a piecewise-linear loss
    if chosen and lp is None and not options['early_stopping'] and options['optimizer'] in ('newton', 'lbfgs') and \
            not limits and \
            found is None and not shards.foreign(data) and objective.kinked(model, loss, label, config.limits):
        smooth = _program(objective.smoothed(model, loss, label, config.limits), names, options, config, shapes,
                          chosen)
        options['smoothing'] = True  # recorded: the optimizer ran on the smoothed loss, in stages
    prog = _program(goal.text, names, options, config, shapes, chosen)
    centred = classes.centred(goal.model, prog.shapes, sized, len(found.keys)) if by_class else ()
    plan = None if plan is None else standardizing.at(plan, dict(prog.shapes))  # by element, the shapes known
    if until:
        options['iterations'] = _iterations(options['optimizer'])
    # what the loads read: a boolean label too
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, checked_loss))
    calls.compiled(prog, options['backend'], options['dtype'], config)  # a backend's errors before the load
    job = shards.Job(goal.text, tuple(names), options['mode'], options['backend'], options['dtype'])
    start = calls.vector_of(w)
    penalty = descent.Penalty(options['l1'], options['l2'], np.concatenate(
        [np.zeros(0)] + [np.full(int(np.prod(shape, dtype=np.int64)), float(options['regularize'] is None or n in
                                                            options['regularize'])) for n, shape in prog.shapes]))
    bounds = descent.bounded(limits, program.spans(prog.shapes), start, list(prog.weights))  # (None for none)
    groups = options['group_by']
    unrolled = None
    if shapes or vectors.needed(goal.model):
        lam, prediction = vectors.unrolled_value(goal.model, shapes, config.limits)
        unrolled = (lam, prediction, dict(shapes.columns))
    # a softmax model's prediction, unrolled: its classes' separation is checked on it after each fit
    logits = unrolled[:2] if by_class else None
    explainer, baselines = _explainer(unrolled or (goal.model, np.array(goal.model.graph.expr(goal.model.root),
                                                                        dtype=object)), cats), []
    with ExitStack() as stack:
        if groups and loaded is not None:  # loaded already, the groups split out of it
            group_types, parts = categorical.grouped(loaded, groups, loader.as_query(data), list(prog.columns))
            parts = [loader.Group(p.key, p.values, calls.in_order(p.table, prog.columns)) for p in parts]
            group_types = catalog.group_types(groups, group_types)
            _check_groups(len(parts), config.memory_limit)
            parts = [(part, None) for part in parts]
        elif groups:  # each group's rows here: a sharded table's are pulled (docs/scaling.md)
            group_types, parts = loader.load_groups(data, list(prog.columns), groups, config.memory_limit,
                                                    cats.codes)
            group_types = catalog.group_types(groups, group_types)  # domains as their base types
            _check_groups(len(parts), config.memory_limit)
            parts = [(part, None) for part in parts]
        else:  # standardize needs the columns here too
            # standardize, validation and newton need the rows here: the shards send only the gradient's sums
            spread = not standardize and validation is None and not impute and smooth is None and \
                options['optimizer'] not in ('newton', 'interior_point')
            loading = calls.loading(data, spread=spread)
            table, kernel = stack.enter_context(loading(prog, config, job, start, cats.codes, set(impute),
                                                        table=loaded))
            group_types, parts = [], [(loader.Group(None, None, table), kernel)]
        held_out = _held_out(options['validation'], prog, groups, config, cats.codes, set(impute))
        rows, fits = [], []
        tally = counting.Tally(name, len(parts) if groups else 1)
        for part, kernel in parts:
            where = f'model "{name}"' + (f', group {part.key}' if part.key else '')
            if part.table.rows == 0:
                server.notice(f'{where}: no rows without NULL in the columns it reads; no model for this group')
                continue
            # a sharded table's local rows
            here = part.table if kernel is None else calls.local_rows(kernel, part.table)
            objective.check_labels(checked_loss, label, _label_column(prog, here, label),
                                   f'{where}: ' if part.key else '')
            part, held = _validation_rows(part, held_out, options, where,
                                          None if found is None else [str(c) for c in prog.columns].index(label))
            imputed = {}
            if impute:  # the statistics of the training rows, before standardize; the held-out rows filled alike
                names_read = [str(c) for c in prog.columns]
                imputed = preprocess.statistics(impute, names_read, part.table, cats.codes, server.check_interrupts)
                part = loader.Group(part.key, part.values,
                                    preprocess.fill(part.table, names_read, imputed, cats.codes))
                held = None if held is None else preprocess.fill(held, names_read, imputed, cats.codes)
            if held is not None:
                objective.check_labels(checked_loss, label, _label_column(prog, held, label), f'{where}, validation: ')
            # many groups' messages: one, at the end (tally.py); one model's as they come
            clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'{where}: {message}'),
                                  options['iterations'], every_iterations=options['progress_every'],
                                  warning=tally.warner(counting.WARNED, part.key) if groups else
                                  lambda message, hint, where=where: server.warning(f'{where}: {message}', hint),
                                  unconverged=tally.warner(counting.UNCONVERGED, part.key) if groups else None)
            if isinstance(kernel, shards.Sharded):
                fit_options = _full_batch(options, part.table.rows)
            else:
                fit_options = options
                step_rows = part.table.rows if options['optimizer'] not in descent.MINI_BATCH else options['batch_size']
                kernel = calls.compiled(prog, options['backend'], options['dtype'], config,
                                        min(step_rows, part.table.rows))
            smoothing = None if smooth is None else (loss, smooth.columns, calls.compiled(
                smooth, options['backend'], options['dtype'], config, part.table.rows))
            fitted, fit, watch = _fit(prog, kernel, part.table, dict(zip(prog.weights, start)), plan, fit_options,
                                      penalty, clock, held, _blocks(prog, cats), lp, config.memory_limit, smoothing,
                                      objective.base(loss), bounds, generated is not None and generated.scaled_start)
            if centred:  # scikit-learn's symmetric parameterisation
                fitted = dict(zip(prog.weights, classes.centre([fitted[n] for n in prog.weights], prog.shapes,
                                                               centred)))
            nested = prog.nest([fitted[n] for n in prog.weights])
            if not isinstance(kernel, shards.Sharded) and not (  # the rows here, a model of numbers, no penalty
                    shapes.columns or vectors.needed(goal.model) and not categorical.only(goal.model, cats)
                    or options['l1'] or options['l2']):
                separation.check_fit(loss, goal.model, prog, _as_labels(part.table, prog, label, found), label,
                                     nested, clock.warning, server.check_interrupts)
            if logits is not None and not isinstance(kernel, shards.Sharded) and not (options['l1'] or options['l2']):
                separation.warn_classes(found.keys, separation.classes_separated(
                    *logits, dict(zip([str(c) for c in prog.columns], part.table.columns)), label, fitted,
                    part.table.rows, server.check_interrupts), clock.warning)
            fits.append((part.values, fitted))
            held_at = descent.at_bounds(limits, fitted)
            tally.bounds(part.key, fitted, held_at)
            if isinstance(explainer, attribution.Explainer) and isinstance(kernel, shards.Sharded):
                explainer = 'its rows are sharded, and the training rows\' means would be the local partitions\''
            explained = {}
            if isinstance(explainer, attribution.Explainer):  # the baseline: the training rows' means
                shown, at = attribution.baseline(explainer, dict(zip(map(str, prog.columns), part.table.columns)),
                                                 fitted, part.table.rows)
                baselines.append(shown)
                explained = dict(baseline=shown, baseline_prediction=at)
            stored = calls.weights_json(unread, categorical.named(nested, cats))
            rows.append(dict(name=name, group_key=part.key, model=model, loss=loss,
                             weights=stored,
                             final_loss=float(fit.loss), loss_history=[float(v) for v in fit.history],
                             iterations=fit.iterations,
                             options=json.dumps({**options, **({'impute': imputed} if imputed else {}), **explained,
                                                 **({'at_bounds': held_at} if limits else {})}),
                             data=data,
                             rows=part.table.rows,
                             training_time=fit.seconds,
                             validation_history=None if watch is None else watch.history,
                             converged=fit.converged, gradient_norm=fit.gradient_norm,
                             metrics=None if held is None else _metrics(kernel, prog, held, fitted, loss, goal, label,
                                                                        found, stored, logits)))
    if not rows:
        raise PgadError('22000', 'no group of the data has a row without NULL in the columns the model reads')
    tally.flush()
    explanation = (explainer, baselines, options.get('classes')) if isinstance(explainer, attribution.Explainer) \
        else (None, explainer)
    scoring = catalog.Scoring(name, goal.model, groups, group_types, printer.budget(config.limits), unrolled,
                              {c: (kind, cats.codes[c]) for c, kind in zip(cats.types, kinds)}, found, explanation,
                              imputed)
    return catalog.store(scoring, rows, fits, deploy)


@contextmanager
def _label_errors(generated, name, label, goal, loss):
    """The errors of the data's label as pgad.train gives them: a missing label named as the label
    (objective.without_label), and a family's label of more than two classes under 'logistic' pointed to 'softmax'
    (generated: the family's regression.Generated)."""
    try:
        yield
    except PgadError as e:
        if generated is not None and e.message.startswith('loss "logistic" takes a label of two classes'):
            raise PgadError(e.sqlstate, e.message, detail=e.detail,
                            hint=f"Use model 'softmax' for many classes: pgad.train('{name}', 'softmax', data, "
                                 f"label => '{label}').") from None
        raise objective.without_label(e, goal, loss) from None


def _explainer(model, cats):
    """The attribution.Explainer of the model (its Lambda and prediction, unrolled), or why it gets none (a text)."""
    try:
        return attribution.explainer(*model[:2], cats.codes)
    except attribution.Unexplained as e:
        return str(e)
    except PgadError as e:
        if e.sqlstate != '54001':
            raise
        return f'its derivatives by the columns are too large ({e.message})'



# What a group costs pgad.train beyond its rows (measured: docs/security.md): its fit, its row of pgad.models and
# its branch of the scoring function, whose body PostgreSQL parses and stores whole.
GROUP_BYTES = 32 << 10


def _check_groups(count, memory_limit):
    """The error if a model of count groups needs more than memory_limit bytes, GROUP_BYTES a group."""
    if count * GROUP_BYTES > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the model\'s groups need {loader.megabytes(count * GROUP_BYTES)}, more '
                                              f'than pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail=f'{count} groups, {GROUP_BYTES >> 10} kB each for its fit, its row of pgad.models and '
                               'its branch of the scoring function.',
                        hint='Group by fewer columns, or have a superuser raise pgad.memory_limit.')


def _full_batch(options, rows):
    """options for a sharded table, whose shards give full-batch sums only: momentum and adam step once per
    iteration over all the rows (batch_size is not used); sgd, whose steps are mini-batches of shuffled rows, is an
    error."""
    if options['optimizer'] == 'sgd':
        raise PgadError('0A000', 'optimizer "sgd" cannot train where the rows are sharded',
                        detail='The shards send sums over all their rows; sgd steps on mini-batches of shuffled rows.',
                        hint="Use 'gd' (sgd over full batches), 'momentum', 'adam' or 'lbfgs'; or give the data as a "
                             "query (SELECT * FROM the table) to pull the rows here.")
    return {**options, 'batch_size': rows}


def _label_column(prog, table, label):
    """The label column's values in table (loaded by prog's columns), for objective.check_labels."""
    names = [str(c) for c in prog.columns]
    return table.columns[names.index(label)] if label in names else np.empty(0)


def _fit(prog, kernel, table, start, plan, options, penalty, clock, held=None, blocks=None, lp=None,
         memory_limit=None, smoothing=None, loss=None, bounds=None, scaled_start=False):
    """({weight: fitted value}, descent.Fit, validation.Watch or None) of one table (a group's) from the weights
    start, on standardised columns when plan is not None; the loss on the held-out rows held (a Table, or None)
    watched after each iteration, and with early_stopping the weights of its lowest (not the optimum: converged
    false, and no WARNING, as asked); blocks as descent.fit's; lp the piecewise.Problem of 'interior_point';
    smoothing (loss, the smoothed objective's columns and kernel) for piecewise.continued; loss the
    loss's base name, for descent.unconverged's hint; bounds (descent.Bounds, or None) each weight's interval
    (never with plan: _check_bounds); scaled_start: start is the standardised columns' weights already (an mlp
    family's random start, regression.py)."""
    names = list(prog.weights)
    if plan is not None:
        columns = dict(zip(prog.columns, table.columns))
        mean, std = standardizing.moments(plan, columns)

        def scaled(t):
            found = dict(zip(prog.columns, t.columns))
            return loader.Table([standardizing.scale(found[c], mean[c], std[c]) if c in plan.columns else found[c]
                                 for c in prog.columns], t.rows, t.skipped)
        table, held = scaled(table), None if held is None else scaled(held)
        start = start if scaled_start else standardizing.forward(plan, start, mean, std)
    watch = None
    if held is not None:
        watch = clock.watch = validating.Watch(
            lambda w: descent.evaluate(kernel, held, w, clock.interrupts)[0] / held.rows, options['early_stopping'])
    why = lambda w, output: domain.diagnose(prog, calls.local_rows(kernel, table), w, output)  # noqa: E731
    begun = [start[n] for n in names]
    try:
        if lp is not None:
            fit, _ = piecewise.fit(lp, kernel, table, prog.columns, begun, names, options['iterations'], penalty,
                                   clock, memory_limit, why)
        elif smoothing is not None:
            fit, _ = piecewise.continued(*smoothing, kernel, table, prog.columns, begun, names,
                                         options['optimizer'], options['iterations'], penalty, clock, why, blocks)
        else:
            fit = descent.fit(kernel, table, begun, names, options['optimizer'],
                              options['learning_rate'], options['iterations'], options['batch_size'], options['seed'],
                              options['tolerance'], penalty, clock, why=why, judge=not options['early_stopping'],
                              blocks=blocks, precision=options['dtype'], bounds=bounds, loss=loss)
    except validating.Stop:
        fit = descent.Fit(watch.best, watch.training[watch.at], watch.training, len(watch.training), clock.seconds(),
                          False)
    else:
        if watch is not None and options['early_stopping'] and watch.at is not None:
            fit = descent.Fit(watch.best, watch.training[watch.at], fit.history, fit.iterations, fit.seconds, False)
        elif options['early_stopping']:
            fit = replace(fit, converged=False)
    fitted = dict(zip(names, fit.weights.tolist()))
    return (fitted if plan is None else standardizing.back(plan, fitted, mean, std)), fit, watch


def _metrics(kernel, prog, held, fitted, loss, goal, label, found, weights, logits=None):
    """The metrics of a version on its validation rows held (a Table of prog's columns), as the jsonb text of
    pgad.model_versions.metrics: validation_loss, the mean objective there without the penalty (at the weights the
    version keeps: the last of validation_history, or with early_stopping its lowest), validation_rows, and
    pgad.evaluate's metrics of its loss (evaluate.metrics_on; of a 'softmax' model from its unrolled logits, where
    it reads no array column). A value that is not finite is null."""
    value = descent.evaluate(kernel, held, np.array([fitted[n] for n in prog.weights], dtype=np.float64),
                             server.check_interrupts)[0] / held.rows
    columns = dict(zip(map(str, prog.columns), held.columns))
    if logits is not None and not set(map(str, logits[0].columns)) <= set(columns):
        logits = None  # array columns, loaded as arrays: their elements are not columns here
    found = evaluating.metrics_on(loss, goal.model, label, json.loads(weights), columns, held.rows,
                                  list(found.keys) if objective.base(loss) == 'softmax' else found is not None,
                                  logits)
    return json.dumps({'validation_loss': float(value) if np.isfinite(value) else None,
                       'validation_rows': held.rows, **found})


def _held_out(validation, prog, groups, config, categories=None, missing=()):
    """The rows of a validation query (None for a fraction, or no validation): a loader.Table, or with group_by
    {group key: Table}; a categorical column coded by the training's categories, a category it has not seen as 0;
    the columns in missing (imputed) with −NaN for NULL."""
    if not isinstance(validation, str):
        return None
    if groups:
        _, found = loader.load_groups(validation, list(prog.columns), groups, config.memory_limit, categories,
                                      unseen=True)
        return {part.key: part.table for part in found}
    return loader.load(validation, list(prog.columns), config.chunk_rows, config.memory_limit, dict(prog.columns_of),
                       categories, unseen=True, missing=missing)


def _validation_rows(part, held_out, options, where, label_at=None):
    """(the group part with its training rows, its held-out rows or None): a fraction of part's rows split off by
    their hash and seed (validation.split), or the validation query's rows (of part's group, with group_by); of a
    model of classes (its label the column label_at), those whose label is a class the training has (classes.seen)."""
    fraction = options['validation']
    if fraction is None:
        return part, None
    if isinstance(fraction, float):
        trained, held = validating.split(part.table, fraction, options['seed'])
    else:
        trained, held = part.table, held_out.get(part.key) if isinstance(held_out, dict) else held_out
        if label_at is not None and held is not None:
            held = classes.seen(held, label_at, where, server.notice)
    if held is None or held.rows == 0 or trained.rows == 0:
        raise PgadError('22000', f'{where}: no {"validation" if trained.rows else "training"} rows',
                        detail=f'validation => {fraction if isinstance(fraction, float) else "its query"} leaves '
                               f'{trained.rows} rows to train on and {0 if held is None else held.rows} to validate '
                               'on.',
                        hint='Give more rows, or another fraction or query.')
    return loader.Group(part.key, part.values, trained), held


# pgad.train's defaults where an argument is NULL (left out): for a piecewise-linear loss of a model linear in its
# weights (piecewise.py) the interior-point method of its linear programme; else Newton where the weights are few
# (NEWTON_WEIGHTS: _newton_pays), else L-BFGS in scaled coordinates (descent._lbfgs), all converging on columns of
# any scale, unless a learning_rate (or l1, but for the linear programme) asks for gradient descent as before 0.11.0.
# For such a loss of any other model, or a lambda loss with kinks, newton or lbfgs on the loss smoothed in stages
# (piecewise.continued). Iterations left out run newton and lbfgs until they stop at the optimum, within a cap of
# NEWTON_ITERATIONS and LBFGS_ITERATIONS (interior_point piecewise.ITERATIONS); the others DEFAULT_ITERATIONS.
DEFAULT_LEARNING_RATE, DEFAULT_ITERATIONS = 0.05, 100
NEWTON_ITERATIONS, LBFGS_ITERATIONS = 100, 10_000
LP_WEIGHTS = 300  # the interior point's normal equations: p² a row, as newton's Hessian
# The Hessian's sums cost about p²/2 a row: measured (llvm, in process, 1e5 rows of a linear model) 0.3 ms a pass at
# p = 6, 16 ms at 21, 218 ms at 41 (a gradient's pass 0.1, 1.1 and 8.8 ms) and its compile 0.3–0.6 s, where scaled
# L-BFGS takes 2p passes to scale and tens to hundreds of iterations: newton pays up to about 48 weights.
NEWTON_WEIGHTS = 48


def _default_optimizer(optimizer, learning_rate, l1, loss, bounds=None):
    """The optimizer asked for; left out, 'interior_point' for a piecewise-linear loss (kept where its programme
    applies, decided once the weights are known; not with bounds), else 'lbfgs' (newton where _newton_pays,
    likewise), or 'gd' where a learning_rate or l1 is given (lbfgs and newton take neither)."""
    if optimizer is not None:
        return optimizer
    if piecewise.takes(loss) and learning_rate is None and not bounds:
        return 'interior_point'
    return 'gd' if learning_rate is not None or l1 else 'lbfgs'


def _check_bounds(options, standardize, base):
    """The error where bounds meet an option they cannot: standardize (it fits other weights than the model's),
    the linear programme of 'interior_point', and a softmax model's centred weights."""
    if standardize:
        raise PgadError('0A000', 'pgad.train takes no bounds with standardize => true',
                        detail='standardize fits the weights of standardised columns, whose bounds are not the '
                               'model\'s.', hint='Standardise the columns in the data query, or leave bounds out.')
    if options['optimizer'] == 'interior_point':
        raise PgadError('0A000', 'optimizer "interior_point" takes no bounds',
                        hint="Use optimizer 'lbfgs' or 'newton', or leave optimizer out.")
    if base == 'softmax':
        raise PgadError('0A000', "pgad.train takes no bounds for loss 'softmax'",
                        detail='Its weights of a class are centred after the fit, which moves them.',
                        hint='Leave bounds out.')


def _linear_programme(goal, loss, label, names, shapes, cats, data, options, config, chosen):
    """The piecewise.Problem optimizer 'interior_point' solves: a piecewise-linear loss, a model linear in its
    weights (numbers or categorical weights, at most LP_WEIGHTS elements, no array column), its rows here (a sharded
    table's are pulled through its query) and float64. Where one of these fails, None for the default (chosen), and
    for an optimizer asked for, the error that says which."""
    def refused(why):
        if chosen:
            return None
        raise piecewise.refusal(loss, why)
    if not piecewise.takes(loss):
        return refused(f'loss "{loss}"')
    if shapes.columns or any(n not in cats.keys for n, _ in shapes.weights):
        return refused('a model with vectors')
    if options['dtype'] != 'float64':
        return refused(f'at dtype "{options["dtype"]}"')
    count = sum(int(np.prod(shape, dtype=np.int64)) for _, shape in shapes.weights) + len(names) - \
        len(shapes.weights)
    if count > LP_WEIGHTS:
        return refused(f'more than {LP_WEIGHTS} weights')
    found = piecewise.problem(goal, loss, label, names, shapes, config.limits)
    if found is None:
        return refused('a model that is not linear in its weights')
    return found


def _newton_pays(start, shapes, cats, data, by_class=()):
    """Does the default take newton: at most NEWTON_WEIGHTS weight elements, none a vector or matrix but a
    categorical or a row per class one's (by_class), no array column (but in a model of classes: w.W @ d.x is
    as cheap as w.W @ [d.x1, d.x2, …]), and rows that are here (a sharded table's shards send the gradient's sums
    only, to L-BFGS)?"""
    return (len(start) <= NEWTON_WEIGHTS and (not shapes.columns or by_class) and
            all(n in cats.keys or n in by_class for n, _ in shapes.weights) and not shards.foreign(data))


def _as_labels(table, prog, label, found):
    """table, where a two-class 'logistic' label (found) is loaded as its code 1 or 2, with it as the 0 or 1 the loss
    reads (separation.check_fit's labels)."""
    if found is None:
        return table
    at = [str(c) for c in prog.columns].index(label)
    return loader.Table([c - 1 if k == at else c for k, c in enumerate(table.columns)], table.rows, table.skipped)


def _check_class_label(goal, label, loss):
    """The error where the model reads its label of classes itself: the loss reads it as each row's class."""
    if label in goal.columns:
        raise PgadError('0A000', f'the model reads column "{label}", the label of loss \'{objective.base(loss)}\'',
                        detail='A label of classes is read as each row\'s class, not as a number the model could use.',
                        hint='Give the model the columns of the features only, or the label another column.')


def _iterations(optimizer):
    """The cap on the iterations left out: newton and lbfgs stop at the optimum well before it."""
    return {'newton': NEWTON_ITERATIONS, 'lbfgs': LBFGS_ITERATIONS,
            'interior_point': piecewise.ITERATIONS}.get(optimizer, DEFAULT_ITERATIONS)


def _program(text, names, options, config, shapes, chosen):
    """The Program options['optimizer'] runs: newton's with the Hessian's sums too (where that is too large for
    the default's choice, 54000 or 54001, lbfgs's instead, options changed to say so)."""
    if options['optimizer'] == 'newton':
        try:
            return program.build_hessian(text, tuple(names), config.limits, shapes)
        except PgadError as e:
            if not chosen or e.sqlstate not in ('54000', '54001'):
                raise
            options['optimizer'] = 'lbfgs'
    return program.build(text, tuple(names), options['mode'], True, config.limits, shapes)


def _blocks(prog, cats):
    """The index arrays of the weight vector whose curvatures descent.curvature may take together: a categorical
    weight's entries (a row reads one), every other weight element alone."""
    blocks = []
    for name, _, at in program.spans(prog.shapes):
        elements = np.arange(at.start, at.stop)
        blocks += [elements] if name in cats.keys else [np.array([k]) for k in elements]
    return blocks

