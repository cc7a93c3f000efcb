"""The SQL functions, one Python function each; extension/sql's shims call these and nothing else.

Each takes the SQL arguments as PL/Python gives them (text, jsonb as text, float8, int), reads pgad's settings
(the limits, the kernel cache, the load's chunk size and memory), and walks the stages:
arguments → program (parse, differentiate) → backend kernel → loader → descent → result.

What only a stored model's functions need (pgad/models/: the catalog, training, summary, evaluate, forecast,
importance) and pgad.explain are imported by the function that calls them, so that a session's first pgad.loss
does not import them (docs/performance.md, "The first call").
"""
import json

import numpy as np

from . import arguments, calls, categorical, loader, program, server, shards
from .calls import settings
from .models import descent
from .errors import PgadError
from .lang import hessian as second, printer, tensors, vectors



@server.entry
def loss(loss, data, weights):
    with calls.prepared(loss, weights, calls.loading(data), gradient=False, once=True) as call:
        return _loss(call)


@server.entry
def gradient(loss, data, weights, mode='reverse', backend='auto', dtype='float64', tape='auto'):
    with calls.prepared(loss, weights, calls.loading(data), mode, backend, dtype, tape=tape, once=True) as call:
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
    load = calls.loading(data, spread=False)
    w, cats, lengths, loaded = calls.categorized(w, lam, load, config)
    prog = program.build_hessian(lam.text, tuple(w), config.limits, calls.shapes_of(w, lengths, cats))
    calls.compiled(prog, backend, 'float64', config)
    vector = calls.vector_of(w)
    with load(prog, config, shards.Job(lam.text, tuple(w), 'reverse', backend, 'float64'), vector, cats.codes,
              table=loaded) as (table, kernel):
        sums = calls.second_sums(calls.Call(prog, table, kernel, vector, unread, cats))
    p = len(prog.weights)
    return second.full(sums[1 + p:] / table.rows, p), categorical.element_names(prog, cats, lam)




# pgad.summary: the coefficient table of a stored model (models/summary.py), from the exact Hessian of its objective
# at the fitted weights over its data query, run again as the caller, who must be the role that trained it.
@server.entry
def summary(name, unconverged='error'):
    from .models import summary as summarizing
    return summarizing.coefficients(name, unconverged)


@server.entry
def gradient_descent(loss, data, weights, learning_rate=0.05, iterations=100, mode='reverse', backend='auto',
                     dtype='float64', tape='auto'):
    with calls.prepared(loss, weights, calls.loading(data), mode, backend, dtype, tape=tape,
                        learning_rate=learning_rate, iterations=iterations) as call:
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
        kernel = calls.compiled(prog, backend, precision, config, table.rows)
        found = descent.evaluate(kernel, table, np.array([weights[k] for k in read], dtype=np.float64),
                                 server.check_interrupts)
        sums[0], sums[1 + np.array(read, dtype=np.int64)] = found[0], found[1:]
    return [float(table.rows), *(float(v) for v in sums)]


# The aggregates (extension/aggregates.c): the transition function asks lambda_columns which columns of a row to
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
    with calls.prepared(loss, weights, calls.unpacking(packed, columns), gradient=False) as call:
        return None if call is None else _loss(call)


@server.entry
def gradient_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_agg', ('mode', 'backend', 'dtype', 'tape'),
                              settings().memory_limit)
    with calls.prepared(loss, weights, calls.unpacking(packed, columns), given['mode'], given['backend'],
                   given['dtype'], tape=given['tape']) as call:
        return None if call is None else _gradient(call)


@server.entry
def gradient_descent_agg(packed, columns, loss, weights, options=None):
    given = arguments.options(options, 'pgad.gradient_descent_agg',
                              ('learning_rate', 'iterations', 'mode', 'backend', 'dtype', 'tape'),
                              settings().memory_limit)
    with calls.prepared(loss, weights, calls.unpacking(packed, columns), given['mode'], given['backend'],
                   given['dtype'], tape=given['tape']) as call:
        return None if call is None else _descend(call, given['learning_rate'], given['iterations'])


# pgad.train, pgad.deploy and pgad.drop_model: models/training.py trains, catalog.py stores, deploys and drops.
@server.entry
def train(name, model, loss, data, weights, learning_rate=None, iterations=None, mode='reverse', backend='auto',
          optimizer=None, batch_size=256, seed=None, tolerance=0.0, l1=0.0, l2=0.0, regularize=None,
          standardize=None, label='y', group_by=None, progress_every=0, dtype='float64', validation=None,
          early_stopping=None, likelihood=None, order_by=None, state=None, deploy='true', impute=None, bounds=None,
          frequency=None):
    from .models import training
    return training.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer,
                          batch_size, seed, tolerance, l1, l2, regularize, standardize, label, group_by,
                          progress_every, dtype, validation, early_stopping, likelihood, order_by, state, deploy,
                          impute, bounds, frequency)


@server.entry
def deploy(name, version=None, strategy=None):
    """pgad.deploy: version `version` of model `name`, or the one `strategy` picks, deployed; its rows."""
    from .models import catalog
    return catalog.deploy(name, version, strategy)


@server.entry
def tune(name, model, loss, data, weights, grid=None, random=None, trials=None, seed=None, validation=None,
         metric='validation_loss', deploy=True, options=None, given=None):
    """pgad.tune: a training of model `name` per combination of the grid (or per random draw), each a version, the
    best by the metric deployed; a row per trial (models/tuning.py). given: pgad.train's arguments by name, None
    where not given."""
    from .models import tuning
    return tuning.tune(name, model, loss, data, weights, grid, random, trials, seed, validation, metric, deploy,
                       options, given)


@server.entry
def prediction_query(name, data, version=None):
    """pgad.prediction_query: the query pgad.predict runs, model `name`'s scoring functions over the data's rows
    (models/predict.py)."""
    from .models import predict
    return predict.query(name, data, version)


@server.entry
def evaluate(name, data, version=None):
    """pgad.evaluate: the metrics of model `name` (its deployed version, or version `version`) on the data,
    (group_key, metric, value) rows (models/evaluate.py)."""
    from .models import evaluate as evaluating
    return evaluating.evaluate(name, data, settings(), version)


@server.entry
def forecast(name, horizon, data=None, level=0.95, simulations=1000, seed=0, levels=None):
    """pgad.forecast: model `name`'s recurrence run `horizon` steps past its last row, (group_key, step, at,
    value, lower, upper) rows (models/forecast.py)."""
    from .models import forecast as forecasting
    return forecasting.forecast(name, horizon, data, level, simulations, seed, settings(), levels)


@server.entry
def anomalies(name, data, level=0.95):
    """pgad.anomalies: sequence model `name` run along the data's rows from its start, each row's one-step prediction,
    its interval at `level` and whether the row lies outside it (models/forecast.py)."""
    from .models import forecast as forecasting
    return forecasting.anomalies(name, data, level, settings())


@server.entry
def cross_validation(name, data, horizon, windows=3, step=None, level=0.95):
    """pgad.cross_validation: sequence model `name`'s forecasts from rolling origins of the data scored against its
    rows, per group and over all (models/forecast.py)."""
    from .models import forecast as forecasting
    return forecasting.cross_validation(name, data, horizon, windows, step, level, settings())


@server.entry
def importance(name, data, permutation=False, seed=None):
    """pgad.importance: each feature's mean |contribution| and mean contribution to model `name`'s predictions on the
    data, and its permutation importance where asked (models/importance.py)."""
    from .models import importance as importing
    return importing.importance(name, data, bool(permutation), seed, settings())


@server.entry
def drop_model(name, version=None):
    from .models import catalog
    catalog.drop(name, version)


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
    from .models import initial
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
    from . import explain as explaining
    return explaining.stages(loss, mode, limits, backend, rows, data, shapes, list(arguments.unread(w, lam)[0]), tape)


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
    columns = loader.lengths(data, lam.columns, cats.codes) if data is not None and lengths else ()
    return w, calls.shapes_of(w, columns, cats)


def _loss(call):
    value = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)[0] / call.table.rows
    descent.check_finite(np.array([value]), call.vector, 1, call.names, 0, call.why)
    return float(value)


def _gradient(call):
    sums = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)
    descent.check_finite(sums, call.vector, 1, call.names, 0, call.why)
    zeros = {n: dict.fromkeys(v, 0.0) if isinstance(v, dict) else _zeros(np.shape(v)) for n, v in call.unread.items()}
    mean = (sums[1:] / call.table.rows).tolist()
    return calls.weights_json(zeros, categorical.named(call.prog.nest(mean), call.categories))


def _zeros(shape):
    """0 as a weight of shape (), (n,) or (m, n) is written: nested lists of one 0.0 (rows shared), no array."""
    zero = 0.0
    for size in reversed(shape):
        zero = [zero] * size
    return zero


def _descend(call, learning_rate, iterations):
    fitted, value, ran = descent.run(call.kernel, call.table, call.vector, learning_rate, iterations, call.names,
                                     server.check_interrupts, server.notice, why=call.why, warning=server.warning)
    nested = categorical.named(call.prog.nest(fitted.tolist()), call.categories)
    return calls.weights_json(call.unread, nested), float(value), ran


@server.entry
def recommend(name, keys, k=10, seen=None, version=None):
    """pgad.recommend: the k items of highest score for each user of keys (models/recommend.py)."""
    from .models import recommend as recommending
    return recommending.recommend(name, keys, k, seen, version)


@server.entry
def embeddings(name, weight, version=None):
    """pgad.embeddings: a keyed weight's values by key, as pgvector's text form (models/recommend.py)."""
    from .models import recommend as recommending
    return recommending.embeddings(name, weight, version)
