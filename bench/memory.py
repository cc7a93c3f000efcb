"""How many times over a pgad call holds its data: the growth of the backend's peak resident memory (VmHWM in
/proc/<pid>/status) over one call, divided by the data's packed bytes (rows × columns × 8), on one throwaway
cluster. pgad.memory_limit charges a call 4 times its packed bytes (extension/pgad.c's PACK_COPIES); this checks
that figure.

    .venv/bin/python bench/memory.py [--rows 2097152 2097153]

The data is generate_series in the data query (no table, so no shared buffers in the count), two float8 columns,
serial plans. Rows 256·2^k fill pgad.pack's state exactly; one row more doubles it, its worst case. Each call runs
on a new connection after a small call of the same kind, so imports and compiled kernels are not counted. Reads
/proc of the server's processes: run it as root or as the server's OS user.
"""
import argparse
import os
import sys

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

LAMBDA = "'λ(d, w) (w.a*d.x - d.y)^2', {data}, '{{\"a\": 0}}'"
CALLS = {
    'pgad.gradient': "SELECT pgad.gradient(" + LAMBDA + ", backend => 'python')",
    'pgad.gradient_agg': "SELECT pgad.gradient_agg('λ(d, w) (w.a*d.x - d.y)^2', '{{\"a\": 0}}', t) "
                         "FROM ({query}) AS t",
    'pgad.train sgd': "SELECT pgad.train('m{n}', 'λ(d, w) w.a*d.x', 'squared', {data}, '{{\"a\": 0}}', "
                      "optimizer => 'sgd', learning_rate => 1e-15, iterations => 1, backend => 'python')",
    'pgad.train sgd standardize': "SELECT pgad.train('s{n}', 'λ(d, w) w.a*d.x', 'squared', {data}, '{{\"a\": 0}}', "
                                  "optimizer => 'sgd', iterations => 1, standardize => true, backend => 'python')",
}


def peak(pid):
    with open(f'/proc/{pid}/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith('VmHWM'))


def held(conninfo, call, rows):
    """The backend's peak growth over one call on rows rows, in bytes."""
    query = f'SELECT x::float8 AS x, (2 * x)::float8 AS y FROM generate_series(1, {rows}) AS x'
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute('SET max_parallel_workers_per_gather = 0')
        pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
        small = 'SELECT 1::float8 AS x, 2::float8 AS y'
        db.execute(call.format(data=f"'{small}'", query=small, n=f'w{rows}'))
        before = peak(pid)
        db.execute(call.format(data=f"'{query}'", query=query, n=rows))
        return peak(pid) - before


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rows', type=int, nargs='+', default=[2097152, 2097153])
    args = parser.parse_args()
    with Cluster() as pg:
        conninfo = f'host=127.0.0.1 port={pg.dsn()["port"]} dbname=test user=postgres'
        with psycopg.connect(conninfo, autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
        print(f'{"call":28}' + ''.join(f'{rows:>12,}' for rows in args.rows) + '   (peak growth / packed bytes)')
        for name, call in CALLS.items():
            print(f'{name:28}' + ''.join(f'{held(conninfo, call, rows) / (rows * 16):12.2f}' for rows in args.rows))


if __name__ == '__main__':
    main()
