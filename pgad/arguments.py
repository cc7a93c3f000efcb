"""Checking the SQL functions' arguments: each check returns the clean value or raises a PgadError."""
import decimal
import json
import math
import re

import numpy as np

from . import loader
from .models import descent
from .backends import BACKENDS
from .errors import PgadError
from .lang import MODES, parser


# What a call holds at its peak for each number of its weights jsonb, and for each weight (a key) besides (measured:
# docs/security.md): PostgreSQL's reading of the jsonb, its text into Python and the result's back, Python's objects
# of the numbers and the names, their float64 arrays. A weight the lambda does not read goes no further (api.py): a
# program and its kernel hold the weights their lambda reads alone.
NUMBER_BYTES = 320
KEY_BYTES = 384


def weights(text, lam, memory_limit=None, by_class=False, value=None):
    """The weights jsonb as {name: float, or a float64 array}: a weight is a number, a vector (an array of numbers)
    or a matrix (an array of rows, each an array of numbers, all of one length, row-major); every weight the lambda
    reads must be there (by_class: under loss 'softmax', where a missing weight's hint starts it at {}, sized by the
    classes). memory_limit (bytes, pgad.memory_limit; None: none) bounds what they may cost, checked
    before anything is parsed (parsed); value: the text as weights_json parsed it already, where the caller did."""
    value = weights_json(text, memory_limit) if value is None else value
    if not isinstance(value, dict):
        raise PgadError('22023', 'weights must be a JSON object of numbers',
                        detail=f'The weights are {text}.', hint=EXAMPLE)
    given = {name: weight(name, v) for name, v in value.items()}
    for name in lam.weights:
        spelt = [k for k in value if k.lower() == name and k != name and k not in lam.weights]
        if name not in value and len(spelt) == 1:  # {"W": …} for w.W, which folds to w, as in PostgreSQL's SQL
            given = {name if k == spelt[0] else k: v for k, v in given.items()}
        elif name not in value:
            example = json.dumps({**{k: value[k] for k in value}, name: {} if by_class else _start_of(lam, name)})
            folded = [k for k in value if k.lower() == name and k != name]
            raise PgadError('22023', f'weight "{name}" is not in the weights',
                            detail='The weights are: ' + (', '.join(f'"{k}"' for k in value) or 'none') + '.',
                            hint=f'Names in the lambda fold to lower case, as PostgreSQL identifiers do: write '
                                 f'{lam.params}."{folded[0]}" for the weight "{folded[0]}".' if folded else
                            f'Give every weight the lambda reads a starting value: {example}.')
    return given


def _start_of(lam, name):
    """The start a missing weight's hint shows: {} for one indexed by a column (a categorical weight) or
    multiplying a vector (w.w @ [...]: sized by the classes under loss 'softmax'), else 0."""
    nodes = lam.graph.nodes
    for node in nodes:
        if node.op in ('index', 'matmul') and node.args and nodes[node.args[0]].op == 'weight' and \
                nodes[node.args[0]].value == name:
            return {}
    return 0


def weights_json(text, memory_limit=None):
    """The weights jsonb's text, parsed, within memory_limit (parsed)."""
    return parsed(text, 'weights', 'weight', memory_limit,
                  'Give only the weights the lambda reads, or have a superuser raise pgad.memory_limit.')


def parsed(text, what, key, memory_limit=None, hint=None):
    """The JSON text of the jsonb argument `what` ('weights'), parsed; first, the error if it may cost more than
    memory_limit bytes (None: no limit): its text holds at most one number more than it has commas, and a `key` (a
    name in messages: 'weight') a colon, NUMBER_BYTES and KEY_BYTES each."""
    numbers, keys = text.count(',') + 1, text.count(':')
    needed = numbers * NUMBER_BYTES + keys * KEY_BYTES
    if memory_limit is not None and needed > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the {what} need {loader.megabytes(needed)}, more than '
                                              f'pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail=f'The {what} jsonb holds up to {numbers} numbers of {keys} {key}s, {NUMBER_BYTES} '
                               f'bytes a number and {KEY_BYTES} a {key} while the call reads them, uses them and '
                               'gives them back.',
                        hint=hint or 'Have a superuser raise pgad.memory_limit.')
    return json.loads(text)


def unread(given, lam):
    """(the weights lam reads, the others), each {name: value} in given's order: only the first become a
    program's weights; the others keep their values (and have the derivative 0) without costing a program or a
    kernel anything."""
    reads = set(lam.weights)
    return ({n: v for n, v in given.items() if n in reads}, {n: v for n, v in given.items() if n not in reads})


EXAMPLE = 'Write the weights as {"a": 0, "b": 0}; a vector as [1, 2, 3], a matrix as [[1, 2], [3, 4]] (rows).'


def weight(name, value):
    """One weight's value: a float, or a float64 array of one or two dimensions; or, for a categorical weight (a
    JSON object, pgad/categorical.py), {category: float}."""
    if isinstance(value, dict):
        return {k: _number(f'{name}[{k}]', v) for k, v in value.items()}
    if isinstance(value, list):
        rows = [v for v in value if isinstance(v, list)]
        if rows and (len(rows) != len(value) or len({len(r) for r in rows}) != 1):
            lengths = [len(v) if isinstance(v, list) else 'a number' for v in value]
            raise PgadError('22023', f'weight "{name}" must be a matrix whose rows have one length',
                            detail=f'Its rows have: {", ".join(map(str, lengths[:10]))}{"…" if len(value) > 10 else ""}.',
                            hint=EXAMPLE)
        if not value or (rows and not rows[0]):
            raise PgadError('22023', f'weight "{name}" is an empty array', hint=EXAMPLE)
        for x in (x for r in rows for x in r) if rows else value:  # numbers, checked without a copy of them
            if isinstance(x, bool) or not isinstance(x, float) and not (isinstance(x, int) and abs(x) < 2 ** 1023):
                _number(name, x)
        array = np.array(value, dtype=np.float64)
        if not np.isfinite(array).all():
            _number(name, array.flat[np.argmin(np.isfinite(array))])
        return array
    return _number(name, value)


def _number(name, number):
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise PgadError('22023', f'weight "{name}" must be a number, not {json.dumps(number)[:40]}',
                        hint=EXAMPLE)
    if not math.isfinite(as_float(number)):
        raise PgadError('22023', f'weight "{name}" is not a finite double precision number',
                        detail=f'It is {float8(number)[:40]}{"…" if len(float8(number)) > 40 else ""}.')
    return float(number)


def float8(number):
    """A number as PostgreSQL prints a float8 (float8out): 0, -1, 0.05, 1e-05, 1e+15, Infinity, NaN; an integer
    past float8's range too (jsonb writes 1e400 as 1 and 400 zeros: 1e+400)."""
    if isinstance(number, float) and not math.isfinite(number):
        return 'NaN' if math.isnan(number) else 'Infinity' if number > 0 else '-Infinity'
    value = decimal.Decimal(repr(float(number)) if math.isfinite(as_float(number)) else number).normalize()
    if value.is_zero():
        return '-0' if value.is_signed() else '0'
    if -4 <= value.adjusted() < 15:
        return format(value, 'f')
    mantissa, power = format(value, 'e').split('e')
    return f'{mantissa}e{power[0]}{power[1:].zfill(2)}'


def as_float(number):
    """number as a float8; infinity for an integer past float8's range (jsonb writes 1e400 as 1 and 400 zeros)."""
    try:
        return float(number)
    except OverflowError:
        return math.inf


def mode(value):
    if value not in MODES:
        raise PgadError('22023', f'unknown mode "{value}"', hint='mode is \'forward\' or \'reverse\'.')
    return value


def backend(value):
    if value != 'auto' and value not in BACKENDS:
        *others, last = [f"'{b}'" for b in ['auto', *BACKENDS]]
        raise PgadError('22023', f'unknown backend "{value}"', hint=f'backend is {", ".join(others)} or {last}.')
    return value


PRECISIONS = ('float64', 'float32')


def dtype(value, backend='auto'):
    """The precision the cuda backend computes in (dtype: SQL reserves the word precision); float32 is the cuda
    backend's alone ('auto' uses it where it picks cuda: the python and llvm backends compute in float64)."""
    if value not in PRECISIONS:
        raise PgadError('22023', f'unknown dtype "{value}"', hint="dtype is 'float64' or 'float32'.")
    if value == 'float32' and backend not in ('cuda', 'auto'):
        raise PgadError('22023', f'dtype "float32" is not available on backend "{backend}"',
                        hint="The python and llvm backends compute in float64: use backend => 'cuda' for float32.")
    return value


TAPES = ('auto', 'store', 'recompute', 'reversible')


def tape(value, mode='reverse', backend='auto'):
    """How the llvm backend's loop kernel keeps what the reverse sweep reads (jit/loops/): 'auto' (chosen by
    size: docs/design.md), 'store', 'recompute' or 'reversible'; reverse mode's and the llvm backend's alone."""
    if value not in TAPES:
        *others, last = [f"'{t}'" for t in TAPES]
        raise PgadError('22023', f'unknown tape "{value}"', hint=f'tape is {", ".join(others)} or {last}.')
    if value != 'auto' and mode != 'reverse':
        raise PgadError('22023', f'tape "{value}" is not available in mode "{mode}"',
                        hint='A tape keeps the forward values for the reverse sweep: use mode => \'reverse\'.')
    if value != 'auto' and backend not in ('llvm', 'auto'):
        raise PgadError('22023', f'tape "{value}" is not available on backend "{backend}"',
                        hint="The tapes are the llvm backend's loop kernels: use backend => 'llvm'.")
    return value


def learning_rate(value):
    if not (value > 0 and math.isfinite(value)):
        raise PgadError('22023', f'learning_rate must be a positive number, not {float8(value)}')
    return float(value)


def iterations(value):
    if value < 0:
        raise PgadError('22023', f'iterations must be 0 or more, not {value}')
    return int(value)


# The options of the aggregates, with the functions' defaults: each is checked as the function's argument is.
OPTIONS = {'learning_rate': (0.05, (int, float), 'a number'), 'iterations': (100, int, 'an integer'),
           'mode': ('reverse', str, 'a string'), 'backend': ('auto', str, 'a string'),
           'dtype': ('float64', str, 'a string'), 'tape': ('auto', str, 'a string')}
INT4_MAX = 2**31 - 1


def options(text, aggregate, names, memory_limit=None):
    """An aggregate's options jsonb (or None: no options) as {name: value} for each of names, defaults filled in;
    memory_limit bounds what parsing it may cost (parsed)."""
    value = {} if text is None else parsed(text, 'options', 'option', memory_limit)
    example = '{' + ', '.join(f'"{n}": {json.dumps(OPTIONS[n][0])}' for n in names) + '}'
    if not isinstance(value, dict):
        raise PgadError('22023', 'options must be a JSON object', detail=f'The options are {text}.',
                        hint=f'Write the options as {example}.' if names else f'{aggregate} takes no options.')
    for name, given in value.items():
        if name not in names:
            raise PgadError('22023', f'unknown option "{name}" of {aggregate}',
                            hint=f'The options are {", ".join(names)}.' if names else f'{aggregate} takes no options.')
        kind = OPTIONS[name][1]
        if isinstance(given, bool) or not isinstance(given, kind) or (name == 'iterations' and given > INT4_MAX):
            raise PgadError('22023', f'option "{name}" must be {OPTIONS[name][2]}, not {json.dumps(given)[:40]}',
                            hint=f'Write the options as {example}.')
    given = {name: value.get(name, OPTIONS[name][0]) for name in names}
    # learning_rate as a float8 first: jsonb writes 1e400 as an integer of 401 digits
    for name, check in (('learning_rate', lambda v: learning_rate(as_float(v))), ('iterations', iterations),
                        ('mode', mode), ('backend', backend)):
        if name in given:
            given[name] = check(given[name])
    if 'dtype' in given:
        given['dtype'] = dtype(given['dtype'], given.get('backend', 'auto'))
    if 'tape' in given:
        given['tape'] = tape(given['tape'], given.get('mode', 'reverse'), given.get('backend', 'auto'))
    return given


# pgad.train's own arguments.
NAMEDATALEN = 64
IDENTIFIER = re.compile(r'\s*(?:"((?:[^"]|"")+)"|([^\W\d]\w*))\s*(,|$)')


def model_name(value):
    """A model's name: also its scoring function's name in pgad_models, always quoted there (a version's own functions
    take names of their own, cut to fit: catalog.own_names)."""
    if not value or len(value.encode()) >= NAMEDATALEN:
        raise PgadError('42602', f'invalid model name "{value}"',
                        detail=f'A model name has 1 to {NAMEDATALEN - 1} bytes, as a PostgreSQL name.',
                        hint='The name is also the name of the model\'s scoring function, pgad_models."<name>".')
    return value


DEPLOY = {'t': True, 'true': True, 'f': False, 'false': False, 'if_better': 'if_better'}


def deploy(text, validation):
    """pgad.train's deploy, as text (a boolean reaches it as 't' or 'f'): True, False or 'if_better', which compares
    validation losses and so needs validation rows."""
    if text is None:
        raise PgadError('22004', 'argument "deploy" of pgad.train must not be NULL')
    value = DEPLOY.get(str(text).strip().lower())
    if value is None:
        raise PgadError('22023', f'invalid value for argument "deploy" of pgad.train: "{text}"',
                        hint="deploy takes true, false or 'if_better'.")
    if value == 'if_better' and validation is None:
        raise PgadError('22023', "deploy => 'if_better' compares validation losses, and there are no validation rows",
                        hint='Give validation => 0.2 (or a query of validation rows).')
    return value


def group_by(text):
    """The group_by column list, 'region, "Year"', as column names: folded to lower case unless double-quoted."""
    if text is None:
        return []
    names, pos = [], 0
    while pos < len(text) or not names:
        m = IDENTIFIER.match(text, pos)
        if not m or m.end() == pos or m.group(3) and m.end() == len(text):
            raise PgadError('42601', 'group_by must be a list of column names', detail=f'group_by is {text}',
                            hint="Write group_by => 'region' or group_by => 'region, year'.")
        names.append(m.group(1).replace('""', '"') if m.group(1) else parser.fold(m.group(2)))
        pos = m.end()
    if len(set(names)) != len(names):
        raise PgadError('42701', 'a column appears twice in group_by', detail=f'group_by is {text}')
    return names


def optimizer(value):
    if value not in descent.OPTIMIZERS:
        *others, last = [f"'{o}'" for o in descent.OPTIMIZERS]
        raise PgadError('22023', f'unknown optimizer "{value}"', hint=f'optimizer is {", ".join(others)} or {last}.')
    return value


def positive(name, value):
    if value is None or value <= 0:
        raise PgadError('22023', f'{name} must be a positive integer, not {value}')
    return int(value)


def non_negative(name, value):
    if value is None or not (value >= 0 and math.isfinite(value)):
        raise PgadError('22023', f'{name} must be 0 or a positive number, not {float8(value)}')
    return value


def penalty(name, value, optimizer):
    """l1 or l2: 0 or more; L-BFGS, a method for smooth objectives, takes no l1."""
    value = non_negative(name, value)
    if name == 'l1' and value and optimizer in ('lbfgs', 'newton'):
        raise PgadError('22023', f'optimizer "{optimizer}" does not take l1', detail='|w| is not differentiable at 0.',
                        hint=f"Use l2 with {optimizer}, or l1 with optimizer 'gd', 'sgd', 'momentum' or 'adam'.")
    return float(value)


def regularize(text, names, memory_limit=None):
    """The weights l1 and l2 apply to: None for every weight, else the names of a JSON array of weight names;
    memory_limit bounds what parsing it may cost (parsed)."""
    if text is None:
        return None
    value = parsed(text, 'regularize', 'key', memory_limit)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PgadError('22023', 'regularize must be a JSON array of weight names', detail=f'regularize is {text}.',
                        hint='Write regularize => \'["a", "b"]\', or leave it out to regularise every weight.')
    value = [name if name in names or name.lower() not in names else name.lower() for name in value]  # "W": w
    for name in value:
        if name not in names:
            raise PgadError('22023', f'weight "{name}" of regularize is not a weight of the model',
                            detail='The model\'s weights are: ' + ', '.join(f'"{n}"' for n in names) + '.')
    return value


BOUNDS_EXAMPLE = 'Write bounds => \'{"alpha": [0, 1], "beta": [0, null]}\': a weight\'s lower and upper bound, null ' \
                 'for none.'


def bounds(text, names, memory_limit=None):
    """{weight: (lower, upper)} of pgad.train's bounds (None where none is given): a JSON object of the weights'
    names, each an array of its lower and upper bound, numbers or null (−∞, ∞), the lower below the upper; a name
    as regularize's. memory_limit bounds what parsing it may cost (parsed)."""
    if text is None:
        return None
    value = parsed(text, 'bounds', 'weight', memory_limit)
    if not isinstance(value, dict):
        raise PgadError('22023', 'bounds must be a JSON object of weight names', detail=f'bounds is {text}.',
                        hint=BOUNDS_EXAMPLE)
    out = {}
    for name, pair in value.items():
        key = name if name in names or name.lower() not in names else name.lower()  # "Alpha": alpha
        if key not in names:
            raise PgadError('22023', f'weight "{name}" of bounds is not a weight of the model',
                            detail='The model\'s weights are: ' + ', '.join(f'"{n}"' for n in names) + '.')
        if not (isinstance(pair, list) and len(pair) == 2 and all(
                v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair)):
            raise PgadError('22023', f'the bounds of weight "{name}" must be an array of two numbers or nulls',
                            detail=f'They are {json.dumps(pair)}.', hint=BOUNDS_EXAMPLE)
        lower = -np.inf if pair[0] is None else float(pair[0])
        upper = np.inf if pair[1] is None else float(pair[1])
        if not lower < upper:
            raise PgadError('22023', f'the lower bound of weight "{name}" is not below its upper bound',
                            detail=f'Its bounds are [{pair[0]}, {pair[1]}].',
                            hint='Give the lower bound first; a weight of one value is a constant: write it in the '
                                 'model.' if lower == upper else 'Give the lower bound first.')
        out[key] = (lower, upper)
    return out
