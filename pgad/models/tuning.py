"""pgad.tune: a search over some of pgad.train's arguments, each combination one training of the model's name kept
as a version (deploy => false), all on the same validation rows, and the best by a named metric deployed.

The combinations are a grid (grid => '{"l2": [0, 0.01, 0.1], "learning_rate": [0.1, 0.01]}': every combination of
the lists, in the jsonb's key order, the last key changing fastest) or random draws (random => '{"l2":
{"log_uniform": [1e-4, 1]}, "optimizer": {"choice": ["adam", "gd"]}}', trials => 20, seed => 1: each trial draws
every key from numpy's PCG64 seeded by seed, keys in the jsonb's order). A key is one of TUNABLE, its values of its
kind there; a draw of an integer argument is rounded. The count of trials is bounded before anything trains
(MAX_TRIALS, 54000 past it). The other arguments of pgad.train go in options (a jsonb object of OPTIONS), checked
as pgad.train checks them, by each training. seed is every training's seed: the validation fraction splits the
rows by their hash and the seed (validation.py), so each trial holds out the same rows.

A version's metrics are those pgad.train stores in pgad.model_versions.metrics (training.py, _metrics), on its
validation rows: validation_loss, and pgad.evaluate's metrics of the loss. The best trial has the lowest value of
the metric, or the highest for those in HIGHER (r2, accuracy, precision, recall, f1, roc_auc); with group_by, a
trial's value is the mean of its groups' weighted by their validation rows; on a tie the earlier trial. A trial
whose training fails with a PgadError (it diverges, its combination is refused) is rolled back (a subtransaction)
and is a row with its error; if every trial fails, the tune fails with the first one's error and changes nothing. A
cancel, a serialization failure, running out of memory or pgad.publish_data_values = 'off' (publish.py) ends the tune.
Each trial ends with a NOTICE of progress; the values of the data the trials' functions publish get one WARNING.
"""
import itertools
import json
import math
import time

import numpy as np

from .. import arguments, calls, server
from ..errors import PgadError
from . import catalog, evaluate, families, objective, publish, regression, training

# The arguments a grid or random search may set, and their kinds; a value of another kind is 22023.
TUNABLE = {'l1': 'number', 'l2': 'number', 'learning_rate': 'number', 'tolerance': 'number',
           'iterations': 'integer', 'batch_size': 'integer', 'early_stopping': 'integer',
           'optimizer': 'text', 'standardize': 'boolean'}
# The other arguments of pgad.train that options may give; name, model, loss, data, weights, validation, seed and
# deploy are pgad.tune's own.
OPTIONS = {**TUNABLE, 'mode': 'text', 'backend': 'text', 'regularize': 'json', 'label': 'text', 'group_by': 'text',
           'progress_every': 'integer', 'dtype': 'text', 'likelihood': 'boolean', 'order_by': 'text', 'state': 'json',
           'impute': 'json', 'bounds': 'json', 'frequency': 'text'}
KINDS = {'number': 'a number', 'integer': 'an integer', 'text': 'a string', 'boolean': 'true or false',
         'json': 'a JSON value'}
# The most trials one pgad.tune runs: each is a training and a version with its functions.
MAX_TRIALS = 100
# The metrics of which a higher value is better (and their _macro and _weighted means); of the others (losses,
# errors, deviances), a lower.
HIGHER = ('r2', 'accuracy', 'precision', 'recall', 'f1', 'roc_auc')
DISTRIBUTIONS = ('uniform', 'log_uniform', 'choice')
INT4_MAX = 2**31 - 1


def tune(name, model, loss, data, weights, grid=None, random=None, trials=None, seed=None, validation=None,
         metric='validation_loss', deploy=True, options=None, given=None):
    """pgad.tune's rows: (trial, version, parameters as jsonb text, value of the metric, converged, training time
    in seconds, deployed, error). given: pgad.train's arguments passed by name ({argument: value or None}), as
    options gives them."""
    family = regression.named(model) or families.named(model)
    loss, data = regression.arranged(model, loss, data)  # pgad.tune(name, family, data, …), as pgad.train takes it
    for argument, value in (('name', name), ('model', model), ('loss', loss), ('data', data), ('weights', weights),
                            ('metric', metric), ('deploy', deploy)):
        if value is None and not (family and argument in ('loss', 'weights')):
            raise PgadError('22004', f'argument "{argument}" of pgad.tune must not be NULL')
    if validation is None:
        raise PgadError('22004', 'pgad.tune needs validation rows',
                        hint="Give validation => 0.2 (a fraction of the rows held out) or validation => 'SELECT …'.")
    name = arguments.model_name(name)
    memory_limit = calls.settings().memory_limit
    if seed is not None:
        arguments.non_negative('seed', seed)
    own = loss if loss is not None else 'squared' if families.named(model) else \
        regression.LOSS_OF.get(regression.canonical(model))
    higher = _metric(metric, objective.canonical(own)) if own is not None else \
        metric in HIGHER or metric.rsplit('_', 1)[0] in HIGHER  # an mlp's loss, by its label: checked by its trials
    passed = _options(options, memory_limit)
    for key, value in (given or {}).items():
        if value is not None:
            if key in passed:
                raise PgadError('22023', f'pgad.tune takes "{key}" once, but it is given both as an argument and in '
                                         'options', hint=f'Leave "{key}" out of options.')
            passed[key] = value
    combinations = _combinations(grid, random, trials, seed, passed, memory_limit)
    catalog.check_can_store(name)
    keep = server.query(catalog.KEEP)[0]['keep']
    _keep(max(keep, len(combinations)))  # no trial's version is pruned by a later trial's training
    with publish.once():  # one WARNING of the values the trials' functions publish, not one a trial
        done = _trials(name, model, loss, data, weights, seed, validation, metric, passed, combinations)
    _keep(keep)  # (an error rolls the statement back, the setting with it)
    trained = [t for t in done if t.error is None]
    if not trained:
        raise done[0].error
    scored = [t for t in trained if t.value is not None]
    best = (max if higher else min)(scored, key=lambda t: t.value, default=None)  # the first of equals
    if best is None:
        server.warning(f'model "{name}": no trial has a value of metric "{metric}"; no version deployed',
                       hint='A metric is null where it is not finite or has nothing to divide by (r2 of a constant '
                            'label, roc_auc of one class).')
    elif deploy:
        catalog.deploy(name, best.version)
    return [(t.k, t.version, json.dumps(t.parameters), t.value, t.converged, t.seconds,
             bool(deploy) and t is best, None if t.error is None else f'{t.error.sqlstate}: {t.error.message}')
            for t in done]


def _trials(name, model, loss, data, weights, seed, validation, metric, passed, combinations):
    """The Trial of each combination, in order: a pgad.train of the name with deploy => false, in a subtransaction
    (a trial that fails leaves nothing behind); a serialization failure or running out of memory ends them."""
    done = []
    for k, parameters in enumerate(combinations, 1):
        server.check_interrupts()
        started = time.monotonic()
        try:
            with server.plpy().subtransaction():  # a trial that fails leaves no trace
                rows = training.train(name, model, loss, data, weights, seed=seed, validation=validation,
                                      deploy='f', **{**passed, **parameters})
        except PgadError as e:
            if e.sqlstate[:2] in ('40', '53') or isinstance(e, publish.Refused):
                raise
            done.append(Trial(k, parameters, time.monotonic() - started, error=e))
            server.notice(f'model "{name}": trial {k} of {len(combinations)} {json.dumps(parameters)} failed: '
                          f'{e.message}')
            continue
        trial = Trial(k, parameters, time.monotonic() - started, rows=rows, metric=metric)
        done.append(trial)
        shown = 'null' if trial.value is None else f'{trial.value:.6g}'
        server.notice(f'model "{name}": trial {k} of {len(combinations)} {json.dumps(parameters)}: {metric} {shown}, '
                      f'version {trial.version}')
    return done


def _keep(count):
    """pgad.keep_versions set to count until the transaction ends (or it is set again)."""
    server.query("SELECT pg_catalog.set_config('pgad.keep_versions', $1, true)", [str(count)], ['pg_catalog.text'])


class Trial:
    """One combination's training: its version's rows (pgad.model_versions' as pgad.train returns them), or the
    PgadError it failed with; the value of the metric (None where a group's is null)."""
    def __init__(self, k, parameters, seconds, rows=None, metric=None, error=None):
        self.k, self.parameters, self.seconds, self.error = k, parameters, seconds, error
        self.version = self.converged = self.value = None
        if rows:
            self.version = rows[0]['version']
            self.converged = all(r['converged'] for r in rows)
            self.value = _value([json.loads(r['metrics']) if r['metrics'] else {} for r in rows], metric)


def _value(metrics, metric):
    """The metric of a version from its groups' metrics: their mean weighted by their validation rows; None where
    one is null or missing."""
    found = [(m.get(metric), m.get('validation_rows') or 0) for m in metrics]
    if not found or any(v is None for v, _ in found):
        return None
    rows = sum(n for _, n in found)
    return float(sum(v * n for v, n in found) / rows) if rows else None


def _metric(metric, loss):
    """Is a higher value of metric better (HIGHER)? The error for a metric that the loss's versions do not have."""
    kind, rules = evaluate.rules_of(loss)
    names = ['validation_loss', *rules, *(evaluate.SOFTMAX_METRICS if kind == evaluate.SOFTMAX else ())]
    if metric not in names:
        raise PgadError('22023', f'unknown metric "{metric}" of loss \'{loss}\'' if kind else
                                 f'unknown metric "{metric}" of a lambda loss',
                        hint=f'The metrics are {", ".join(names)}.')
    return metric in HIGHER or metric.rsplit('_', 1)[0] in HIGHER  # f1_macro as f1


def _options(text, memory_limit):
    """options (jsonb text, or None) as pgad.train's keyword arguments, each of its kind (OPTIONS)."""
    given = {} if text is None else arguments.parsed(text, 'options', 'option', memory_limit)
    if not isinstance(given, dict):
        raise PgadError('22023', 'options must be a JSON object',
                        hint='Write the other arguments of pgad.train as {"optimizer": "adam", "label": "y"}.')
    for key in given:
        if key not in OPTIONS:
            raise PgadError('22023', f'pgad.tune takes no option "{key}"',
                            detail='Its options are the arguments of pgad.train but name, model, loss, data, weights, '
                                   'validation, seed and deploy, which are pgad.tune\'s own.',
                            hint=f'The options are {", ".join(OPTIONS)}.')
    return {key: _as(key, value, 'option') for key, value in given.items()}


def _as(key, value, what):
    """A JSON value as pgad.train takes argument key (OPTIONS' kind): a jsonb one as its text; 22023 for another
    kind."""
    kind = OPTIONS[key]
    if kind == 'json':
        return json.dumps(value)
    ok = {'number': not isinstance(value, bool) and isinstance(value, (int, float)),
          'integer': not isinstance(value, bool) and isinstance(value, int) and abs(value) <= INT4_MAX,
          'text': isinstance(value, str), 'boolean': isinstance(value, bool)}[kind]
    if not ok:
        raise PgadError('22023', f'{what} "{key}" must be {KINDS[kind]}, not {json.dumps(value)[:40]}')
    if kind == 'number' and not math.isfinite(arguments.as_float(value)):
        raise PgadError('22023', f'{what} "{key}" must be a finite number, not {arguments.float8(value)[:40]}')
    return float(value) if kind == 'number' else value


def _combinations(grid, random, trials, seed, passed, memory_limit):
    """The trials' parameters, [{key: value}], of the grid or the random search; their count bounded (MAX_TRIALS)
    before any is made."""
    if (grid is None) == (random is None):
        raise PgadError('22023', 'pgad.tune takes a grid or a random search, one of them',
                        hint='Write grid => \'{"l2": [0, 0.01, 0.1]}\', or random => \'{"l2": {"log_uniform": '
                             '[0.0001, 1]}}\' with trials => 20.')
    if grid is not None and trials is not None:
        raise PgadError('22023', 'trials is the count of a random search, not of a grid',
                        hint='A grid trains every combination of its lists once.')
    spec = arguments.parsed(grid if grid is not None else random, 'grid' if grid is not None else 'random', 'key',
                            memory_limit)
    what = 'grid' if grid is not None else 'random'
    if not isinstance(spec, dict) or not spec:
        raise PgadError('22023', f'{what} must be a JSON object of the arguments to tune',
                        hint='Write grid => \'{"l2": [0, 0.01, 0.1], "learning_rate": [0.1, 0.01]}\'.')
    for key in spec:
        if key not in TUNABLE:
            raise PgadError('22023', f'pgad.tune cannot tune argument "{key}"',
                            hint=f'The arguments it tunes are {", ".join(TUNABLE)}; give the others of pgad.train '
                                 'in options.')
        if key in passed:
            raise PgadError('22023', f'argument "{key}" is both tuned and given in options',
                            hint=f'Leave "{key}" out of options, or out of the {what}.')
    if grid is not None:
        return _grid(spec)
    if trials is None or trials <= 0:
        raise PgadError('22023', f'a random search takes trials, a positive integer, not {trials}',
                        hint='Write trials => 20.')
    _bound(trials)
    return _random(spec, trials, seed)


def _bound(count):
    if count > MAX_TRIALS:
        raise PgadError('54000', f'pgad.tune would run {count} trials, more than {MAX_TRIALS}',
                        detail='Each trial is a training of the model, kept as a version with its functions.',
                        hint='Tune fewer values at once, or a random search of fewer trials.')


def _grid(spec):
    count = 1
    for key, values in spec.items():
        if not isinstance(values, list) or not values:
            raise PgadError('22023', f'the grid\'s "{key}" must be a non-empty JSON array of its values',
                            hint=f'Write "{key}": [{"0.1, 0.01" if TUNABLE[key] == "number" else "…"}].')
        count *= len(values)
        _bound(count)  # before any list is read further, or a combination made
    checked = {key: [_as(key, v, 'grid value of') for v in values] for key, values in spec.items()}
    return [dict(zip(checked, values)) for values in itertools.product(*checked.values())]


def _random(spec, trials, seed):
    """trials draws of every key of spec: {"uniform": [low, high]}, {"log_uniform": [low, high]} (0 < low) or
    {"choice": [value, …]} (or a list of values, as a choice)."""
    draws = {}
    for key, given in spec.items():
        if isinstance(given, list):
            given = {'choice': given}
        if not isinstance(given, dict) or len(given) != 1 or next(iter(given)) not in DISTRIBUTIONS:
            raise PgadError('22023', f'the random search\'s "{key}" must be {{"uniform": [low, high]}}, '
                                     '{"log_uniform": [low, high]} or {"choice": [value, …]}',
                            detail=f'It is {json.dumps(given)[:80]}.')
        (kind, values), = given.items()
        if kind == 'choice':
            if not isinstance(values, list) or not values:
                raise PgadError('22023', f'the random search\'s "{key}" choice must be a non-empty JSON array')
            draws[key] = ('choice', [_as(key, v, 'random value of') for v in values])
            continue
        if TUNABLE[key] not in ('number', 'integer') or not isinstance(values, list) or len(values) != 2 or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(arguments.as_float(v))
                for v in values) or not values[0] <= values[1] or kind == 'log_uniform' and values[0] <= 0:
            raise PgadError('22023', f'the random search\'s "{key}" {kind} must be [low, high], two finite numbers, '
                                     f'low <= high{", low > 0" if kind == "log_uniform" else ""}, of a numeric '
                                     'argument',
                            detail=f'It is {json.dumps(given)[:80]}.',
                            hint='Write {"choice": [value, …]} for an argument that is not a number.')
        draws[key] = (kind, [float(v) for v in values])
    generator = np.random.Generator(np.random.PCG64(0 if seed is None else seed))
    out = []
    for _ in range(trials):
        trial = {}
        for key, (kind, values) in draws.items():
            if kind == 'choice':
                value = values[int(generator.integers(len(values)))]
            elif kind == 'uniform':
                value = float(generator.uniform(values[0], values[1]))
            else:
                value = float(np.exp(generator.uniform(math.log(values[0]), math.log(values[1]))))
            trial[key] = int(round(value)) if TUNABLE[key] == 'integer' and kind != 'choice' else value
        out.append(trial)
    return out
