"""make bench, shards: training on a table sharded over postgres_fdw servers, where its rows are (pgad's data-parallel
path) against pulling its rows through postgres_fdw to train here, side by side in one run.

Starts a coordinator and three shard clusters on this machine (throwaway, as the tests do). Each shard holds
--rows rows (x1, x2, y) in its table pts; the coordinator has, for S = 1, 2, 3, a table sharded_S partitioned over
S postgres_fdw foreign tables on shards 1..S, a table tiny_S over S one-row tables on them (its time a round is the
round trip alone), and a local table of --rows rows (one shard's compute). Every timing is in one psycopg
connection to the coordinator, the best of --repeats, the contenders interleaved:

    data-parallel   pgad.gradient_descent(loss, 'sharded_S', …)              the gradient goes to the data
    pulled          pgad.gradient_descent(loss, 'SELECT … FROM sharded_S', …) the rows come to the gradient, once

and for each, the bytes that crossed the network (the loopback interface's counter, /proc/net/dev: the servers talk
over 127.0.0.1). Output: a table on stdout and bench/results/shards.json. docs/scaling.md has the figures
and the model built from them.

    python3 bench/shards.py [--rows 1000000] [--iterations 100] [--repeats 3] [--out DIR]
"""
import argparse
import json
import os
import sys
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pgad.throwaway import Cluster  # noqa: E402

LOSS = 'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c - d.y)^2'
START = '{"a": 0, "b": 0, "c": 0}'
SHARDS = (1, 2, 3)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rows', type=int, default=1_000_000, help='rows on each shard (1,000,000)')
    p.add_argument('--iterations', type=int, default=100, help='gradient descent iterations (100)')
    p.add_argument('--repeats', type=int, default=3, help='runs of each measurement; the fastest is kept (3)')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'), help='results folder (bench/results)')
    return p.parse_args(argv)


def fill_shard(cluster, k, rows):
    with psycopg.connect(cluster.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute(f'SELECT setseed(0.{k})')
        db.execute('CREATE TABLE pts AS SELECT x1, x2, 1.5*x1 - 2*x2 + 0.5 + 0.1*(2*random() - 1) AS y '
                   f'FROM (SELECT 2*random() - 1 AS x1, 2*random() - 1 AS x2 FROM generate_series(1, {rows})) AS r')
        db.execute('CREATE TABLE one AS SELECT * FROM pts LIMIT 1')
        db.execute('VACUUM ANALYZE pts')


def set_up(coordinator, shards, rows):
    with psycopg.connect(coordinator.conninfo(), autocommit=True) as db:
        for extension in ('pgad CASCADE', 'postgres_fdw', 'dblink'):
            db.execute(f'CREATE EXTENSION {extension}')
        for k, shard in shards.items():
            db.execute(f"CREATE SERVER shard{k} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
                       f"port '{shard.settings['port']}', dbname 'test', fetch_size '10000')")
            db.execute(f"CREATE USER MAPPING FOR PUBLIC SERVER shard{k} OPTIONS (user 'postgres')")
        for s in SHARDS:
            for table, remote in ((f'sharded_{s}', 'pts'), (f'tiny_{s}', 'one')):
                db.execute(f'CREATE TABLE {table} (x1 float8, x2 float8, y float8, k int) PARTITION BY LIST (k)')
                for k in range(1, s + 1):
                    db.execute(f"CREATE FOREIGN TABLE {table}_{k} PARTITION OF {table} FOR VALUES IN ({k}) "
                               f"SERVER shard{k} OPTIONS (table_name '{remote}')")
        db.execute('SELECT setseed(0.5)')
        db.execute('CREATE TABLE local_one_shard AS SELECT x1, x2, 1.5*x1 - 2*x2 + 0.5 AS y FROM (SELECT '
                   f'2*random() - 1 AS x1, 2*random() - 1 AS x2 FROM generate_series(1, {rows})) AS r')
        db.execute('VACUUM ANALYZE local_one_shard')


def loopback():
    """Bytes through the loopback interface so far (/proc/net/dev's lo: received, which on lo is also sent): the
    servers here talk over 127.0.0.1, so this counts what crosses between the coordinator and the shards (and
    the little the client sends and gets). None where there is no such counter."""
    try:
        with open('/proc/net/dev') as f:
            for line in f:
                name, _, fields = line.partition(':')
                if name.strip() == 'lo':
                    return int(fields.split()[0])
    except OSError:
        pass
    return None


def run(db, data, iterations):
    """(seconds, bytes over the network, fitted weights) of one gradient descent on data."""
    before = loopback()
    started = time.perf_counter()
    weights, = db.execute('SELECT weights FROM pgad.gradient_descent(%s, %s, %s, 0.5, %s)',
                          (LOSS, data, START, iterations)).fetchone()
    seconds = time.perf_counter() - started
    after = loopback()
    return seconds, (after - before if before is not None and after is not None else None), weights


def main(argv=None):
    args = parse_args(argv)
    clusters = {}
    threads = [threading.Thread(target=lambda k=k: clusters.__setitem__(k, Cluster())) for k in (0, *SHARDS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        shards = {k: clusters[k] for k in SHARDS}
        print(f'shards: filling {len(shards)} shards with {args.rows} rows each', flush=True)
        fillers = [threading.Thread(target=fill_shard, args=(shards[k], k, args.rows)) for k in SHARDS]
        for t in fillers:
            t.start()
        for t in fillers:
            t.join()
        set_up(clusters[0], shards, args.rows)
        results = measure(clusters[0], args)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    os.makedirs(args.out, exist_ok=True)
    text = table(results)  # adds results['derived']
    with open(os.path.join(args.out, 'shards.json'), 'w') as f:
        json.dump(results, f, indent=2)
    print(text)


def measure(coordinator, args):
    k = args.iterations
    contenders = {}
    for s in SHARDS:
        contenders[f'data-parallel, {s} shard{"s" * (s > 1)}'] = (s, f'sharded_{s}', k)
        contenders[f'pulled, {s} shard{"s" * (s > 1)}'] = (s, f'SELECT x1, x2, y FROM sharded_{s}', k)
        contenders[f'round trip alone, {s} shard{"s" * (s > 1)}'] = (s, f'tiny_{s}', k)
        contenders[f'setup alone, {s} shard{"s" * (s > 1)}'] = (s, f'sharded_{s}', 0)
        contenders[f'tiny setup alone, {s} shard{"s" * (s > 1)}'] = (s, f'tiny_{s}', 0)
    contenders['one shard\'s rows, here'] = (0, 'local_one_shard', k)
    best = {}
    with psycopg.connect(coordinator.conninfo(), autocommit=True) as db:
        run(db, 'tiny_1', 1)  # imports and first compilations: not timed
        run(db, 'local_one_shard', 1)
        for repeat in range(args.repeats):
            for name, (s, data, iterations) in contenders.items():
                seconds, moved, weights = run(db, data, iterations)
                print(f'  {name}: {seconds:.3f} s, {moved} bytes', flush=True)
                if name not in best or seconds < best[name]['seconds']:
                    best[name] = dict(shards=s, data=data, iterations=iterations, seconds=seconds, bytes=moved,
                                      weights=weights)
    return dict(rows_per_shard=args.rows, iterations=k, loss=LOSS, repeats=args.repeats, results=best,
                when=time.strftime('%Y-%m-%d %H:%M:%S'), cpus=os.cpu_count())


def table(results):
    k = results['iterations']
    lines = [f'{results["rows_per_shard"]} rows a shard, {k} iterations, best of {results["repeats"]}',
             f'{"contender":32} {"seconds":>8} {"ms a round":>10} {"bytes moved":>12} {"a round":>12}']
    for name, r in results['results'].items():
        rounds = r['iterations'] + 1 if r['iterations'] else 1
        per = f'{r["bytes"] / rounds:.0f}' if r['bytes'] is not None else '-'
        lines.append(f'{name:32} {r["seconds"]:8.3f} {1e3 * r["seconds"] / rounds:10.2f} '
                     f'{r["bytes"] if r["bytes"] is not None else "-":>12} {per:>12}')
    derived = results['derived'] = {}
    for s in SHARDS:
        plural = 's' * (s > 1)
        r = {name.rsplit(', ', 1)[0]: v['seconds'] for name, v in results['results'].items()
             if name.endswith(f', {s} shard{plural}')}
        d = derived[s] = dict(ratio=r['pulled'] / r['data-parallel'],
                              round_trip_ms=1e3 * (r['round trip alone'] - r['tiny setup alone']) / k,
                              round_ms=1e3 * (r['data-parallel'] - r['setup alone']) / k,
                              call_setup_ms=1e3 * r['tiny setup alone'], load_setup_ms=1e3 * r['setup alone'])
        lines.append(f'{s} shard{plural}: pulled / data-parallel = {d["ratio"]:.2f}; a round {d["round_ms"]:.2f} ms, '
                     f'of which the round trip alone {d["round_trip_ms"]:.2f} ms; a call\'s setup '
                     f'{d["call_setup_ms"]:.0f} ms (with the first load {d["load_setup_ms"]:.0f} ms)')
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
