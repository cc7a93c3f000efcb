"""Automatic ETS on a mixed set of series (issue 46): pgad's 'auto' and 'auto(A)' against statsforecast's AutoETS.

    .venv/bin/python bench/mixed.py [--seed 7] [--out bench/results]

86 series of the kinds issue 46's check holds, the last h of each held out: daily with a weekly season (additive,
and multiplicative with a multiplicative error), monthly with a yearly season (the same two, the additive one damped),
damped trends, AR(2), random walks, and real series shipped with statsmodels (co2, nile, sunspots, macrodata's realgdp,
cpi, unemp and realcons, elnino). pgad: one pgad.train per frequency (days, months, quarters, years; the season's
length from the dates) and one pgad.forecast of each, at 95%; AutoETS(season_length=m) series by series. Reported: the
mean MASE of the held-out tails (scaled by the seasonal naive's in-sample MAE; m = 1 where the history is shorter than
two seasons) and the 95% intervals' coverage, over all and per kind, and the seconds each took. Timings are reported,
never asserted.
"""
import argparse
import datetime
import os
import sys
import time
import warnings

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from optimum import Cluster  # noqa: E402


def ets(rng, n, trend, season, m, error, sigma, level=100.0, slope=0.3, phi=0.9, amplitude=0.2):
    """A series of ETS(error, trend, season, m): α 0.3, β 0.02, γ 0.1."""
    b = slope
    pattern = np.sin(2 * np.pi * np.arange(m) / m)
    seasons = [] if season == 'N' else list(1 + amplitude * pattern if season == 'M' else 10 * amplitude * pattern)
    y = np.empty(n)
    for t in range(n):
        part = level + {'N': 0.0, 'A': b, 'Ad': phi * b}[trend]
        s1 = seasons[0] if seasons else 0.0
        mean = part + s1 if season == 'A' else part * s1 if season == 'M' else part
        e = sigma * rng.normal() * (mean if error == 'M' else 1.0)
        y[t] = mean + e
        per = s1 if season == 'M' else 1.0
        level = part + 0.3 * e / per
        b = {'N': 0.0, 'A': b, 'Ad': phi * b}[trend] + 0.02 * e / per
        if seasons:
            seasons = seasons[1:] + [s1 + 0.1 * e / (part if season == 'M' else 1.0)]
    return y


def collection(seed):
    """[(kind, frequency 'D', 'M', 'Q' or 'Y', season length, y, held-out rows)]."""
    import statsmodels.api as sm
    rng = np.random.default_rng(seed)
    found = [('daily-A', 'D', 7, ets(rng, 400, 'A', 'A', 7, 'A', 2.0), 14) for _ in range(12)]
    found += [('daily-M', 'D', 7, ets(rng, 400, 'N', 'M', 7, 'M', 0.04), 14) for _ in range(12)]
    found += [('monthly-M', 'M', 12, ets(rng, 144, 'A', 'M', 12, 'M', 0.03), 18) for _ in range(12)]
    found += [('monthly-A', 'M', 12, ets(rng, 144, 'Ad', 'A', 12, 'A', 1.5), 18) for _ in range(12)]
    found += [('damped', 'M', 12, ets(rng, 120, 'Ad', 'N', 12, 'A', 1.0, slope=2.0), 12) for _ in range(10)]
    for _ in range(10):
        y, e = np.zeros(300), rng.normal(size=300)
        for t in range(2, 300):
            y[t] = 0.6 * y[t - 1] - 0.2 * y[t - 2] + e[t]
        found.append(('ar', 'D', 7, y + 50, 14))
    found += [('walk', 'D', 7, 100 + np.cumsum(rng.normal(size=300)), 14) for _ in range(10)]
    co2 = sm.datasets.co2.load_pandas().data['co2'].resample('MS').mean().ffill().to_numpy()[-240:]
    found.append(('real', 'M', 12, co2, 24))
    found.append(('real', 'Y', 1, sm.datasets.nile.load_pandas().data['volume'].to_numpy().astype(float), 10))
    found.append(('real', 'Y', 1, sm.datasets.sunspots.load_pandas().data['SUNACTIVITY'].to_numpy()[-150:] + 1, 10))
    macro = sm.datasets.macrodata.load_pandas().data
    found += [('real', 'Q', 4, macro[c].to_numpy().astype(float), 8) for c in ('realgdp', 'cpi', 'unemp', 'realcons')]
    elnino = sm.datasets.elnino.load_pandas().data.iloc[:, 1:13].to_numpy().ravel()
    found.append(('real', 'M', 12, elnino[-240:], 24))
    return found


def dates(frequency, n):
    start = datetime.date(2000, 1, 1)
    if frequency == 'D':
        return [start + datetime.timedelta(days=t) for t in range(n)]
    step = {'M': 1, 'Q': 3, 'Y': 12}[frequency]
    return [datetime.date(2000 + (t * step) // 12, (t * step) % 12 + 1, 1) for t in range(n)]


def mase(actual, forecast, history, m):
    m = m if len(history) > 2 * m else 1
    return float(np.mean(np.abs(actual - forecast)) / np.mean(np.abs(history[m:] - history[:-m])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results'))
    parser.add_argument('--per-series', action='store_true', help="each series' MASE by contender, in mixed.csv")
    args = parser.parse_args(argv)
    import pandas as pd
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS
    warnings.filterwarnings('ignore')
    series = collection(args.seed)
    forecasts, seconds = {}, {}
    with Cluster() as cluster, psycopg.connect(cluster.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute("SET pgad.publish_data_values = 'on'")
        db.execute('CREATE TABLE mixed (sid int, day date, y float8)')
        with db.cursor().copy('COPY mixed (sid, day, y) FROM STDIN') as copy:
            for k, (_, frequency, _, y, h) in enumerate(series):
                for d, v in zip(dates(frequency, len(y) - h), y[:-h]):
                    copy.write_row((k, d, float(v)))
        for family in ('auto', 'auto(A)'):
            began, out = time.perf_counter(), {}
            for frequency in ('D', 'M', 'Q', 'Y'):
                ids = [k for k, s in enumerate(series) if s[1] == frequency]
                most = max(series[k][4] for k in ids)
                db.execute("SELECT count(*) FROM pgad.train('mixed', %s, 'squared', %s, NULL, order_by => 'day', "
                           "group_by => 'sid')", [family, f'SELECT sid, day, y FROM mixed WHERE sid = ANY '
                                                          f'(ARRAY{ids})'])
                for sid, step, value, lower, upper in db.execute(
                        "SELECT (group_key->>'sid')::int, step, value, lower, upper FROM pgad.forecast('mixed', %s)",
                        [most]):
                    out.setdefault(sid, {})[step] = (value, lower, upper)
            seconds[f"pgad '{family}'"] = time.perf_counter() - began
            forecasts[f"pgad '{family}'"] = {k: np.array([v[s] for s in sorted(v)])[:series[k][4]]
                                             for k, v in out.items()}
    began, out = time.perf_counter(), {}
    for k, (_, _, m, y, h) in enumerate(series):
        frame = pd.DataFrame({'unique_id': 0, 'ds': np.arange(len(y) - h), 'y': y[:-h]})
        found = StatsForecast(models=[AutoETS(season_length=m)], freq=1).forecast(df=frame, h=h, level=[95])
        out[k] = found[['AutoETS', 'AutoETS-lo-95', 'AutoETS-hi-95']].to_numpy()
    seconds['statsforecast AutoETS'], forecasts['statsforecast AutoETS'] = time.perf_counter() - began, out
    kinds = list(dict.fromkeys(s[0] for s in series))
    lines = [f'{len(series)} series of {len(kinds)} kinds (issue 46), the last values held out: mean MASE / 95% '
             'coverage', '', '| contender | seconds | all | ' + ' | '.join(kinds) + ' |',
             '|---|---:|---:|' + '---:|' * len(kinds)]
    each = {}  # contender: each series' MASE, in order
    for name, found in forecasts.items():
        scores = {}
        for k, (kind, _, m, y, h) in enumerate(series):
            f = found[k]
            each.setdefault(name, []).append(mase(y[-h:], f[:, 0], y[:-h], m))
            scores.setdefault(kind, []).append((each[name][-1],
                                                float(np.mean((y[-h:] >= f[:, 1]) & (y[-h:] <= f[:, 2])))))
        every = [v for each in scores.values() for v in each]
        cells = [f'{np.mean([a for a, _ in v]):.3f} / {np.mean([b for _, b in v]):.3f}'
                 for v in [every, *scores.values()]]
        lines.append(f'| {name} | {seconds[name]:.1f} | ' + ' | '.join(cells) + ' |')
    report = '\n'.join(lines)
    print(report, flush=True)
    os.makedirs(args.out, exist_ok=True)
    if args.per_series:
        rows = ['series,kind,' + ','.join(each)] + [f'{k},{s[0]},' + ','.join(f'{v[k]:.4f}' for v in each.values())
                                                    for k, s in enumerate(series)]
        with open(os.path.join(args.out, 'mixed.csv'), 'w') as f:
            f.write('\n'.join(rows) + '\n')
    with open(os.path.join(args.out, 'mixed.md'), 'w') as f:
        f.write(f'`.venv/bin/python bench/mixed.py --seed {args.seed}`, '
                f'{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}\n\n{report}\n')


if __name__ == '__main__':
    main()
