"""Many users at once: sixteen sessions train on the same tables together, one is terminated and one cancelled
mid-training, and the other fourteen return what each returns alone; the server neither crashes nor restarts.

The test starts a cluster of its own, so that its server log (testing.postgresql sends the server's stderr to
<base_dir>/postgresql.log; logging_collector is off) holds only what this test made the server do.
"""
import json
import re
import threading
import time

import psycopg
import pytest

from pgad.throwaway import Cluster

ROWS = 50000
LINEAR = 'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c - d.y)^2'
MODEL = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c'
DESCENT = 'SELECT * FROM pgad.gradient_descent(%s, %s, %s, learning_rate => %s, iterations => %s, mode => %s, ' \
          'backend => %s)'
TRAIN = 'SELECT weights, final_loss, loss_history, iterations FROM pgad.train(%s, %s, %s, %s, %s, ' \
        'learning_rate => %s, iterations => %s, mode => %s, backend => %s, optimizer => %s, batch_size => %s, ' \
        'seed => 7, label => %s, progress_every => %s)'
# a crash of a backend: the postmaster logs "server process (PID n) was terminated by signal 11: Segmentation
# fault" and restarts every session ("terminating any other active server processes"); a PANIC likewise
CRASH = re.compile(r'terminated by signal|server process .* was terminated|PANIC|segmentation|'
                   r'terminating any other active server processes|all server processes terminated', re.IGNORECASE)


def descent(lam, data, weights, rate, iterations, mode, backend):
    return DESCENT, (lam, data, json.dumps(weights), rate, iterations, mode, backend)


def train(model, loss, data, weights, rate, iterations, mode, backend, optimizer, batch_size=256, label='y',
          progress_every=0):
    """The call of pgad.train; its model's name is filled in per run (name=None here). lbfgs and newton take no
    learning_rate (22023): theirs is NULL."""
    rate = None if optimizer in ('lbfgs', 'newton') else rate
    return TRAIN, [None, model, loss, data, json.dumps(weights), rate, iterations, mode, backend, optimizer,
                   batch_size, label, progress_every]


# Fourteen trainings of different lambdas and weights, each a fraction of a second alone, on the same table
SESSIONS = [
    descent(LINEAR, 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.1, 3000, 'reverse', 'llvm'),
    descent(LINEAR, 'shared', {'a': 1, 'b': -1, 'c': 0.5}, 0.05, 3000, 'forward', 'llvm'),
    descent(LINEAR, 'SELECT x1, x2, y FROM shared WHERE g % 2 = 0', {'a': 0, 'b': 0, 'c': 0}, 0.1, 600,
            'reverse', 'python'),
    descent('λ(d, w) softplus(w.a*d.x1 + w.b*d.x2 + w.c) - d.label*(w.a*d.x1 + w.b*d.x2 + w.c)', 'shared',
            {'a': 0, 'b': 0, 'c': 0}, 1.0, 1500, 'reverse', 'llvm'),
    descent('λ(d, w) (w.a*sin(d.x1) + w.b*d.x2^2 - d.y)^2', 'shared', {'a': 0.3, 'b': 0.2}, 0.05, 400,
            'forward', 'python'),
    descent('λ(d, w) sqrt((w.a*d.x1 + w.b - d.y)^2 + 1) + 0.1*w.a^2', 'shared', {'a': 2, 'b': 2}, 0.5, 2000,
            'forward', 'llvm'),
    descent('λ(d, w) exp(w.a*d.x1) - d.label*w.a*d.x1 + (w.b - d.x2)^2', 'shared', {'a': 0.1, 'b': 0}, 0.2, 500,
            'reverse', 'python'),
    train(MODEL, 'squared', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.1, 3000, 'reverse', 'llvm', 'gd',
          progress_every=100),
    train(MODEL, 'squared', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.01, 20, 'forward', 'python', 'sgd',
          progress_every=1),
    train(MODEL, 'logistic', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.1, 20, 'reverse', 'llvm', 'momentum',
          label='label', progress_every=1),
    train(MODEL, 'absolute', 'SELECT x1, x2, y FROM shared WHERE g % 3 <> 0', {'a': 1, 'b': 1, 'c': 1}, 0.05, 10,
          'forward', 'llvm', 'adam', batch_size=100, progress_every=1),
    train(MODEL, 'squared', 'shared', {'a': 5, 'b': -5, 'c': 0}, 0.05, 60, 'reverse', 'python', 'lbfgs'),
    train('λ(d, w) w.a*d.x1*d.x2 + w.b*d.x1 + w.c', 'squared', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.05, 500,
          'forward', 'python', 'momentum', batch_size=ROWS, progress_every=20),
    train(MODEL, 'logistic', 'shared', {'a': -1, 'b': 1, 'c': 0}, 0.5, 100, 'reverse', 'llvm', 'lbfgs',
          label='label'),
]
IN_LOOPS = 3  # of these, in their loops (a progress NOTICE came) before the two are stopped
# The two that are stopped: trainings far longer than the test, which report progress, so that the test knows
# they are in their loops (progress_every => 1: a NOTICE after each iteration)
TERMINATED = train(MODEL, 'squared', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.01, 10 ** 8, 'reverse', 'llvm', 'gd',
                   progress_every=1)
CANCELLED = train(MODEL, 'logistic', 'shared', {'a': 0, 'b': 0, 'c': 0}, 0.01, 10 ** 8, 'forward', 'python',
                  'adam', batch_size=512, label='label', progress_every=1)


@pytest.fixture(scope='module')
def cluster():
    with Cluster() as pg:
        with psycopg.connect(pg.conninfo(), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            db.execute(f'CREATE TABLE shared AS SELECT g, sin(g)::float8 AS x1, cos(3*g)::float8 AS x2, '
                       f'(2*sin(g) - cos(3*g) + 0.5 + 0.1*sin(7*g))::float8 AS y, '
                       f'(sin(g) + 0.8*sin(11*g) > 0)::int::float8 AS label FROM generate_series(1, {ROWS}) AS g')
        yield pg


def run(db, session, name):
    """One session's call on db, its model (if any) named name: what it returns, the time it took left out."""
    sql, args = session
    if sql == TRAIN:
        args = [name, *args[1:]]
    return db.execute(sql, args).fetchone()


class Session(threading.Thread):
    """A connection of its own that makes one call once the barrier go lets every session go: .result or .error
    after, and when it finished; at its first progress NOTICE, .training is set, .trained records when, and
    in_loop is released."""
    def __init__(self, cluster, session, name, go, in_loop):
        super().__init__(daemon=True)
        self.session, self.name_, self.go, self.in_loop = session, name, go, in_loop
        self.result = self.error = None
        self.training, self.trained, self.finished = threading.Event(), None, None
        self.db = psycopg.connect(cluster.conninfo(), autocommit=True)
        self.db.add_notice_handler(self.notice)
        self.pid = self.db.execute('SELECT pg_backend_pid()').fetchone()[0]

    def notice(self, diag):
        if diag.message_primary.startswith(f'model "{self.name_}": iteration ') and not self.training.is_set():
            self.trained = time.monotonic()
            self.training.set()
            self.in_loop.release()

    def run(self):
        self.go.wait()
        try:
            self.result = run(self.db, self.session, self.name_)
        except psycopg.Error as e:
            self.error = e
        self.finished = time.monotonic()


def test_sixteen_sessions_train_together_and_one_stopped_disturbs_none(cluster):
    with psycopg.connect(cluster.conninfo(), autocommit=True) as admin:
        server_started = admin.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
        alone = [run(admin, session, f'alone_{k}') for k, session in enumerate(SESSIONS)]

        go, in_loop = threading.Barrier(len(SESSIONS) + 2), threading.Semaphore(0)
        sessions = [Session(cluster, s, f'together_{k}', go, in_loop) for k, s in enumerate(SESSIONS)]
        terminated, cancelled = [Session(cluster, session, name, go, threading.Semaphore(0))
                                 for session, name in ((TERMINATED, 'terminated'), (CANCELLED, 'cancelled'))]
        everyone = [terminated, cancelled, *sessions]
        try:
            [s.start() for s in everyone]
            assert terminated.training.wait(60) and cancelled.training.wait(60)  # both in their loops
            assert all(in_loop.acquire(timeout=60) for _ in range(IN_LOOPS))  # and some of the others
            stopped = time.monotonic()
            admin.execute('SELECT pg_terminate_backend(%s), pg_cancel_backend(%s)', (terminated.pid, cancelled.pid))
            for s in everyone:
                s.join(60)
            assert not any(s.is_alive() for s in everyone)
        finally:
            for s in everyone:
                if s.is_alive():
                    admin.execute('SELECT pg_terminate_backend(%s)', (s.pid,))

        assert any(s.trained is not None and s.trained < stopped < s.finished for s in sessions)  # mid-training
        assert isinstance(terminated.error, psycopg.OperationalError) and terminated.db.closed
        assert terminated.error.sqlstate in ('57P01', None)  # the FATAL's 57P01, or only the connection lost
        assert cancelled.error.sqlstate == '57014' and cancelled.error.diag.message_primary == \
            'canceling statement due to user request'
        assert cancelled.db.execute('SELECT 1').fetchone() == (1,)  # a cancel leaves the session usable
        assert [(s.error, s.result) for s in sessions] == [(None, result) for result in alone]  # bit for bit

        # the server went on: no crash, no restart, and nothing of either in its log
        assert admin.execute('SELECT pg_postmaster_start_time()').fetchone()[0] == server_started
        assert admin.execute("SELECT count(*) FROM pgad.models WHERE name LIKE 'together_%'").fetchone()[0] == \
            sum(s.session[0] == TRAIN for s in sessions)
        assert admin.execute("SELECT count(*) FROM pgad.models WHERE name IN ('terminated', 'cancelled')"
                             ).fetchone()[0] == 0  # a stopped training stores nothing
        for s in everyone:
            s.db.close()
    log = cluster.read_bootlog()
    assert 'terminating connection due to administrator command' in log  # the log is the server's: it saw this
    assert 'canceling statement due to user request' in log
    assert CRASH.findall(log) == []


def test_the_crash_patterns_match_a_crash():
    """The log check can fail: these are PostgreSQL's lines after a backend's segfault."""
    log = ('LOG:  server process (PID 4242) was terminated by signal 11: Segmentation fault\n'
           'LOG:  terminating any other active server processes\n')
    assert len(CRASH.findall(log)) == 3
