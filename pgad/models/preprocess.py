"""pgad.train's impute: a NULL in a column the model reads replaced by a statistic of the training rows, stored with
the model and applied wherever the model is used.

impute is a jsonb object, column → 'mean' | 'median' | 'most_frequent' | a number (a constant). Its columns are
loaded with −NaN for NULL (loader.load's missing: a NaN whose sign bit is set; a NaN of the data's is loaded as
PostgreSQL's own NaN, whose sign bit is clear, and is still the data's NaN, an error in training), so that their rows
are not skipped; a row with NULL in a column not named is skipped, as before. The statistic is taken from the rows
the model trains on (those left after that skipping; a validation fraction's held-out rows, or a validation
query's, are left out, as from any statistic a model learns), over their values that are not NULL: the mean, the
median (numpy's: the mean of the middle two of an even count), the most frequent value (the smallest of those most
frequent; of a categorical column, the category first in the categories' order), or the constant. Each column's is
stored in the model's options as impute: {"x": {"strategy": "mean", "value": 12.5}} (a categorical column's value
its category, as text; a boolean column's 1 or 0), and the rows' −NaNs replaced by it (fill) in training,
pgad.evaluate, pgad.importance and pgad.summary alike. The scoring functions read the column as coalesce($k, value)
(catalog.Scoring's imputed), so that a NULL there gives a number, as in training.

Imputation comes before standardize: the means and deviations standardize.py takes are of the imputed columns.
"""
import json
import math
import threading

import numpy as np

from .. import arguments
from ..errors import PgadError
from ..jit import threads

STRATEGIES = ('mean', 'median', 'most_frequent')
STRATEGY_HINT = "Give each column 'mean', 'median', 'most_frequent' or a number, as in impute => '{\"x\": \"mean\"}'."


def parse(text, columns, categorical=()):
    """{column: strategy, or the constant (a float)} of impute's jsonb text (None: {}), for a model that reads
    columns (parser.Column: .boolean); categorical: the columns of a categorical weight. An unknown column is 42703,
    an unknown strategy or a constant that is not a finite number 22023, a mean or median of a column that is not
    a number 42804."""
    if text is None:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict):
        raise PgadError('22023', 'impute must be a jsonb object of columns and strategies',
                        detail=f'It is {text}.', hint=STRATEGY_HINT)
    read = {str(c): c for c in columns}
    spec = {}
    for name, strategy in found.items():
        if name not in read:
            raise PgadError('42703', f'column "{name}" of impute is not a column the model reads',
                            detail='The model reads: ' + (', '.join(f'"{c}"' for c in read) or 'no column') + '.',
                            hint='Name the columns of the model lambda (d.x) whose NULLs are to be replaced.')
        column = read[name]
        if isinstance(strategy, bool) or not isinstance(strategy, (str, int, float)) or \
                isinstance(strategy, str) and strategy not in STRATEGIES:
            raise PgadError('22023', f'unknown impute strategy {json.dumps(strategy)} for column "{name}"',
                            hint=STRATEGY_HINT)
        kind = 'a categorical' if name in categorical else 'a boolean' if column.boolean else None
        if kind and strategy in ('mean', 'median'):
            raise PgadError('42804', f'impute strategy "{strategy}" needs a numeric column, and column "{name}" is '
                                     f'{kind} one',
                            hint="Impute it with 'most_frequent'.")
        if not isinstance(strategy, str):
            strategy = arguments.as_float(strategy)  # jsonb writes 1e400 as an integer of 401 digits
            if not math.isfinite(strategy):
                raise PgadError('22023', f'the impute constant of column "{name}" must be a finite number')
            if name in categorical:
                raise PgadError('42804', f'impute constant {found[name]} is a number, and column "{name}" is a '
                                         'categorical one',
                                hint="Impute it with 'most_frequent', or replace its NULLs in the data query.")
            if column.boolean and strategy not in (0.0, 1.0):
                raise PgadError('22023', f'the impute constant of boolean column "{name}" must be 0 or 1',
                                hint="Give 0 (false) or 1 (true), or 'most_frequent'.")
        spec[column] = strategy
    return spec


def statistics(spec, names, table, codes=None, interrupts=lambda: None):
    """{column: {"strategy": …, "value": …}} of the spec (parse's) from the training rows table (loaded as
    names, −NaN for NULL in spec's columns); codes: {categorical column: its categories}, a code's value given as
    its category. 22000 for a column whose every training row is NULL. Each statistic of more than THREAD_VALUES
    values is taken by waited(), interrupts() called meanwhile."""
    codes = codes or {}
    out = {}
    for column, strategy in spec.items():
        if not isinstance(strategy, str):
            out[str(column)] = dict(strategy='constant', value=strategy)
            continue
        values = table.columns[names.index(column)]
        values = values[~np.isnan(values)]  # NULL, and a NaN of the data's (an error in training)
        if not len(values):
            raise PgadError('22000', f'column "{column}" of impute has no value that is not NULL in the training '
                                     'rows', detail=f'Its {strategy} is taken from the rows the model trains on.',
                            hint='Give the column a constant to impute, or train on rows that have its values.')
        if strategy in ('mean', 'median'):
            value = waited(lambda: central(values, np.mean if strategy == 'mean' else np.median), len(values),
                           interrupts)
        else:
            value = waited(lambda: _most_frequent(values), len(values), interrupts)
        if str(column) in codes:
            value = codes[str(column)][int(value) - 1]
        out[str(column)] = dict(strategy=strategy, value=value)
    return out


def _most_frequent(values):
    """The smallest of the most frequent of values (not NaN)."""
    found, counts = np.unique(values, return_counts=True)
    return float(found[np.argmax(counts)])


# A median or most frequent value sorts its column: 0.6 s and 3.4 s for 1e7 values on the 2-core VM, one numpy call
# each, which checks no interrupt. Past THREAD_VALUES values it runs in a thread of its own (waited), which numpy's sort
# lets run beside this one (it releases the GIL), and this thread checks for interrupts every WAIT_SECONDS.
THREAD_VALUES = 1 << 20
WAIT_SECONDS = 0.1


def waited(work, size, interrupts):
    """work() (a statistic of numpy arrays of size values); past THREAD_VALUES, in a daemon thread started with every
    signal blocked (jit/threads.py's started, as pgad's kernel threads are) that touches numpy memory alone, nothing of
    PostgreSQL, while this thread calls interrupts() every WAIT_SECONDS. A cancel is answered within about that: the
    thread, which holds its arrays itself, ends when its sort does, its result unread."""
    if size <= THREAD_VALUES:
        return work()
    done, found = threading.Event(), {}

    def run():
        try:
            found['value'] = work()
        except BaseException as e:  # noqa: BLE001 (raised in the waiting thread)
            found['error'] = e
        done.set()
    threads.started(run, 'pgad statistic')
    while not done.wait(WAIT_SECONDS):
        interrupts()
    if 'error' in found:
        raise found['error']
    return found['value']


def central(values, statistic):
    """statistic (np.mean or np.median) of finite values, finite: where a sum passes float64's range (a mean of
    1e308s, the middle two of an even count), of the values divided by the largest magnitude, multiplied back."""
    with np.errstate(over='ignore'):
        value = float(statistic(values))
    if not math.isfinite(value):
        largest = float(np.max(np.abs(values)))
        value = float(statistic(values / largest)) * largest
    return value


def fill(table, names, imputed, codes=None):
    """table (loader.Table, loaded as names) with the −NaNs (NULLs) of each imputed column ({column: {"value": …}}:
    the stored options.impute) replaced by its value; codes: {categorical column: its categories} (a category the
    categories lack is code 0: a weight of 0, as the scoring function reads it)."""
    if not imputed:
        return table
    codes = codes or {}
    columns = list(table.columns)
    for column, stored in imputed.items():
        if column not in names:
            continue
        value = stored['value']
        if column in codes:
            value = codes[column].index(value) + 1 if value in codes[column] else 0
        at = names.index(column)
        columns[at] = np.where(np.isnan(columns[at]) & np.signbit(columns[at]), float(value), columns[at])
    return type(table)(columns, table.rows, table.skipped)


def of(options):
    """The stored imputation ({column: {"strategy", "value"}}) of a model's options (a dict), {} for none."""
    return options.get('impute') or {}
