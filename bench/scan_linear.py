"""A linear recurrence's gradient by the parallel scan (pgad/scan_linear.py) against the sequential reference
(issue 37): AR(7) — seven lag fields that shift, and the intercept — along one sequence of --rows rows.

    .venv/bin/python bench/scan_linear.py [--rows 1000000] [--reference-rows 10000] [--repeats 3] [--sql]

In process, no SQL, the contenders interleaved, best of --repeats:
  reference     sequences.gradient(…, parallel=False): the states forwards and the adjoints backwards a row at a time
                (each node a numpy call a row), timed on --reference-rows rows and scaled to --rows (it is linear in
                the rows)
  scan, n       sequences.gradient(…, parallel=True) on n threads (1 and 2): the maps of all rows in one numpy call a
                node, the blocked scan forwards and backwards; with the budget pgad.train gives it (64 MB: a chunk
                of rows is one piece, so a second thread has nothing to take) and with 8 times that (four pieces a
                chunk)
  np.sum        np.sum of the column: one numpy pass over the rows, the floor
With --sql, end to end on a throwaway cluster: the rows in a table (COPY), then pgad.train of the AR(7) by
conditional least squares (the first seven rows' loss masked by a column of the data query, as AutoReg drops
them), load included, against export + statsmodels AutoReg(y, 7).fit() on the same rows; the largest relative
difference of the parameters.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pgad import limits, scan_linear, sequences  # noqa: E402
from pgad.jit import threads  # noqa: E402
from pgad.models import sequence  # noqa: E402

P = 7
STATE = {'l1': {'start': '0', 'next': 'd.y'},
         **{f'l{k}': {'start': '0', 'next': f's.l{k - 1}'} for k in range(2, P + 1)}}
MODEL = 'λ(d, w, s) w.c + ' + ' + '.join(f'w.p{k}*s.l{k}' for k in range(1, P + 1))
WEIGHTS = {'c': 0.0, **{f'p{k}': 0.0 for k in range(1, P + 1)}}
MASKED = 'λ(p, d) d.m*(p - d.y)^2'  # conditional least squares: rows 1 … 7 have m = 0


def series(rows, seed=7):
    """An AR(7) process with a mean of 10."""
    rng = np.random.default_rng(seed)
    phi = np.array([0.35, 0.2, 0.1, -0.05, 0.1, 0.05, 0.1])
    from scipy.signal import lfilter
    y = lfilter([1.0], [1.0, *-phi], 1.0 + rng.normal(0, 1, rows + 200))
    return y[200:]


def best(f, repeats):
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        f()
        times.append(time.perf_counter() - began)
    return min(times)


def in_process(args):
    step = sequence.step_of(MODEL, 'squared', 'y', json.dumps(STATE), json.dumps(WEIGHTS), limits.DEFAULT,
                            1 << 30)[0]
    y = series(args.rows)
    w = np.linspace(0.05, 0.4, P + 1)
    whole = sequences.Sequences({'y': y}, np.array([0]), np.array([args.rows]))
    part = sequences.Sequences({'y': y[:args.reference_rows]}, np.array([0]), np.array([args.reference_rows]))
    times = {}
    def scan(budget):
        return lambda: sequences.gradient(step, whole, w, tile_bytes=budget, parallel=True)
    train, wide = sequences.TILE_BYTES, 8 * sequences.TILE_BYTES
    contenders = {'reference (scaled)': (1, lambda: sequences.gradient(step, part, w, parallel=False)),
                  'scan, 1 thread': (1, scan(train)), 'scan, 2 threads': (2, scan(train)),
                  f'scan, 1 thread, {wide >> 20} MB': (1, scan(wide)),
                  f'scan, 2 threads, {wide >> 20} MB': (2, scan(wide)),
                  'np.sum of the column': (1, lambda: np.sum(y))}
    for _ in range(args.repeats):
        for name, (n, f) in contenders.items():
            threads.on_count(lambda n=n: n)
            took = best(f, 1) * (args.rows / args.reference_rows if name.startswith('reference') else 1)
            times[name] = min(times.get(name, took), took)
    threads.on_count(None)
    one = sequences.gradient(step, whole, w, tile_bytes=wide, parallel=True)
    threads.on_count(lambda: 2)
    two = sequences.gradient(step, whole, w, tile_bytes=wide, parallel=True)
    threads.on_count(None)
    print(f'AR({P}) along one sequence of {args.rows:,} rows, time per gradient (best of {args.repeats}), '
          f'the budget {train >> 20} MB (pgad.train\'s: {scan_linear.PIECE_BLOCKS * scan_linear.BLOCK:,}-row pieces, '
          f'chunks of {scan_linear._Layout(step, whole, w, train, True).chunk:,} rows) unless said:')
    floor = times['np.sum of the column']
    for name, took in times.items():
        print(f'  {name:32s} {took:10.4f} s   {took / floor:9.1f}× np.sum')
    print(f'  1 and 2 threads give the same bits: {np.array_equal(one[1], two[1]) and np.array_equal(one[0], two[0])}')
    print(f'  a chunk at {wide >> 20} MB: {scan_linear._Layout(step, whole, w, wide, True).chunk:,} rows')


def sql(args):
    import psycopg
    import warnings
    from statsmodels.tsa.ar_model import AutoReg
    from pgad.throwaway import Cluster
    y = series(args.rows)
    cluster = Cluster()
    try:
        with psycopg.connect(cluster.conninfo(), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            db.execute('CREATE TABLE ar (t int, y float8)')
            with db.cursor().copy('COPY ar (t, y) FROM STDIN') as copy:
                for t, v in enumerate(y, 1):
                    copy.write_row((t, float(v)))
            db.execute('VACUUM ANALYZE ar')
            data = f'SELECT t, y, (t > {P})::int::float8 AS m FROM ar'
            began = time.perf_counter()
            row = db.execute('SELECT weights, iterations, converged FROM pgad.train(%s, %s, %s, %s, %s, '
                             "order_by => 't', state => %s)",
                             ['ar7', MODEL, MASKED, data, json.dumps(WEIGHTS), json.dumps(STATE)]).fetchone()
            took = time.perf_counter() - began
            began = time.perf_counter()
            exported = np.array([r[0] for r in db.execute('SELECT y FROM ar ORDER BY t')])
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                fit = AutoReg(exported, P).fit()
            statsmodels_took = time.perf_counter() - began
    finally:
        cluster.stop()
    found = np.array([row[0]['c'], *[row[0][f'p{k}'] for k in range(1, P + 1)]])
    worst = np.max(np.abs(found - fit.params) / np.abs(fit.params))
    print(f'SQL end to end, AR({P}) on a table of {args.rows:,} rows:')
    print(f'  pgad.train (load, {row[1]} iterations, converged {row[2]})  {took:8.2f} s')
    print(f'  export + statsmodels AutoReg({P}).fit()                    {statsmodels_took:8.2f} s')
    print(f'  largest relative difference of the {P + 1} parameters: {worst:.2e}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--reference-rows', type=int, default=10_000)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--sql', action='store_true', help='also pgad.train against statsmodels AutoReg, in SQL')
    args = parser.parse_args(argv)
    in_process(args)
    if args.sql:
        sql(args)


if __name__ == '__main__':
    main()
