"""The lambdas of issue 9 — a 20,000-term sum, a 20,000-factor product chain, CASEs nested 3,000 deep, a 5,000-long
chain of ^ — through each stage in process, and through SQL in one session (pgad.derivatives, pgad.gradient in both
modes), best of --repeats, in seconds. docs/performance.md records a run; timings are printed, never asserted
(tests/test_sizes.py checks the same cases' answers and that their work grows linearly).

    .venv/bin/python bench/sizes.py [--repeats 3] [--no-sql]

In process the stages are timed apart: parse, differentiate (forward, reverse) and print every derivative (the
budget of pgad.derivatives). Through SQL a new lambda text is sent each repeat (a trailing space differs), so no
backend cache answers: the time is what a user's first call with that lambda costs, after the session's first
import of pgad.
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pgad import lang  # noqa: E402
from pgad.lang import forward, printer, reverse  # noqa: E402
from pgad.limits import DEFAULT  # noqa: E402

CASES = {
    'sum of 20,000 terms': 'λ(d, w) ' + ' + '.join(f'w.a{i}*d.x' for i in range(20_000)),
    'product of 20,000 factors': 'λ(d, w) ' + '*'.join(('(w.a + d.x)', '(w.b - d.y)')[i % 2] for i in range(20_000)),
    'CASE 3,000 deep': 'λ(d, w) ' + ''.join(f'CASE WHEN d.x > {-k} THEN ' for k in range(3000)) + 'w.a*d.x' +
                       ' ELSE w.b END' * 3000,
    '^ chain 5,000 long': 'λ(d, w) ' + '^'.join(['w.a'] * 5000),
}


def best(repeats, work):
    """(the least seconds of repeats runs of work(k), the last result or the SQLSTATE it raised)."""
    times, result = [], None
    for k in range(repeats):
        started = time.perf_counter()
        try:
            result = work(k)
        except Exception as e:  # noqa: BLE001 (a refusal is a result here: printed with its SQLSTATE)
            result = f'ERROR {getattr(e, "sqlstate", type(e).__name__)}'
        times.append(time.perf_counter() - started)
    return min(times), result


def in_process(text, repeats):
    row = {}
    row['parse'], lam = best(repeats, lambda k: lang.parse(text, DEFAULT))
    for mode, gradient in (('forward', forward.gradient), ('reverse', reverse.gradient)):
        def differentiate(k):
            fresh = lang.parse(text, DEFAULT)
            started = time.perf_counter()
            grad = gradient(fresh.graph, fresh.root, tuple(fresh.weights))
            return fresh, grad, time.perf_counter() - started
        times = [differentiate(k) for k in range(repeats)]
        row[mode] = min(t for _, _, t in times)
        fresh, grad, _ = times[-1]
        row[f'print ({mode})'], _ = best(repeats, lambda k: printer.to_lambdas(fresh, list(grad.values())))
        row['nodes'] = len(fresh.graph)
    return row


def through_sql(conn, text, repeats):
    lam = lang.parse(text, DEFAULT)
    weights = json.dumps({name: 0.5 for name in lam.weights})
    row = {}
    row['pgad.derivatives'], row['derivatives →'] = best(repeats, lambda k: conn.execute(
        'SELECT count(*) FROM pgad.derivatives(%s)', (text + ' ' * (k + 1),)).fetchone()[0])
    for mode in ('forward', 'reverse'):
        row[f'pgad.gradient {mode}'], _ = best(repeats, lambda k: conn.execute(
            f"SELECT pgad.gradient(%s, 'sizes', %s, mode => '{mode}')", (text + ' ' * (k + 1), weights)).fetchone())
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--no-sql', action='store_true')
    args = p.parse_args()
    for name, text in CASES.items():
        row = in_process(text, args.repeats)
        print(f'{name:28} ' + '  '.join(f'{k} {v:.3f}' if isinstance(v, float) else f'{k} {v}' for k, v in row.items()),
              flush=True)
    if args.no_sql:
        return
    import psycopg
    from pgad.throwaway import Cluster
    with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as conn:
        conn.execute('CREATE EXTENSION pgad CASCADE')
        conn.execute('CREATE TABLE sizes AS SELECT 0.5::float8 AS x, -0.5::float8 AS y FROM generate_series(1, 1000)')
        conn.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'sizes', '{\"a\": 1}')")  # the session's imports
        for name, text in CASES.items():
            row = through_sql(conn, text, args.repeats)
            print(f'{name:28} ' + '  '.join(f'{k} {v:.3f}' if isinstance(v, float) else f'{k} {v}'
                                            for k, v in row.items()), flush=True)


if __name__ == '__main__':
    main()
