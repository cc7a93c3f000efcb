"""A cancel, a termination and statement_timeout end a call within about a second however dear its kernel's rows
(docs/security.md, "Bounded, cancellable work"): a kernel call is cut in pieces by its estimated cost (jit/cost.py,
jit/threads.py), and the backend checks for interrupts between its pieces. The kernel here does 32 × 32 matrix
products a row (tens of µs a row): 0.12.0 ran a call over the table's million rows as one piece a thread, and a cancel,
a termination or a timeout there ended the statement 40–54 s later on the loaded 2-core VM; now 0.1 s."""
import json
import threading
import time

import psycopg
import pytest

from conftest import error_of

N = 32
HEAVY = 'λ(d, w) sum(w.a @ outer(w.v * d.x, w.v))'
WEIGHTS = json.dumps({'a': [[0.01] * N] * N, 'v': [0.01] * N})
ROWS = 1_000_000
LATENCY = 1.5  # seconds from the cancel to the end of the statement: a second, and margin for a loaded 2-core VM


@pytest.fixture(scope='module', autouse=True)
def table(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f'CREATE TABLE heavy AS SELECT (i % 1000) / 1000.0::float8 AS x '
                   f'FROM generate_series(1, {ROWS}) AS i')


def ready(db, n):
    """db set to n threads, the heavy kernel compiled and loaded there, and the seconds its call takes to load the
    rows (a cheap call over the same table): the kernel runs from then on."""
    db.execute(f'SET pgad.threads = {n}')
    db.execute('SELECT pgad.gradient(%s, %s, %s)', (HEAVY, 'SELECT x FROM heavy LIMIT 10', WEIGHTS))
    started = time.monotonic()
    db.execute("SELECT pgad.loss('λ(d, w) w.a*d.x', 'heavy', '{\"a\": 1}')")
    return time.monotonic() - started


def heavy(db):
    db.execute('SELECT pgad.gradient(%s, %s, %s)', (HEAVY, 'heavy', WEIGHTS))


@pytest.mark.parametrize('n', [1, 2])
@pytest.mark.parametrize('how', ['pg_cancel_backend', 'pg_terminate_backend'])
def test_a_cancel_or_termination_during_a_dear_kernel_ends_the_call_within_a_second(cluster, dbname, how, n):
    db = psycopg.connect(cluster.conninfo(dbname), autocommit=True)
    try:
        pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
        delay = ready(db, n) + 1.0  # a second into the kernel
        acted = []

        def act():
            time.sleep(delay)
            with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
                acted.append(time.monotonic())
                other.execute(f'SELECT {how}(%s)', (pid,))
        thread = threading.Thread(target=act)
        thread.start()
        with pytest.raises(psycopg.Error) as caught:
            heavy(db)
        ended = time.monotonic()
        thread.join()
        if how == 'pg_cancel_backend':
            assert caught.value.diag.sqlstate == '57014'
        else:
            assert isinstance(caught.value, psycopg.OperationalError)
        assert ended - acted[0] < LATENCY
    finally:
        db.close()


@pytest.mark.parametrize('n', [1, 2])
def test_statement_timeout_during_a_dear_kernel_ends_the_call_within_a_second(db, n):
    timeout = ready(db, n) + 1.0
    db.execute(f"SET statement_timeout = '{int(timeout * 1000)}ms'")
    try:
        started = time.monotonic()
        diag = error_of(db, 'SELECT pgad.gradient(%s, %s, %s)', (HEAVY, 'heavy', WEIGHTS))
        ended = time.monotonic()
    finally:
        db.execute('SET statement_timeout = 0')
    assert (diag.sqlstate, diag.message_primary) == ('57014', 'canceling statement due to statement timeout')
    assert ended - started - timeout < LATENCY


def test_the_server_answers_after_a_cancelled_dear_kernel(db):
    """The pool serves the next call: the same gradient over a few rows, by 1 and 2 threads, agrees."""
    db.execute('SET pgad.threads = 2')
    found = [db.execute('SELECT pgad.gradient(%s, %s, %s)::text', (HEAVY, 'SELECT x FROM heavy LIMIT 20000', WEIGHTS))
             .fetchone()[0] for _ in range(2)]
    assert found[0] == found[1]  # the same bits
