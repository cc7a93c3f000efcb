"""Where pgad's load time goes: ways of turning P+1 float8 columns into numpy arrays inside the server, timed side by
side on one throwaway cluster, against one plain scan of the same table.

    .venv/bin/python bench/load.py [--rows 1000000] [--features 2 8 32]

Each way runs in a PL/Python function (the path pgad's loader takes: one query through SPI, then numpy), best of 3:
  scan            SELECT sum(y + x1 + …): the yardstick
  send only       sum(length(float8send(y)) + …): the send functions alone, no bytes kept
  pgad            string_agg(float8send(y) || float8send(x1) || …): pgad's loader, then the columns apart
  concat only     sum(length(float8send(y) || …)): pgad's per-row bytes, not aggregated
  per column      string_agg(float8send(y)), string_agg(float8send(x1)), …: one aggregate per column
  row array       string_agg(array_send(ARRAY[y, x1, …])): one array per row
  array_agg       array_send(array_agg(y)), …: one array per column
  pgad.loss       the whole pgad.loss call on the linear loss (its load, one evaluation)
  chunked         the same with SET pgad.load_chunk_rows = 65536: the fallback for data past 1 GB
Timings are printed, never asserted.
"""
import argparse
import os
import sys

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

WAYS = ['scan', 'send only', 'concat only', 'pgad', 'per column', 'row array', 'array_agg', 'pgad.loss', 'chunked']

# The queries are built from the fixed column names y, x1..xP only (no user text).
FUNCTION = r'''
CREATE FUNCTION load_way(way text, tbl text, p int) RETURNS float8 LANGUAGE plpython3u AS $$
import time
plpy.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # a first pgad call puts its environment on sys.path
import numpy as np
cols = ['y'] + [f'x{i}' for i in range(1, p + 1)]
send = [f'float8send({c})' for c in cols]
plpy.execute('SET pgad.load_chunk_rows = 65536' if way == 'chunked' else 'RESET pgad.load_chunk_rows')
start = time.perf_counter()
if way == 'scan':
    plpy.execute(f"SELECT sum({' + '.join(cols)}) FROM {tbl}")
elif way == 'send only':
    plpy.execute(f"SELECT sum({' + '.join(f'length({s})' for s in send)}) FROM {tbl}")
elif way == 'concat only':
    plpy.execute(f"SELECT sum(length({' || '.join(send)})) FROM {tbl}")
elif way == 'pgad':
    row = plpy.execute(f"SELECT string_agg({' || '.join(send)}, ''::bytea) AS b FROM {tbl}")[0]
    flat = np.frombuffer(row['b'], '>f8').reshape(-1, len(cols))
    [np.ascontiguousarray(flat[:, k], dtype=np.float64) for k in range(len(cols))]
elif way == 'per column':
    row = plpy.execute('SELECT ' + ', '.join(f"string_agg({s}, ''::bytea) AS c{k}" for k, s in enumerate(send)) +
                       f' FROM {tbl}')[0]
    [np.frombuffer(row[f'c{k}'], '>f8').astype(np.float64) for k in range(len(cols))]
elif way == 'row array':
    row = plpy.execute(f"SELECT string_agg(array_send(ARRAY[{', '.join(cols)}]), ''::bytea) AS b FROM {tbl}")[0]
    item = [('length', '>i4'), ('value', '>f8')]
    rows = np.frombuffer(row['b'], [('header', 'V20'), *[(f'c{k}', item) for k in range(len(cols))]])
    [rows[f'c{k}']['value'].astype(np.float64) for k in range(len(cols))]
elif way == 'array_agg':
    row = plpy.execute('SELECT ' + ', '.join(f'array_send(array_agg({c})) AS c{k}' for k, c in enumerate(cols)) +
                       f' FROM {tbl}')[0]
    item = np.dtype([('length', '>i4'), ('value', '>f8')])
    [np.frombuffer(row[f'c{k}'], item, offset=20)['value'].astype(np.float64) for k in range(len(cols))]
elif way in ('pgad.loss', 'chunked'):
    loss = 'λ(d, w) (' + ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' - d.y)^2'
    weights = '{' + ', '.join(f'"w{i}": 0' for i in range(1, p + 1)) + '}'
    plpy.execute(plpy.prepare('SELECT pgad.loss($1, $2, $3::jsonb)', ['text', 'text', 'text']), [loss, tbl, weights])
elapsed = time.perf_counter() - start
plpy.execute('RESET pgad.load_chunk_rows')
return elapsed
$$;
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8, 32])
    args = parser.parse_args()
    with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute(FUNCTION)
        print(f'{args.rows:,} rows; ms, best of 3; ratio to one scan')
        print(f"{'P':>3} " + ''.join(f'{w:>15}' for w in WAYS))
        for p in args.features:
            table = f'load_p{p}'
            xs = ', '.join(f'random()*2 - 1 AS x{i}' for i in range(1, p + 1))
            db.execute(f'CREATE TABLE {table} AS SELECT random() AS y, {xs} FROM generate_series(1, {args.rows})')
            db.execute(f'VACUUM ANALYZE {table}')
            ms = {w: 1e3 * min(db.execute('SELECT load_way(%s, %s, %s)', (w, table, p)).fetchone()[0]
                               for _ in range(3)) for w in WAYS}
            print(f'{p:>3} ' + ''.join(f'{ms[w]:>8.0f} ({ms[w] / ms["scan"]:4.1f})' for w in WAYS), flush=True)
            db.execute(f'DROP TABLE {table}')


if __name__ == '__main__':
    main()
