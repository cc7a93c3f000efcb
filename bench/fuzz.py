"""`make fuzz`: the lambda-language fuzzer (tests/fuzzing.py) over a million inputs, on every core.

Each worker takes blocks of input indices, writes input i as fuzzing.generate(seed, i), and runs it through the
parser, the DAG, forward and reverse mode and the python backend (fuzzing.check); every --postgres-every'th input
also goes to PostgreSQL (its primal value at three rows, one query per block), every --printed-every'th through
the printer and back. Then --sql inputs go through pgad's SQL functions on the same throwaway server, which must
stay up. It prints the figures and, for every kind of failure, how many inputs met it and the shortest of them
with its seed (fuzzing.generate(seed, i) writes it again). Exit status 1 when any input failed.

    .venv/bin/python bench/fuzz.py [--inputs 1000000] [--seed 1] [--jobs 2] [--sql 2000]

Then the crash fuzzer of vector lambdas (tests/vector_fuzzing.py): --vectors inputs — a random lambda of vectors and
matrices at random shapes, a mode, a backend and a tape, compiled and run on three data sets — in forked children
(a child killed by a signal names its input), and --vector-sql of them through pgad.gradient and pgad.loss on the
server, whose log must show no backend "terminated by signal" and whose postmaster must not have restarted.

    .venv/bin/python bench/fuzz.py --inputs 0 --vectors 100000 --vector-sql 500 [--jobs 1] [--vector-minutes 60]
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
import vector_fuzzing  # noqa: E402

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


VECTOR_BLOCK = 500


def vector_block(args):
    """Vector inputs start … start+count-1 in forked children: (counts, crashes, exceptions, seconds)."""
    seed, start, count, deadline = args
    started = time.perf_counter()
    if deadline and time.time() > deadline:  # past --vector-minutes: the block is not run
        return collections.Counter(), [], [], 0.0
    outcomes, crashes = vector_fuzzing.fuzz(seed, count, start=start)
    counts = collections.Counter()
    exceptions = []
    for i, o in outcomes.items():
        counts['inputs'] += 1
        counts['data sets run'] += o['ran']
        counts[f'SQLSTATE {o["state"]}' if o['state'] else 'exception' if o['exception'] else 'ran'] += 1
        counts[f'kernel {o["kind"] or "python"}'] += 1
        if o['exception']:
            exceptions.append((i, o['exception']))
    counts['inputs'] += len(crashes)
    return counts, crashes, exceptions[:5], time.perf_counter() - started


def vectors(args, cluster):
    """The vector crash fuzzer: in process, then through SQL on cluster. Returns the number of failures."""
    started = time.perf_counter()
    counts, crashes, exceptions = collections.Counter(), [], []
    deadline = time.time() + 60 * args.vector_minutes if args.vector_minutes else 0
    blocks = [(args.seed, s, min(VECTOR_BLOCK, args.vectors - s), deadline)
              for s in range(0, args.vectors, VECTOR_BLOCK)]
    with multiprocessing.Pool(args.jobs) as pool:
        for k, (c, crashed, excepted, _) in enumerate(pool.imap_unordered(vector_block, blocks)):
            if not c:
                continue
            counts.update(c)
            crashes += crashed
            exceptions += excepted
            for i, how in crashed:  # at once, should the run be stopped before its summary
                print(f'  CRASH {how}: seed {args.seed} input {i}', flush=True)
            rate = counts['inputs'] / (time.perf_counter() - started)
            print(f'  vectors: {counts["inputs"]:,} inputs, {rate:,.1f}/s, {len(crashes)} crashed', flush=True)
    seconds = time.perf_counter() - started
    print(f'\nvector lambdas in process: {counts["inputs"]:,} inputs in {seconds:.0f} s, {counts["data sets run"]:,} '
          f'data sets run; {len(crashes)} crashed (a child killed by a signal), {counts["exception"]:,} raised another '
          'exception than PgadError')
    print('  ' + ', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()) if k not in ('inputs', 'data sets run')))
    for i, how in crashes[:20]:
        inp = vector_fuzzing.generate(args.seed, i)
        print(f'  CRASH {how}: seed {args.seed} input {i}: {inp.mode} {inp.backend} {inp.tape} {inp.text[:300]!r}')
    for i, text in exceptions[:10]:
        print(f'  exception: seed {args.seed} input {i}: {text[:400]}')
    log = os.path.join(getattr(cluster, 'base_dir', ''), 'postgresql.log')
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    sql_started = time.perf_counter()
    states, lost = collections.Counter(), []
    conninfo = cluster.conninfo('postgres')
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute(vector_fuzzing.SETUP_SQL)
    conn.execute("SET statement_timeout = '60s'")
    postmaster = conn.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    for i in range(args.vector_sql):
        inp = vector_fuzzing.generate(args.seed, i)
        found = vector_fuzzing.through_sql(conn, inp)
        states.update(found or ['none'])
        if 'connection lost' in found:
            lost.append(i)
            conn = psycopg.connect(conninfo, autocommit=True)
            conn.execute("SET statement_timeout = '60s'")
    restarted = conn.execute('SELECT pg_postmaster_start_time()').fetchone()[0] != postmaster
    signalled = vector_fuzzing.crashes_in_log(log, offset)
    print(f'vector lambdas through SQL: {args.vector_sql:,} inputs in {time.perf_counter() - sql_started:.0f} s, '
          'pgad.gradient and pgad.loss each; errors by SQLSTATE: '
          + ', '.join(f'{k} {v:,}' for k, v in sorted(states.items())))
    print(f'  connections lost: {lost[:20]}; postmaster restarted: {restarted}; "terminated by signal" in the '
          f'server log: {len(signalled)}' + ''.join(f'\n    {line}' for line in signalled[:10]))
    return len(crashes) + len(lost) + restarted + len(signalled)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--inputs', type=int, default=1_000_000)
    parser.add_argument('--seed', default='1')
    parser.add_argument('--jobs', type=int, default=os.cpu_count() or 2)
    parser.add_argument('--postgres-every', type=int, default=20)
    parser.add_argument('--printed-every', type=int, default=20)
    parser.add_argument('--sql', type=int, default=2000)
    parser.add_argument('--vectors', type=int, default=100_000, help='vector lambdas for the crash fuzzer')
    parser.add_argument('--vector-sql', type=int, default=500, help='of them, through SQL')
    parser.add_argument('--vector-minutes', type=float, default=0,
                        help='start no block of vector inputs after this long (0: run them all)')
    args = parser.parse_args()
    if args.inputs == 0:  # the vector crash fuzzer alone
        with Cluster() as cluster:
            with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as conn:
                conn.execute('CREATE EXTENSION pgad CASCADE')
            return 1 if vectors(args, cluster) else 0

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
        vector_failures = vectors(args, cluster) if args.vectors else 0

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
        print('no failures' if not vector_failures else f'{vector_failures} vector crash(es): above')
        return 1 if vector_failures else 0
    print('\nfailures by kind (the count of inputs, then the shortest):')
    for kind, (*shortest, n) in sorted(found.items(), key=lambda kv: -kv[1][-1]):
        print(f'- {kind}: {n:,}')
        for _, seed, text, detail in shortest:
            print(f'    seed {seed}: {text[:300]!r}\n      {detail[:400]}')
    return 1


if __name__ == '__main__':
    sys.exit(main())
