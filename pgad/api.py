"""The SQL functions, one Python function each; extension/sql's shims call these and nothing else.

Each takes the SQL arguments as PL/Python gives them (text, jsonb as text, float8, int), reads pgad's settings
(the limits, the kernel cache, the load's chunk size and memory), and walks the stages:
arguments → program (parse, differentiate) → backend kernel → loader → descent → result.
"""
import json
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np

from . import arguments, backends, domain, explain as explaining, loader, program, server, shards
from .models import catalog, descent, initial, objective, standardize as standardizing
from .errors import PgadError
from .jit.cache import DiskCache
from .lang import printer, tensors, vectors
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
REQUIRED = ('name', 'model', 'loss', 'data', 'weights', 'learning_rate', 'iterations', 'mode', 'backend', 'optimizer',
            'batch_size', 'tolerance', 'l1', 'l2', 'standardize', 'label', 'progress_every', 'dtype')


@server.entry
def train(name, model, loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto',
          optimizer='gd', batch_size=256, seed=None, tolerance=0.0, l1=0.0, l2=0.0, regularize=None,
          standardize=False, label='y', group_by=None, progress_every=0, dtype='float64'):
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
    options = dict(learning_rate=arguments.learning_rate(learning_rate), iterations=arguments.iterations(iterations),
                   mode=arguments.mode(mode), backend=arguments.backend(backend),
                   optimizer=arguments.optimizer(optimizer), batch_size=arguments.positive('batch_size', batch_size),
                   seed=None if seed is None else arguments.non_negative('seed', seed),
                   tolerance=arguments.non_negative('tolerance', tolerance),
                   l1=arguments.penalty('l1', l1, optimizer), l2=arguments.penalty('l2', l2, optimizer),
                   regularize=arguments.regularize(regularize, [*names, *unread], config.memory_limit),
                   standardize=bool(standardize),
                   label=label, group_by=arguments.group_by(group_by),
                   progress_every=int(arguments.non_negative('progress_every', progress_every)),
                   dtype=arguments.dtype(dtype, backend))  # backend checked just above
    plan = standardizing.plan(goal.model) if standardize else None
    for column in goal.loss_columns if standardize else ():
        if column in goal.columns:
            raise PgadError('0A000', f'standardize => true changes column "{column}", which the loss reads too',
                            hint='Train without standardize, or give the loss a column of its own.')
    catalog.check_can_store(name)
    try:
        shapes = _shapes(w, loader.lengths(data, program.parsed(goal.text, config.limits).columns))
    except PgadError as e:
        raise objective.without_label(e, goal, loss) from None
    if (shapes or vectors.needed(goal.model)) and (standardize or options['group_by']):
        raise PgadError('0A000', 'pgad.train takes no standardize or group_by for a model with vectors',
                        hint='Standardise the columns in the data query, or train one model per group.')
    prog = program.build(goal.text, tuple(names), options['mode'], True, config.limits, shapes)
    _kernel(prog, options['backend'], options['dtype'], config)  # a backend's errors before the load
    job = shards.Job(goal.text, tuple(names), options['mode'], options['backend'], options['dtype'])
    start = _vector(w)
    penalty = descent.Penalty(options['l1'], options['l2'], np.concatenate(
        [np.full(int(np.prod(shape, dtype=np.int64)), float(options['regularize'] is None or n in
                                                            options['regularize'])) for n, shape in prog.shapes]))
    groups = options['group_by']
    with ExitStack() as stack:
        if groups:  # each group's rows here: a sharded table's are pulled (docs/scaling.md)
            group_types, parts = loader.load_groups(data, list(prog.columns), groups, config.memory_limit)
            group_types = catalog.group_types(groups, group_types)  # domains as their base types
            _check_groups(len(parts), config.memory_limit)
            parts = [(part, None) for part in parts]
        else:  # standardize needs the columns here too
            table, kernel = stack.enter_context(_loading(data, spread=not standardize)(prog, config, job, start))
            group_types, parts = [], [(loader.Group(None, None, table), kernel)]
        rows, fits = [], []
        for part, kernel in parts:
            where = f'model "{name}"' + (f', group {part.key}' if part.key else '')
            if part.table.rows == 0:
                server.notice(f'{where}: no rows without NULL in the columns it reads; no model for this group')
                continue
            clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'{where}: {message}'),
                                  options['iterations'], every_iterations=options['progress_every'],
                                  warning=lambda message, hint: server.warning(f'{where}: {message}', hint))
            if isinstance(kernel, shards.Sharded):
                fit_options = _full_batch(options, part.table.rows)
            else:
                fit_options = options
                step_rows = part.table.rows if options['optimizer'] not in descent.MINI_BATCH else options['batch_size']
                kernel = _kernel(prog, options['backend'], options['dtype'], config, min(step_rows, part.table.rows))
            fitted, fit = _fit(prog, kernel, part.table, dict(zip(prog.weights, start)), plan, fit_options, penalty,
                               clock)
            fits.append((part.values, fitted))
            rows.append(dict(name=name, group_key=part.key, model=model, loss=loss,
                             weights=_with(unread, prog.nest([fitted[n] for n in prog.weights])),
                             final_loss=float(fit.loss), loss_history=[float(v) for v in fit.history],
                             iterations=fit.iterations, options=json.dumps(options), data=data, rows=part.table.rows,
                             training_time=fit.seconds))
    if not rows:
        raise PgadError('22000', 'no group of the data has a row without NULL in the columns the model reads')
    unrolled = None
    if shapes or vectors.needed(goal.model):
        lam, prediction = vectors.unrolled_value(goal.model, shapes, config.limits)
        unrolled = (lam, prediction, dict(shapes.columns))
    scoring = catalog.Scoring(name, goal.model, groups, group_types, printer.budget(config.limits), unrolled)
    return catalog.store(scoring, rows, fits)


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


def _fit(prog, kernel, table, start, plan, options, penalty, clock):
    """({weight: fitted value}, descent.Fit) of one table (a group's) from the weights start, on standardised
    columns when plan is not None."""
    names = list(prog.weights)
    if plan is not None:
        columns = dict(zip(prog.columns, table.columns))
        mean, std = standardizing.moments(plan, columns)
        table = loader.Table([standardizing.scale(columns[c], mean[c], std[c]) if c in plan.columns else columns[c]
                              for c in prog.columns], table.rows, table.skipped)
        start = standardizing.forward(plan, start, mean, std)
    fit = descent.fit(kernel, table, [start[n] for n in names], names, options['optimizer'],
                      options['learning_rate'], options['iterations'], options['batch_size'], options['seed'],
                      options['tolerance'], penalty, clock,
                      why=lambda w, output: domain.diagnose(prog, _local(kernel, table), w, output))
    fitted = dict(zip(names, fit.weights.tolist()))
    return (fitted if plan is None else standardizing.back(plan, fitted, mean, std)), fit


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
    return explaining.stages(loss, mode, limits, backend, rows, data, shapes, list(arguments.unread(w, lam)[0]), tape)


@dataclass(frozen=True)
class Call:
    """One call's stages, ready to run: the program, the loaded table, the compiled kernel, the weights."""
    prog: program.Program
    table: loader.Table
    kernel: object
    vector: np.ndarray  # the starting weights, in the order of prog.weights
    unread: dict        # the weights the lambda does not read, {name: value}: given back as they came

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
    def load(prog, config, job, start):
        layout = shards.layout(data, prog.columns) if spread and not prog.shaped else None
        if layout is None:
            table = _some_rows(loader.load(data, list(prog.columns), config.chunk_rows, config.memory_limit,
                                           dict(prog.columns_of)))
            yield table, _kernel(prog, job.backend, job.dtype, config, table.rows)
            return
        with shards.Shards(layout, job) as remote:
            here = (loader.load(layout.local_query, list(prog.columns), config.chunk_rows, config.memory_limit)
                    if layout.local_query else loader.Table([np.empty(0) for _ in prog.columns], 0, 0))
            kernel = shards.Sharded(_kernel(prog, job.backend, job.dtype, config, here.rows), here, remote,
                                    len(prog.outputs), server.check_interrupts)
            rows = int(kernel.round(start)[0])
            yield _some_rows(loader.Table(here.columns, rows, here.skipped)), kernel
    load.lengths = lambda lam: loader.lengths(data, lam.columns)
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
    def load(prog, config, job, start):
        table = loader.packed(packed, names, list(prog.columns))
        yield (table, _kernel(prog, job.backend, job.dtype, config, table.rows)) if table.rows else (None, None)
    load.lengths = lambda lam: ()  # the aggregates pack numbers: lambda_columns refuses an array column
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
    prog = program.build(lam.text, tuple(w), mode, gradient, config.limits, _shapes(w, load.lengths(lam)), tape)
    _kernel(prog, backend, precision, config)  # a backend's errors (no GPU, too large) before the load
    vector = _vector(w)
    with load(prog, config, shards.Job(lam.text, tuple(w), mode, backend, precision), vector) as (table, kernel):
        yield None if table is None else Call(prog, table, kernel, vector, unread)


def _shapes(w, columns=()):
    """The vectors.Shapes of the weights (a dict of numbers and arrays, as arguments.weights gives) and of array
    columns ((name, length), … as loader.lengths gives)."""
    return vectors.Shapes(tuple((name, v.shape) for name, v in w.items() if np.ndim(v)), tuple(columns))


def _given(lam, weights, data, lengths):
    """(the weights, their vectors.Shapes) of a function that takes weights and data only for their shapes
    (pgad.derivatives, pgad.explain): every weight the lambda reads a number unless weights (a jsonb, or None) says
    otherwise; the array columns' lengths from data where it is given and lengths is true."""
    w = arguments.weights(weights, lam, settings().memory_limit) if weights is not None else \
        dict.fromkeys(lam.weights, 0.0)
    return w, _shapes(w, loader.lengths(data, lam.columns) if data is not None and lengths else ())


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
    zeros = {n: _zeros(np.shape(v)) for n, v in call.unread.items()}
    return _with(zeros, call.prog.nest((sums[1:] / call.table.rows).tolist()))


def _zeros(shape):
    """0 as a weight of shape (), (n,) or (m, n) is written: nested lists of one 0.0 (rows shared), no array."""
    zero = 0.0
    for size in reversed(shape):
        zero = [zero] * size
    return zero


def _descend(call, learning_rate, iterations):
    fitted, value, ran = descent.run(call.kernel, call.table, call.vector, learning_rate, iterations, call.names,
                                     server.check_interrupts, server.notice, why=call.why, warning=server.warning)
    return _with(call.unread, call.prog.nest(fitted.tolist())), float(value), ran
