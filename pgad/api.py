"""The SQL functions, one Python function each; extension/sql's shims call these and nothing else.

Each takes the SQL arguments as PL/Python gives them (text, jsonb as text, float8, int), reads pgad's settings
(the limits, the kernel cache, the load's chunk size and memory), and walks the stages:
arguments → program (parse, differentiate) → backend kernel → loader → descent → result.
"""
import json
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace

import numpy as np

from . import arguments, backends, categorical, domain, explain as explaining, loader, program, server, shards
from .models import (catalog, descent, evaluate as evaluating, initial, objective, standardize as standardizing,
                     summary as summarizing, validation as validating)
from .errors import PgadError
from .jit.cache import DiskCache
from .lang import hessian as second, printer, tensors, vectors
from .limits import Limits


@dataclass(frozen=True)
class Settings:
    limits: Limits      # pgad.max_lambda_bytes, pgad.max_lambda_nodes
    cache: DiskCache    # pgad.cache_directory, pgad.cache_size
    chunk_rows: int     # pgad.load_chunk_rows
    memory_limit: int   # pgad.memory_limit, in bytes


def settings():
    """pgad's settings, as this call sees them."""
    s = server.settings()
    return Settings(Limits(server.in_bytes(s['max_lambda_bytes']), int(s['max_lambda_nodes'])),
                    DiskCache(s['cache_directory'], server.in_bytes(s['cache_size'])), int(s['load_chunk_rows']),
                    server.in_bytes(s['memory_limit']))


@server.entry
def loss(loss, data, weights):
    with _prepared(loss, weights, _loading(data), gradient=False) as call:
        return _loss(call)


@server.entry
def gradient(loss, data, weights, mode='reverse', backend='auto', dtype='float64', tape='auto'):
    with _prepared(loss, weights, _loading(data), mode, backend, dtype, tape=tape) as call:
        return _gradient(call)


@server.entry
def hessian(loss, data, weights, backend='auto'):
    """The Hessian of the mean loss by the weights' elements, {"a": {"a": ∂²/∂a², "b": ∂²/∂a∂b}, …}: a vector
    weight's elements named "v[1]", a matrix's "m[1,2]" (vectors.elements). Forward over reverse (lang/hessian.py),
    summed over the rows by the same backends as the gradient."""
    hess, names = _hessian_at(loss, data, weights, backend)
    return json.dumps({a: {b: float(hess[i, j]) for j, b in enumerate(names)} for i, a in enumerate(names)})


def _hessian_at(loss, data, weights, backend='auto'):
    """(the Hessian of the mean loss as a p × p array, the weights' element names) of lambda text loss over
    data at the weights jsonb."""
    config = settings()
    lam = program.parsed(loss, config.limits)
    w, unread = arguments.unread(arguments.weights(weights, lam, config.memory_limit), lam)
    backend = arguments.backend(backend)
    load = _loading(data, spread=False)
    w, cats = categorical.expand(w, lam, load.data, config.limits, config.memory_limit)
    prog = program.build_hessian(lam.text, tuple(w), config.limits, _shapes(w, load.lengths(lam, cats.codes), cats))
    _kernel(prog, backend, 'float64', config)
    vector = _vector(w)
    with load(prog, config, shards.Job(lam.text, tuple(w), 'reverse', backend, 'float64'), vector, cats.codes) \
            as (table, kernel):
        sums = _second_sums(Call(prog, table, kernel, vector, unread, cats))
    p = len(prog.weights)
    return second.full(sums[1 + p:] / table.rows, p), categorical.element_names(prog, cats)


def _second_sums(call):
    """The sums over the call's rows of a build_hessian program's outputs: [loss, gradient…, Hessian's upper half…]."""
    sums = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)
    descent.check_finite(sums, call.vector, 1, call.names, 0, call.why)
    return sums


# pgad.summary: the coefficient table of a stored model (models/summary.py), from the exact Hessian of its objective
# at the fitted weights over its data query, run again as the caller; per group for a grouped model.
# Only the role that trained the model may: the data query is that role's SQL text, and running it as another role
# (a superuser above all) would run whatever functions it calls with that role's privileges.
@server.entry
def summary(name):
    config = settings()
    found = catalog.rows(name)
    me = catalog.current_user()
    for owner in {row['trained_by'] for row in found} - {me}:
        raise PgadError('42501', f'model "{name}" belongs to role "{owner}"',
                        detail='pgad.summary runs the model\'s data query again, and that query is the text of the '
                               'role that trained it: only that role may run it.',
                        hint='Ask that role for the summary, or train a model of your own on the data.')
    first = found[0]
    options = json.loads(first['options'])
    summarizing.check_model(name, first['loss'], options)
    goal = objective.build(first['model'], first['loss'], options.get('label', 'y'), config.limits)
    lam = objective.labelled(program.parsed(goal.text, config.limits), goal, first['loss'])
    w, unread = arguments.unread(arguments.weights(first['weights'], goal.model, config.memory_limit), lam)
    w, cats = categorical.stored(w, goal.model)  # the stored categories; a row of another category is skipped
    prog = program.build_hessian(goal.text, tuple(w), config.limits,
                                 _shapes(w, loader.lengths(first['data'], lam.columns, cats.codes), cats))
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, first['loss']))
    names = categorical.element_names(prog, cats)
    backend = options.get('backend', 'auto')
    groups = options.get('group_by') or []
    if groups:
        _, parts = loader.load_groups(first['data'], list(prog.columns), groups, config.memory_limit, cats.codes)
        tables = {json.dumps(json.loads(part.key), sort_keys=True): part.table for part in parts}
    else:
        tables = {None: _some_rows(loader.load(first['data'], list(prog.columns), config.chunk_rows,
                                               config.memory_limit, dict(prog.columns_of), cats.codes))}
    out = []
    for row in found:
        key = None if row['group_key'] is None else json.dumps(json.loads(row['group_key']), sort_keys=True)
        table = tables.get(key)
        if table is None or table.rows == 0:
            continue  # the group is no longer in the data
        w, unread = arguments.unread(arguments.weights(row['weights'], goal.model, config.memory_limit), lam)
        w = categorical.as_vectors(w, cats)
        vector = _vector(w)
        sums = _second_sums(Call(prog, table, _kernel(prog, backend, 'float64', config, table.rows), vector, unread))
        p = len(prog.weights)
        for line in summarizing.table(name, first['loss'], vector, sums[0], second.full(sums[1 + p:], p),
                                      table.rows, names):
            out.append((row['group_key'], *line))
    return out


@server.entry
def gradient_descent(loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto',
                     dtype='float64', tape='auto'):
    with _prepared(loss, weights, _loading(data), mode, backend, dtype, tape=tape, learning_rate=learning_rate,
                   iterations=iterations) as call:
        return _descend(call, arguments.learning_rate(learning_rate), arguments.iterations(iterations))


@server.entry
def partial_sums(loss, data, names, weights, mode='reverse', backend='auto', dtype='float64'):
    """A shard's part of a sharded training (shards.py): [rows, loss sum, gradient sums by the weights `names`] of
    the data at the weights (a float8[] in the order of names, finite or not: the coordinator checks the sums)."""
    config = settings()
    lam = program.parsed(loss, config.limits)
    if len(names) != len(weights) or len(set(names)) != len(names):
        raise PgadError('22023', f'{len(names)} weight names for {len(weights)} weights',
                        hint='names and weights are the weight vector\'s names and values, one of each per weight.')
    arguments.weights(json.dumps(dict.fromkeys(names, 0)), lam, config.memory_limit)
    mode, backend = arguments.mode(mode), arguments.backend(backend)
    precision = arguments.dtype(dtype, backend)
    reads = set(lam.weights)
    read = [k for k, name in enumerate(names) if name in reads]  # where the weights the lambda reads are
    prog = program.build(lam.text, tuple(names[k] for k in read), mode, True, config.limits)
    table = shards.loaded(data, list(prog.columns), config.chunk_rows, config.memory_limit)
    sums = np.zeros(1 + len(names))  # the loss sum, then a derivative by each name: 0 by a weight it does not read
    if table.rows:
        kernel = _kernel(prog, backend, precision, config, table.rows)
        found = descent.evaluate(kernel, table, np.array([weights[k] for k in read], dtype=np.float64),
                                 server.check_interrupts)
        sums[0], sums[1 + np.array(read, dtype=np.int64)] = found[0], found[1:]
    return [float(table.rows), *(float(v) for v in sums)]


# The aggregates (extension/pgad.c, part 4): the transition function asks lambda_columns which columns of a row to
# pack; the final function gives the packed rows, their columns' names and the group's loss, weights and options
# (a jsonb of the functions' arguments by name, or None) to loss_agg, gradient_agg or gradient_descent_agg. A group
# with no row to average over (all skipped for a NULL) gives NULL.

@server.entry
def lambda_columns(loss, names, types):
    """The position (from 1) in a row, whose column names and type oids are names and types, of each column the
    lambda reads: the error for one that is not there or not a number is the functions' own."""
    lam = program.parsed(loss, settings().limits)
    categorical.refuse_aggregate(lam, names, types)
    return [k + 1 for k in loader.positions(lam.columns, names, types, aggregate=True)]


@server.entry
def loss_agg(packed, columns, loss, weights, options=None):
    arguments.options(options, 'pgad.loss_agg', (), settings().memory_limit)
    with _prepared(loss, weights, _unpacking(packed, columns), gradient=False) as call:
        return None if call is None else _loss(call)


@server.entry
def gradient_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_agg', ('mode', 'backend', 'dtype', 'tape'),
                              settings().memory_limit)
    with _prepared(loss, weights, _unpacking(packed, columns), given['mode'], given['backend'],
                   given['dtype'], tape=given['tape']) as call:
        return None if call is None else _gradient(call)


@server.entry
def gradient_descent_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_descent_agg',
                              ('learning_rate', 'iterations', 'mode', 'backend', 'dtype', 'tape'),
                              settings().memory_limit)
    with _prepared(loss, weights, _unpacking(packed, columns), given['mode'], given['backend'],
                   given['dtype'], tape=given['tape']) as call:
        return None if call is None else _descend(call, given['learning_rate'], given['iterations'])


# pgad.train and pgad.drop_model: the model and its loss make one objective lambda (objective.py), trained as the
# functions train, per group with group_by (the data loaded once: loader.load_groups), by the optimizer asked for
# (descent.fit), on standardised columns with standardize (standardize.py); catalog.py stores the fits and writes
# the scoring function.
REQUIRED = ('name', 'model', 'loss', 'data', 'weights', 'mode', 'backend', 'batch_size', 'tolerance', 'l1', 'l2',
            'label', 'progress_every', 'dtype')


@server.entry
def train(name, model, loss, data, weights, learning_rate=None, iterations=None, mode='reverse', backend='auto',
          optimizer=None, batch_size=256, seed=None, tolerance=0.0, l1=0.0, l2=0.0, regularize=None,
          standardize=None, label='y', group_by=None, progress_every=0, dtype='float64', validation=None,
          early_stopping=None):
    given = dict(locals())
    for argument in REQUIRED:
        if given[argument] is None:
            raise PgadError('22004', f'argument "{argument}" of pgad.train must not be NULL')
    name = arguments.model_name(name)
    config = settings()
    goal = objective.build(model, loss, label, config.limits)
    w, unread = arguments.unread(arguments.weights(weights, goal.model, config.memory_limit),
                                 program.parsed(goal.text, config.limits))
    names = list(w)
    optimizer = arguments.optimizer(_default_optimizer(optimizer, learning_rate, l1))
    learning_rate = DEFAULT_LEARNING_RATE if learning_rate is None else learning_rate
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
                   validation=validating.option(validation))
    options['early_stopping'] = validating.early_stopping(early_stopping, options['validation'])
    if standardize and categorical.indexed(w, goal.model):
        raise PgadError('0A000', 'pgad.train takes no standardize for a model with a categorical weight',
                        hint='Standardise the numeric columns in the data query, or train without standardize.')
    plan = standardizing.plan(goal.model) if standardize else None
    for column in goal.loss_columns if standardize else ():
        if column in goal.columns:
            raise PgadError('0A000', f'standardize => true changes column "{column}", which the loss reads too',
                            hint='Train without standardize, or give the loss a column of its own.')
    catalog.check_can_store(name, loss)
    read = objective.labelled(program.parsed(goal.text, config.limits), goal, loss)  # a boolean label too
    w, cats = categorical.expand(w, read, data, config.limits, config.memory_limit)
    kinds = catalog.group_types(list(cats.types), list(cats.types.values()), 'a categorical weight')
    try:
        lengths = loader.lengths(data, read.columns, cats.codes)
    except PgadError as e:
        raise objective.without_label(e, goal, loss) from None
    shapes = _shapes(w, lengths, cats)
    if (shapes.columns or any(n not in cats.keys for n, _ in shapes.weights) or
            vectors.needed(goal.model) and not categorical.only(goal.model, cats)) and \
            (standardize or options['group_by']):
        raise PgadError('0A000', 'pgad.train takes no standardize or group_by for a model with vectors',
                        hint='Standardise the columns in the data query, or train one model per group.')
    prog = (program.build_hessian(goal.text, tuple(names), config.limits, shapes)  # newton: the Hessian's sums too
            if options['optimizer'] == 'newton' else
            program.build(goal.text, tuple(names), options['mode'], True, config.limits, shapes))
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, loss))  # what the loads read: a boolean label too
    _kernel(prog, options['backend'], options['dtype'], config)  # a backend's errors before the load
    job = shards.Job(goal.text, tuple(names), options['mode'], options['backend'], options['dtype'])
    start = _vector(w)
    penalty = descent.Penalty(options['l1'], options['l2'], np.concatenate(
        [np.zeros(0)] + [np.full(int(np.prod(shape, dtype=np.int64)), float(options['regularize'] is None or n in
                                                            options['regularize'])) for n, shape in prog.shapes]))
    groups = options['group_by']
    with ExitStack() as stack:
        if groups:  # each group's rows here: a sharded table's are pulled (docs/scaling.md)
            group_types, parts = loader.load_groups(data, list(prog.columns), groups, config.memory_limit,
                                                    cats.codes)
            group_types = catalog.group_types(groups, group_types)  # domains as their base types
            _check_groups(len(parts), config.memory_limit)
            parts = [(part, None) for part in parts]
        else:  # standardize needs the columns here too
            # standardize, validation and newton need the rows here: the shards send only the gradient's sums
            spread = not standardize and validation is None and options['optimizer'] != 'newton'
            table, kernel = stack.enter_context(_loading(data, spread=spread)(prog, config, job, start, cats.codes))
            group_types, parts = [], [(loader.Group(None, None, table), kernel)]
        held_out = _held_out(options['validation'], prog, groups, config, cats.codes)
        rows, fits = [], []
        for part, kernel in parts:
            where = f'model "{name}"' + (f', group {part.key}' if part.key else '')
            if part.table.rows == 0:
                server.notice(f'{where}: no rows without NULL in the columns it reads; no model for this group')
                continue
            here = part.table if kernel is None else _local(kernel, part.table)  # a sharded table's local rows
            objective.check_labels(loss, label, _label_column(prog, here, label), f'{where}: ' if part.key else '')
            part, held = _validation_rows(part, held_out, options, where)
            if held is not None:
                objective.check_labels(loss, label, _label_column(prog, held, label), f'{where}, validation: ')
            clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'{where}: {message}'),
                                  options['iterations'], every_iterations=options['progress_every'],
                                  warning=lambda message, hint: server.warning(f'{where}: {message}', hint))
            if isinstance(kernel, shards.Sharded):
                fit_options = _full_batch(options, part.table.rows)
            else:
                fit_options = options
                step_rows = part.table.rows if options['optimizer'] not in descent.MINI_BATCH else options['batch_size']
                kernel = _kernel(prog, options['backend'], options['dtype'], config, min(step_rows, part.table.rows))
            fitted, fit, watch = _fit(prog, kernel, part.table, dict(zip(prog.weights, start)), plan, fit_options,
                                      penalty, clock, held)
            fits.append((part.values, fitted))
            rows.append(dict(name=name, group_key=part.key, model=model, loss=loss,
                             weights=_with(unread, categorical.named(prog.nest([fitted[n] for n in prog.weights]),
                                                                     cats)),
                             final_loss=float(fit.loss), loss_history=[float(v) for v in fit.history],
                             iterations=fit.iterations, options=json.dumps(options), data=data, rows=part.table.rows,
                             training_time=fit.seconds,
                             validation_history=None if watch is None else watch.history))
    if not rows:
        raise PgadError('22000', 'no group of the data has a row without NULL in the columns the model reads')
    unrolled = None
    if shapes or vectors.needed(goal.model):
        lam, prediction = vectors.unrolled_value(goal.model, shapes, config.limits)
        unrolled = (lam, prediction, dict(shapes.columns))
    scoring = catalog.Scoring(name, goal.model, groups, group_types, printer.budget(config.limits), unrolled,
                              {c: (kind, cats.codes[c]) for c, kind in zip(cats.types, kinds)})
    return catalog.store(scoring, rows, fits)


@server.entry
def evaluate(name, data):
    """pgad.evaluate: the metrics of model `name` on the data, (group_key, metric, value) rows (models/evaluate.py)."""
    return evaluating.evaluate(name, data, settings())


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


def _fit(prog, kernel, table, start, plan, options, penalty, clock, held=None):
    """({weight: fitted value}, descent.Fit, validation.Watch or None) of one table (a group's) from the weights
    start, on standardised columns when plan is not None; the loss on the held-out rows held (a Table, or None)
    watched after each iteration, and with early_stopping the weights of its lowest."""
    names = list(prog.weights)
    if plan is not None:
        columns = dict(zip(prog.columns, table.columns))
        mean, std = standardizing.moments(plan, columns)

        def scaled(t):
            found = dict(zip(prog.columns, t.columns))
            return loader.Table([standardizing.scale(found[c], mean[c], std[c]) if c in plan.columns else found[c]
                                 for c in prog.columns], t.rows, t.skipped)
        table, held = scaled(table), None if held is None else scaled(held)
        start = standardizing.forward(plan, start, mean, std)
    watch = None
    if held is not None:
        watch = clock.watch = validating.Watch(
            lambda w: descent.evaluate(kernel, held, w, clock.interrupts)[0] / held.rows, options['early_stopping'])
    try:
        fit = descent.fit(kernel, table, [start[n] for n in names], names, options['optimizer'],
                          options['learning_rate'], options['iterations'], options['batch_size'], options['seed'],
                          options['tolerance'], penalty, clock,
                          why=lambda w, output: domain.diagnose(prog, _local(kernel, table), w, output))
    except validating.Stop:
        fit = descent.Fit(watch.best, watch.training[watch.at], watch.training, len(watch.training), clock.seconds())
    else:
        if watch is not None and options['early_stopping'] and watch.at is not None:
            fit = descent.Fit(watch.best, watch.training[watch.at], fit.history, fit.iterations, fit.seconds)
    fitted = dict(zip(names, fit.weights.tolist()))
    return (fitted if plan is None else standardizing.back(plan, fitted, mean, std)), fit, watch


def _held_out(validation, prog, groups, config, categories=None):
    """The rows of a validation query (None for a fraction, or no validation): a loader.Table, or with group_by
    {group key: Table}; a categorical column coded by the training's categories, a category it has not seen as 0."""
    if not isinstance(validation, str):
        return None
    if groups:
        _, found = loader.load_groups(validation, list(prog.columns), groups, config.memory_limit, categories,
                                      unseen=True)
        return {part.key: part.table for part in found}
    return loader.load(validation, list(prog.columns), config.chunk_rows, config.memory_limit, dict(prog.columns_of),
                       categories, unseen=True)


def _validation_rows(part, held_out, options, where):
    """(the group part with its training rows, its held-out rows or None): a fraction of part's rows split off by
    their hash and seed (validation.split), or the validation query's rows (of part's group, with group_by)."""
    fraction = options['validation']
    if fraction is None:
        return part, None
    if isinstance(fraction, float):
        trained, held = validating.split(part.table, fraction, options['seed'])
    else:
        trained, held = part.table, held_out.get(part.key) if isinstance(held_out, dict) else held_out
    if held is None or held.rows == 0 or trained.rows == 0:
        raise PgadError('22000', f'{where}: no {"validation" if trained.rows else "training"} rows',
                        detail=f'validation => {fraction if isinstance(fraction, float) else "its query"} leaves '
                               f'{trained.rows} rows to train on and {0 if held is None else held.rows} to validate '
                               'on.',
                        hint='Give more rows, or another fraction or query.')
    return loader.Group(part.key, part.values, trained), held


# pgad.train's defaults where an argument is NULL (left out): L-BFGS, whose line search needs no learning rate and
# converges on columns of any scale, unless a learning_rate or l1 asks for gradient descent as before 0.11.0.
DEFAULT_LEARNING_RATE, DEFAULT_ITERATIONS = 0.05, 100


def _default_optimizer(optimizer, learning_rate, l1):
    """The optimizer asked for; left out, 'lbfgs', or 'gd' where a learning_rate or l1 is given (lbfgs takes
    neither)."""
    if optimizer is not None:
        return optimizer
    return 'gd' if learning_rate is not None or l1 else 'lbfgs'


@server.entry
def drop_model(name):
    catalog.drop(name)


@server.entry
def derivatives(loss, weights=None, data=None):
    """Each weight's derivative as text; with vectors (the weights' shapes from weights, array columns' lengths
    from data), as vector expressions (lang/tensors.py)."""
    if loss is None:
        return []  # not STRICT (weights and data are NULL unless given): a NULL loss gives no rows
    limits = settings().limits
    lam = program.parsed(loss, limits)
    w, shapes = _given(lam, weights, data, lengths=True)
    budget = printer.budget(limits)
    if shapes or vectors.needed(lam):
        grown = lam.copy()
        found = tensors.gradient(grown, shapes)
        return list(zip(found, printer.to_lambdas(grown, list(found.values()), budget)))
    prog = program.build(loss, tuple(arguments.unread(w, lam)[0]), limits=limits)
    found = dict(zip(prog.weights, printer.to_lambdas(prog.lam, prog.outputs[1:], budget)))
    return [(name, found.get(name, '0')) for name in w]


@server.entry
def init_weights(shapes, scheme='glorot', seed=0):
    config = settings()
    return initial.weights(shapes, scheme, seed, config.limits, config.memory_limit)


@server.entry
def explain(loss, mode='reverse', backend='auto', rows=None, data=None, weights=None, tape='auto'):
    if loss is None or mode is None or backend is None or tape is None:
        return []  # pgad.explain is not STRICT (rows, data, weights are NULL unless given): a NULL elsewhere, no rows
    backend = arguments.backend(backend)
    if rows is not None:
        arguments.non_negative('rows', rows)
    mode, limits = arguments.mode(mode), settings().limits
    tape = arguments.tape(tape, mode, backend)
    lam = program.parsed(loss, limits)
    w, shapes = _given(lam, weights, data, lengths=weights is not None or vectors.needed(lam))
    if shapes.categorical and data is not None:
        raise PgadError('0A000', 'pgad.explain takes no data with a categorical weight',
                        hint='Leave data out and list the categories in the weights ({"region": {"north": 0, '
                             '"south": 0}}), or give rows.')
    return explaining.stages(loss, mode, limits, backend, rows, data, shapes, list(arguments.unread(w, lam)[0]), tape)


@dataclass(frozen=True)
class Call:
    """One call's stages, ready to run: the program, the loaded table, the compiled kernel, the weights."""
    prog: program.Program
    table: loader.Table
    kernel: object
    vector: np.ndarray  # the starting weights, in the order of prog.weights
    unread: dict        # the weights the lambda does not read, {name: value}: given back as they came
    categories: categorical.Categories = None  # the categorical weights' categories

    @property
    def names(self):
        return list(self.prog.weights)

    def why(self, w, output):
        """What explains a sum that is not finite at the starting weights: the operation and the row (domain.py)."""
        return domain.diagnose(self.prog, _local(self.kernel, self.table), w, output)


def _local(kernel, table):
    """The rows of table that are here: a sharded table's local partitions' (the shards' are not)."""
    return kernel.table if isinstance(kernel, shards.Sharded) else table


def _loading(data, spread=True):
    """How a function loads its columns: the data query's, packed by pgad.pack (loader.py); or, where the data names
    a table sharded over postgres_fdw servers (shards.py, unless spread is False), the local partitions' rows and a
    kernel that adds the shards' sums to theirs, the shards' connections open until the call ends. No row is an
    error. load(prog, config, job, start) is a context manager giving (table, kernel); start, the starting weights,
    is where a sharded load's first round counts the rows. load.lengths(lam) gives the lengths of the array columns
    the lambda reads (loader.lengths). A lambda with vectors pulls a sharded table's rows."""
    @contextmanager
    def load(prog, config, job, start, categories=None):
        layout = shards.layout(data, prog.columns) if spread and not prog.shaped else None
        if layout is None:
            table = _some_rows(loader.load(data, list(prog.columns), config.chunk_rows, config.memory_limit,
                                           dict(prog.columns_of), categories))
            yield table, _kernel(prog, job.backend, job.dtype, config, table.rows)
            return
        with shards.Shards(layout, job) as remote:
            here = (loader.load(layout.local_query, list(prog.columns), config.chunk_rows, config.memory_limit)
                    if layout.local_query else loader.Table([np.empty(0) for _ in prog.columns], 0, 0))
            kernel = shards.Sharded(_kernel(prog, job.backend, job.dtype, config, here.rows), here, remote,
                                    len(prog.outputs), server.check_interrupts)
            rows = int(kernel.round(start)[0])
            yield _some_rows(loader.Table(here.columns, rows, here.skipped)), kernel
    load.lengths = lambda lam, categorical=(): loader.lengths(data, lam.columns, categorical)
    load.data = data
    return load


def _some_rows(table):
    if table.rows == 0:
        raise PgadError('22000', 'the data has no rows' if not table.skipped else
                        f'every row of the data has NULL in a column the lambda reads ({table.skipped} rows)',
                        hint='data must have at least one row to average the loss over.')
    return table


def _unpacking(packed, names):
    """How an aggregate loads its columns: from the rows its transition function packed. No row gives None."""
    @contextmanager
    def load(prog, config, job, start, categories=None):
        table = loader.packed(packed, names, list(prog.columns))
        yield (table, _kernel(prog, job.backend, job.dtype, config, table.rows)) if table.rows else (None, None)
    load.lengths = lambda lam, categorical=(): ()  # the aggregates pack numbers: lambda_columns refuses an array column
    load.data = None  # categorical.expand refuses a categorical weight
    return load


@contextmanager
def _prepared(loss, weights, load, mode='reverse', backend='auto', dtype='float64', gradient=True, tape='auto',
              **checked):
    """The Call for the lambda text loss at the weights jsonb, its data from load (_loading, _unpacking), for the
    length of a with block; None when load gives none. The arguments are checked in order (a function's first bad
    argument is the one reported), `checked` ones by arguments' function of their name."""
    config = settings()
    lam = program.parsed(loss, config.limits)
    w, unread = arguments.unread(arguments.weights(weights, lam, config.memory_limit), lam)
    for name, value in checked.items():
        getattr(arguments, name)(value)
    mode, backend = arguments.mode(mode), arguments.backend(backend)
    precision = arguments.dtype(dtype, backend)
    tape = arguments.tape(tape, mode, backend)
    w, cats = categorical.expand(w, lam, load.data, config.limits, config.memory_limit)
    prog = program.build(lam.text, tuple(w), mode, gradient, config.limits,
                         _shapes(w, load.lengths(lam, cats.codes), cats), tape)
    _kernel(prog, backend, precision, config)  # a backend's errors (no GPU, too large) before the load
    vector = _vector(w)
    with load(prog, config, shards.Job(lam.text, tuple(w), mode, backend, precision), vector, cats.codes) \
            as (table, kernel):
        yield None if table is None else Call(prog, table, kernel, vector, unread, cats)


def _shapes(w, columns=(), cats=None):
    """The vectors.Shapes of the weights (a dict of numbers and arrays, as arguments.weights gives), of array
    columns ((name, length), … as loader.lengths gives) and the columns that index categorical weights (cats)."""
    return vectors.Shapes(tuple((name, v.shape) for name, v in w.items() if np.ndim(v)), tuple(columns),
                          tuple(cats.codes) if cats else ())


def _given(lam, weights, data, lengths):
    """(the weights, their vectors.Shapes) of a function that takes weights and data only for their shapes
    (pgad.derivatives, pgad.explain): every weight the lambda reads a number unless weights (a jsonb, or None) says
    otherwise; the array columns' lengths from data where it is given and lengths is true."""
    config = settings()
    w = arguments.weights(weights, lam, config.memory_limit) if weights is not None else \
        dict.fromkeys(lam.weights, 0.0)
    cats = categorical.Categories()
    if categorical.indexed(w, lam):  # the categories of the data, or without data those weights lists
        w, cats = categorical.expand(w, lam, data, config.limits, config.memory_limit) if data is not None else \
            categorical.listed(w, lam)
    return w, _shapes(w, loader.lengths(data, lam.columns, cats.codes) if data is not None and lengths else (), cats)


def _with(unread, nested):
    """The weights jsonb of nested ({weight: number or nested lists}, as Program.nest gives) and the weights the
    lambda does not read, {name: a number or an array}."""
    return json.dumps({**{n: v.tolist() if isinstance(v, np.ndarray) else v for n, v in unread.items()}, **nested})


def _vector(w):
    """The weights as one vector, in the order of a Program's weights: each weight's elements row-major."""
    return np.concatenate([np.ravel(v) for v in w.values()]).astype(np.float64) if w else np.zeros(0)


def _kernel(prog, backend, precision, config, rows=None):
    """prog's kernel on the backend asked for ('auto': chosen for steps over `rows` rows; None, not known yet)."""
    chosen = backends.choose(prog, backend, rows)
    return backends.compile(prog, chosen, config.cache, precision if chosen == 'cuda' else 'float64')


def _loss(call):
    value = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)[0] / call.table.rows
    descent.check_finite(np.array([value]), call.vector, 1, call.names, 0, call.why)
    return float(value)


def _gradient(call):
    sums = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)
    descent.check_finite(sums, call.vector, 1, call.names, 0, call.why)
    zeros = {n: dict.fromkeys(v, 0.0) if isinstance(v, dict) else _zeros(np.shape(v)) for n, v in call.unread.items()}
    return _with(zeros, categorical.named(call.prog.nest((sums[1:] / call.table.rows).tolist()), call.categories))


def _zeros(shape):
    """0 as a weight of shape (), (n,) or (m, n) is written: nested lists of one 0.0 (rows shared), no array."""
    zero = 0.0
    for size in reversed(shape):
        zero = [zero] * size
    return zero


def _descend(call, learning_rate, iterations):
    fitted, value, ran = descent.run(call.kernel, call.table, call.vector, learning_rate, iterations, call.names,
                                     server.check_interrupts, server.notice, why=call.why, warning=server.warning)
    return _with(call.unread, categorical.named(call.prog.nest(fitted.tolist()), call.categories)), float(value), ran
