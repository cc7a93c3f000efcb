"""Where pgad's load time goes: pgad.pack (the native packing aggregate), serial and with 2 parallel workers,
against pgad 0.3's string_agg load and one plain scan of the same table, timed side by side on one throwaway
cluster, with the whole pgad.loss and a 100-iteration pgad.gradient_descent, and the same two as aggregates.

    .venv/bin/python bench/load.py [--rows 1000000] [--features 2 8] [--repeats 3]

Each way runs in a PL/Python function (the path pgad's loader takes: one query through SPI, then numpy); the ways
are interleaved, and each figure is the best of the repeats. "∥2" is the same with max_parallel_workers_per_gather
= 2 (the planner's own choice of plan), the others run with it 0, the serial plan:
  scan            SELECT sum(y + x1 + …): the yardstick
  string_agg      string_agg(float8send(y) || float8send(x1) || …): pgad 0.3's load, then the columns apart
  pack            pgad.pack(y, x1, …): pgad's load, then the columns as numpy views
  pgad.loss       the whole pgad.loss call on the linear loss (its load, one evaluation)
  descent 100     pgad.gradient_descent of the linear loss, 100 iterations, llvm (its load, 100 kernel calls)
  chunked         pgad.loss with SET pgad.load_chunk_rows = 65536: the fallback for data past 1 GB
  whole row       SELECT count(t) FROM the table AS t: what the executor pays to make each row one value
  loss_agg        the aggregate pgad.loss_agg(loss, weights, t) FROM the table AS t: the same number as pgad.loss
  descent_agg 100 pgad.gradient_descent_agg(…, t, options) with descent 100's options
Timings are printed, never asserted.
"""
import argparse
import os
import sys

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

WAYS = ['scan', 'scan ∥2', 'string_agg', 'pack', 'pack ∥2', 'pgad.loss', 'pgad.loss ∥2', 'descent 100',
        'descent 100 ∥2', 'chunked', 'whole row', 'loss_agg', 'loss_agg ∥2', 'descent_agg 100', 'descent_agg 100 ∥2']

# The queries are built from the fixed column names y, x1..xP only (no user text).
FUNCTION = r'''
CREATE FUNCTION load_way(way text, tbl text, p int) RETURNS float8 LANGUAGE plpython3u AS $$
import time
plpy.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # a first pgad call puts its environment on sys.path
import numpy as np
cols = ['y'] + [f'x{i}' for i in range(1, p + 1)]
send = [f'float8send({c})' for c in cols]
loss = 'λ(d, w) (' + ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' - d.y)^2'
weights = '{' + ', '.join(f'"w{i}": 0' for i in range(1, p + 1)) + '}'
plpy.execute('SET pgad.load_chunk_rows = 65536' if way == 'chunked' else 'RESET pgad.load_chunk_rows')
plpy.execute('SET max_parallel_workers_per_gather = ' + ('2' if way.endswith('∥2') else '0'))
start = time.perf_counter()
if way == 'whole row':
    plpy.execute(f'SELECT count(t) FROM {tbl} AS t')
elif way.startswith('scan'):
    plpy.execute(f"SELECT sum({' + '.join(cols)}) FROM {tbl}")
elif way == 'string_agg':
    row = plpy.execute(f"SELECT string_agg({' || '.join(send)}, ''::bytea) AS b FROM {tbl}")[0]
    flat = np.frombuffer(row['b'], '>f8').reshape(-1, len(cols))
    [np.ascontiguousarray(flat[:, k], dtype=np.float64) for k in range(len(cols))]
elif way.startswith('pack'):
    b = plpy.execute(f"SELECT pgad.pack({', '.join(cols)}) AS b FROM {tbl}")[0]['b']
    n = (len(b) - 24) // (8 * len(cols))
    flat = np.frombuffer(b, np.float64, offset=24)
    [flat[k * n:(k + 1) * n] for k in range(len(cols))]
elif way.startswith('pgad.loss') or way == 'chunked':
    plpy.execute(plpy.prepare('SELECT pgad.loss($1, $2, $3::jsonb)', ['text', 'text', 'text']), [loss, tbl, weights])
elif way.startswith('descent 100'):
    plpy.execute(plpy.prepare("SELECT * FROM pgad.gradient_descent($1, $2, $3::jsonb, 0.01, 100, 'reverse', 'llvm')",
                              ['text', 'text', 'text']), [loss, tbl, weights])
elif way.startswith('loss_agg'):
    plpy.execute(plpy.prepare(f'SELECT pgad.loss_agg($1, $2::jsonb, t) FROM {tbl} AS t', ['text', 'text']),
                 [loss, weights])
elif way.startswith('descent_agg 100'):
    plpy.execute(plpy.prepare(f'SELECT pgad.gradient_descent_agg($1, $2::jsonb, t, $3::jsonb) FROM {tbl} AS t',
                              ['text', 'text', 'text']),
                 [loss, weights, '{"learning_rate": 0.01, "iterations": 100, "backend": "llvm"}'])
elapsed = time.perf_counter() - start
plpy.execute('RESET pgad.load_chunk_rows')
plpy.execute('RESET max_parallel_workers_per_gather')
return elapsed
$$;
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8])
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute(FUNCTION)
        print(f'{args.rows:,} rows; ms, best of {args.repeats}, interleaved; (ratio to one serial scan)')
        print(f"{'P':>3} " + ''.join(f'{w:>19}' for w in WAYS))
        for p in args.features:
            table = f'load_p{p}'
            xs = ', '.join(f'random()*2 - 1 AS x{i}' for i in range(1, p + 1))
            db.execute(f'CREATE TABLE {table} AS SELECT random() AS y, {xs} FROM generate_series(1, {args.rows})')
            db.execute(f'VACUUM ANALYZE {table}')
            db.execute('SELECT load_way(%s, %s, %s)', ('descent 100', table, p))  # compiles the kernel
            ms = {w: float('inf') for w in WAYS}
            for _ in range(args.repeats):
                for w in WAYS:
                    ms[w] = min(ms[w], 1e3 * db.execute('SELECT load_way(%s, %s, %s)', (w, table, p)).fetchone()[0])
            print(f'{p:>3} ' + ''.join(f'{ms[w]:>12.0f} ({ms[w] / ms["scan"]:4.1f})' for w in WAYS), flush=True)
            db.execute(f'DROP TABLE {table}')


if __name__ == '__main__':
    main()
