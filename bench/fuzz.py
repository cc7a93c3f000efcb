"""`make fuzz`: the lambda-language fuzzer (tests/fuzzing.py) over a million inputs, on every core.

Each worker takes blocks of input indices, writes input i as fuzzing.generate(seed, i), and runs it through the
parser, the DAG, forward and reverse mode and the python backend (fuzzing.check); every --postgres-every'th input
also goes to PostgreSQL (its primal value at three rows, one query per block), every --printed-every'th through
the printer and back. Then --sql inputs go through pgad's SQL functions on the same throwaway server, which must
stay up. It prints the figures and, for every kind of failure, how many inputs met it and the shortest of them
with its seed (fuzzing.generate(seed, i) writes it again). Exit status 1 when any input failed.

    .venv/bin/python bench/fuzz.py [--inputs 1000000] [--seed 1] [--jobs 2] [--sql 2000]
"""
import argparse
import collections
import multiprocessing
import os
import sys
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests'))
import fuzzing  # noqa: E402

from pgad.throwaway import Cluster  # noqa: E402

BLOCK = 2000
_conn = None


def _start(conninfo):
    global _conn
    _conn = psycopg.connect(conninfo, autocommit=True)


def run_block(args):
    """Inputs start … start+count-1: (counts, {failure kind: [(length, seed, text, detail)]}, seconds)."""
    seed, start, count, postgres_every, printed_every = args
    counts = collections.Counter()
    found = collections.defaultdict(list)
    results = []
    started = time.perf_counter()
    for i in range(start, start + count):
        text = fuzzing.generate(seed, i)
        r = fuzzing.check(text, seed, i, for_postgres=i % postgres_every == 0, printed=i % printed_every == 0)
        results.append(r)
        counts['inputs'] += 1
        counts[r.outcome] += 1
        if r.outcome == 'rejected':
            counts[f'SQLSTATE {r.sqlstate}'] += 1
    compared = fuzzing.compare_with_postgres(_conn, [r for r in results if r.postgres])
    for kind, n in compared.items():
        counts[f'postgres: {kind or "agrees"}'] += n
    for r in results:
        for kind, detail in r.failures:
            found[kind].append((len(r.text), r.seed, r.text, detail))
        counts['failed'] += bool(r.failures)
    return counts, {k: sorted(v)[:3] + [len(v)] for k, v in found.items()}, time.perf_counter() - started


def through_sql(conninfo, seed, n):
    """The first n sendable inputs through pgad's SQL functions: (counts, failures)."""
    counts, found = collections.Counter(), collections.defaultdict(list)
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute("SET statement_timeout = '60s'")
    started_at = conn.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    i = 0
    while counts['inputs'] < n:
        text = fuzzing.generate(seed, i)
        i += 1
        if not fuzzing.sendable(text):
            continue
        weights = fuzzing.check(text, seed, i - 1, printed=False).weights
        failures, states = fuzzing.through_sql(conn, text, weights, started_at)
        counts['inputs'] += 1
        counts.update(f'SQLSTATE {s}' for s in states)
        for kind, detail in failures:
            found[kind].append((len(text), f'{seed}:{i - 1}', text, detail))
        if any(kind == 'server: connection lost' for kind, _ in failures):
            conn = psycopg.connect(conninfo, autocommit=True)
    return counts, found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--inputs', type=int, default=1_000_000)
    parser.add_argument('--seed', default='1')
    parser.add_argument('--jobs', type=int, default=os.cpu_count() or 2)
    parser.add_argument('--postgres-every', type=int, default=20)
    parser.add_argument('--printed-every', type=int, default=20)
    parser.add_argument('--sql', type=int, default=2000)
    args = parser.parse_args()

    with Cluster() as cluster:
        conninfo = cluster.conninfo('postgres')
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute('CREATE EXTENSION pgad CASCADE')
            conn.execute(fuzzing.SETUP_SQL)
            conn.execute(fuzzing.SERVER_SETUP_SQL)
        started = time.perf_counter()
        counts, found = collections.Counter(), {}
        blocks = [(args.seed, s, min(BLOCK, args.inputs - s), args.postgres_every, args.printed_every)
                  for s in range(0, args.inputs, BLOCK)]
        with multiprocessing.Pool(args.jobs, initializer=_start, initargs=(conninfo,)) as pool:
            for k, (c, f, _) in enumerate(pool.imap_unordered(run_block, blocks)):
                counts.update(c)
                for kind, (*shortest, n) in f.items():
                    old = found.get(kind, [n * 0])
                    found[kind] = sorted(old[:-1] + shortest)[:3] + [old[-1] + n]
                if (k + 1) % 25 == 0:
                    rate = counts['inputs'] / (time.perf_counter() - started)
                    print(f'  {counts["inputs"]:,} inputs, {rate:,.0f}/s, {counts["failed"]} failed', flush=True)
        seconds = time.perf_counter() - started
        sql_started = time.perf_counter()
        sql_counts, sql_found = through_sql(conninfo, args.seed, args.sql)
        sql_seconds = time.perf_counter() - sql_started

    print(f'\nfuzz: seed {args.seed}, {args.jobs} processes, {os.cpu_count()} cores')
    print(f'in process: {counts["inputs"]:,} inputs in {seconds:.0f} s ({counts["inputs"] / seconds:,.0f}/s): '
          f'{counts["accepted"]:,} accepted, {counts["rejected"]:,} rejected with a SQLSTATE, '
          f'{counts["crash"]:,} crashed (another exception), {counts["failed"]:,} failed an oracle')
    print('  rejected by SQLSTATE: ' + ', '.join(f'{k[9:]} {v:,}' for k, v in sorted(counts.items())
                                                 if k.startswith('SQLSTATE')))
    print('  against PostgreSQL (rows): ' + ', '.join(f'{k[10:]} {v:,}' for k, v in sorted(counts.items())
                                                      if k.startswith('postgres:')))
    print(f'through SQL: {sql_counts["inputs"]:,} inputs in {sql_seconds:.0f} s, 4 calls each; errors by SQLSTATE: '
          + ', '.join(f'{k[9:]} {v:,}' for k, v in sorted(sql_counts.items()) if k.startswith('SQLSTATE')))
    for kind, items in sql_found.items():
        found[kind] = sorted(items)[:3] + [len(items)]
    if not found:
        print('no failures')
        return 0
    print('\nfailures by kind (the count of inputs, then the shortest):')
    for kind, (*shortest, n) in sorted(found.items(), key=lambda kv: -kv[1][-1]):
        print(f'- {kind}: {n:,}')
        for _, seed, text, detail in shortest:
            print(f'    seed {seed}: {text[:300]!r}\n      {detail[:400]}')
    return 1


if __name__ == '__main__':
    sys.exit(main())
