"""Sequence models (issue 37), three benchmarks:

    .venv/bin/python bench/sequences.py --gradient [--repeats 3]
    .venv/bin/python bench/sequences.py --train [--series 10000] [--days 730] [--peer-series 1000] [--repeats 1]
    .venv/bin/python bench/sequences.py --fit [--fit-series 1000] [--days 730] [--repeats 2]
    .venv/bin/python bench/sequences.py --auto [--auto-series 10000] [--arima-series 200] [--days 730] [--horizon 14]

--gradient: the time of a gradient through the recurrence, by the llvm backend (pgad/jit/scan.py) against the
python reference (pgad/sequences.py), in this process (no server):
  Holt-Winters (additive, weekly season: 9 state fields, 12 weights), one series of 730 rows (reverse and forward
  mode), and 10,000 of them (each its own weights) in one call, on 1 and 2 threads, in SIMD lanes (pgad/jit/lanes.py)
  and one at a time (scan.py); AR(7) (7 lags as state fields,
  8 weights) on one series of 1,000,000 rows, against one numpy pass over the column (its sum). Best of --repeats; the python reference once
  where it takes seconds. Timings are reported, never asserted.

--fit: lockstep.newton (pgad.train's default for sequence models) fitting --fit-series of --train's series in this
process, its gradients in SIMD lanes (pgad/jit/lanes.py) against one series at a time (scan.py), interleaved, the
CPU seconds of the fit and of its gradients (the least of --repeats).

The functions (holt_winters, autoregression, series, seconds) are for other benchmarks to call.

--train: many daily series fitted by additive Holt-Winters with a weekly season, pgad.train (one call, group_by
the series, the rows loaded from the table) against export + statsforecast's AutoETS and export + statsmodels'
ExponentialSmoothing on the same rows. The table hw (series float8, t float8, y float8) holds --series series of --days rows each, drawn from additive
Holt-Winters itself (error-correction form, each series its own α ∈ [0.2, 0.5], β ∈ [0.02, 0.1], γ ∈ [0.1, 0.3], level,
trend and weekly profile), with a fixed seed, copied in with COPY (FORMAT BINARY). The contenders, each timed end
to end from this process (the export included for the peers, the load for pgad):
  pgad          pgad.train('hw', MODEL, 'squared', 'SELECT series, t, y FROM hw', …, order_by => 't',
                group_by => 'series', state => STATE): the level starts at the first row's y plus a weight, the trend
                and the seven seasonal states at weights; α, β, γ and the starts are each series' own (L-BFGS for
                all the series in lockstep: pgad/models/lockstep.py)
  statsforecast AutoETS(model='AAA', season_length=7), StatsForecast(n_jobs=2).fit on the exported rows (numba;
                its first call compiles, timed apart on 20 series and left out)
  statsmodels   ExponentialSmoothing(trend='add', seasonal='add', seasonal_periods=7,
                initialization_method='estimated').fit() one series at a time
The peers run on the first --peer-series series (their time a series is steady, so the table scales it to
--series, and says so); pgad on all of them. Each reports its mean SSE a series on the peers' series. Writes
bench/results/sequences.md and .json. Timings are reported, never asserted.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time
import warnings

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad import limits, sequences  # noqa: E402
from pgad.jit import lanes, threads  # noqa: E402
from pgad.models import descent, lockstep, sequence  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optimum  # noqa: E402  (copy_in, and through it bench/run.py)
from optimum import Cluster  # noqa: E402
import run  # noqa: E402

ROOT = run.ROOT

LEVEL = 'w.alpha*(d.y - s.s1) + (1 - w.alpha)*(s.level + s.trend)'
HOLT_WINTERS = {'level': {'start': 'w.l0', 'next': LEVEL},
                'trend': {'start': 'w.b0', 'next': f'w.beta*({LEVEL} - s.level) + (1 - w.beta)*s.trend'},
                **{f's{k}': {'start': f'w.i{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)},
                's7': {'start': 'w.i7', 'next': 'w.gamma*(d.y - s.level - s.trend) + (1 - w.gamma)*s.s1'}}


def step(model, state, weights):
    """(the Step, the weight vector) of a model, its state and its weights (dicts), under the squared loss of y."""
    found, _, _, given, _, _ = sequence.step_of(model, 'squared', 'y', json.dumps(state), json.dumps(weights),
                                                limits.DEFAULT, 1 << 34)
    return found, np.array([float(given[n]) for n in found.weights])


def holt_winters():
    """Additive Holt-Winters with a weekly season (s1 the season of the row), as pgad.train takes it."""
    return step('λ(d, w, s) s.level + s.trend + s.s1', HOLT_WINTERS,
                {'alpha': 0.3, 'beta': 0.05, 'gamma': 0.1, 'l0': 100.0, 'b0': 0.1,
                 **{f'i{k}': float(k - 4) for k in range(1, 8)}})


def autoregression(p=7):
    """AR(p): the last p values as state fields."""
    state = {'y1': {'start': '0', 'next': 'd.y'},
             **{f'y{k}': {'start': '0', 'next': f's.y{k - 1}'} for k in range(2, p + 1)}}
    model = 'λ(d, w, s) w.c + ' + ' + '.join(f'w.a{k}*s.y{k}' for k in range(1, p + 1))
    return step(model, state, {'c': 0.0, **{f'a{k}': 0.1 / k for k in range(1, p + 1)}})


def series(count, rows, seed=0):
    """Sequences of count daily series of rows rows each: a level, a trend, a weekly season and noise."""
    rng = np.random.default_rng(seed)
    t = np.tile(np.arange(rows), count)
    y = 100 + 0.05 * t + 5 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 2, count * rows)
    return sequences.Sequences({'y': y}, np.arange(count, dtype=np.int64) * rows, np.full(count, rows, np.int64))


def seconds(fn, repeats):
    """The least wall-clock seconds of repeats calls of fn()."""
    best = float('inf')
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def on_threads(n, fn):
    replaced = threads.on_count(lambda: n)
    try:
        return fn()
    finally:
        threads.on_count(*replaced)


def gradient(repeats):
    lines = ['| gradient | python reference | llvm, 1 thread | llvm, 2 threads |', '|---|---:|---:|---:|']
    hw, w = holt_winters()
    one = series(1, 730)
    sequences.gradient(hw, one, w, backend='llvm')  # compiled once
    py = seconds(lambda: sequences.gradient(hw, one, w), repeats)
    ll = seconds(lambda: sequences.gradient(hw, one, w, backend='llvm'), repeats * 10)
    lines.append(f'| Holt-Winters, 1 series × 730 rows | {py * 1e3:.1f} ms | {ll * 1e3:.3f} ms | (one series: '
                 f'1 thread) |')
    sequences.gradient(hw, one, w, mode='forward', backend='llvm')
    py = seconds(lambda: sequences.gradient(hw, one, w, mode='forward'), repeats)
    ll = seconds(lambda: sequences.gradient(hw, one, w, mode='forward', backend='llvm'), repeats * 10)
    lines.append(f'| the same in forward mode | {py * 1e3:.1f} ms | {ll * 1e3:.3f} ms | (one series: 1 thread) |')
    many = series(10_000, 730, seed=1)
    each = w[:, None] * (1 + 1e-5 * np.arange(10_000))[None, :]
    py = seconds(lambda: sequences.gradient(hw, many, each), 1)
    ll = [on_threads(n, lambda: seconds(lambda: sequences.gradient(hw, many, each, backend='llvm'), repeats))
          for n in (1, 2)]
    lines.append(f'| Holt-Winters, 10,000 series × 730 rows (each its weights), {lanes.width()} in SIMD lanes | '
                 f'{py:.2f} s | {ll[0]:.3f} s | {ll[1]:.3f} s |')
    pays, lanes.pays = lanes.pays, lambda step, seqs: False  # scan.py's kernel, a sequence at a time
    try:
        ll = [on_threads(n, lambda: seconds(lambda: sequences.gradient(hw, many, each, backend='llvm'), repeats))
              for n in (1, 2)]
    finally:
        lanes.pays = pays
    lines.append(f'| the same, one series at a time | | {ll[0]:.3f} s | {ll[1]:.3f} s |')
    ar, w = autoregression(7)
    long = series(1, 1_000_000, seed=2)
    sequences.gradient(ar, series(1, 10), w, backend='llvm')
    ll = seconds(lambda: sequences.gradient(ar, long, w, backend='llvm'), repeats)
    column = long.columns['y']
    scan = seconds(lambda: column.sum(), repeats * 10)
    lines.append(f'| AR(7), 1 series × 1,000,000 rows | not run (minutes) | {ll * 1e3:.1f} ms | (one series) |')
    lines.append(f'| one numpy pass over the column (its sum), 1,000,000 rows | | {scan * 1e3:.2f} ms | |')
    return '\n'.join(lines)


MODEL = 'λ(d, w, s) s.level + s.trend + s.s1'
STATE = {
    'level': {'start': 'd.y + w.l0', 'next': 's.level + s.trend + w.alpha*(d.y - s.level - s.trend - s.s1)'},
    'trend': {'start': 'w.b0', 'next': 's.trend + w.alpha*w.beta*(d.y - s.level - s.trend - s.s1)'},
    **{f's{k}': {'start': f'w.i{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)},
    's7': {'start': 'w.i7', 'next': 's.s1 + w.gamma*(d.y - s.level - s.trend - s.s1)'},
}
START = {'alpha': 0.2, 'beta': 0.05, 'gamma': 0.1, 'l0': 0.0, 'b0': 0.0, **{f'i{k}': 0.0 for k in range(1, 8)}}


def make(series, days, rng):
    """(series id, t, y) of the rows: each series drawn from additive Holt-Winters with its own parameters."""
    alpha, beta, gamma = rng.uniform(0.2, 0.5, series), rng.uniform(0.02, 0.1, series), rng.uniform(0.1, 0.3, series)
    level, trend = rng.uniform(50, 500, series), rng.normal(0, 0.2, series)
    season = rng.normal(0, 10, (7, series))
    season -= season.mean(axis=0)
    sigma = rng.uniform(1, 3, series)
    y = np.empty((days, series))
    for t in range(days):
        e = rng.normal(0, sigma)
        y[t] = level + trend + season[0] + e
        level, trend, season = (level + trend + alpha * e, trend + alpha * beta * e,
                                np.vstack([season[1:], season[0] + gamma * e]))
    ids = np.repeat(np.arange(series, dtype=np.float64), days)
    ts = np.tile(np.arange(days, dtype=np.float64), series)
    return ids, ts, y.T.ravel()


def pgad_fit(db):
    began = time.perf_counter()
    rows = db.execute("SELECT group_key->>'series', final_loss * rows, converged, iterations FROM pgad.train("
                      "'hw', %s, 'squared', 'SELECT series, t, y FROM hw', %s, order_by => 't', group_by => 'series', "
                      "state => %s)", (MODEL, json.dumps(START), json.dumps(STATE))).fetchall()
    took = time.perf_counter() - began
    sse = {int(float(k)): v for k, v, _, _ in rows}
    return took, sse, sum(1 for r in rows if r[2]), max(r[3] for r in rows)


def export(db, series):
    began = time.perf_counter()
    X, y = run.export(db, argparse.Namespace(xs=['series', 't'], table=f'(SELECT * FROM hw WHERE series < {series}) AS hw'))
    return time.perf_counter() - began, X, y


def statsforecast_fit(ids, ts, y):
    import pandas as pd
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS
    frame = pd.DataFrame({'unique_id': ids.astype(np.int64), 'ds': ts.astype(np.int64), 'y': y})
    began = time.perf_counter()
    fitted = StatsForecast(models=[AutoETS(model='AAA', season_length=7)], freq=1, n_jobs=2).fit(frame)
    took = time.perf_counter() - began
    sse = {}
    for k, m in enumerate(fitted.fitted_[:, 0]):
        sse[int(fitted.uids[k]) if hasattr(fitted, 'uids') else k] = float(np.sum(np.square(m.model_['residuals'])))
    return took, sse


def statsmodels_fit(ids, y, series):
    from statsmodels.tsa.holtwinters import ExponentialSmoothing
    began = time.perf_counter()
    sse = {}
    for k in range(series):
        one = y[ids == k]
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            fit = ExponentialSmoothing(one, trend='add', seasonal='add', seasonal_periods=7,
                                       initialization_method='estimated').fit()
        sse[k] = float(fit.sse)
    return time.perf_counter() - began, sse


def training(args):
    """The --train benchmark: the table of each contender's time and SSE; writes bench/results/sequences.md, .json."""
    started = time.perf_counter()
    ids, ts, y = make(args.series, args.days, np.random.default_rng(args.seed))
    peers = min(args.peer_series, args.series)
    results = {}
    with Cluster() as cluster, psycopg.connect(cluster.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        optimum.copy_in(db, 'hw', {'series': ids, 't': ts, 'y': y})
        # statsforecast compiles its numba code on its first call: once, on 20 series, not timed
        small = ids < 20
        statsforecast_fit(ids[small], ts[small], y[small])
        for _ in range(args.repeats):
            took, sse, converged, iterations = pgad_fit(db)
            best = results.get('pgad')
            if best is None or took < best['seconds']:
                results['pgad'] = dict(seconds=took, sse=sse, converged=converged, iterations=iterations)
            exported, _, _ = export(db, peers)
            took, sse = statsforecast_fit(ids[ids < peers], ts[ids < peers], y[ids < peers])
            took += exported
            best = results.get('statsforecast')
            if best is None or took < best['seconds']:
                results['statsforecast'] = dict(seconds=took, sse=sse, series=peers)
        took, sse = statsmodels_fit(ids, y, min(args.statsmodels_series, args.series))
        results['statsmodels'] = dict(seconds=took, sse=sse, series=min(args.statsmodels_series, args.series))
    report = table(results, args)
    print(report, flush=True)
    meta = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            'command': ' '.join([os.path.relpath(sys.executable, ROOT), 'bench/sequences.py', *sys.argv[1:]]),
            'series': args.series, 'days': args.days, 'cpu': run.machine(), 'cores': os.cpu_count(),
            'python': platform.python_version(), 'seconds': round(time.perf_counter() - started, 1)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'sequences.json'), 'w') as f:
        json.dump({'meta': meta, 'results': {k: {**v, 'sse': None} for k, v in results.items()}}, f, indent=1)
    with open(os.path.join(args.out, 'sequences.md'), 'w') as f:
        f.write(f'`{meta["command"]}`, {meta["date"]}, {meta["cpu"]} × {meta["cores"]}\n\n{report}\n')


def table(results, args):
    """The markdown table: each contender's time for --series series (scaled from the series it fitted), its ratio
    to pgad's, and its mean SSE a series against pgad's on the series both fitted."""
    pgad = results['pgad']
    lines = [f'{args.series:,} series × {args.days} days, additive Holt-Winters (weekly season)', '',
             '| contender | series fitted | seconds | seconds for all | × pgad | SSE / pgad\'s (mean over its series) |',
             '|---|---|---|---|---|---|']
    for name, r in results.items():
        fitted = r.get('series', args.series)
        scaled = r['seconds'] * args.series / fitted
        common = [k for k in r['sse'] if k in pgad['sse']]
        ratio = np.mean([r['sse'][k] / pgad['sse'][k] for k in common]) if common else float('nan')
        lines.append(f'| {name} | {fitted:,} | {r["seconds"]:.1f} | {scaled:.1f} | '
                     f'{scaled / pgad["seconds"]:.2f} | {ratio:.6f} |')
    lines.append('')
    lines.append(f'pgad: {pgad["converged"]:,} of {args.series:,} fits converged; at most {pgad["iterations"]} '
                 'iterations.')
    return '\n'.join(lines)


def fitting(count, days, seed, repeats):
    """lockstep.newton (pgad.train's default for sequence models) fitting count Holt-Winters series of --train's data
    (make), 100 iterations, its gradients by sequences.gradient(…, backend='llvm') as models/sequence.py calls them:
    in SIMD lanes against one series at a time, interleaved, the CPU seconds of this process (time.process_time: the
    least of repeats) for the fit and for its gradients."""
    _, _, y = make(count, days, np.random.default_rng(seed))
    hw, _, _, given, _, _ = sequence.step_of(MODEL, 'squared', 'y', json.dumps(STATE), json.dumps(START),
                                             limits.DEFAULT, 1 << 34)
    start = np.array([float(given[n]) for n in hw.weights])
    rows = sequences.Sequences({'y': y}, np.arange(count, dtype=np.int64) * days, np.full(count, days, np.int64))
    best, pays = {}, lanes.pays
    for _ in range(repeats):
        for name, rule in (('lanes', pays), ('one series at a time', lambda step, seqs: False)):
            lanes.pays, spent = rule, [0.0]

            def objective(w, at):
                started = time.process_time()
                part = sequences.Sequences(rows.columns, rows.starts[at], rows.lengths[at])
                found = sequences.gradient(hw, part, w, 'reverse', 64 << 20, 'llvm')
                spent[0] += time.process_time() - started
                return found
            started = time.process_time()
            try:
                lockstep.newton(objective, np.tile(start[:, None], (1, count)), rows.lengths, list(hw.weights), 100,
                                0.0, descent.Penalty(), descent.Clock(lambda: None, lambda m: None, 100))
            finally:
                lanes.pays = pays
            total = time.process_time() - started
            best[name] = min(best.get(name, (total, spent[0])), (total, spent[0]))
    lines = [f'| lockstep.newton, {count:,} Holt-Winters series × {days} rows | the fit, CPU s | its gradients |',
             '|---|---:|---:|']
    lines += [f'| {name} | {total:.2f} | {grads:.2f} |' for name, (total, grads) in best.items()]
    return '\n'.join(lines)


def mase(actual, forecast, history, m=7):
    """The mean absolute scaled error of forecast against actual, scaled by the seasonal naive's in-sample MAE."""
    scale = np.mean(np.abs(history[m:] - history[:-m]))
    return float(np.mean(np.abs(actual - forecast)) / scale)


FIRST = "pgad 'auto(7)'"  # the contender the others are timed against


def automatic(args):
    """The --auto benchmark (issue 46): --auto-series daily series of --days rows (make: additive Holt-Winters, each
    its own parameters), the last --horizon held out. pgad.train(…, 'auto(7)', …) over all of them in one call (fifteen
    ETS candidates a series, the least AICc kept; and 'auto(7,A)', the nine of an additive error alone) and
    pgad.forecast at 95%, against export + statsforecast's
    AutoETS(season_length=7) (its own choice among the ETS models) with n_jobs = the cores, forecast with
    level=[95], and AutoARIMA(season_length=7) on the first --arima-series of them (its seconds scaled to all), on
    the same rows, in one run: seconds (the load and the export included), the mean MASE of the held-out tails and
    the 95% intervals' coverage. Timings are reported, never asserted."""
    import pandas as pd
    from statsforecast import StatsForecast
    from statsforecast.models import AutoARIMA, AutoETS
    started = time.perf_counter()
    series, days, horizon = args.auto_series, args.days, args.horizon
    ids, ts, y = make(series, days, np.random.default_rng(args.seed))
    cut = days - horizon
    y_by = y.reshape(series, days)
    results = {}
    with Cluster() as cluster, psycopg.connect(cluster.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute("SET pgad.publish_data_values = 'on'")
        optimum.copy_in(db, 'hw', {'series': ids, 't': ts, 'y': y})
        small = (ids < 20) & (ts < cut)
        frame = pd.DataFrame({'unique_id': ids[small].astype(np.int64), 'ds': ts[small].astype(np.int64),
                              'y': y[small]})
        StatsForecast(models=[AutoETS(season_length=7), AutoARIMA(season_length=7)], freq=1, n_jobs=1) \
            .forecast(df=frame, h=horizon)  # numba's compiles, left out
        for _ in range(args.repeats):
            for contender, family in (("pgad 'auto(7)'", 'auto(7)'), ("pgad 'auto(7,A)'", 'auto(7,A)')):
                began = time.perf_counter()
                chosen = db.execute("SELECT group_key->>'series', options->>'family' FROM pgad.train('auto', %s, "
                                    "'squared', %s, NULL, order_by => 't', group_by => 'series')",
                                    [family, f'SELECT series, t, y FROM hw WHERE t < {cut}']).fetchall()
                rows = db.execute("SELECT (group_key->>'series')::float8::int, step, value, lower, upper "
                                  "FROM pgad.forecast('auto', %s)", [horizon]).fetchall()
                took = time.perf_counter() - began
                forecast = np.full((series, horizon, 3), np.nan)
                for k, step, value, lower, upper in rows:
                    forecast[k, step - 1] = value, lower, upper
                if contender not in results or took < results[contender]['seconds']:
                    results[contender] = dict(seconds=took, forecast=forecast,
                                              families={f: sum(1 for _, c in chosen if c == f) for _, f in chosen})
            def peer(model, frame, began):  # (seconds since began, series × horizon × 3) of a statsforecast model
                found = StatsForecast(models=[model], freq=1, n_jobs=os.cpu_count()) \
                    .forecast(df=frame, h=horizon, level=[95])
                took = time.perf_counter() - began
                found = found.reset_index() if 'unique_id' not in found.columns else found
                forecast, shown = np.full((series, horizon, 3), np.nan), repr(model)
                for k, part in found.groupby('unique_id'):
                    forecast[int(k)] = part[[shown, f'{shown}-lo-95', f'{shown}-hi-95']].to_numpy()[:horizon]
                return took, forecast

            began = time.perf_counter()
            X, target = run.export(db, argparse.Namespace(xs=['series', 't'],
                                                          table=f'(SELECT * FROM hw WHERE t < {cut}) AS hw'))
            frame = pd.DataFrame({'unique_id': X[:, 0].astype(np.int64), 'ds': X[:, 1].astype(np.int64),
                                  'y': target})
            took, forecast = peer(AutoETS(season_length=7), frame, began)
            if 'statsforecast AutoETS' not in results or took < results['statsforecast AutoETS']['seconds']:
                results['statsforecast AutoETS'] = dict(seconds=took, forecast=forecast)
            if args.arima_series:  # AutoARIMA on the first --arima-series series, its time scaled to all of them
                took, forecast = peer(AutoARIMA(season_length=7), frame[frame['unique_id'] < args.arima_series],
                                      time.perf_counter())
                took *= series / args.arima_series
                name = f'statsforecast AutoARIMA (on {args.arima_series:,}, time scaled)'
                if name not in results or took < results[name]['seconds']:
                    results[name] = dict(seconds=took, forecast=forecast, subset=args.arima_series)
    subset = args.arima_series if args.arima_series else None
    lines = [f'{series:,} daily series × {days} days (the last {horizon} held out), automatic ETS', '',
             '| contender | seconds | × pgad | mean MASE | 95% coverage |' +
             (f' mean MASE, first {subset:,} |' if subset else ''),
             '|---|---:|---:|---:|---:|' + '---:|' * bool(subset)]
    for name, r in results.items():
        f, some = r['forecast'], r.get('subset', series)
        scores = [mase(y_by[k, cut:], f[k, :, 0], y_by[k, :cut]) for k in range(some)]
        inside = np.mean((y_by[:some, cut:] >= f[:some, :, 1]) & (y_by[:some, cut:] <= f[:some, :, 2]))
        cells = [f'{np.mean(scores):.4f}' if some == series else '', f'{inside:.3f}']
        if subset:
            cells.append(f'{np.mean(scores[:subset]):.4f}')
        lines.append(f'| {name} | {r["seconds"]:.1f} | {r["seconds"] / results[FIRST]["seconds"]:.2f} | '
                     + ' | '.join(cells) + ' |')
    lines += ['', *(f'{name}\'s choices: ' + ', '.join(f'{f} {n}' for f, n in sorted(r['families'].items()))
                    for name, r in results.items() if 'families' in r)]
    report = '\n'.join(lines)
    print(report, flush=True)
    meta = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            'command': ' '.join([os.path.relpath(sys.executable, ROOT), 'bench/sequences.py', *sys.argv[1:]]),
            'cpu': run.machine(), 'cores': os.cpu_count(), 'seconds': round(time.perf_counter() - started, 1)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'sequences_auto.md'), 'w') as f:
        f.write(f'`{meta["command"]}`, {meta["date"]}, {meta["cpu"]} × {meta["cores"]}\n\n{report}\n')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--gradient', action='store_true', help='the time of a gradient, llvm against python')
    parser.add_argument('--train', action='store_true', help='Holt-Winters on many series against the peers')
    parser.add_argument('--fit', action='store_true', help="lockstep's fit of --fit-series series, lanes or not")
    parser.add_argument('--fit-series', type=int, default=1000)
    parser.add_argument('--auto', action='store_true', help="'auto' against statsforecast's AutoETS, held-out MASE")
    parser.add_argument('--auto-series', type=int, default=10_000)
    parser.add_argument('--horizon', type=int, default=14)
    parser.add_argument('--arima-series', type=int, default=200, help="series AutoARIMA fits in --auto (0: none)")
    parser.add_argument('--repeats', type=int, default=None, help='best of (3 for --gradient, 1 for --train)')
    parser.add_argument('--series', type=int, default=10_000)
    parser.add_argument('--days', type=int, default=730)
    parser.add_argument('--peer-series', type=int, default=1000, help='series the peers fit (scaled to --series)')
    parser.add_argument('--statsmodels-series', type=int, default=100)
    parser.add_argument('--seed', type=int, default=37)
    parser.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'))
    args = parser.parse_args(argv)
    if args.gradient:
        print(gradient(args.repeats or 3), flush=True)
    if args.fit:
        print(fitting(args.fit_series, args.days, args.seed, args.repeats or 2), flush=True)
    if args.train:
        args.repeats = args.repeats or 1
        training(args)
    if args.auto:
        args.repeats = args.repeats or 1
        automatic(args)


if __name__ == '__main__':
    main()
