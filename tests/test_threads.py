"""Kernel calls split over the backend's pool of threads (pgad/jit/threads.py, docs/design.md, Threads): a fixed
partition and combine order (bit-identical run to run at a count, 1e-12 across counts), pgad.threads bounded by
pgad.max_threads, every pool thread with every signal blocked, and a cancel or a termination acting during a
threaded call. The partition and the kernels' shares run in process; the rest against the real server."""
import json
import os
import re
import signal
import threading
import time
import uuid

import numpy as np
import psycopg
import pytest

from conftest import error_of
from pgad import limits, program
from pgad.jit import compiler, cost, threads
from pgad.lang import vectors

ROWS = 300_000  # 4 shares of at least threads.SHARE_ROWS rows: 1 to 4 threads
MODEL = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.d'
LINEAR = 'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.d - d.y)^2'
START = '{"a": 0, "b": 0, "c": 0, "d": 0}'
SPLIT = re.compile(r'pgad: a kernel call over (\d+) rows on (\d+) threads')
# every signal but those the kernel will not let a thread block (SIGKILL, SIGSTOP) and the two glibc keeps for itself
# (32, 33: thread cancellation and setxid), as /proc/<pid>/task/<tid>/status shows a thread's blocked set
ALL_BLOCKED = sum(1 << (s - 1) for s in range(1, 65) if s not in (9, 19, 32, 33))


# --- in process: the partition, the combine order, the kernels' shares ----------------------------------------------
@pytest.mark.parametrize('rows', [0, 1, 7, 65_536, 300_001])
@pytest.mark.parametrize('n', [1, 2, 3, 4, 64])
def test_the_shares_cover_the_rows_in_order_and_differ_by_at_most_one_row(rows, n):
    parts = threads.shares(rows, n)
    assert len(parts) == n and parts[0][0] == 0 and parts[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    assert max(e - s for s, e in parts) - min(e - s for s, e in parts) <= 1
    assert parts == threads.shares(rows, n)


def test_the_sums_are_added_in_share_order():
    # (1e16 + 1) + 1 rounds each 1 away; 1e16 + (1 + 1) keeps them: only share order gives the first
    parts = [np.array([1e16]), np.array([1.0]), np.array([1.0])]
    assert threads.combine(parts)[0] == (1e16 + 1.0) + 1.0 != 1e16 + (1.0 + 1.0)
    assert parts[0][0] == 1e16  # the shares' own sums are left as they were


def test_a_call_splits_only_where_each_share_has_enough_rows():
    threads.on_count(lambda: 8)
    try:
        assert threads.count(150) == 1  # Iris: never split
        assert threads.count(2 * threads.SHARE_ROWS - 1) == 1
        assert threads.count(3 * threads.SHARE_ROWS) == 3
        assert threads.count(100 * threads.SHARE_ROWS) == 8
        assert threads.count(3 * threads.LOOP_SHARE_ROWS, threads.LOOP_SHARE_ROWS) == 3
    finally:
        threads.on_count(None)
    assert threads.count(100 * threads.SHARE_ROWS) == 1  # nothing installed (outside the server): one thread


def with_threads(n, kernel, columns, rows, w, share_rows=threads.SHARE_ROWS):
    """The kernel's sums with pgad.threads = n (and rows enough for n shares of share_rows)."""
    threads.on_count(lambda: n)
    try:
        assert threads.count(rows, share_rows) == n
        return kernel(columns, rows, w)
    finally:
        threads.on_count(None)


def test_an_unrolled_kernel_gives_the_same_bits_at_a_count_and_agrees_across_counts():
    prog = program.build(LINEAR, ('a', 'b', 'c', 'd'))
    kernel = compiler.compile(prog).kernel
    rng = np.random.default_rng(0)
    columns = [rng.normal(size=ROWS) for _ in prog.columns]
    w = rng.normal(size=4)
    found = {n: with_threads(n, kernel, columns, ROWS, w) for n in (1, 2, 3, 4)}
    for n in (2, 3, 4):
        assert with_threads(n, kernel, columns, ROWS, w).tobytes() == found[n].tobytes()
        np.testing.assert_allclose(found[n], found[1], rtol=1e-12)
    # each share reads its own rows: the sums of the halves, added, are the 2-thread sums' bits
    half = ROWS // 2
    halves = kernel([c[:half] for c in columns], half, w) + kernel([c[half:] for c in columns], ROWS - half, w)
    assert halves.tobytes() == found[2].tobytes()


def test_a_loop_kernel_offsets_each_block_by_its_rows_and_takes_a_scratch_buffer_a_share():
    """A 3-4-2 network reading a float8[] column (one row-major block of 3 doubles a row) and a number column, by
    the loop kernel storing its tape: each share's block address moves by 3 doubles a row, the number column's by 1."""
    text = 'λ(d, w) logsumexp(w.w2 @ relu(w.w1 @ d.pix + w.b1)) - dot(w.w2 @ relu(w.w1 @ d.pix + w.b1), [1, 0])*d.y'
    shapes = vectors.Shapes((('w1', (4, 3)), ('b1', (4,)), ('w2', (2, 4))), (('pix', 3),))
    prog = program.build(text, ('w1', 'b1', 'w2'), 'reverse', True, shapes=shapes, tape='store')
    assert compiler.form(prog) == 'store'
    rows = 4 * threads.LOOP_SHARE_ROWS + 3
    rng = np.random.default_rng(1)
    pix = rng.normal(size=(rows, 3))
    elements = dict(prog.columns_of)
    columns = [pix[:, elements[c][1] - 1] if c in elements else rng.integers(0, 2, rows).astype(float)
               for c in prog.columns]
    w = rng.normal(size=len(prog.weights)) * 0.5
    kernel = compiler.compile(prog).kernel
    found = {n: with_threads(n, kernel, columns, rows, w, threads.LOOP_SHARE_ROWS) for n in (1, 2, 3, 4)}
    for n in (2, 3, 4):
        assert with_threads(n, kernel, columns, rows, w, threads.LOOP_SHARE_ROWS).tobytes() == found[n].tobytes()
        np.testing.assert_allclose(found[n], found[1], rtol=1e-12)
    half = rows // 2
    halves = (kernel([c[:half] for c in columns], half, w) + kernel([c[half:] for c in columns], rows - half, w))
    assert halves.tobytes() == found[2].tobytes()


def test_a_dear_kernels_call_runs_in_pieces_checking_interrupts_after_each(monkeypatch):
    """A loop kernel of 16 × 16 matrix products a row (µs a row): its call over 20,000 rows is cut in pieces by its
    estimated cost, the calling thread checks interrupts after each piece it runs, and the sums are the pieces'
    added in order: the same bits at a count, 1e-12 across counts."""
    shapes = vectors.Shapes((('a', (16, 16)), ('v', (16,))), ())
    prog = program.build('λ(d, w) sum(w.a @ outer(w.v * d.x, w.v))', ('a', 'v'), 'reverse', True, shapes=shapes)
    assert compiler.form(prog) == 'store'
    kernel = compiler.compile(prog).kernel
    rows = 20_000
    parts = threads.pieces(rows, 1, cost.per_row(prog, 'store'))
    assert len(parts) > 1
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=rows), rng.normal(size=len(prog.weights)) * 0.1
    checks = []
    outer = limits.on_interrupts(lambda: checks.append(1))
    try:
        one = kernel([x], rows, w)
    finally:
        limits.on_interrupts(outer)
    assert len(checks) == len(parts)  # after each piece (the calling thread runs them all)
    with monkeypatch.context() as patch:
        patch.setattr(threads, 'PIECE_NS', float('inf'))  # each piece by hand in one call
        by_hand = threads.combine([kernel([x[start:end]], end - start, w) for start, end in parts])
    assert one.tobytes() == by_hand.tobytes()
    for n in (2, 3):
        found = with_threads(n, kernel, [x], rows, w, threads.LOOP_SHARE_ROWS)
        assert len(threads.pieces(rows, n, cost.per_row(prog, 'store'))) > n  # more pieces than threads
        assert with_threads(n, kernel, [x], rows, w, threads.LOOP_SHARE_ROWS).tobytes() == found.tobytes()
        np.testing.assert_allclose(found, one, rtol=1e-12)


def test_pool_threads_block_every_signal():
    threads.run(lambda start, end: None, 10, 3)
    for thread in threads._pool:
        with open(f'/proc/self/task/{thread.native_id}/status') as f:
            blocked = int(re.search(r'^SigBlk:\s*([0-9a-f]+)$', f.read(), re.M).group(1), 16)
        assert blocked == ALL_BLOCKED, f'{thread.name}: {blocked:016x}'


def test_an_interrupt_is_raised_once_every_share_has_finished():
    finished = []

    def work(start, end):
        if start:
            time.sleep(0.3)
            finished.append(start)
        else:
            time.sleep(0.1)  # the pool's shares start meanwhile
        return start

    def interrupts():
        raise KeyboardInterrupt  # stands for Interrupted, the server's cancel

    with pytest.raises(KeyboardInterrupt):
        threads.run(work, 30, 3, interrupts)
    assert sorted(finished) == [10, 20]
    assert threads.run(work, 30, 3) == [0, 10, 20]  # and the pool serves the next call as before


def test_a_dear_kernels_rows_are_cut_in_pieces_of_piece_ns_a_multiple_of_the_threads():
    assert threads.pieces(300_000, 3) == threads.shares(300_000, 3)  # no cost given: the shares
    assert threads.pieces(1_000_000, 2, 1.0) == threads.shares(1_000_000, 2)  # cheap: 1 ms a call, the shares
    for n in (1, 2, 3):
        for rows, row_ns in ((1_000_000, 1_000.0), (300_001, 40_000.0), (7, 1e9)):
            parts = threads.pieces(rows, n, row_ns)
            assert parts == threads.pieces(rows, n, row_ns) and (len(parts) % n == 0 or len(parts) == rows)
            assert parts[0][0] == 0 and parts[-1][1] == rows and all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
            assert all(end > start for start, end in parts)  # a row at least
            assert max((e - s) * row_ns for s, e in parts) <= threads.PIECE_NS or max(e - s for s, e in parts) == 1
            assert len(parts) <= max(n, 2 * n * rows * row_ns / (n * threads.PIECE_NS))  # and no more than needed


def test_a_cancel_stops_the_pieces_not_started_and_waits_for_those_running():
    started, finished = [], []

    def work(start, end):
        started.append(start)
        time.sleep(0.1 if start % 100 == 0 else 0.3)  # the pool's first pieces start while this thread's runs
        finished.append(start)
        return start

    def interrupts():
        raise KeyboardInterrupt

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        threads.run(work, 3000, 3, interrupts, threads.PIECE_NS / 10)  # 300 pieces of 10 rows, 0.1–0.3 s each
    assert time.monotonic() - began < 5  # a piece a thread, not the call's 50 s
    assert sorted(started) == sorted(finished) and 1 <= len(started) <= 3  # each thread's piece, ended before
    checks = []
    parts = threads.run(lambda start, end: start, 3000, 1, lambda: checks.append(1), threads.PIECE_NS / 10)
    assert parts == [s for s, _ in threads.pieces(3000, 1, threads.PIECE_NS / 10)] and len(checks) == len(parts)


def test_where_no_more_threads_start_a_call_runs_on_those_there_are(monkeypatch):
    threads.run(lambda start, end: None, 10, 2)  # at least one in the pool
    monkeypatch.setattr(threads.threading.Thread, 'start', lambda self: (_ for _ in ()).throw(
        RuntimeError("can't start new thread")))
    there = len(threads._pool)
    assert threads.run(lambda start, end: (start, end), 100, there + 5) == threads.shares(100, there + 1)


def test_a_shares_error_is_raised_in_the_calling_thread():
    def work(start, end):
        if start:
            raise MemoryError
        return start

    with pytest.raises(MemoryError):
        threads.run(work, 30, 3)


def test_a_child_of_fork_starts_a_pool_of_its_own():
    # fork() copies the calling thread alone: a child that counted its parent's pool threads as its own waited for
    # them for ever (mutmut's forked test processes did, once the stats run had split a call)
    threads.run(lambda start, end: None, 10, 3)
    parents = [thread.native_id for thread in threads._pool]
    pid = os.fork()
    if pid == 0:  # the child: a split call within 10 s, on threads that are its own, or exit 1
        code = 1
        try:
            signal.alarm(10)
            code = 0 if (threads.run(lambda start, end: start, 30, 3) == [0, 10, 20]
                         and not {t.native_id for t in threads._pool} & set(parents)) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert threads.run(lambda start, end: start, 30, 3) == [0, 10, 20]  # and the parent's pool is as it was


# --- the real server --------------------------------------------------------------------------------------------------
@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('SELECT pg_catalog.setseed(0.29)')
        db.execute(f'CREATE TABLE many AS SELECT random() AS x1, random() AS x2, random() AS x3 '
                   f'FROM generate_series(1, {ROWS})')
        db.execute('ALTER TABLE many ADD COLUMN y float8')
        db.execute('UPDATE many SET y = 2*x1 - x2 + 0.5*x3 + 0.1 + 0.1*random()')
        db.execute('DROP ROLE IF EXISTS dana')
        db.execute('CREATE ROLE dana LOGIN')
        db.execute('GRANT SELECT ON many TO dana')
        db.execute('GRANT CREATE ON SCHEMA public TO dana')


def splits(db):
    """The (rows, threads) of each split the calls on db report (DEBUG2), as they come."""
    found = []
    db.add_notice_handler(lambda d: found.extend(tuple(map(int, m.groups())) for m in [SPLIT.match(d.message_primary)]
                                                 if m))
    db.execute('SET client_min_messages = debug2')
    return found


def descend(db, n, iterations=100):
    db.execute(f'SET pgad.threads = {n}')
    return db.execute(f"SELECT weights::text, loss FROM pgad.gradient_descent(%s, 'many', %s, 0.5, {iterations})",
                      (LINEAR, START)).fetchone()


def lbfgs(db, n):
    db.execute(f'SET pgad.threads = {n}')
    return db.execute("SELECT weights::text, final_loss FROM pgad.train('threads', %s, 'squared', 'many', %s, "
                      "optimizer => 'lbfgs', iterations => 30)", (MODEL, START)).fetchone()


def weights(row):
    found = json.loads(row[0])
    return np.array([found[k] for k in 'abcd'])


def test_a_count_gives_the_same_bits_run_to_run_and_counts_agree_to_1e_12(db):
    db.execute('SET pgad.max_threads = 4')
    # a parallel plan packs the rows in whichever order its workers send them, and sums in another order round
    # differently, with threads or without: the load runs serially here, so that only the threads could change a bit
    db.execute('SET max_parallel_workers_per_gather = 0')
    seen = splits(db)
    results = {}
    for fit in (descend, lbfgs):
        for n in (1, 2, 3, 4):
            results[fit.__name__, n] = fit(db, n)
        for n in (2, 3):
            assert fit(db, n) == results[fit.__name__, n]  # the weights' text and the loss: the same bits
        for n in (2, 3, 4):
            # gradient descent's weights to 1e-12; L-BFGS's to 1e-8: its curvature pairs and line search amplify the
            # sums' last-bit differences (measured 8e-10 after 30 iterations), while its loss agrees to 1e-12
            np.testing.assert_allclose(weights(results[fit.__name__, n]), weights(results[fit.__name__, 1]),
                                       rtol=1e-12 if fit is descend else 1e-8)
            assert results[fit.__name__, n][1] == pytest.approx(results[fit.__name__, 1][1], rel=1e-12)
    assert {n for _, n in seen} == {2, 3, 4} and {rows for rows, _ in seen} == {ROWS}
    np.testing.assert_allclose(weights(results['lbfgs', 1]), [2, -1, 0.5, 0.15], atol=0.01)  # it fitted


def test_the_automatic_count_is_max_parallel_workers_per_gather_plus_one_within_the_cores(db):
    seen = splits(db)
    db.execute('SET pgad.max_threads = 64')
    db.execute('SET max_parallel_workers_per_gather = 2')
    descend(db, 0, 2)
    automatic = min(3, len(os.sched_getaffinity(0)))
    assert seen == ([(ROWS, automatic)] if automatic > 1 else [])
    db.execute('SET max_parallel_workers_per_gather = 0')
    seen.clear()
    descend(db, 0, 2)
    assert seen == []  # one thread: nothing split


def test_a_plain_role_cannot_raise_max_threads_and_its_threads_stop_there(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as admin:
        admin.execute('ALTER ROLE dana SET pgad.max_threads = 3')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='dana'), autocommit=True) as dana:
            dana.execute("SELECT pgad.loss('λ(d, w) d.x1', 'SELECT 1.0 AS x1', '{}')")  # pgad.so loaded: its settings
            assert error_of(dana, 'SET pgad.max_threads = 64').sqlstate == '42501'
            assert dana.execute('SHOW pgad.max_threads').fetchone()[0] == '3'
            seen = splits(dana)
            descend(dana, 64, 2)
            assert seen == [(ROWS, 3)]
    finally:
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as admin:
            admin.execute('ALTER ROLE dana RESET pgad.max_threads')


def task_masks(pid):
    """{thread id: its blocked signals} of every thread of process pid."""
    masks = {}
    for tid in os.listdir(f'/proc/{pid}/task'):
        with open(f'/proc/{pid}/task/{tid}/status') as f:
            masks[int(tid)] = int(re.search(r'^SigBlk:\s*([0-9a-f]+)$', f.read(), re.M).group(1), 16)
    return masks


def test_every_thread_of_the_backend_but_its_own_blocks_every_signal(db):
    pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
    db.execute('SET pgad.max_threads = 4')
    descend(db, 4, 2)
    masks = task_masks(pid)
    assert len(masks) >= 4  # the backend's own, and 3 in the pool (and numpy's BLAS threads, if it has any)
    assert {tid: m for tid, m in masks.items() if tid != pid and m != ALL_BLOCKED} == {}
    assert masks[pid] != ALL_BLOCKED  # the backend's own thread takes the server's signals
    # and the compiler process still starts from a backend with threads: a lambda compiled nowhere before (the
    # disk cache is off, and the constant new)
    db.execute("SET pgad.cache_directory = ''")
    fresh = f'λ(d, w) (w.a*d.x1 - d.y + {uuid.uuid4().int % 10**9})^2'
    assert db.execute("SELECT pgad.loss(%s, 'many', '{\"a\": 1}')", (fresh,)).fetchone()[0] > 0
    assert db.execute("SELECT pgad.gradient(%s, 'many', '{\"a\": 1}')", (fresh,)).fetchone()[0] is not None


def test_the_aggregates_final_step_splits_its_rows_too(db):
    db.execute('SET max_parallel_workers_per_gather = 0')
    seen = splits(db)
    db.execute('SET pgad.threads = 2')
    fit = db.execute("SELECT (f).weights::text, (f).loss FROM (SELECT pgad.gradient_descent_agg(%s, %s, m, "
                     "'{\"learning_rate\": 0.5, \"iterations\": 100}') AS f FROM many AS m) AS a",
                     (LINEAR, START)).fetchone()
    assert seen == [(ROWS, 2)]
    assert fit == descend(db, 2)  # the same rows in the same order, the same shares: the same bits


def test_a_cancel_during_a_threaded_descent_stops_it_within_a_second(cluster, dbname, db):
    db.execute('SET max_parallel_workers_per_gather = 0')  # the rows in the same order at each load
    reference = descend(db, 2)
    pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
    seen = splits(db)
    cancelled = []

    def cancel():
        time.sleep(2.0)
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
            cancelled.append(time.monotonic())
            other.execute('SELECT pg_cancel_backend(%s)', (pid,))
    thread = threading.Thread(target=cancel)
    thread.start()
    diag = error_of(db, "SELECT pgad.gradient_descent(%s, 'many', %s, 0.5, 100000000)", (LINEAR, START))
    stopped = time.monotonic()
    thread.join()
    assert diag.sqlstate == '57014'
    assert seen == [(ROWS, 2)]
    assert stopped - cancelled[0] < 1.5  # a second, and margin for the loaded 2-core machine
    assert descend(db, 2) == reference  # the pool serves the next call as before


def test_the_server_survives_a_termination_during_a_threaded_descent(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
        started_at = other.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
            pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
            db.execute('SET pgad.threads = 2')
            timer = threading.Timer(2.0, lambda: other.execute('SELECT pg_terminate_backend(%s)', (pid,)))
            timer.start()
            with pytest.raises(psycopg.OperationalError):
                db.execute("SELECT pgad.gradient_descent(%s, 'many', %s, 0.5, 100000000)", (LINEAR, START))
            timer.join()
        assert other.execute('SELECT pg_postmaster_start_time()').fetchone()[0] == started_at  # no crash, no restart
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        assert descend(db, 2, 2)[1] > 0
