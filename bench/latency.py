"""The first call of a new session: what a person at psql waits for before pgad does any work (issue 38).

    .venv/bin/python bench/latency.py [--repeats 7] [--rows 300] [--json bench/results/latency.json]

On a throwaway cluster with a table of --rows rows (x, y), each case is a one-statement session: connect, run the
statement, fetch its rows, disconnect, timed from the client. A case's figure is its best time over the repeats
minus the best time of the same session running `SELECT 1` (the connection's own cost); the cases and SELECT 1
are interleaved, a round of each per repeat, so that a slow moment of the machine falls on all of them alike.

  loss, cached kernel   pgad.loss of a linear lambda on the table, its kernel compiled by an earlier session and
                        in the disk cache (pgad.cache_directory)
  loss, new lambda      the same with a linear lambda never seen (its weights renamed each time): the compile of
                        its kernel included
  train, first          pgad.train of a linear regression (squared loss, pgad.train's defaults), its kernels in
                        the disk cache; beside it `warm`: the same statement run again in one session
                        (its time from the client, the connection already open)
  summary, first        pgad.summary of that model; `warm` likewise
  train, new lambda     pgad.train of the same model with its weights renamed each time: its kernels compiled
  train and summary also print first − warm: the issue's target is that a first call costs at most 200 ms more
  than a warm one. Beside each, the CPU time of the session's backend (its threads', from /proc, less SELECT 1's;
  without a compiler process it started), which a loaded machine inflates far less than the wall time. Timings
  are printed, never asserted.

--breakdown: where a first call's time goes, in a backend. Each round, new sessions time `DO $$ pass $$ LANGUAGE
plpython3u` (PL/Python's start) and then, in one DO block, pgad's imports one by one (numpy with its signals
blocked, the pgad package and the lambda language, pgad.api, llvmlite.binding, pgad.jit.compiler), the execution
engine, a compile of an empty module in the compiler process (its start), and in the same session the first
pgad.loss (its kernel in the disk cache) and a second. Best of the repeats, each stage apart.

--preload LIBS starts the server with shared_preload_libraries = LIBS (e.g. plpython3), to measure what that gives.

--baseline DIR compares with another pgad on the same server, side by side: DIR is that pgad's package folder (for
main's: `git archive main pgad | tar -x -C /tmp/base`, then --baseline /tmp/base/pgad), renamed into the place of
the installed pgad/ for a round of every case after each of this one's (a new session imports whichever is there).
The SQL of both must be the same; the server's environment must be writable; the installed pgad is always put back.
"""
import argparse
import ast
import compileall
import contextlib
import json
import os
import platform
import re
import sys
import time

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

LOSS = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
WEIGHTS = '{"a": 0, "b": 0}'
TRAIN = "SELECT 1 FROM pgad.train('latency', 'λ(d, w) w.a*d.x + w.b', 'squared', 'points', '{\"a\": 0, \"b\": 0}')"
SUMMARY = "SELECT * FROM pgad.summary('latency')"
TRAIN_NEW = "SELECT 1 FROM pgad.train('latency_new', %s, 'squared', 'points', %s::jsonb)"
CASES = ['SELECT 1', 'loss, cached kernel', 'loss, new lambda', 'train, first', 'summary, first', 'train, new lambda']


def session(conninfo, sql, params=None, cpu=None):
    """Seconds of a new session that runs sql once: connect, execute, fetch (its close is not waited for). With cpu (a
    list), the backend's CPU seconds by then (every thread's, from /proc: the server is this machine's; a compiler
    process it started and reaped is not counted) are appended to it."""
    started = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        if cursor.description is not None:
            cursor.fetchall()
        seconds = time.perf_counter() - started
        if cpu is not None:
            cpu.append(backend_cpu(conn.execute('SELECT pg_backend_pid()').fetchone()[0]))
    return seconds


def backend_cpu(pid):
    """The CPU seconds a process's threads have run (each's /proc/PID/task/TID/schedstat: nanoseconds first)."""
    total = 0
    for task in os.listdir(f'/proc/{pid}/task'):
        with open(f'/proc/{pid}/task/{task}/schedstat') as f:
            total += int(f.read().split()[0])
    return total / 1e9


def statement(conn, sql, params=None):
    """Seconds of sql on an open connection, fetched."""
    started = time.perf_counter()
    conn.execute(sql, params).fetchall()
    return time.perf_counter() - started


def new_lambda(k):
    """A linear lambda of the same shape as LOSS that no session has seen: its weights are named after k."""
    return f'λ(d, w) (w.a{k}*d.x + w.b{k} - d.y)^2', json.dumps({f'a{k}': 0, f'b{k}': 0})


def setup(db, rows):
    db.execute('DROP TABLE IF EXISTS points')
    db.execute('SELECT setseed(0.38)')
    db.execute(f'CREATE TABLE points AS SELECT x, 3 * x + 1 + (random() - 0.5) / 10 AS y '
               f'FROM (SELECT random() AS x FROM generate_series(1, {int(rows)})) s')
    db.execute('ANALYZE points')


def warm_up(conninfo):
    """The kernels in the disk cache and the model in the catalog, before any timing."""
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute('SELECT pgad.loss(%s, %s, %s::jsonb)', (LOSS, 'points', WEIGHTS))
        db.execute(TRAIN).fetchall()


def one_round(conninfo, tag, times, warm, cpu):
    """Each case once, in order, its seconds appended to times[case], the backend's CPU seconds to cpu[case] (and
    warm[case] for train and summary)."""
    for case in CASES:
        if case == 'SELECT 1':
            times[case].append(session(conninfo, 'SELECT 1', cpu=cpu[case]))
        elif case == 'loss, cached kernel':
            times[case].append(session(conninfo, 'SELECT pgad.loss(%s, %s, %s::jsonb)', (LOSS, 'points', WEIGHTS),
                                       cpu=cpu[case]))
        elif case == 'loss, new lambda':
            loss, weights = new_lambda(f'{tag}_{len(times[case])}')
            times[case].append(session(conninfo, 'SELECT pgad.loss(%s, %s, %s::jsonb)', (loss, 'points', weights),
                                       cpu=cpu[case]))
        elif case == 'train, new lambda':
            k = f'{tag}_{len(times[case])}'
            times[case].append(session(conninfo, TRAIN_NEW, (f'λ(d, w) w.a{k}*d.x + w.b{k}',
                                                             json.dumps({f'a{k}': 0, f'b{k}': 0})), cpu=cpu[case]))
        else:
            sql = TRAIN if case.startswith('train') else SUMMARY
            times[case].append(session(conninfo, sql, cpu=cpu[case]))
            with psycopg.connect(conninfo, autocommit=True) as conn:
                statement(conn, sql)
                warm[case].append(statement(conn, sql))


def measure(conninfo, repeats, swap=None):
    """{variant: ({case: [seconds, …]}, {case: [warm seconds, …]}, {case: [backend CPU seconds, …]})} over the
    repeats: the installed pgad ('this'),
    and with swap (a Swap) also the baseline's, a round of each in turn."""
    variants = ['this'] + (['baseline'] if swap else [])
    found = {v: ({case: [] for case in CASES}, {'train, first': [], 'summary, first': []}, {case: [] for case in CASES})
             for v in variants}
    for variant in variants:
        with swap.placed(variant) if swap else contextlib.nullcontext():
            warm_up(conninfo)
    for r in range(repeats):
        for variant in variants:
            with swap.placed(variant) if swap else contextlib.nullcontext():
                one_round(conninfo, f'{os.getpid()}_{variant}', *found[variant])
    return found


class Swap:
    """The installed pgad package (folder `installed`) and another (folder `baseline`, e.g. main's pgad/ from
    `git archive`), exchanged by renaming between the rounds: a new session imports whichever is in place. The
    installed one is back in place when placed() returns, error or not."""

    def __init__(self, installed, baseline):
        self.installed, self.baseline, self.aside = installed, os.path.abspath(baseline), installed + '.latency-aside'
        compileall.compile_dir(self.baseline, quiet=1)  # as pip compiled the installed one: no session compiles it

    @contextlib.contextmanager
    def placed(self, variant):
        if variant == 'this':
            yield
            return
        os.rename(self.installed, self.aside)
        os.rename(self.baseline, self.installed)
        try:
            yield
        finally:
            os.rename(self.installed, self.baseline)
            os.rename(self.aside, self.installed)


def site_packages(conninfo):
    """The folder pgad's shims put on sys.path (written into them by make install)."""
    with psycopg.connect(conninfo, autocommit=True) as db:
        source = db.execute("SELECT prosrc FROM pg_proc WHERE proname = '_loss'").fetchone()[0]
    return re.search(r"sys.path.insert\(0, '([^']*)'\)", source).group(1)


# The stages of a first call, timed inside a backend (--breakdown); SITE: where pgad's shims find its environment
STAGES = r'''
import signal, sys, time
t, names = [time.perf_counter()], []
def mark(name):
    t.append(time.perf_counter())
    names.append(name)
if SITE not in sys.path:
    sys.path.insert(0, SITE)
mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
import numpy
signal.pthread_sigmask(signal.SIG_SETMASK, mask)
mark('import numpy')
import pgad, pgad.lang
mark('import pgad, pgad.lang')
from pgad import api
mark('import pgad.api')
import llvmlite.binding
mark('import llvmlite.binding')
from pgad.jit import compiler, worker
mark('import pgad.jit.compiler')
compiler.engine()
mark('the execution engine')
worker.run(dict(job='llvm', ir='define void @f() {\n  ret void\n}\n', speed_level=3, vectorise=True, codegen_level=3,
                optimised_ir=False, assembly=False), 'an empty module')
mark('the compiler process, an empty module')
plpy.notice(repr([(n, b - a) for n, a, b in zip(names, t, t[1:])]))
'''


def breakdown(conninfo, repeats, swap=None):
    """{variant: {stage: best ms}} of a first call's stages in new sessions (STAGES), the installed pgad's ('this')
    and with swap the baseline's, a round of each in turn."""
    found = {variant: {} for variant in ['this'] + (['baseline'] if swap else [])}
    for _ in range(repeats):
        for variant in found:
            with swap.placed(variant) if swap else contextlib.nullcontext():
                stages(conninfo, found[variant])
    best = {}
    for variant, seconds in found.items():
        base = min(seconds.pop('SELECT 1'))
        seconds['PL/Python starts (DO $$ pass $$)'] = [t - base for t in seconds['PL/Python starts (DO $$ pass $$)']]
        print(f'\n{variant}\n{"stage":<42} {"best ms":>8} {"median ms":>10}')
        for stage, times in seconds.items():
            print(f'{stage:<42} {min(times) * 1e3:>8.1f} {sorted(times)[len(times) // 2] * 1e3:>10.1f}')
        best[variant] = {stage: min(times) * 1e3 for stage, times in seconds.items()}
    return best


def stages(conninfo, found):
    """One round of the stages, each's seconds appended to found[stage]."""
    site = site_packages(conninfo)
    found.setdefault('SELECT 1', []).append(session(conninfo, 'SELECT 1'))
    found.setdefault('PL/Python starts (DO $$ pass $$)', []).append(
        session(conninfo, 'DO $$ pass $$ LANGUAGE plpython3u'))
    notices = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute(f'DO $$\nSITE = {site!r}\n{STAGES}$$ LANGUAGE plpython3u')
        for stage in ('first pgad.loss after the imports', 'a second pgad.loss'):
            found.setdefault(stage, []).append(
                statement(conn, 'SELECT pgad.loss(%s, %s, %s::jsonb)', (LOSS, 'points', WEIGHTS)))
    for stage, seconds in ast.literal_eval(notices[-1]):
        found.setdefault(stage, []).append(seconds)


def report(found):
    """The table of each variant's figures, printed; {variant: {case: figures}}."""
    figures = {}
    for variant, (times, warm, cpu) in found.items():
        base, base_cpu = min(times['SELECT 1']), min(cpu['SELECT 1'])
        rows = {'SELECT 1': {'session_ms': base * 1e3, 'backend_cpu_ms': base_cpu * 1e3}}
        print(f'\n{variant}')
        print(f'{"case":<22} {"session ms":>11} {"− SELECT 1":>11} {"warm ms":>8} {"first − warm":>13} '
              f'{"CPU − SELECT 1":>15}')
        print(f'{"SELECT 1":<22} {base * 1e3:>11.1f} {"":>11} {"":>8} {"":>13} {base_cpu * 1e3:>12.1f} ms')
        for case in CASES[1:]:
            best, used = min(times[case]), min(cpu[case]) - base_cpu
            row = {'session_ms': best * 1e3, 'over_select_1_ms': (best - base) * 1e3, 'backend_cpu_ms': used * 1e3}
            line = f'{case:<22} {best * 1e3:>11.1f} {(best - base) * 1e3:>11.1f}'
            if case in warm:
                w = min(warm[case])
                row.update(warm_ms=w * 1e3, first_minus_warm_ms=(best - base - w) * 1e3)
                line += f' {w * 1e3:>8.1f} {(best - base - w) * 1e3:>13.1f}'
            else:
                line += f' {"":>8} {"":>13}'
            rows[case] = row
            print(line + f' {used * 1e3:>15.1f}')
        figures[variant] = rows
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--repeats', type=int, default=7, help='interleaved rounds; each figure is the best (7)')
    p.add_argument('--rows', type=int, default=300, help='rows of the table (300)')
    p.add_argument('--json', help='also write the figures there')
    p.add_argument('--breakdown', action='store_true', help="also time a first call's stages in a backend")
    p.add_argument('--preload', metavar='LIBS', help='the server\'s shared_preload_libraries')
    p.add_argument('--baseline', metavar='DIR', help='another pgad package folder (e.g. main\'s pgad/), swapped in '
                   'place of the installed one for a round of its own after each round (renames pgad/ in the '
                   'server\'s environment: it must be writable)')
    args = p.parse_args()
    with Cluster(server_settings={'shared_preload_libraries': args.preload} if args.preload else None) as pg:
        conninfo = pg.conninfo()
        with psycopg.connect(conninfo, autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            version = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgad'").fetchone()[0]
            server = db.execute('SHOW server_version').fetchone()[0]
            setup(db, args.rows)
        swap = Swap(os.path.join(site_packages(conninfo), 'pgad'), args.baseline) if args.baseline else None
        found = measure(conninfo, args.repeats, swap)
        print(f'pgad {version}, PostgreSQL {server}, {platform.node()}, {os.cpu_count()} cores, '
              f'{args.rows} rows, best of {args.repeats}' + (f', preloaded {args.preload}' if args.preload else ''))
        rows = report(found)
        parts = breakdown(conninfo, args.repeats, swap) if args.breakdown else None
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump({'pgad': version, 'server': server, 'rows': args.rows, 'repeats': args.repeats,
                       'preload': args.preload, 'date': time.strftime('%Y-%m-%d'), 'figures': rows, 'stages': parts,
                       'times': {v: {case: [t * 1e3 for t in ts] for case, ts in times.items()}
                                 for v, (times, _, _) in found.items()}}, f, indent=1)


if __name__ == '__main__':
    main()
