"""pgad.train of a keyed model (keyed.py: a vector per key, w.p[d.user] with {"shape": [8]}): the rows loaded once,
the keys found in the same pass, each key column as its code (keyed.load), the fit by block Newton (blocks.py), L-BFGS
or a sparse mini-batch optimizer (sparse.py), and the version stored with its keyed weights in tables
(weight_tables.py) and a scoring function that looks them up (KeyedScoring).

The options a keyed model takes: optimizer ('block_newton', the default up to BLOCK_MOST global values; 'lbfgs',
'gd'; 'sgd', 'adagrad', 'adam', mini-batches that touch only a batch's keys), iterations (sweeps, iterations or
epochs), learning_rate, batch_size, seed (the keyed starts' where the spec gives none, and the batches'), tolerance,
mode, l2, regularize and backend ('auto', the default, and 'llvm' compile each pass over the rows as one gather and
scatter loop, jit/scatter.py; 'cuda' runs that loop as a CUDA kernel, gpu/scatter.py, with block Newton's conjugate
gradients in numpy over its passes; 'python' runs the local program in numpy; a sparse optimizer's mini-batches run
in numpy on any). What it does not take (group_by, validation, standardize, l1, bounds, impute, early_stopping,
likelihood, dtype float32) is refused by name (0A000).
"""
import json
import math
from dataclasses import replace

import numpy as np

from .. import arguments, keyed as keyed_weights, loader, program, server
from ..errors import PgadError
from ..lang import printer, sql, vectors
from . import blocks, catalog, descent, objective, sparse, weight_tables

OPTIMIZERS = ('block_newton', 'lbfgs', 'gd', 'sgd', 'adagrad', 'adam')
DENSE_RATE = 0.05       # gd's learning_rate where none is given, as pgad.train's
SWEEPS = 100            # block Newton's sweeps where iterations is left out
BUDGET, BUDGET_LEAST = 64 << 20, 8 << 20  # block Newton's blocks at once: an eighth of pgad.memory_limit, 8 MB at least
COPIES_SHARE = 4  # the table's copies in another group's key order (blocks.arrange) take a quarter of the limit at most
BLOCK_MOST = 33         # the most values of the global weights' block that block Newton is the default for: past
#                         it (a network's weights, whose blocks are not convex) L-BFGS; a key's block of any size is
#                         solved by conjugate gradients (blocks.CG_FROM), where their copies fit
ITERATIONS = {'lbfgs': 2000, 'gd': 1000, 'sgd': 50, 'adagrad': 50, 'adam': 50}
POLISH_COPIES = 2 * descent.MEMORY + 14  # the vectors L-BFGS keeps (its pairs, its iterate, gradient, direction and
#                                          scale, a line search's trial, the kernel's sums): only where they fit
UNSCALED = []  # descent.fit's blocks: none, so no curvature pass and no index array a weight (millions of them)
UNTAKEN = {  # pgad.train's arguments a keyed model does not take, and their defaults
    'group_by': None, 'validation': None, 'standardize': None, 'bounds': None, 'impute': None,
    'early_stopping': None, 'likelihood': None, 'order_by': None, 'state': None, 'frequency': None,
}
COLUMN = '\x00'  # starts the name of a keyed weight read as a column of the scoring lambda: no data column has it


def train(name, model, loss, data, weights, w, given, config):
    """pgad.train of a keyed model: the stored version's rows (weights: the jsonb's text, w: as parsed)."""
    for argument, default in UNTAKEN.items():
        if given.get(argument) is not None and given.get(argument) != default and \
                not (argument == 'impute' and not json.loads(given[argument])):
            raise PgadError('0A000', f'pgad.train takes no {argument} for a keyed model',
                            detail='A keyed model is one whose weights hold a value per key (w.p[d.user], '
                                   '{"shape": [8]}).', hint=f'Leave {argument} out.')
    if given.get('dtype') not in (None, 'float64'):
        raise PgadError('0A000', f'pgad.train takes no dtype "{given["dtype"]}" for a keyed model',
                        detail='A keyed model is trained in float64 on every backend.',
                        hint='Leave dtype out.')
    if given.get('l1'):
        raise PgadError('0A000', 'pgad.train takes no l1 for a keyed model', hint='Use l2.')
    backend = arguments.backend(given.get('backend') or 'auto')
    optimizer = given.get('optimizer') or 'block_newton'
    if optimizer not in OPTIMIZERS:
        raise PgadError('0A000', f'optimizer "{optimizer}" cannot train a keyed model',
                        hint="Use 'block_newton' (the default), 'lbfgs', 'gd', 'sgd', 'adagrad' or 'adam'.")
    if given.get('learning_rate') is not None and optimizer in ('block_newton', 'lbfgs'):
        raise PgadError('22023', f'optimizer "{optimizer}" takes no learning_rate',
                        hint="Leave learning_rate out, or use it with 'gd', 'sgd', 'adagrad' or 'adam'.")
    iterations = given.get('iterations')
    options = dict(optimizer=optimizer, mode=arguments.mode(given.get('mode') or 'reverse'), backend=backend,
                   iterations=arguments.iterations(iterations if iterations is not None else
                                                   SWEEPS if optimizer == 'block_newton' else ITERATIONS[optimizer]),
                   learning_rate=arguments.learning_rate(sparse.DEFAULT_RATE.get(optimizer, DENSE_RATE)
                                                         if given.get('learning_rate') is None else
                                                         given['learning_rate']),
                   batch_size=arguments.positive('batch_size', given.get('batch_size', 256)),
                   seed=None if given.get('seed') is None else arguments.non_negative('seed', given['seed']),
                   tolerance=arguments.non_negative('tolerance', given.get('tolerance') or 0.0),
                   l1=0.0, l2=arguments.penalty('l2', given.get('l2') or 0.0, 'lbfgs'),
                   label=given.get('label', 'y'),
                   progress_every=int(arguments.non_negative('progress_every', given.get('progress_every') or 0)))
    loss = objective.canonical(loss)
    goal = objective.build(model, loss, options['label'], config.limits)
    lam = program.parsed(goal.text, config.limits)
    if not isinstance(w, dict):
        raise PgadError('22023', 'weights must be a JSON object', detail=f'The weights are {weights}.',
                        hint=keyed_weights.EXAMPLE)
    for missing in [n for n in lam.weights if n not in w]:
        raise PgadError('22023', f'weight "{missing}" is not in the weights',
                        detail='The weights are: ' + ', '.join(f'"{k}"' for k in w) + '.',
                        hint='Give every weight the lambda reads a starting value: ' + keyed_weights.EXAMPLE + '.')
    w = {n: w[n] for n in lam.weights}
    keyed = keyed_weights.found(w, lam, options['seed'])
    globals_ = {n: arguments.weight(n, v) for n, v in w.items() if n not in keyed.specs}
    options['regularize'] = arguments.regularize(given.get('regularize'), list(w), config.memory_limit)
    catalog.check_can_store(name, loss)
    keyed_weights.check(keyed, loader.as_query(data))
    shapes = {n: np.shape(v) for n, v in globals_.items()}
    prog, text, names = keyed_weights.local_program(lam, keyed, shapes, config.limits, options['mode'])
    columns = [*prog.columns, *dict.fromkeys(keyed.column.values())]
    try:
        table = keyed_weights.load(keyed, data, columns, config.memory_limit)
    except PgadError as e:
        raise objective.without_label(e, goal, loss) from None
    if table.rows == 0:
        raise PgadError('22000', f'model "{name}": no rows without NULL in the columns it reads',
                        hint='data must have at least one row to average the loss over.')
    layout = keyed_weights.layout(names, keyed, shapes)
    lbfgs_fits = config.memory_limit is None or POLISH_COPIES * 8 * layout.size <= config.memory_limit
    if given.get('optimizer') is None and _block_sizes(layout)[None] > BLOCK_MOST:
        # the global weights' block too large to solve as one; L-BFGS where its pairs fit, else sparse Adam
        options['optimizer'] = optimizer = 'lbfgs' if lbfgs_fits else 'adam'
    if optimizer == 'lbfgs' and not lbfgs_fits:
        need = loader.megabytes(POLISH_COPIES * 8 * layout.size)
        raise PgadError(loader.OUT_OF_MEMORY, f'optimizer "lbfgs" needs {need} for its {layout.size} weights, more '
                                              f'than pgad.memory_limit ({loader.megabytes(config.memory_limit)})',
                        detail=f'It keeps {POLISH_COPIES} copies of the weights: its curvature pairs and steps.',
                        hint="Use optimizer 'block_newton' or 'adam', which keep fewer, or have a superuser raise "
                             'pgad.memory_limit.')
    conjugate = any(size >= blocks.CG_FROM for size in _block_sizes(layout).values())
    if optimizer == 'block_newton' and conjugate and config.memory_limit is not None and \
            blocks.CG_COPIES * 8 * layout.size > config.memory_limit:
        if given.get('optimizer') is None:  # its conjugate gradients' vectors do not fit: sparse Adam, which fits
            options['optimizer'] = optimizer = 'adam'
        else:
            need = loader.megabytes(blocks.CG_COPIES * 8 * layout.size)
            raise PgadError(loader.OUT_OF_MEMORY, f'optimizer "block_newton" needs {need} for its {layout.size} '
                                                  f'weights, more than pgad.memory_limit '
                                                  f'({loader.megabytes(config.memory_limit)})',
                            detail=f'Its conjugate gradients keep {blocks.CG_COPIES} copies of the weights at once.',
                            hint="Use optimizer 'adam', which keeps fewer, or have a superuser raise "
                                 'pgad.memory_limit.')
    label = [str(c) for c in prog.columns]
    if options['label'] in label:
        objective.check_labels(loss, options['label'], table.columns[label.index(options['label'])])
    start = np.zeros(layout.size)
    for n, value in globals_.items():
        start[layout.spans[n]] = np.ravel(value)
    for n in layout.keyed:
        start[layout.spans[n]] = keyed_weights.start(keyed, n).ravel()
    penalty = keyed_weights.Ridge(options['l2'], {n: 1.0 if options['regularize'] is None or n in options['regularize']
                                                  else 0.0 for n in layout.spans}, dict(layout.spans))
    kernel = keyed_weights.Kernel(prog, layout, columns, backend, config.cache)
    where = f'model "{name}"'
    clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'{where}: {message}'),
                          options['iterations'], every_iterations=options['progress_every'],
                          warning=lambda message, hint: server.warning(f'{where}: {message}', hint))
    holder = [start]  # the fit moves the start in place, and holds the only reference to it
    del start
    fit = _fit(prog, text, kernel, table, holder, layout, penalty, dict(options, until=iterations is None), clock,
               config, keyed.keys)
    if not fit.converged:
        message, hint = descent.unconverged(optimizer, fit, options['iterations'], penalty, objective.base(loss))
        if optimizer == 'block_newton':
            hint = (f"Train with iterations => {10 * options['iterations']} (sweeps), or leave iterations out: "
                    'L-BFGS then finishes what the sweeps leave.')
        elif optimizer in sparse.RULES:
            hint = (f"Train with iterations => {10 * options['iterations']} (epochs), a larger batch_size, or "
                    "optimizer => 'block_newton' where a key's values are few enough (it converges).")
        clock.warning(message, hint)
    fitted = fit.weights
    stored = {**layout.nest(fitted),
              **{n: {'keyed_by': keyed.column[n], 'keys': c, 'shape': list(layout.shapes[n])}
                 for n, (_, c) in layout.keyed.items()}}
    row = dict(name=name, group_key=None, model=model, loss=loss, weights=json.dumps(stored),
               final_loss=float(fit.loss), loss_history=[float(v) for v in fit.history], iterations=fit.iterations,
               options=json.dumps({**options, 'keyed': {n: dict(column=keyed.column[n], shape=list(s.shape),
                                                                init=s.init, seed=s.seed)
                                                        for n, s in keyed.specs.items()}}),
               data=data, rows=table.rows, training_time=fit.seconds, validation_history=None,
               converged=fit.converged, gradient_norm=fit.gradient_norm, metrics=None)
    scoring = KeyedScoring(name, program.parsed(model, config.limits), keyed, layout, shapes, config.limits,
                           printer.budget(config.limits))
    scoring.values = {n: layout.table(fitted, n) for n in layout.keyed}
    element = {e: fitted[layout.spans[n].start + j] for n in layout.names if n not in layout.keyed
               for j, e in enumerate(vectors.elements(n, layout.shapes[n]))}
    return catalog.store(scoring, [row], [(None, element)], arguments.deploy(given.get('deploy', 'true'), None))


def _block_sizes(layout):
    """The values of each of block Newton's blocks: the global weights', and a key's of each keyed column."""
    sizes = {None: sum(math.prod(layout.shapes[n]) for n in layout.names if n not in layout.keyed)}
    for n, (column, _) in layout.keyed.items():
        sizes[column] = sizes.get(column, 0) + math.prod(layout.shapes[n])
    return sizes


def _fit(prog, text, kernel, table, holder, layout, penalty, options, clock, config, keys):
    """The descent.Fit of options' optimizer from start; text: the local lambda's (keyed.build). Block Newton that
    has not converged in its sweeps hands over to L-BFGS where iterations was left out (options['until']) and its
    vectors fit pgad.memory_limit: where the blocks are tightly coupled the sweeps gain little (ALS's linear rate),
    where the factors' near-symmetries leave L-BFGS crawling instead the sweeps do better; each takes the other's
    slow case."""
    optimizer, iterations = options['optimizer'], options['iterations']
    start = holder.pop()
    names = layout.element_names(keys)
    if optimizer in sparse.RULES:
        return sparse.fit(kernel, table, start, layout, penalty, optimizer, options['learning_rate'], iterations,
                          options['batch_size'], np.random.default_rng(options['seed']), options['tolerance'], clock)
    if optimizer != 'block_newton':
        return descent.fit(kernel, table, start, names, optimizer, options['learning_rate'], iterations,
                           penalty=penalty.dense(layout.size), tolerance=options['tolerance'], clock=clock,
                           blocks=UNSCALED)
    groups = [blocks.Group(text, [n for n in layout.names if n not in layout.keyed], layout, config.limits, prog.dims)]
    groups = groups if groups[0].m else []
    for column in dict.fromkeys(c for c, _ in layout.keyed.values()):
        groups.append(blocks.Group(text, [n for n, (c, _) in layout.keyed.items() if c == column], layout,
                                   config.limits, prog.dims, column))

    def loss_only(w):
        return kernel.loss(table.columns, table.rows, w, clock.poll)
    budget = BUDGET if config.memory_limit is None else max(BUDGET_LEAST, config.memory_limit // 8)
    spare = None if config.memory_limit is None else config.memory_limit // COPIES_SHARE
    fit, _ = blocks.fit(kernel, table, start, groups, penalty, iterations, options['tolerance'], clock, loss_only,
                        budget, spare)
    if fit.converged or fit.stopped != 'cap' or not options['until']:
        return fit
    if config.memory_limit is not None and POLISH_COPIES * 8 * layout.size > config.memory_limit:
        return fit
    clock.iterations = ITERATIONS['lbfgs']
    polish = descent.fit(kernel, table, fit.weights, names, 'lbfgs', iterations=ITERATIONS['lbfgs'],
                         penalty=penalty.dense(layout.size), tolerance=options['tolerance'], clock=clock,
                         blocks=UNSCALED)
    return replace(polish, history=fit.history + polish.history, iterations=fit.iterations + polish.iterations,
                   seconds=clock.seconds())


class KeyedScoring:
    """The scoring function of a keyed model, for catalog.store: its arguments (the keyed columns as their types,
    then the other columns the model reads) and, once the version is known (stored), its tables and body."""
    group_by, categories, imputed, classes, explanation, lengths = (), {}, {}, None, None, []

    def __init__(self, name, model, keyed, layout, shapes, limits, max_chars):
        """model: the model lambda as parsed; shapes: {global weight: its shape}."""
        self.name, self.model, self.keyed, self.layout, self.max_chars = name, model, keyed, layout, max_chars
        self.lam, self.root = scoring_lambda(model, keyed, shapes, limits)
        self.outputs = np.array(0)
        keys = list(dict.fromkeys(keyed.column[w] for w in layout.keyed))
        others = [c for c in model.columns if c not in keys]
        self.params = [(c, keyed.types[c]) for c in keys] + \
            [(c, 'pg_catalog.bool' if getattr(c, 'boolean', False) else 'pg_catalog.float8') for c in others]
        self.at = {p: k + 1 for k, (p, _) in enumerate(self.params)}
        self.values = {}

    def identity_of(self, name):
        return f'{catalog.function_name(name)}({", ".join(t for _, t in self.params)})'

    def signature_of(self, name):
        return f'{catalog.function_name(name)}({", ".join(printer.quote_ident(p) + " " + t for p, t in self.params)})'

    @property
    def identity(self):
        return self.identity_of(self.name)

    def functions(self, loss, fits, own=None):
        """{suffix: (identity, signature, returns, body, comment)}: the scoring function and those its loss gives
        (catalog.EXTRAS), their bodies reading own's tables (a placeholder's before the version is known)."""
        (_, weights), = fits
        made = {'': (self.identity, self.signature_of(self.name), 'pg_catalog.float8',
                     self.body(weights, own or self.name), catalog.SCORING_COMMENT)}
        for suffix, returns, of, comment in catalog.EXTRAS.get(loss, ()):
            extra = f'{self.name}_{suffix}'
            made[suffix] = (self.identity_of(extra), self.signature_of(extra), returns,
                            self.body(weights, own or self.name, of, returns), comment)
        return made

    def stored(self, rows, own, fits, loss):
        """Create and fill the version's tables (rows: its stored rows), then give the functions' bodies."""
        version = rows[0]['version']
        for weight, (column, _) in self.layout.keyed.items():
            weight_tables.create(self.name, version, weight_tables.qualified(own, weight), self.keyed.types[column],
                                 bool(self.layout.shapes[weight]), self.keyed.keys[column], self.values[weight])
        return self.functions(loss, fits, own)

    def body(self, weights, own, of=None, returns='pg_catalog.float8'):
        """(SELECT CASE WHEN an argument is NULL THEN NULL ELSE <the model> END FROM (SELECT) LEFT JOIN <a keyed
        weight's table> ON key = $k …): each keyed weight's value looked up once, 0 for a key it does not hold."""
        joins, columns, zero = [], {}, "'0'::pg_catalog.float8"
        equal = {c: weight_tables.equality(t) for c, t in self.keyed.types.items()}  # one query a key column
        for k, weight in enumerate(self.layout.keyed):
            alias = f'pgad_k{k + 1}'
            column = self.keyed.column[weight]
            joins.append(f'LEFT JOIN {weight_tables.qualified(own, weight)} AS {alias} ON {alias}.key '
                         f'{equal[column]} ${self.at[column]}')
            shape = self.layout.shapes[weight]
            for j in range(shape[0]) if shape else ():
                columns[vectors.element(COLUMN + weight, (j + 1,))] = f'COALESCE({alias}.value[{j + 1}], {zero})'
            if not shape:
                columns[COLUMN + weight] = f'COALESCE({alias}.value, {zero})'
        for c in self.model.columns:
            if c in self.at and c not in self.keyed.types:
                columns[c] = f'(${self.at[c]})::pg_catalog.int4::pg_catalog.float8' \
                    if getattr(c, 'boolean', False) else f'${self.at[c]}'
        x = sql.expression(self.lam, self.root, columns, weights, self.max_chars)
        x = of(x) if of else x
        nulls = ' OR '.join(f'${k} IS NULL' for k in self.at.values())
        return f'(SELECT CASE WHEN {nulls} THEN NULL::{returns} ELSE {x} END FROM (SELECT) AS pgad_one ' + \
            ' '.join(joins) + ')'


def scoring_lambda(model, keyed, shapes, limits):
    """(the model lambda with each keyed read a column, unrolled, its prediction node id): what the scoring
    function's SQL is written from. shapes: {global weight: shape}."""
    local = keyed_weights.localised(model, keyed.column, as_columns=COLUMN)
    dims = vectors.Shapes(tuple((n, s) for n, s in shapes.items() if s),
                          tuple((COLUMN + w, keyed.specs[w].shape[0]) for w in keyed.column if keyed.specs[w].shape))
    lam, prediction = vectors.unrolled_value(local, dims, limits)
    if np.size(prediction) != 1:
        raise PgadError('0A000', 'pgad.train takes a keyed model whose prediction is a number',
                        hint='Predict a number: dot(w.p[d.user], w.q[d.item]), not a vector.')
    return lam, np.ravel(prediction)[0].id
