"""How many times over a pgad call holds its data: the growth of the backend's peak resident memory (VmHWM in
/proc/<pid>/status) over one call, divided by the data's packed bytes (rows × columns × 8), on one throwaway
cluster. pgad.memory_limit charges a call 4 times its packed bytes (extension/pgad.h's PACK_COPIES); this checks
that figure.

    .venv/bin/python bench/memory.py [--rows 2097152 2097153]
    .venv/bin/python bench/memory.py --bounds

The data is generate_series in the data query (no table, so no shared buffers in the count), two float8 columns,
serial plans. Rows 256·2^k fill pgad.pack's state exactly; one row more doubles it, its worst case. Each call runs
on a new connection after a small call of the same kind, so imports and compiled kernels are not counted. Reads
/proc of the server's processes: run it as root or as the server's OS user.

--bounds measures what is not the data (docs/security.md, "Memory"): a million weights the lambda does not read, as
a vector and as a 1000×1000 matrix, given as a jsonb literal (PostgreSQL's own reading of it included) and from a
table; and 10,000 rows in one-row chunks or groups under a 1 MB pgad.memory_limit. Each: the call's outcome, the
backend's peak growth over it, and how much more it holds after it.
"""
import json
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


def resident(pid, key):
    with open(f'/proc/{pid}/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(key))


START = "(SELECT weights FROM starts WHERE name = '{}')"
LOSS = "SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'SELECT x, y FROM pts{where}', {weights})"
GRADIENT = "SELECT pgad.gradient('λ(d, w) (w.a*d.x - d.y)^2', 'SELECT x, y FROM pts{where}', {weights}) IS NULL"
TRAIN = ("SELECT pgad.train('{name}', 'λ(d, w) w.a*d.x', 'squared', 'SELECT x, y FROM pts WHERE x <= 3', {weights}, "
         "iterations => 3) IS NULL")
SMALL_WHERE = ' WHERE x <= 10'
SMALL = "'{\"a\": 0.5, \"unused\": [0.25]}'"
LIMITED = ["SET pgad.memory_limit = '1MB'"]
BOUNDS = [  # (what, settings, the call, a small call of the same kind, the literal its %s stands for or None)
    *[(f'{call} of 1M unread numbers, {shape}, {source}', [], sql.format(where='', name='m', weights=weights),
       sql.format(where=SMALL_WHERE, name='s', weights=small), literal)
      for shape in ('vector', 'matrix')
      for source, weights, small, literal in (('literal', '%s', SMALL, shape),
                                              ('table', START.format(shape), START.format('small'), None))
      for call, sql in (('pgad.loss', LOSS), ('pgad.gradient', GRADIENT), ('pgad.train', TRAIN))],
    ('pgad.loss, 1-row chunks (as superuser)', LIMITED + ['SET pgad.load_chunk_rows = 1'],
     LOSS.format(where='', weights="'{\"a\": 0}'"), LOSS.format(where=SMALL_WHERE, weights="'{\"a\": 0}'"), None),
    ('pgad.pack, 10,000 hashed 1-row groups', LIMITED + ['SET enable_sort = off'],
     'SELECT sum(length(p)) FROM (SELECT pgad.pack(x) AS p FROM pts GROUP BY g) AS s',
     'SELECT sum(length(p)) FROM (SELECT pgad.pack(x) AS p FROM pts WHERE x <= 10 GROUP BY g) AS s', None),
    ('pgad.loss_agg, 10,000 hashed 1-row groups', LIMITED + ['SET enable_sort = off'],
     "SELECT sum(l) FROM (SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '{\"a\": 0}', p) AS l FROM pts AS p GROUP BY g) s",
     "SELECT sum(l) FROM (SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '{\"a\": 0}', p) AS l FROM pts AS p "
     "WHERE x <= 10 GROUP BY g) s", None),
    ('pgad.train, 10,000 1-row groups', LIMITED,
     "SELECT pgad.train('g', 'λ(d, w) w.a*d.x', 'squared', 'pts', '{\"a\": 0}', group_by => 'g') IS NULL",
     "SELECT pgad.train('h', 'λ(d, w) w.a*d.x', 'squared', 'SELECT * FROM pts WHERE x <= 10', '{\"a\": 0}', "
     "group_by => 'g') IS NULL", None),
]


def bounded(conninfo, settings, call, small, args):
    """(the call's outcome, the backend's peak growth over it, what it holds more after it), after small."""
    with psycopg.connect(conninfo, autocommit=True) as db:
        for setting in settings:
            db.execute(setting)
        pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
        try:
            db.execute(small)
        except psycopg.Error:
            pass
        with open(f'/proc/{pid}/clear_refs', 'w') as refs:
            refs.write('5')  # the peak back to the resident size
        start = resident(pid, 'VmRSS')
        try:
            db.execute(call, args)
            outcome = 'ok'
        except psycopg.Error as e:
            outcome = f'{e.diag.sqlstate} {e.diag.message_primary}'
        return outcome, resident(pid, 'VmHWM') - start, resident(pid, 'VmRSS') - start


def bounds(conninfo):
    literals = {'vector': json.dumps({'a': 0.5, 'unused': [0.25] * 1_000_000}),
                'matrix': json.dumps({'a': 0.5, 'unused': [[0.25] * 1000 for _ in range(1000)]})}
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute('CREATE TABLE pts AS SELECT x::float8 AS x, (2 * x + 1)::float8 AS y, x AS g '
                   'FROM generate_series(1, 10000) AS x')
        db.execute('ANALYZE pts')
        db.execute('CREATE TABLE starts (name text, weights jsonb)')
        db.execute(f"INSERT INTO starts VALUES ('small', {SMALL}), ('vector', %s), ('matrix', %s)",
                   (literals['vector'], literals['matrix']))
    print(f'{"call":58}{"outcome":66}{"peak":>9}{"after":>9}  (MB)')
    for what, settings, call, small, literal in BOUNDS:
        outcome, peak, after = bounded(conninfo, settings, call, small, (literals[literal],) if literal else None)
        print(f'{what:58}{outcome[:64]:66}{peak / (1 << 20):9.1f}{after / (1 << 20):9.1f}', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rows', type=int, nargs='+', default=[2097152, 2097153])
    parser.add_argument('--bounds', action='store_true', help='unread weights and small groups (docs/security.md)')
    args = parser.parse_args()
    with Cluster() as pg:
        conninfo = f'host=127.0.0.1 port={pg.dsn()["port"]} dbname=test user=postgres'
        with psycopg.connect(conninfo, autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
        if args.bounds:
            bounds(conninfo)
            return
        print(f'{"call":28}' + ''.join(f'{rows:>12,}' for rows in args.rows) + '   (peak growth / packed bytes)')
        for name, call in CALLS.items():
            print(f'{name:28}' + ''.join(f'{held(conninfo, call, rows) / (rows * 16):12.2f}' for rows in args.rows))


if __name__ == '__main__':
    main()
