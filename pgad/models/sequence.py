"""pgad.train of a sequence model (order_by and state): its rows loaded once and put in order per group, its step
built (sequences.py), each group's sequence fitted by descent.fit through the recurrence, the fits stored with what
a forecast starts from (each group's last state), and a scoring function that predicts a row from a given state.

What is stored in pgad.models.options beyond a model's usual options: order_by, state (the fields' start and next
as given), and per group last_state ({field: value after the last row}), last_order (the order column's value of
the last row, as text) and sigma2 (the mean squared one-step error, squared loss only: the forecast's intervals).
"""
import datetime
import json
import re
from dataclasses import dataclass, replace

import numpy as np

from .. import arguments, calls, domain, loader, program, sequences, server
from ..errors import PgadError
from ..lang import parser, printer, vectors
from . import catalog, descent, families, lockstep, objective, periods, tally as counting

OPTIMIZERS = ('newton', 'lbfgs', 'gd', 'momentum', 'adam')  # full batches: a sequence's rows are no sample of another
NEWTON_WEIGHTS = 48  # the default optimizer is newton up to this many weights (its Hessian: a gradient a weight), then
#                      L-BFGS, as pgad.train's for other models
ORDER_TYPES = {  # the order column's type → how the loader reads it as a float8, in SQL over pgad_data.<column>
    'date': "({} OPERATOR(pg_catalog.-) '2000-01-01'::pg_catalog.date)::pg_catalog.float8",
    'timestamp without time zone': "pg_catalog.date_part('epoch', {})",
    'timestamp with time zone': "pg_catalog.date_part('epoch', {})",
    **{t: '({})::pg_catalog.float8' for t in ('smallint', 'integer', 'bigint', 'real', 'double precision', 'numeric')},
}
STATE_ARGUMENT = 'state_'  # the scoring function's argument for state field f is state_<f>


@dataclass
class Ordered:
    """A group's rows in order: its key, its values, the columns' arrays, and the order column's (as float8)."""
    key: str
    values: list
    columns: dict
    order: np.ndarray
    skipped: int


def check(order_by, state, options):
    """The order_by and state arguments' errors before anything runs: both or neither, and an optimizer that takes
    full batches."""
    if (order_by is None) != (state is None):
        given, missing = ('order_by', 'state') if state is None else ('state', 'order_by')
        raise PgadError('22023', f'{given} needs {missing}: a sequence model carries a state along ordered rows',
                        hint='Give both, order_by => \'day\' and state => \'{"level": {"start": "d.y", "next": '
                             '"s.level + w.alpha*(d.y - s.level)"}}\', or neither.')
    if options['optimizer'] not in OPTIMIZERS:
        raise PgadError('0A000', f'optimizer "{options["optimizer"]}" cannot train a sequence model',
                        detail='A sequence\'s rows are not samples of each other: its objective is a sum along the '
                               'recurrence, which the optimizers take whole.',
                        hint="Use 'newton', 'lbfgs', 'gd', 'momentum' or 'adam', or leave optimizer out.")
    if options['validation'] is not None or options['standardize']:
        raise PgadError('0A000', 'pgad.train takes no validation or standardize for a sequence model',
                        hint='Evaluate it on the rows after the training ones with pgad.evaluate.')


def order_column(text):
    """The order_by argument as a column name (folded to lower case unless double-quoted)."""
    names = arguments.group_by(text)
    if len(names) != 1:
        raise PgadError('22023', 'order_by names one column', detail=f'order_by is {text}.',
                        hint="Order by a date, timestamp or number column: order_by => 'day'.")
    return names[0]


def load(data, columns, order_by, group_by, memory_limit):
    """The data's rows of columns and order_by, one Ordered per group (one in all without group_by), each group's
    rows in the order column's order; a tie in it is an error that names the group and the value. A row with NULL
    in a column read (the order column too) is skipped, as training skips one: the state passes it unchanged."""
    query = loader.as_query(data)
    names, types = loader.check_columns(query, [c for c in columns if c != order_by])
    if order_by not in names:
        raise PgadError('42703', f'column "{order_by}" of order_by does not exist in the data',
                        detail='The data has columns: ' + ', '.join(printer.quote_ident(n) for n in names) + '.')
    kind = loader.type_name(types[names.index(order_by)])
    if kind not in ORDER_TYPES:
        raise PgadError('42804', f'column "{order_by}" of order_by is of type {kind}',
                        hint='Order by a date, a timestamp or a number, or cast the column in the data query.')
    if order_by in (group_by or ()):
        raise PgadError('22023', f'column "{order_by}" is both order_by and group_by',
                        hint='Order each group\'s rows by a column that is not one of its keys.')
    # the order column's value as a float8, under its own name (a NULL in it is named so): the model reads it not
    kept = [c for c in dict.fromkeys([*columns, *(group_by or ())]) if c in names]
    wrapped = ('SELECT ' + ', '.join([*(f'pgad_data.{printer.quote_ident(c)}' for c in kept),
                                      ORDER_TYPES[kind].format('pgad_data.' + printer.quote_ident(order_by)) +
                                      ' AS ' + printer.quote_ident(order_by)]) + f' FROM ({query}\n) AS pgad_data')
    read = [*columns, order_by]
    if group_by:
        group_types, parts = loader.load_groups(wrapped, read, group_by, memory_limit)
        found = [(p.key, p.values, p.table) for p in parts]
    else:
        group_types, found = [], [(None, None, loader.load(wrapped, read, memory_limit=memory_limit))]
    groups = []
    for group, values, table in found:
        order = table.columns[-1]
        at = np.argsort(order, kind='stable')
        order = order[at]
        tied = np.flatnonzero(np.diff(order) == 0)
        if len(tied):
            where = f' in group {group}' if group else ''
            raise PgadError('21000', f'order_by "{order_by}" has more than one row at {shown(order[tied[0]], kind)}'
                                     f'{where}', detail=f'{len(tied)} such tie{"s" * (len(tied) != 1)}' + where + '.',
                            hint='A sequence has one row per value of its order column: aggregate the rows of a '
                                 'value in the data query, or add group_by.')
        groups.append(Ordered(group, values, {c: table.columns[k][at] for k, c in enumerate(columns)}, order,
                              table.skipped))
    return group_types, groups, kind


def shown(value, kind):
    """A value of the order column, read as a float8 (ORDER_TYPES), as the text of its type."""
    if kind == 'date':
        return (datetime.date(2000, 1, 1) + datetime.timedelta(days=int(value))).isoformat()
    if kind.startswith('timestamp'):  # as the server prints it (a timestamptz in the session's TimeZone)
        moment = 'pg_catalog.to_timestamp($1)' + ('' if kind.endswith('with time zone') else " AT TIME ZONE 'UTC'")
        return server.query(f'SELECT ({moment})::pg_catalog.text AS t', [float(value)], ['pg_catalog.float8'])[0]['t']
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _fit(step, seqs, start, names, options, penalty, wheres, name, tile_bytes, memory_limit, cache=None, model=None,
         bounds=None, tally=None, keys=None, loss='squared', counts=None, likelihood=None):
    """[descent.Fit of each sequence]: by Newton or L-BFGS all at once (lockstep.py), every call of the recurrence over
    the sequences still running; by the other optimizers one sequence at a time (descent.fit). Each sequence that
    did not converge is told to tally, by its group's key. Lockstep takes as many groups at a time as a quarter of
    memory_limit holds their optimizer's state. A loss not finite at the starting weights is explained (diagnosed)
    by the operation that made it so, printed as model (the parsed model lambda) writes it. bounds (descent.Bounds,
    or None) each weight's interval, the same for every group. What the fits find goes to tally (tally.Tally: one
    message for many groups), each sequence's by its group's key in keys; loss the loss's base name (its hints);
    counts each sequence's rows that are not missing periods, the objective's divisor (its rows: seqs.lengths);
    likelihood, for an ETS of multiplicative error, the Steps (relative, logs) whose objectives are each row's
    squared relative error and ln|ŷ|: the objective is then the concentrated −2 log L, n·ln(S/n) + 2·L of their sums
    (the step's own is not used), by Newton or L-BFGS only."""
    counts = seqs.lengths if counts is None else counts
    if likelihood is not None and options['optimizer'] not in ('lbfgs', 'newton'):
        raise PgadError('0A000', f'optimizer "{options["optimizer"]}" cannot fit a multiplicative error',
                        detail='Its likelihood is no mean over the rows.', hint="Use 'newton' or 'lbfgs'.")
    def why(part, k, where):  # descent.check_finite's why(w, output) for sequence k of part, of where
        one = sequences.Sequences(part.columns, part.starts[[k]], part.lengths[[k]])
        return lambda w, output: diagnosed(step, one, w, model, where) if output == 0 and model is not None else None
    if options['optimizer'] in ('lbfgs', 'newton'):
        clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'model "{name}": {message}'),
                              options['iterations'], every_iterations=options['progress_every'])
        newton = options['optimizer'] == 'newton'
        fitting = lockstep.newton if newton else lockstep.fit
        p = len(start)
        # what a group costs lockstep beyond its rows: newton its Hessians (one kept) and differences, L-BFGS its pairs
        per_group = 8 * max(p, 1) * (5 * p + 8 if newton else 2 * descent.MEMORY + 12)
        batch = max(1, (memory_limit // 4) // per_group)
        fits = []
        for begin in range(0, seqs.count, batch):  # as many groups at once as pgad.memory_limit has room for
            part = sequences.Sequences(seqs.columns, seqs.starts[begin:begin + batch],
                                       seqs.lengths[begin:begin + batch])

            def sums(w, at, part=part, n=np.asarray(counts[begin:begin + batch], dtype=np.float64)):
                some = sequences.Sequences(part.columns, part.starts[at], part.lengths[at])  # the groups at
                if likelihood is None:
                    return sequences.gradient(step, some, w, options['mode'], tile_bytes, options['backend'], cache)
                return concentrated(*(sequences.gradient(s, some, w, options['mode'], tile_bytes, options['backend'],
                                                         cache) for s in likelihood), n[at])
            fits += fitting(sums, _start_of(start, begin, part.count),
                            counts[begin:begin + batch], names, options['iterations'], options['tolerance'], penalty,
                            clock,
                            why=lambda k, part=part, begin=begin: why(part, k, wheres[begin + k]), bounds=bounds)
        for key, fit in zip(keys, fits):
            if not fit.converged:
                message, hint = descent.unconverged(options['optimizer'], fit, options['iterations'], penalty, loss)
                tally.add(counting.UNCONVERGED, key, message, taken(hint))
        return fits
    fits = []
    for k, (where, key) in enumerate(zip(wheres, keys)):
        part = sequences.Sequences(seqs.columns, seqs.starts[[k]], seqs.lengths[[k]])
        clock = descent.Clock(server.check_interrupts, lambda message: server.notice(f'{where}: {message}'),
                              options['iterations'], every_iterations=options['progress_every'],
                              warning=lambda message, hint, key=key: tally.add(counting.WARNED, key, message,
                                                                                taken(hint)),
                              unconverged=lambda message, hint, key=key: tally.add(counting.UNCONVERGED, key,
                                                                                    message, taken(hint)))
        fits.append(descent.fit(Kernel(step, part, options['mode'], tile_bytes, options['backend'], cache),
                                loader.Table([], int(part.lengths[0]), 0),
                                _start_of(start, k, 1)[:, 0], names, options['optimizer'], options['learning_rate'],
                                options['iterations'],
                                int(counts[k]), None, options['tolerance'], penalty, clock,
                                why=why(part, 0, where), bounds=bounds, loss=loss))
    return fits


def concentrated(relative, logs, n):
    """(the concentrated −2 log L of a multiplicative error less n·(ln 2π + 1), n·ln(S/n) + 2·L, its gradient) of
    each group from the sums S of its squared relative errors and L of ln|ŷ| (each (sum, P × G gradient))."""
    (s, ds), (logs_sum, dl) = relative, logs
    with np.errstate(divide='ignore', invalid='ignore'):
        return n * np.log(s / n) + 2 * logs_sum, (n / s) * ds + 2 * dl


def likelihood_steps(model_text, label, state, weights, limits, memory_limit, gaps):
    """The Steps (relative, logs) of an ETS of multiplicative error (_fit's likelihood): its recurrence with the
    objectives ((y − ŷ)/ŷ)² and ln|ŷ| of a row."""
    y = families.column(label)
    return tuple(step_of(model_text, loss, label, state, weights, limits, memory_limit, gaps)[0]
                 for loss in (f'λ(p, d) (({y} - p)/p)^2', 'λ(p, d) ln(abs(p))'))


# A smoothing parameter, by its name: alpha, beta, gamma, alone or with a suffix (alpha2, gamma_week). Outside [0, 1]
# it weighs old rows more than new ones (or one row's error past itself): a recurrence that may have no minimum.
SMOOTHING = re.compile(r'(alpha|beta|gamma)([0-9]*|_\w*)', re.IGNORECASE)


def _outside(tally, names, fits, keys, limits):
    """An OUTSIDE entry in tally for each group (keys) whose fit leaves a smoothing parameter (SMOOTHING) that has
    no bounds (limits) outside [0, 1]."""
    watched = [k for k, n in enumerate(names) if SMOOTHING.fullmatch(n) and n not in (limits or {})]
    for key, fit in zip(keys, fits):
        out = [f'"{names[k]}" = {fit.weights[k]:g}' for k in watched if not 0 <= fit.weights[k] <= 1]
        if out:
            first = names[next(k for k in watched if not 0 <= fit.weights[k] <= 1)]
            tally.add(counting.OUTSIDE, key, f'smoothing parameter {", ".join(out)} is outside [0, 1]',
                      f'Bound it: bounds => \'{{"{first}": [0, 1]}}\' (a smoothing parameter outside [0, 1] weighs '
                      'old rows more than new ones, and the fit may have no minimum).')


def _start_of(start, begin, count):
    """The starting weights of count groups from the group begin, P × count: start's columns where it is P × G (a
    family's, each group's from its rows), else start for each."""
    start = np.asarray(start, dtype=np.float64)
    return start[:, begin:begin + count].copy() if start.ndim == 2 else np.tile(start[:, None], (1, count))


def _starts(start, names, components, kept, label, given):
    """P × G: each group's starting weights, an ETS's from its rows (families.initial), where the user gave none."""
    index = {n: i for i, n in enumerate(names)}
    out = np.tile(np.asarray(start, dtype=np.float64)[:, None], (1, len(kept)))
    for k, (_, group) in enumerate(kept):
        for n, v in families.initial(components, group.columns[label][observed(group)]).items():
            if n in index and n not in given:
                out[index[n], k] = v
    return out


def _family(text, loss, weights, given, data, config):
    """(the families.Family text names, its model, loss, weights, the arguments given, the data loaded or None) for
    pgad.train: the weights given replace the family's starting ones, the bounds given its bounds; no state may be
    given. 'auto' without its season's length loads the data first, and takes it from the order column's step
    (families.season_length)."""
    if given['state'] is not None:
        raise PgadError('22023', f'model "{text.strip()}" names a family, which makes its own state',
                        hint='Leave state out, or write the model as a lambda of the state you give.')
    if given['order_by'] is None:
        raise PgadError('22023', f'family "{text.strip()}" needs order_by: the column that orders the rows',
                        hint="Give order_by => 'day'.")
    if objective.canonical(loss) != 'squared':
        raise PgadError('0A000', f'family "{text.strip()}" is fitted by least squares, not loss \'{loss}\'',
                        hint="Give loss 'squared'.")
    preloaded, season = None, families.season_of(text)
    if season is None:  # 'auto': the season's length from the order column
        preloaded = load(data, [given['label']], order_column(given['order_by']),
                         arguments.group_by(given['group_by']), config.memory_limit)
        found = [group.order for group in preloaded[1] if len(group.order) > 1]
        errors = ',A' if families.errors_of(text) == 'A' else ''
        text = f'auto({families.season_length(preloaded[2], found[0]) if found else 1}{errors})'
    family = families.generate(text, given['label'])
    mine = arguments.parsed(weights, 'weights', 'weight', config.memory_limit) if weights else {}
    limits = arguments.parsed(given['bounds'], 'bounds', 'weight', config.memory_limit) if given['bounds'] else {}
    if not isinstance(mine, dict) or not isinstance(limits, dict):
        raise PgadError('22023', f'the weights and bounds of family "{family.name}" are JSON objects',
                        hint='Give the starting values and bounds of the weights by name: \'{"alpha": 0.2}\'.')
    given = {**given, 'state': family.state, 'bounds': json.dumps({**family.bounds, **limits})}
    return family, family.model, 'squared', json.dumps({**family.weights, **mine}), given, preloaded


# A family's smoothing weights that a fit left at a bound start again from inside, RESTART of the way from the bound
# it reached: a smoothing recurrence's least squares may have a worse optimum on a face of the bounds (γ = 0, the
# seasons fixed) than inside, and Newton's path from the one start may end there.
RESTART = 0.3


def _restarted(fitting, begun, bounds, tally, names, some, keys, fixed=()):
    """[descent.Fit of each group of some] of a family from begun (P × G): fitting's, and for the groups where a
    smoothing weight (SMOOTHING, not fixed) ended at a bound, a second fit from begun with those weights RESTART
    of the way inside, the better objective of the two kept; the messages (tally) the kept fits' (keys: each
    group's key)."""
    first = counting.Tally(tally.name, tally.groups)
    fits = fitting(begun, bounds, first, some)
    smoothing = [i for i, n in enumerate(names) if SMOOTHING.fullmatch(n) and n not in fixed]
    if bounds is None or not smoothing:
        for k in some:
            tally.take(first, keys[k])
        return fits
    again = begun[:, some].copy()
    stuck = np.zeros(len(some), dtype=bool)
    for j, fit in enumerate(fits):
        for i in smoothing:
            lower, upper = bounds.lower[i], bounds.upper[i]
            if np.isfinite(lower) and np.isfinite(upper) and fit.weights[i] in (lower, upper):
                stuck[j] = True
                again[i, j] = lower + (RESTART if fit.weights[i] == lower else 1 - RESTART) * (upper - lower)
    redone = {}
    if stuck.any():
        second = counting.Tally(tally.name, tally.groups)
        full = begun.copy()
        full[:, some[stuck]] = again[:, stuck]
        for j, fit in zip(np.flatnonzero(stuck), fitting(full, bounds, second, some[stuck])):
            if fit.loss < fits[j].loss:
                fits[j], redone[j] = fit, second
    for j, k in enumerate(some):
        tally.take(redone.get(j, first), keys[k])
    return fits


def _choose(family, fitting, start, names, spans, limits, kept, keys, tally, label, mine, counts, finite):
    """([the chosen descent.Fit of each group], [(its family, {candidate: AICc})]) of 'auto': each candidate of the
    family fitted in turn, all the groups at once (fitting(start, bounds, tally, groups)) with its weights fixed by
    bounds of one value, and each group's of least AICc (families.aicc) kept; a candidate that needs a label above
    0 (a multiplicative season) fits only the groups whose labels all are; each group starts from its rows
    (families.initial) but for the weights the user gave (mine), and a multiplicative error from its additive twin's
    fit (the same recurrence: its least squares is near the likelihood's optimum). The messages are the chosen fits'
    (keys: each group's key); counts each group's rows but its missing periods, AICc's n. A candidate is no candidate
    for a group where its objective is not finite at the group's start (finite(begun, groups, error): a season near
    0 divides), nor for any group where its fit fails so elsewhere; a group no candidate fits is the error."""
    index = {n: i for i, n in enumerate(names)}
    everyone = np.arange(len(kept))
    positive = np.array([np.min(group.columns[label][observed(group)]) > 0 for _, group in kept])
    scores, found, fitted_of, failed = np.full((len(family.candidates), len(kept)), np.inf), [], {}, None
    unfit = {}  # group: the fit that raises its error, the first candidate's not finite at its start
    for c, candidate in enumerate(family.candidates):
        begun = _starts(start, names, candidate.components, kept, label, mine)
        twin = fitted_of.get(candidate.name.replace('ets(M,', 'ets(A,'), {}) if candidate.error == 'M' else {}
        for k, fit in twin.items():
            begun[:, k] = fit.weights
        for n, v in candidate.fixed.items():
            begun[index[n]] = v
        limited = {**(limits or {}), **{n: (v, v) for n, v in candidate.fixed.items()},
                   **{n: tuple(b) for n, b in candidate.bounds.items()}}
        some = everyone[positive] if candidate.positive else everyone
        bounded = descent.bounded(limited, spans, begun, names)
        good = finite(begun, some, candidate.error) if len(some) else np.ones(0, dtype=bool)
        for k in some[~good]:  # its error, where no candidate fits the group: this fit's at its start
            unfit.setdefault(k, lambda k=k, begun=begun, bounded=bounded, error=candidate.error: fitting(
                begun, bounded, counting.Tally(tally.name, tally.groups), np.array([k]), error))
        some = some[good]
        told = counting.Tally(tally.name, tally.groups)
        try:
            fits = dict(zip(some, _restarted(lambda *a, error=candidate.error: fitting(*a, error=error), begun,
                                             bounded, told, names, some, keys, candidate.fixed) if len(some) else []))
        except PgadError as e:  # not finite at its start for some group (a season near 0 divides): not a candidate
            if not e.sqlstate.startswith('22') or len(family.candidates) == 1:
                raise
            failed, fits = failed or e, {}
        for k, fit in fits.items():  # (a multiplicative error's as the SSE of the same −2 log L: S·exp(2L/n))
            n = int(counts[k])
            with np.errstate(over='ignore'):
                sse = n * float(np.exp(fit.loss)) if candidate.error == 'M' else fit.loss * n
            scores[c, k] = families.aicc(sse, n, candidate.parameters)
        found.append((fits, told))
        fitted_of[candidate.name] = fits
    best = np.argmin(scores, axis=0)
    for k, c in enumerate(best):  # a group whose least AICc is none (too few rows): the first candidate that fits it
        if k not in found[c][0]:
            fitting_it = [j for j, (fits, _) in enumerate(found) if k in fits]
            if not fitting_it:  # no candidate fits the group: the first's error that left it out
                if k in unfit:
                    unfit[k]()
                raise failed or PgadError('22003', f'{kept[k][0]}: no candidate of "{family.name}" is finite at its '
                                                   'starting weights', hint='Check the labels for values near 0.')
            best[k] = fitting_it[0]
    fitted = []
    for k, c in enumerate(best):
        fitted.append(found[c][0][k])
        tally.take(found[c][1], keys[k])
    return fitted, [(family.candidates[c].name, {candidate.name: float(scores[j, k]) if np.isfinite(scores[j, k])
                                                 else None for j, candidate in enumerate(family.candidates)})
                    for k, c in enumerate(best)]


def _check_positive(kept, label, shown):
    """The error of a multiplicative error's family over a group with a label not above 0."""
    for where, group in kept:
        y = group.columns[label][observed(group)]
        if np.any(y <= 0):
            raise PgadError('22023', f'{where}: family "{shown}" has a multiplicative error, and the label is '
                                     f'{float(np.min(y)):g} at its least', detail='Its errors are relative to the '
                                                                                 'prediction: labels above 0 only.',
                            hint=f'Use an additive error: {shown.replace("ets(M,", "ets(A,")}.')


def observed(group):
    """Which of a group's rows are not missing periods (periods.filled's, column GAP 1)."""
    gap = group.columns.get(sequences.GAP)
    return np.ones(len(group.order), dtype=bool) if gap is None else gap == 0


def _periods(frequency, kind, kept, step, label, name, memory_limit):
    """(each kept group's periods.Frequency or None, kept with a row for each missing period where the model reads
    no column but its label, each group's number of those, each group's last row's period counted from its first or
    None): the frequency declared (pgad.train's frequency), else
    each group's detected. A NOTICE counts the missing periods filled, or those left out of a model that reads other
    columns (it has no value of them there: its rows are consecutive, as without a frequency)."""
    given = periods.declared(frequency, kind) if frequency is not None else None
    found = [given or periods.detected(group.order, kind) for _, group in kept]
    missing = np.zeros(len(kept), dtype=np.int64)
    at = [periods.periods(group.order, f, kind) if f else None for (_, group), f in zip(kept, found)]
    spans = [None if a is None else int(a[-1]) for a in at]
    if not periods.fills(step, label):
        for k, a in enumerate(at):
            missing[k] = 0 if a is None else int(a[-1]) + 1 - len(a)
        if missing.any():
            server.notice(f'model "{name}": {periods.count(int(missing.sum()))} in the data '
                          f'{_in_groups(missing)}are not filled: the model reads columns beside its label "{label}", '
                          'which have no value there; its rows follow one another')
        return found, kept, np.zeros(len(kept), dtype=np.int64), spans
    out = []
    for k, ((where, group), f) in enumerate(zip(kept, found)):
        if f is not None:
            group, missing[k] = periods.filled(group, f, kind, label, periods.budget(step, memory_limit))
        out.append((where, group))
    if missing.any():
        server.notice(f'model "{name}": {periods.count(int(missing.sum()))} {_in_groups(missing)}'
                      f'advance{"s" * bool(missing.sum() == 1)} the state without an update, the label read as the '
                      'prediction (a row of a NULL label is one)')
    return found, out, missing, spans


def _in_groups(missing):
    groups = int(np.count_nonzero(missing))
    return f'in {groups} group{"s" * (groups != 1)} ' if len(missing) > 1 else ''


def reads_label(step, label):
    """Whether the step's prediction reads the label column (an AR(p)'s first p rows predict their own)."""
    graph = step.graph
    return any(graph.nodes[i].op == 'column' and graph.nodes[i].value == label
               for i in graph.ancestors([step.prediction]))


def variance(errors, own):
    """(σ², the rows predicted) of a group's one-step errors: the sum of their squares over the rows predicted, as
    AutoReg's sigma2 (ssr/nobs, nobs the rows it predicts) and ETSModel's mse take it. Where the prediction reads the
    label (own), a row whose error is exactly 0 is one that predicts its own label (an AR(p)'s first p rows,
    CASE WHEN s.n < p THEN d.y …), not a prediction: not counted."""
    predicted = int(np.count_nonzero(errors)) if own else len(errors)
    return float(np.sum(errors ** 2) / max(predicted, 1)), predicted


def diagnosed(step, seq, weights, model, where):
    """domain.diagnose's error for the first sequence of seq (of where: 'model "m", group {…}'), whose loss is not
    finite at weights (a vector): over its rows up to the first where a node is not finite (sequences.not_finite),
    each row reading the state before it; the expression printed as model (the parsed λ(d, w, s)) writes it, the
    group named in its detail. None where no row is to blame."""
    found = sequences.not_finite(step, seq, weights)
    if found is None:
        return None
    t, node, states = found
    first = int(seq.starts[0])
    names = (*step.weights, *(sequences.STATE + f for f in step.states))
    row = program.Program(replace(model, graph=step.graph, columns=list(step.columns)), (node,), names)
    table = loader.Table([seq.columns[c][first:first + t + 1] for c in step.columns], t + 1, 0)
    found = domain.diagnose(row, table, [*np.asarray(weights, dtype=np.float64), *states], 0,
                            f"the rows of {where} in order_by's order (without NULL in a column read)")
    if found is not None and isinstance(found.detail, str) and ', group ' in where and where not in found.detail:
        found.detail = f'{where[0].upper()}{where[1:]}: {found.detail}'
    return found


def taken(hint):
    """descent's hint of an unconverged fit without what a sequence model does not take (check): standardize."""
    return hint.replace(" or standardize => true.", ".")


class Kernel:
    """descent.fit's kernel for one sequence: the summed objective and its gradient along all its rows, in one
    call (whole), by the step's backend."""
    whole = True

    def __init__(self, step, seqs, mode, tile_bytes, backend='python', cache=None):
        self.step, self.seqs, self.mode, self.tile_bytes = step, seqs, mode, tile_bytes
        self.backend, self.cache = backend, cache

    def __call__(self, columns, rows, weights):
        loss, grad = sequences.gradient(self.step, self.seqs, weights, self.mode, self.tile_bytes, self.backend,
                                        self.cache)
        return np.concatenate([[loss.sum()], grad.sum(axis=1)])


def step_of(model_text, loss, label, state, weights_text, limits, memory_limit, gaps=False):
    """(the Step, the parsed model, the weights {name: value}, the unread ones, the shapes) of a stored or given
    sequence model; gaps: its rows have missing periods (sequences.without_update)."""
    model = parser.parse(model_text, limits, state=True)
    if model.state is None:
        raise PgadError('42601', 'a sequence model is a lambda of the data row, the weights and the state: '
                                 'λ(d, w, s)', hint="For example 'λ(d, w, s) s.level', with state => "
                                                    '\'{"level": {"start": "d.y", "next": "s.level + w.alpha*(d.y - '
                                                    's.level)"}}\'.')
    if objective.base(loss) == 'softmax':
        raise PgadError('0A000', 'a sequence model takes no loss \'softmax\'', hint='Predict a number.')
    goal = objective.objective_lambda(model, loss, label, limits)
    given = arguments.weights(weights_text, model, memory_limit)
    if any(isinstance(v, dict) for v in given.values()):
        raise PgadError('0A000', 'a sequence model takes no categorical weight', hint='Give numbers or arrays.')
    shapes = calls.shapes_of(given)
    fields = sequences.fields(state, limits)
    step = sequences.build(model, goal.root, fields, list(given), limits, shapes, label if gaps else None)
    read = set(n for n, _ in step.shapes)
    return step, model, goal, {n: v for n, v in given.items() if n in read}, \
        {n: v for n, v in given.items() if n not in read}, shapes


def scoring_lambda(model, columns):
    """The model's prediction as a Lambda of its columns and, for each state field it reads, the column
    state_<field>: what the scoring function takes. A data column of that name is an error."""
    def leaf(node, graph):
        if node.op != 'weight' or not node.value.startswith(sequences.STATE):
            return None
        name = STATE_ARGUMENT + node.value[len(sequences.STATE):]
        if name in columns:
            raise PgadError('42P08', f'column "{name}" is named as the scoring function\'s argument for state '
                                     f'field "{node.value[len(sequences.STATE):]}"',
                            hint='Rename the column in the data query.')
        return graph.column(name)
    graph, values = model.graph.rebuilt([model.root], leaf)
    reads = [c for c in model.columns] + [STATE_ARGUMENT + f for f in model.states]
    return parser.Lambda(model.text, graph, values[model.root].id, model.row, model.params,
                         [c if isinstance(c, parser.Column) else parser.Column(c) for c in reads],
                         list(model.weights))


def train(name, model_text, loss, data, weights, given, config):
    """pgad.train's rows of pgad.models for a sequence model: given holds pgad.train's arguments by name. A model
    that names a family (families.py) is trained as the lambda and state it generates."""
    family, preloaded = None, None
    if families.named(model_text):
        family, model_text, loss, weights, given, preloaded = _family(model_text, loss, weights, given, data, config)
    order_by, state = given['order_by'], given['state']
    chosen = given['optimizer'] is None
    optimizer = given['optimizer'] or ('gd' if given['learning_rate'] is not None or given['l1'] else 'lbfgs')
    optimizer = arguments.optimizer(optimizer)
    loss = objective.canonical(loss)
    options = dict(learning_rate=arguments.learning_rate(0.05 if given['learning_rate'] is None else
                                                         given['learning_rate']),
                   iterations=arguments.iterations(given['iterations'] if given['iterations'] is not None else
                                                   10_000 if optimizer == 'lbfgs' else 100),  # newton: 100 too
                   mode=arguments.mode(given['mode']), backend=arguments.backend(given['backend']),
                   optimizer=optimizer, tolerance=arguments.non_negative('tolerance', given['tolerance']),
                   l1=arguments.penalty('l1', given['l1'], optimizer), l2=arguments.penalty('l2', given['l2'], optimizer),
                   label=given['label'], group_by=arguments.group_by(given['group_by']),
                   progress_every=int(arguments.non_negative('progress_every', given['progress_every'])),
                   validation=given['validation'], standardize=bool(given['standardize']))
    check(order_by, state, options)
    for key in ('validation', 'standardize'):
        del options[key]
    if family is not None:
        options['family'] = family.name
    order_by = order_column(order_by)
    label = options['label']
    step, model, goal, w, unread, shapes = step_of(model_text, loss, label, state, weights, config.limits,
                                                   config.memory_limit)
    limits = arguments.bounds(given['bounds'], [*w, *unread], config.memory_limit)
    if limits:
        options['bounds'] = descent.stored_bounds(limits)
    if order_by in step.columns:
        raise PgadError('0A000', f'the model reads its order column "{order_by}"',
                        hint='Read the gap between rows as a column of its own: SELECT day, y, day - '
                             'lag(day) OVER (ORDER BY day) AS gap FROM … (docs/sql.md, "Sequences").')
    if chosen and optimizer == 'lbfgs' and len(step.weights) <= NEWTON_WEIGHTS:
        options['optimizer'] = 'newton'
        if given['iterations'] is None:
            options['iterations'] = 100
    scoring_model = scoring_lambda(model, set(step.columns))
    group_types, groups, kind = preloaded if preloaded and list(step.columns) == [label] else \
        load(data, list(step.columns), order_by, options['group_by'], config.memory_limit)
    group_types = catalog.group_types(options['group_by'], group_types)
    options['group_types'] = group_types  # its forecast function's columns (catalog.forecast_made)
    names = [e for n, shape in step.shapes for e in vectors.elements(n, shape)]
    start = calls.vector_of(w)
    penalty = descent.Penalty(options['l1'], options['l2'], np.ones(len(start)))
    bounds = descent.bounded(limits, program.spans(step.shapes), start, names)
    kept = []
    for group in groups:
        where = f'model "{name}"' + (f', group {group.key}' if group.key else '')
        if not len(group.order):
            server.notice(f'{where}: no rows without NULL in the columns it reads; no model for this group')
            continue
        objective.check_labels(loss, label, group.columns.get(label, np.empty(0)), f'{where}: ' if group.key else '')
        kept.append((where, group))
    if not kept:
        raise PgadError('22000', 'no group of the data has a row without NULL in the columns the model reads')
    frequencies, kept, missing, spans = _periods(given.get('frequency'), kind, kept, step, label, name,
                                                 config.memory_limit)
    if missing.any():  # the step again, its state advancing at a missing period without an update
        step = step_of(model_text, loss, label, state, weights, config.limits, config.memory_limit, gaps=True)[0]
    lengths = np.array([len(group.order) for _, group in kept])
    counts = lengths - missing
    seqs = sequences.joined([group.columns for _, group in kept], lengths, step.columns)
    sequences.check_tape(seqs, len(step.states), config.memory_limit)
    tally = counting.Tally(name, len(kept) if options['group_by'] else 1)
    keys = [group.key for _, group in kept]

    errors = {c.error for c in family.candidates} if family is not None and family.candidates else \
        {family.error} if family is not None else {'A'}
    relatives = likelihood_steps(model_text, label, state, weights, config.limits, config.memory_limit,
                                 missing.any()) if 'M' in errors else None
    if 'M' in errors and not family.candidates:
        _check_positive(kept, label, family.name)

    def fitting(begun, limited, told, some=None, error='A'):  # the fits of the groups some (all: None) from begun
        some = np.arange(len(kept)) if some is None else some                  # (P or P × G), of an ETS's error
        part = sequences.Sequences(seqs.columns, seqs.starts[some], seqs.lengths[some])
        begun = np.asarray(begun)[:, some] if np.ndim(begun) == 2 else begun
        return _fit(step, part, begun, names, options, penalty, [kept[k][0] for k in some], name,
                    min(sequences.TILE_BYTES, config.memory_limit // 4), config.memory_limit, config.cache, model,
                    limited, told, [keys[k] for k in some], objective.base(loss), counts[some],
                    relatives if error == 'M' else None)

    def finite(begun, some, error='A'):  # which groups of some have an objective finite at begun
        part = sequences.Sequences(seqs.columns, seqs.starts[some], seqs.lengths[some])
        with np.errstate(all='ignore'):
            found = [sequences.run(s, part, begun[:, some], backend=options['backend'], cache=config.cache)[0]
                     for s in (relatives if error == 'M' else (step,))]
        return np.all(np.isfinite(found), axis=0)
    chosen = None
    mine = set(json.loads(given['weights'] or '{}')) if family is not None else set()
    if family is not None and family.candidates:
        fitted, chosen = _choose(family, fitting, start, names, program.spans(step.shapes), limits, kept, keys,
                                 tally, label, mine, counts, finite)
    elif family is not None and family.components is not None:
        fitted = _restarted(lambda *a: fitting(*a, error=family.error),
                            _starts(start, names, family.components, kept, label, mine), bounds, tally, names,
                            np.arange(len(kept)), keys)
    else:
        fitted = fitting(start, bounds, tally)
    weights = np.stack([fit.weights for fit in fitted], axis=1)
    _, last, predictions = sequences.run(step, seqs, weights, keep='predictions', backend=options['backend'],
                                         cache=config.cache, tile_bytes=min(sequences.TILE_BYTES, config.memory_limit // 4))
    own = reads_label(step, label)
    rows, fits = [], []
    fixed = {c.name: set(c.fixed) for c in family.candidates} if chosen else {}

    def free(k, fit):  # the group's weights that its fit moved: not those its 'auto' candidate fixed
        held = fixed[chosen[k][0]] if chosen else set()
        return {n: v for n, v in zip(names, fit.weights.tolist()) if n not in held}
    held = [descent.at_bounds(limits, free(k, fit)) for k, fit in enumerate(fitted)]  # each group's at a bound
    for k, (key, fit) in enumerate(zip(keys, fitted)):
        tally.bounds(key, free(k, fit), held[k])
    _outside(tally, names, fitted, keys, limits)
    tally.flush()
    for k, ((where, group), fit) in enumerate(zip(kept, fitted)):
        extra = dict(order_by=order_by, state=json.loads(state), order_type=kind,
                     **({'frequency': frequencies[k].text, 'first_order': shown(group.order[0], kind),
                         'last_period': spans[k]} if frequencies[k] else {}),
                     **({'missing_periods': int(missing[k])} if missing[k] else {}),
                     **({'at_bounds': held[k]} if limits else {}),
                     last_state={f: float(v) for f, v in zip(step.states, last[:, k])},
                     last_order=shown(group.order[-1], kind),
                     **({'family': chosen[k][0], 'candidates': chosen[k][1]} if chosen else {}))
        if objective.base(loss) == 'squared' and label in group.columns:
            at = slice(seqs.starts[k], seqs.starts[k] + lengths[k])
            seen = observed(group)
            errors = group.columns[label] - predictions[at]
            if families.relative(chosen[k][0] if chosen else family.name if family else None):
                errors = errors / predictions[at]  # ε = e/ŷ: σ² of a multiplicative error
            extra['sigma2'], extra['predicted_rows'] = variance(errors[seen], own)
        nested = {n: float(fit.weights[at.start]) if not shape else fit.weights[at].reshape(shape).tolist()
                  for n, shape, at in program.spans(step.shapes)}
        fits.append((group.values, dict(zip(names, fit.weights.tolist()))))
        rows.append(dict(name=name, group_key=group.key, model=model_text, loss=loss,
                         weights=calls.weights_json(unread, nested), final_loss=float(fit.loss),
                         loss_history=[float(v) for v in fit.history], iterations=fit.iterations,
                         options=json.dumps({**options, **extra}), data=data, rows=int(counts[k]),
                         training_time=fit.seconds, validation_history=None, converged=fit.converged,
                         gradient_norm=fit.gradient_norm))
    unrolled = None
    if shapes or vectors.needed(scoring_model):
        lam, prediction = vectors.unrolled_value(scoring_model, shapes, config.limits)
        unrolled = (lam, prediction, {})
    catalog.check_forecast_names(name, True)
    scoring = catalog.Scoring(name, scoring_model, options['group_by'], group_types, printer.budget(config.limits),
                              unrolled, {}, None, None)
    return catalog.store(scoring, rows, fits, given['deploy'])
