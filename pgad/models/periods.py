"""The periods of a sequence model's order column (docs/sql.md, "Frequency and gaps"): its frequency, declared
(pgad.train's frequency) or detected (the most common step between a group's rows), the missing periods it makes
rows of, and the order values of a forecast's steps.

A frequency is a number of months (a calendar step, for a date or timestamp column: a month, a quarter, a year) or a
fixed step in the units the loader reads the column in (days of a date, seconds of a timestamp, the number itself).
Its text is what a forecast adds to the last row's value: an interval as PostgreSQL prints it ('1 day', '1 mon',
'01:00:00'), or a number.

A missing period is a row whose label is unknown: the state advances there as a forecast's does, without an update
(sequences.without_update), its label read as the prediction. Only a model that reads no column but its label has
them filled (another column has no value there to read).
"""
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

import numpy as np

from .. import server
from ..errors import PgadError
from ..sequences import GAP
from . import catalog

MONTHS = ((28, 31, 1), (89, 92, 3), (181, 184, 6), (365, 366, 12))  # a most common step of days as months
SLACK = 0.05  # of a fixed step: a row this far off its period (an hour of a day across a DST change) is on it
# An interval's months and its rest (days and time) in seconds; NULL for a text that is no interval.
INTERVAL = ("SELECT ((pg_catalog.date_part('year', i) OPERATOR(pg_catalog.*) 12) OPERATOR(pg_catalog.+) "
            "pg_catalog.date_part('month', i))::pg_catalog.int4 AS months, "
            "pg_catalog.date_part('day', i) AS days, (pg_catalog.date_part('hour', i) OPERATOR(pg_catalog.*) 3600) "
            "OPERATOR(pg_catalog.+) (pg_catalog.date_part('minute', i) OPERATOR(pg_catalog.*) 60) "
            "OPERATOR(pg_catalog.+) pg_catalog.date_part('second', i) AS seconds, i::pg_catalog.text AS shown "
            "FROM (SELECT $1::pg_catalog.interval AS i) AS given")
# Each group's order values of a forecast's steps 1 … $4: its first value ($1) plus k times its frequency ($2), k
# from its last row's period ($3) on; NULL for a group without a frequency.
AHEAD = ("SELECT (u.l::{t} OPERATOR(pg_catalog.+) (u.f::pg_catalog.interval OPERATOR(pg_catalog.*) "
         "(u.p OPERATOR(pg_catalog.+) k)))::{t}::pg_catalog.text AS at FROM ROWS FROM (pg_catalog.unnest($1::"
         "pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.int8[])) "
         "WITH ORDINALITY AS u(l, f, p, g), pg_catalog.generate_series(1, $4) AS k ORDER BY u.g, k")


@dataclass(frozen=True)
class Frequency:
    text: str            # as stored: '1 day', '1 mon', '01:00:00', or a number
    months: int = 0      # a calendar step of months, or 0
    step: float = 0.0    # else a fixed step in the loader's units (days, seconds, the number)


def _unit(kind):
    return 'date' if kind == 'date' else 'timestamp' if kind.startswith('timestamp') else 'number'


def fills(step, label):
    """Whether a model's missing periods are rows (periods.filled, sequences.without_update): it reads no column
    but its label, for another has no value there."""
    return not set(step.columns) - {label}


def budget(step, memory_limit):
    """The most rows a group's periods may span: 16 bytes a column read, and two more, within memory_limit."""
    return max(1, memory_limit // (16 * (len(step.columns) + 2)))


def _interval(text):
    """INTERVAL's row of text, or None where PostgreSQL reads no interval in it."""
    try:
        return server.query(INTERVAL, [text], ['pg_catalog.text'])[0]
    except server.SPIError as e:
        if not (getattr(e, 'sqlstate', None) or '').startswith('22'):
            raise
        return None


def declared(text, kind):
    """The Frequency that pgad.train's frequency (text) declares for an order column of type kind: an interval of
    months alone or of days and time alone for a date or timestamp (whole days for a date), a number above 0 for a
    number column."""
    unit = _unit(kind)
    if unit == 'number':
        try:
            step = Decimal(text.strip())
        except InvalidOperation:
            step = None
        if step is None or not step.is_finite() or step <= 0:
            raise PgadError('22023', f'frequency "{text}" is not a number above 0',
                            detail=f'The order column is of type {kind}: a period is a step of its values.',
                            hint="Give the step between rows: frequency => '1'.")
        return Frequency(str(step.normalize()), step=float(step))
    found = _interval(text)
    example = "frequency => '1 day', '7 days', '1 month' or '3 months'" if unit == 'date' else \
        "frequency => '1 hour', '1 day' or '1 month'"
    if found is None:
        raise PgadError('22023', f'frequency "{text}" is not an interval', hint=f'Give {example}.')
    months, rest = found['months'], found['days'] * 86400 + found['seconds']
    if (months != 0) == (rest != 0) or months < 0 or rest < 0 or (unit == 'date' and rest % 86400):
        why = 'months and a time of days' if months and rest else \
            'a step of whole days' if unit == 'date' and rest > 0 else 'a step above 0'
        raise PgadError('22023', f'frequency "{text}" is not {why}' if why != 'months and a time of days' else
                        f'frequency "{text}" mixes {why}',
                        detail=f'The order column is of type {kind}.', hint=f'Give {example}.')
    return Frequency(found['shown'], months=months) if months else \
        Frequency(found['shown'], step=rest / 86400 if unit == 'date' else rest)


def detected(order, kind):
    """The Frequency of a group's order values (sorted, as the loader reads them), by their most common step: a
    date's (or a timestamp's of whole days) of 28 to 31 days a month, of 89 to 92 a quarter, …, else the step
    itself; None where the rows are fewer than 2, that step is not the step of most of them, or they are off its
    periods (irregular)."""
    if len(order) < 2:
        return None
    diffs = np.round(np.diff(order), 6)
    unit = _unit(kind)
    days = diffs if unit == 'date' else diffs / 86400 if unit == 'timestamp' else None
    months = next((m for low, high, m in MONTHS if days is not None and
                   2 * np.count_nonzero((low <= days) & (days <= high) & (days % 1 == 0)) > len(diffs)), 0)
    steps, counts = np.unique(diffs, return_counts=True)
    if not months and 2 * np.max(counts) <= len(diffs):
        return None
    step = float(steps[np.argmax(counts)])
    if months:
        found = Frequency(_shown(f'{months} mons'), months=months)
    elif unit == 'number':
        found = Frequency(repr(step) if not step.is_integer() else str(int(step)), step=step)
    else:
        found = Frequency(_shown(f'{step:g} {"days" if unit == "date" else "seconds"}'), step=step)
    return found if periods(order, found, kind) is not None else None


def _shown(text):
    return server.query('SELECT ($1::pg_catalog.interval)::pg_catalog.text AS t', [text], ['pg_catalog.text'])[0]['t']


def _month(order, kind):
    """Each value's month, counted from January 2000."""
    if kind == 'date':
        days = np.asarray(order, dtype='int64').astype('timedelta64[D]') + np.datetime64('2000-01-01')
    else:
        days = (np.asarray(order) * 1e6).astype('int64').astype('datetime64[us]')
    return days.astype('datetime64[M]').astype('int64') - (2000 - 1970) * 12


def periods(order, frequency, kind):
    """Each row's period, counted from the group's first (int64, increasing), or None where a row is off the
    frequency's periods (two rows in one period, a step that is not a whole number of periods)."""
    if frequency.months:
        months = _month(order, kind)
        at = months - months[0]
        if np.any(at % frequency.months):
            return None
        at = at // frequency.months
    else:
        exact = (np.asarray(order) - order[0]) / frequency.step
        at = np.round(exact).astype('int64')
        if np.any(np.abs(exact - at) > SLACK):
            return None
    return at if len(at) < 2 or np.all(np.diff(at) > 0) else None


def filled(group, frequency, kind, label, budget):
    """(group with a row for each missing period between its first and last, the number of those): the label 0 and
    column GAP 1 there (0 elsewhere), the order value between its neighbours'. budget: the most rows the group may
    grow to (pgad.memory_limit's share), past which it is an error."""
    at = periods(group.order, frequency, kind)
    if at is None:
        raise PgadError('22023', f'the rows{_of(group)} are not one per period of frequency "{frequency.text}"',
                        detail='Two rows fall in one period, or a step between rows is not a whole number of '
                               'periods.', hint='Give the frequency of the rows, or leave frequency out to detect it.')
    n = int(at[-1]) + 1 if len(at) else 0
    if n == len(at):
        return replace(group, columns={**group.columns, GAP: np.zeros(n)}), 0
    if n > budget:
        raise PgadError('54000', f'the rows{_of(group)} span {n} periods of frequency "{frequency.text}", more than '
                                 f'pgad.memory_limit holds ({budget} rows)',
                        hint='Give a longer frequency, or have a superuser raise pgad.memory_limit.')
    order = np.interp(np.arange(n), at, group.order)
    return replace(group, columns=spread(group.columns, at, n), order=order), n - len(at)


def spread(columns, at, n):
    """n rows of columns ({column: array}), their values at the rows at and 0 elsewhere, with column GAP 1 at the
    rows between (the missing periods) and 0 at at."""
    out = {c: np.zeros(n) for c in columns}
    for c, v in columns.items():
        out[c][at] = v
    out[GAP] = np.ones(n)
    out[GAP][at] = 0.0
    return out


def _of(group):
    return f' of group {group.key}' if group.key else ''


def ahead(firsts, frequencies, spans, kind, horizon):
    """[[the order value of step h = 1 … horizon as text] of each group]: its first value (text, as stored) plus
    (p + h) times its frequency (Frequency text, or None: NULLs), p its last row's period (spans), as PostgreSQL
    adds an interval to the column's type: a series of month ends stays at month ends (January 31 plus 1 month is
    the end of February, plus 2 the end of March); or the number."""
    if _unit(kind) == 'number':
        return [[None] * horizon if f is None else [str(Decimal(first) + Decimal(f) * (p + h))
                                                    for h in range(1, horizon + 1)]
                for first, f, p in zip(firsts, frequencies, spans)]
    if kind not in catalog.ORDER_CASTS:
        return [[None] * horizon for _ in firsts]
    rows = server.query(AHEAD.format(t=catalog.ORDER_CASTS[kind]),
                        [list(firsts), list(frequencies), list(spans), horizon],
                        ['pg_catalog.text[]', 'pg_catalog.text[]', 'pg_catalog.int8[]', 'pg_catalog.int4'])
    return [[r['at'] for r in rows[g * horizon:(g + 1) * horizon]] for g in range(len(firsts))]


def count(n):
    return f'{n} missing period{"s" * (n != 1)}'
