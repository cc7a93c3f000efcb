"""A keyed training's load (issue 48): the keys found in the native load's own pass against a query a key column first.

    .venv/bin/python bench/keyed_load.py [--rows 1000000] [--users 200000] [--items 2000] [--repeats 3]
    .venv/bin/python bench/keyed_load.py --categorical [--users 5000] …

One throwaway cluster; a table of rows of user_id (users text keys), item_id (items text keys) and rating, in an
order unrelated to the keys. In the server, interleaved, each `repeats` times on a new connection:
- keys in the load: keyed.load, as pgad.train of a keyed model loads — one native load whose receiver codes each key
  column by a hash of its keys in C (extension/keys.c), then the keys sorted and the codes renumbered by numpy;
- keys by query: keyed.read_keys, one SELECT … GROUP BY … ORDER BY a key column, then loader.load with each key
  column coded by a jsonb literal of its keys (loader.category_code): the path before, kept where the load is not
  native.
With --categorical, the same for two categorical weights (w.u[d.user_id] + w.i[d.item_id], {"u": {}, "i": {}}), as
pgad.loss, pgad.gradient and pgad.train load them: categorical.preload then expand, which puts the keys the load found
in the type's order by one query over them, against expand's query a column (LEVELS) then loader.load coding each
column by a jsonb literal of its categories — the path before, kept for group_by and pgad.pack's load.
Printed: each run's seconds (the keys' queries apart), and the backend's peak resident memory. Never asserted.
"""
import argparse
import json
import os
import sys

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

STAGE = """CREATE FUNCTION pgad_bench_keyed_load(data text, native boolean) RETURNS jsonb LANGUAGE plpython3u AS $$
import json
import resource
import time
plpy.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's Python on sys.path
from pgad import calls, keyed, loader
limit = calls.settings().memory_limit
found = keyed.Keyed({'p': keyed.Spec((8,)), 'q': keyed.Spec((8,))}, {'p': 'user_id', 'q': 'item_id'})
columns = ['rating', 'user_id', 'item_id']
start = time.perf_counter()
if native:
    table = keyed.load(found, data, columns, limit)
    read = start
else:
    keyed.check(found, loader.as_query(data))
    keyed.read_keys(found, loader.as_query(data), limit)
    read = time.perf_counter()
    table = loader.load(data, columns, memory_limit=limit, categories=dict(found.keys))
end = time.perf_counter()
return json.dumps({'keys_s': read - start, 'total_s': end - start, 'rows': table.rows,
                   'keys': {c: len(k) for c, k in found.keys.items()},
                   'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
$$"""

CATEGORICAL = """CREATE FUNCTION pgad_bench_categorical_load(data text, native boolean) RETURNS jsonb
LANGUAGE plpython3u AS $$
import json
import resource
import time
plpy.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's Python on sys.path
from pgad import calls, categorical, loader, program
config = calls.settings()
lam = program.parsed('λ(d, w) (w.u[d.user_id] + w.i[d.item_id] - d.rating)^2', config.limits)
w = {'u': {}, 'i': {}}
start = time.perf_counter()
if native:
    table = categorical.preload(data, lam, categorical.indexed(w, lam), (), config)
    expanded, cats = categorical.expand(w, lam, data, config.limits, config.memory_limit, table)
    read = start
else:
    expanded, cats = categorical.expand(w, lam, data, config.limits, config.memory_limit)
    read = time.perf_counter()
    table = loader.load(data, list(lam.columns), 0, config.memory_limit, {}, cats.codes)
end = time.perf_counter()
return json.dumps({'keys_s': read - start, 'total_s': end - start, 'rows': table.rows,
                   'keys': {c: len(k) for c, k in cats.codes.items()},
                   'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
$$"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--users', type=int, default=200_000)
    parser.add_argument('--items', type=int, default=2_000)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--categorical', action='store_true', help='two categorical weights, not keyed ones')
    args = parser.parse_args()
    function = 'pgad_bench_categorical_load' if args.categorical else 'pgad_bench_keyed_load'
    with Cluster() as pg, psycopg.connect(pg.conninfo('postgres'), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        # 7919 is prime: every user appears (for a count of users that is no multiple of it), in no key order
        db.execute("CREATE TABLE ratings AS SELECT 'user' || lpad((g::bigint * 7919 %% %(users)s)::text, 7, '0') "
                   "AS user_id, 'item' || lpad((g::bigint * 31 %% %(items)s)::text, 5, '0') AS item_id, "
                   "(g %% 5 + 1)::float8 AS rating FROM generate_series(1, %(rows)s) AS g", vars(args))
        db.execute('VACUUM ANALYZE ratings')
        db.execute(CATEGORICAL if args.categorical else STAGE)
        print('rows, users, items:', db.execute('SELECT count(*), count(DISTINCT user_id), count(DISTINCT item_id) '
                                                'FROM ratings').fetchone())
        for _ in range(args.repeats):
            for native in (False, True):
                with psycopg.connect(pg.conninfo('postgres'), autocommit=True) as session:
                    got = session.execute(f'SELECT {function}(%s, %s)', ['ratings', native]).fetchone()[0]
                print(f'{"keys in the load" if native else "keys by query   "}: {got["total_s"]:.3f} s '
                      f'(keys\' queries {got["keys_s"]:.3f} s), {got["rows"]} rows, keys {json.dumps(got["keys"])}, '
                      f'backend peak {got["peak_mb"]:.0f} MB', flush=True)


if __name__ == '__main__':
    main()
