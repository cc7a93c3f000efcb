"""Issue 29's yardsticks: pgad's load and 100 iterations of gradient descent as multiples of one scan of the same
columns, on 1 and on 2 threads, with the memory-bandwidth floor, and end to end against export + PyTorch.

    .venv/bin/python bench/cores.py [--rows 1000000] [--features 2 8] [--repeats 5]

One throwaway cluster, default settings (the planner may scan in parallel), one session; every way is timed on the
client around one statement of that session (as psql's \\timing), the ways interleaved, each figure the best of the
repeats. For linear and logistic regression (bench/run.py's data sets) with P features and N rows:
  scan            SELECT sum(y + x1 + … + xP): one scan of the same columns, the yardstick
  load            pgad.loss of the loss: the load of P + 1 columns and one evaluation
  descent         pgad.gradient_descent, 100 iterations at learning rate 0.01 (load included)
  floor           pgad.gradient_descent of λ(d, w) w.a*(d.y + d.x1 + …), 100 iterations: a kernel that only reads
                  the same bytes; (floor − load) / 100 is the time one pass over the columns takes, the floor under
                  an iteration (its GB/s printed)
  torch           export through COPY (FORMAT BINARY) into numpy, then 100 iterations of PyTorch (bench/run.py's),
                  timed as the sum of the two
each pgad way with SET pgad.threads = 1 and = 2. Prints a table of ms and ratios; writes bench/results/cores.json.
Nothing is asserted.
"""
import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import psycopg

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'bench'))
import run  # noqa: E402  bench/run.py: the data sets, the export and the PyTorch trainer
from pgad.throwaway import Cluster  # noqa: E402

run.np = np
ITERATIONS = 100
THREADS = (1, 2)


def ways(ds):
    """{name: (SQL statement, pgad.threads or None)} for one data set; the SQL holds only bench-made names."""
    cols = ['y'] + ds.xs
    floor = 'λ(d, w) w.a*(' + ' + '.join(f'd.{c}' for c in cols) + ')'
    loss, start = ds.lam.replace("'", "''"), ds.start
    found = {'scan': (f'SELECT sum({" + ".join(cols)}) FROM {ds.table}', None)}
    for n in THREADS:
        found[f'load ×{n}'] = (f"SELECT pgad.loss('{loss}', '{ds.table}', '{start}')", n)
        found[f'descent ×{n}'] = (f"SELECT * FROM pgad.gradient_descent('{loss}', '{ds.table}', '{start}', 0.01, "
                                  f'{ITERATIONS})', n)
        found[f'floor load ×{n}'] = (f"SELECT pgad.loss('{floor}', '{ds.table}', '{{\"a\": 0}}')", n)
        found[f'floor ×{n}'] = (f"SELECT * FROM pgad.gradient_descent('{floor}', '{ds.table}', '{{\"a\": 0}}', "
                                f'1e-9, {ITERATIONS})', n)
    return found


def timed(db, sql, threads):
    if THREADS != (1,):  # a pgad with pgad.threads
        db.execute('RESET pgad.threads' if threads is None else f'SET pgad.threads = {int(threads)}')
    started = time.perf_counter()
    rows = db.execute(sql).fetchall()
    took = time.perf_counter() - started
    if 'gradient_descent' in sql and rows[0][2] != ITERATIONS:  # the fit's iterations: every way runs all 100
        sys.exit(f'bench: {sql} ran {rows[0][2]} iterations, not {ITERATIONS}')
    return took


def torch_end_to_end(db, ds):
    started = time.perf_counter()
    X, y = run.export(db, ds)
    exported = time.perf_counter() - started
    train = run.warmed(run.torch_trainer(X, y, ds.kind, 0.01))
    started = time.perf_counter()
    train(ITERATIONS)
    return exported + time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8])
    parser.add_argument('--losses', nargs='+', default=['linear', 'logistic'])
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--no-torch', action='store_true')
    args = parser.parse_args()
    results = []
    with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        cores = db.execute("SELECT current_setting('pgad.max_threads', true)").fetchone()[0]
        if cores is None:  # a pgad before pgad.threads: one thread
            global THREADS
            THREADS = (1,)
        print(f'{args.rows:,} rows; ms, best of {args.repeats}, interleaved, one session; (× one scan); '
              f'pgad.max_threads = {cores}, os.cpu_count() = {os.cpu_count()}', flush=True)
        for kind in args.losses:
            for p in args.features:
                ds = run.Dataset(kind, p, args.rows)
                db.execute(ds.create_sql())
                db.execute(f'VACUUM ANALYZE {ds.table}')
                todo = ways(ds)
                for sql, threads in todo.values():  # compiles the kernels, warms the pool and the cache
                    timed(db, sql, threads)
                ms = {name: float('inf') for name in todo}
                if not args.no_torch:
                    ms['torch'] = float('inf')
                for _ in range(args.repeats):
                    for name, (sql, threads) in todo.items():
                        ms[name] = min(ms[name], 1e3 * timed(db, sql, threads))
                    if not args.no_torch:
                        ms['torch'] = min(ms['torch'], 1e3 * torch_end_to_end(db, ds))
                if len(THREADS) > 1:
                    db.execute('RESET pgad.threads')
                scan = ms['scan']
                row = {'loss': kind, 'P': p, 'rows': args.rows, 'ms': ms,
                       'scans': {k: v / scan for k, v in ms.items()}}
                for n in THREADS:
                    per_pass = (ms[f'floor ×{n}'] - ms[f'floor load ×{n}']) / ITERATIONS
                    row[f'floor GB/s ×{n}'] = args.rows * (p + 1) * 8 / (per_pass * 1e-3) / 1e9 if per_pass > 0 else None
                best = f'descent ×{THREADS[-1]}'
                if len(THREADS) > 1:
                    row['threads 2 vs 1 (descent)'] = ms['descent ×1'] / ms['descent ×2']
                if 'torch' in ms:
                    row[f'torch / {best}'] = ms['torch'] / ms[best]
                results.append(row)
                print(f'\n{kind}, P = {p}:')
                for name, value in ms.items():
                    print(f'  {name:<16} {value:9.1f} ms  {value / scan:6.2f} scans')
                for key in row:
                    if 'GB/s' in key or ' vs ' in key or ' / ' in key:
                        print(f'  {key}: {row[key]:.2f}' if row[key] is not None else f'  {key}: -')
                sys.stdout.flush()
                db.execute(f'DROP TABLE {ds.table}')
    out = ROOT / 'bench' / 'results'
    out.mkdir(exist_ok=True)
    (out / 'cores.json').write_text(json.dumps(results, indent=1))


if __name__ == '__main__':
    main()
