"""make bench, time to optimum (issue 35): pgad.train with only its required arguments, on raw-unit tables, against
export + statsmodels and export + scikit-learn on the same rows, and against another installation's pgad.

    .venv/bin/python bench/optimum.py [--rows 1000000] [--repeats 3] [--pgad-rounds 3] [--baseline PREFIX] [--out DIR]

Two tables, made in NumPy with a fixed seed (--seed) and copied in with COPY (FORMAT BINARY), so that every cluster
holds the same rows:
  houses  y (the price), sqft 500–5,000, lot 600–100,000, year 1900–2020, bedrooms 1–8, distance 0.5–50 (km):
          squared loss, λ(d, w) w.sqft*d.sqft + w.lot*d.lot + w.year*d.year + w.bedrooms*d.bedrooms
                                + w.distance*d.distance + w.b
  cancer  y (0 or 1) and six breast-cancer-like features of mixed scale: radius ~14, texture ~19, perimeter ~90,
          area ~700, smoothness ~0.1, concave_points ~0.05: logistic loss, the same linear form
The contenders, each timed end to end from this process:
  pgad (this tree)  pgad.train(name, model, loss, table, zero weights) on the cluster this script starts, with the
                    PostgreSQL and pgad on PATH (what `make install` installed): only the required arguments
  pgad (baseline)   the same call on a second throwaway cluster run from --baseline PREFIX, a PostgreSQL
                    installation with another pgad in it (tools/baseline.sh builds one: 0.13.0 by default)
  export            COPY (SELECT …) TO STDOUT (FORMAT BINARY) through psycopg, parsed into numpy (bench/run.py)
  statsmodels       export + OLS(y, X).fit() (pinv) / Logit(y, X).fit() (Newton, its defaults): the optimum
  scikit-learn      export + LinearRegression() / LogisticRegression(C=inf, …): C=inf is 1.9's spelling of
                    penalty=None; the default solver lbfgs with max_iter=10000, tol=1e-10, and newton-cholesky
                    with tol=1e-10
For every contender: the objective (the mean squared error, the mean log loss, computed here in float64 on the
exported rows) relative to statsmodels' (excess = f/f* - 1), the largest relative weight error against
statsmodels' weights, and whether it says it converged (pgad.models.converged and gradient_norm where the
installed pgad has those columns; statsmodels' mle_retvals; scikit-learn's n_iter_ < max_iter). The pgad calls
run in one connection to each cluster after one untimed call on 1,000 rows (imports, the kernel's compile), and the
fits after one untimed fit of 1,000 rows (imports). Every figure is the best of --repeats, the contenders
interleaved (the median beside it); pgad's calls, cheap beside the fits, run --pgad-rounds times a repeat (the
installations alternating), so that the two pgads are compared on more runs. Output: a table on stdout,
bench/results/optimum.md and optimum.json (with every run's time). Timings are reported, never asserted.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import sys
import time
import types
import warnings

import numpy as np
import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pgad.throwaway import Cluster  # noqa: E402
import run  # noqa: E402  (bench/run.py, beside this file: its parser of COPY's binary format)

run.np = np  # run.py imports numpy in its main()

HOUSES = ['sqft', 'lot', 'year', 'bedrooms', 'distance']
CANCER = ['radius', 'texture', 'perimeter', 'area', 'smoothness', 'concave_points']
BASELINE_HOW = ('bash tools/baseline.sh fa02f1d /opt/pg-bench-old (as root, under a minute), then '
                '--baseline /opt/pg-bench-old (make bench OPTIMUM_ARGS=\'--baseline /opt/pg-bench-old\')')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rows', type=int, default=1_000_000, help='rows of each table (1,000,000)')
    p.add_argument('--repeats', type=int, default=3, help='runs of each contender; the fastest is kept (3)')
    p.add_argument('--pgad-rounds', type=int, default=3,
                   help="pgad's calls a repeat, interleaved: pgad's figures are the best of repeats × rounds (3)")
    p.add_argument('--seed', type=int, default=35)
    p.add_argument('--baseline', metavar='PREFIX',
                   help='a PostgreSQL installation with another pgad (tools/baseline.sh); left out: no baseline')
    p.add_argument('--losses', default='squared,logistic', help='which tables (squared,logistic)')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'), help='results folder (bench/results)')
    return p.parse_args(argv)


# --- the data ---------------------------------------------------------------------------------------------------------
def houses(n, rng):
    sqft = rng.uniform(500, 5000, n).round()
    lot = np.clip(rng.lognormal(np.log(8000), 0.8, n), 600, 1e5).round()
    year = rng.integers(1900, 2021, n).astype(np.float64)
    bedrooms = np.clip(np.round(sqft / 800 + rng.normal(0, 0.7, n)), 1, 8)
    distance = rng.uniform(0.5, 50, n).round(2)
    y = (-600_000 + 150 * sqft + 0.8 * lot + 375 * year + 8000 * bedrooms - 2500 * distance
         + rng.normal(0, 40_000, n)).round()
    return {'y': y, 'sqft': sqft, 'lot': lot, 'year': year, 'bedrooms': bedrooms, 'distance': distance}


def cancer(n, rng):
    radius = np.clip(rng.normal(14.1, 3.5, n), 6.5, 28)
    texture = np.clip(rng.normal(19.3, 4.3, n), 9.7, 39.3)
    perimeter = 6.55 * radius + rng.normal(0, 2.5, n)
    area = 3.2 * radius ** 2 + rng.normal(0, 40, n)
    smoothness = np.clip(rng.normal(0.096, 0.014, n), 0.05, 0.165)
    concave = np.clip(0.049 + 0.006 * (radius - 14.1) + rng.normal(0, 0.03, n), 0, 0.2)
    z = (1.2 * (texture - 19.3) / 4.3 + 3.0 * (area - 650) / 350 + 1.0 * (smoothness - 0.096) / 0.014
         + 2.0 * (concave - 0.049) / 0.039 - 0.6)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float64)
    return {'y': y, 'radius': radius, 'texture': texture, 'perimeter': perimeter, 'area': area,
            'smoothness': smoothness, 'concave_points': concave}


TABLES = {'squared': ('houses', HOUSES, houses), 'logistic': ('cancer', CANCER, cancer)}


def copy_in(db, table, columns):
    """CREATE TABLE table and fill it from {column: float64 array} with one COPY (FORMAT BINARY): a row is int16
    field count, then per field int32 length 8 and the big-endian float8."""
    names = list(columns)
    db.execute(f'CREATE TABLE {table} ({", ".join(f"{c} float8" for c in names)})')
    n = len(columns[names[0]])
    rows = np.empty(n, np.dtype([('count', '>i2')] + [f for c in names for f in ((f'{c}_len', '>i4'), (c, '>f8'))]))
    rows['count'] = len(names)
    for c in names:
        rows[f'{c}_len'] = 8
        rows[c] = columns[c]
    data = memoryview(run.COPY_SIGNATURE + bytes(8) + rows.tobytes() + b'\xff\xff')
    with db.cursor().copy(f'COPY {table} ({", ".join(names)}) FROM STDIN (FORMAT BINARY)') as copy:
        for start in range(0, len(data), 1 << 23):
            copy.write(data[start:start + (1 << 23)])
    db.execute(f'VACUUM ANALYZE {table}')


# --- the contenders -------------------------------------------------------------------------------------------------
def model(features):
    return 'λ(d, w) ' + ' + '.join(f'w.{f}*d.{f}' for f in features) + ' + w.b'


class Pgad:
    """pgad.train with only the required arguments, in one connection to one cluster."""

    def __init__(self, where, cluster):
        self.db = psycopg.connect(cluster.conninfo(), autocommit=True)
        self.notices = []
        self.db.add_notice_handler(lambda d: self.notices.append(f'{d.severity}: {d.message_primary}'))
        self.db.execute('CREATE EXTENSION pgad CASCADE')
        self.version = self.db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgad'").fetchone()[0]
        self.columns = [r[0] for r in self.db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'pgad.models'::regclass AND NOT attisdropped "
            "AND attname IN ('converged', 'gradient_norm') ORDER BY attnum")]
        self.label = f'pgad {self.version} ({where}): defaults'

    def train(self, loss, table, features, data=None):
        start = '{' + ', '.join(f'"{f}": 0' for f in features + ['b']) + '}'
        extra = ''.join(f', {c}' for c in self.columns)
        self.notices.clear()
        began = time.perf_counter()
        row = self.db.execute(f'SELECT weights, final_loss, iterations{extra} FROM pgad.train(%s, %s, %s, %s, %s)',
                              (f'optimum_{table}', model(features), loss, data or table, start)).fetchone()
        took = time.perf_counter() - began
        weights = np.array([row[0][f] for f in features + ['b']])
        found = {'iterations': row[2], 'final_loss': row[1], 'notices': list(self.notices)}
        found.update(zip(self.columns, row[3:]))
        return took, weights, found

    def close(self):
        self.db.close()


def export(db, table, features):
    X, y = run.export(db, types.SimpleNamespace(xs=features, table=table))
    return np.column_stack([X, np.ones(len(y))]), y


def statsmodels_fit(loss, X, y):
    import statsmodels.api as sm
    if loss == 'squared':
        return sm.OLS(y, X).fit().params, {'converged': 'direct (pinv)'}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = sm.Logit(y, X).fit(disp=0)
    return result.params, {'converged': bool(result.mle_retvals['converged']),
                           'iterations': int(result.mle_retvals['iterations']),
                           'notices': [str(w.message) for w in caught]}


def sklearn_fit(loss, X, y, solver):
    from sklearn.linear_model import LinearRegression, LogisticRegression
    if loss == 'squared':
        fit = LinearRegression(fit_intercept=False).fit(X, y)
        return fit.coef_, {'converged': 'direct (lstsq)'}
    max_iter = 10_000 if solver == 'lbfgs' else 1000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        fit = LogisticRegression(C=np.inf, solver=solver, max_iter=max_iter, tol=1e-10,
                                 fit_intercept=False).fit(X, y)
    iterations = int(np.max(fit.n_iter_))
    return fit.coef_.ravel(), {'converged': iterations < max_iter, 'iterations': iterations,
                               'notices': [str(w.message).split('\n')[0] for w in caught]}


def objective(loss, X, y, w):
    z = X @ w
    if loss == 'squared':
        return float(np.mean((z - y) ** 2))
    return float(np.mean(np.logaddexp(0, z) - y * z))


# --- one table ------------------------------------------------------------------------------------------------------
def measure(loss, pgads, repeats, pgad_rounds):
    """Every contender on loss's table, interleaved, best of repeats (pgad's of repeats × pgad_rounds):
    {contender: {'s': …, 'weights': …, …}}."""
    table, features, _ = TABLES[loss]
    for p in pgads:  # imports, the kernel's compile: not timed
        p.train(loss, table, features, data=f'SELECT * FROM {table} LIMIT 1000')
    fitters = {'statsmodels': lambda X, y: statsmodels_fit(loss, X, y),
               'scikit-learn': lambda X, y: sklearn_fit(loss, X, y, 'lbfgs')}
    if loss == 'logistic':
        fitters['scikit-learn newton-cholesky'] = lambda X, y: sklearn_fit(loss, X, y, 'newton-cholesky')
    X, y = export(pgads[0].db, f'(SELECT * FROM {table} LIMIT 1000) AS sample', features)
    for fit in fitters.values():  # imports: not timed
        fit(X, y)
    results = {}

    def keep(name, seconds, weights, found, fit_s=None):
        best = results.get(name)
        runs = (best or {}).get('runs', []) + [seconds]
        if best is None or seconds < best['s']:
            results[name] = {'s': seconds, 'fit_s': fit_s, 'weights': weights, **found}
        results[name]['runs'] = runs

    for _ in range(repeats):
        for _ in range(pgad_rounds):
            for p in pgads:
                took, weights, found = p.train(loss, table, features)
                keep(p.label, took, weights, found)
        began = time.perf_counter()
        X, y = export(pgads[0].db, table, features)
        exported = time.perf_counter() - began
        keep('export', exported, None, {})
        for name, fit in fitters.items():
            began = time.perf_counter()
            weights, found = fit(X, y)
            took = time.perf_counter() - began
            keep(f'export + {name}', exported + took, np.asarray(weights, float), found, fit_s=took)
    optimum = results['export + statsmodels']['weights']
    best = objective(loss, X, y, optimum)
    for r in results.values():
        if r['weights'] is not None:
            r['objective'] = objective(loss, X, y, r['weights'])
            r['excess'] = r['objective'] / best - 1
            errors = np.abs(r['weights'] - optimum) / np.abs(optimum)
            r['weight_error'], r['worst_weight'] = float(np.max(errors)), (features + ['b'])[int(np.argmax(errors))]
            r['weights'] = dict(zip(features + ['b'], r['weights'].tolist()))
    return results


def converged(r):
    if 'converged' not in r:
        return '—'
    text = 'NULL' if r['converged'] is None else str(r['converged']).lower() if isinstance(r['converged'], bool) \
        else r['converged']
    if r.get('gradient_norm') is not None:
        text += f' (gradient_norm {r["gradient_norm"]:.2g})'
    return text


def table_md(loss, results, reference, repeats, rounds):
    lines = [f'| {loss}: method | s, best / median of {repeats} (pgad: of {repeats * rounds}) | '
             f'× {reference.split(":")[0]} '
             '| objective excess | max weight error | iterations | converged |', '|---|---:|---:|---:|---:|---:|---|']
    for name, r in results.items():
        s = f'{r["s"]:.2f}' + (f' / {np.median(r["runs"]):.2f}' if len(r['runs']) > 1 else '')
        s += f' (fit {r["fit_s"]:.2f})' if r.get('fit_s') is not None else ''
        excess = f'{r["excess"]:.2g}' if 'excess' in r else ''
        error = f'{r["weight_error"]:.2g}' if 'weight_error' in r else ''
        error += f' ({r["worst_weight"]})' if r.get('weight_error') else ''
        lines.append(f'| {name} | {s} | {r["s"] / results[reference]["s"]:.2f}× | {excess} | {error} | '
                     f'{r.get("iterations", "")} | {converged(r)} |')
    return '\n'.join(lines)


def baseline_cluster(prefix):
    found = sorted(glob.glob(os.path.join(prefix, 'usr/lib/postgresql/*/bin/postgres')))
    if not found:
        raise SystemExit(f'optimum.py: no PostgreSQL under {prefix} (usr/lib/postgresql/*/bin/postgres); '
                         f'build one with {BASELINE_HOW}')
    bindir = os.path.dirname(found[-1])
    return Cluster(initdb=os.path.join(bindir, 'initdb'), postgres=os.path.join(bindir, 'postgres'))


def main(argv=None):
    args = parse_args(argv)
    losses = args.losses.split(',')
    started = time.perf_counter()
    if not args.baseline:
        print(f'optimum.py: no baseline pgad; to time one beside this tree\'s: {BASELINE_HOW}', flush=True)
    clusters, pgads = [], []
    try:
        clusters.append(Cluster())
        pgads.append(Pgad('this tree', clusters[0]))
        if args.baseline:
            clusters.append(baseline_cluster(args.baseline))
            pgads.append(Pgad(f'baseline {args.baseline}', clusters[1]))
        rng = np.random.default_rng(args.seed)
        for loss in losses:
            table, _, make = TABLES[loss]
            columns = make(args.rows, rng)
            for p in pgads:
                copy_in(p.db, table, columns)
        print(f'{args.rows:,} rows a table; seconds, best of {args.repeats}, interleaved; excess = objective / '
              "statsmodels' - 1; weight error = max |w - w*| / |w*|", flush=True)
        report = {}
        for loss in losses:
            report[loss] = measure(loss, pgads, args.repeats, args.pgad_rounds)
            print(table_md(loss, report[loss], pgads[0].label, args.repeats, args.pgad_rounds) + '\n', flush=True)
            for name, r in report[loss].items():  # pgad's WARNINGs, statsmodels' and scikit-learn's warnings
                for notice in dict.fromkeys(n for n in r.get('notices', []) if not n.startswith(('NOTICE', 'INFO'))):
                    print(f'  {name}: {notice}')
    finally:
        for p in pgads:
            p.close()
        for c in clusters:
            c.stop()
    meta = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            'command': ' '.join([os.path.relpath(sys.executable, ROOT), 'bench/optimum.py', *sys.argv[1:]]),
            'rows': args.rows, 'repeats': args.repeats, 'pgad_rounds': args.pgad_rounds, 'seed': args.seed,
            'baseline': args.baseline,
            'versions': {p.label: p.version for p in pgads}, 'cpu': run.machine(), 'cores': os.cpu_count(),
            'python': platform.python_version(), 'seconds': round(time.perf_counter() - started, 1)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'optimum.json'), 'w') as f:
        json.dump({'meta': meta, 'results': report}, f, indent=1, default=str)
    with open(os.path.join(args.out, 'optimum.md'), 'w') as f:
        f.write(f'`{meta["command"]}`, {meta["date"]}, {meta["cpu"]} × {meta["cores"]}\n\n')
        f.write('\n\n'.join(table_md(loss, report[loss], pgads[0].label, args.repeats, args.pgad_rounds)
                              for loss in losses) + '\n')
    print(f'{meta["seconds"]:.0f} s in all; bench/results/optimum.{{md,json}}')


if __name__ == '__main__':
    main()
