"""make bench: pgad against what a PostgreSQL user would otherwise do, side by side on one server.

For each data set (linear and logistic regression, P features, N rows, made in SQL with a fixed seed) it times
the same batch gradient descent (K iterations from zero weights, one learning rate, the mean loss) done by

  pgad            pgad.gradient_descent for each backend (python, llvm) and mode (reverse, forward) the server has;
                  its data load is timed on its own (pgad.loss: one load and one evaluation), and the cost of an
                  iteration is (time(K iterations) - time(0 iterations)) / (K * N)
  plain SQL       a PL/pgSQL loop, one SELECT avg(<hand-written gradient>) FROM table per iteration
  PL/Python       a plpython3u aggregate whose transition function (Python, once per row) sums the gradient
  NumPy, PyTorch, JAX
                  export with COPY ... (FORMAT BINARY), parsed by numpy, then trained in this process (float64)

next to one scan of the table (SELECT sum(<the loss in SQL>) FROM table), and the cold start of a connection.
Every contender's fitted weights are checked against pgad's python backend. Output: bench/results/results.json,
results.md (printed at the end) and time_vs_n.png. A timing is the best of up to 5 runs for what takes under a
second, else of one run (--repeats, --repeat-budget). bench/README.md has the details and the flags.
"""
import argparse
import contextlib
import datetime
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # pgad.throwaway, also before an editable install's .pth is read

# module → the extra that brings it
NEEDED = {'numpy': 'bench', 'matplotlib': 'bench', 'torch': 'bench', 'jax': 'bench', 'jaxlib': 'bench',
          'sklearn': 'bench', 'statsforecast': 'bench', 'psycopg': 'dev', 'testing.postgresql': 'dev'}
SCHEMA = 'pgad_bench'
BIG_N = 1_000_000  # from here on the slow contenders run capped iterations


def ensure_packages():
    """Import what the benchmarks need; when something is missing, pip-install the project's bench extra."""
    def missing():
        gone = []
        for module in NEEDED:
            try:
                importlib.import_module(module)
            except ImportError:
                gone.append(module)
        return gone

    gone = missing()
    if not gone:
        return
    extras = ','.join(sorted({NEEDED[m] for m in gone}))
    command = [sys.executable, '-m', 'pip', 'install', '-q', '--disable-pip-version-check', '-e', f'.[{extras}]']
    print(f'bench: {", ".join(gone)} not installed; running {" ".join(command)} in {ROOT}', flush=True)
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        sys.exit(f'bench: installing failed; run {sys.executable} -m pip install -e \'.[dev,bench]\' from {ROOT}')
    importlib.invalidate_caches()
    gone = missing()
    if gone:
        sys.exit(f'bench: still cannot import {", ".join(gone)}; '
                 f'run {sys.executable} -m pip install -e \'.[dev,bench]\' from {ROOT}')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--quick', action='store_true', help='only P = 2, 8 and N = 1e5 (a smoke test)')
    p.add_argument('--big', action='store_true', help='add N = 1e7 (long: see bench/README.md)')
    p.add_argument('--iterations', type=int, default=20, metavar='K', help='gradient descent iterations (20)')
    p.add_argument('--learning-rate', type=float, default=0.01, help='learning rate (0.01)')
    p.add_argument('--features', type=_ints, metavar='P,...', help='override the feature counts')
    p.add_argument('--rows', type=_ints, metavar='N,...', help='override the row counts')
    p.add_argument('--losses', type=_names, default=['linear', 'logistic'], metavar='L,...',
                   help='linear, logistic (both)')
    p.add_argument('--skip', type=_names, default=[], metavar='C,...',
                   help=f'contenders to leave out: {", ".join(CONTENDER_GROUPS)}')
    p.add_argument('--sql-cap', type=int, default=3, metavar='K',
                   help='iterations of plain SQL at N >= 1e6 (3); all K below')
    p.add_argument('--plpython-cap', type=int, default=3, metavar='K', help='iterations of PL/Python at N < 1e6 (3)')
    p.add_argument('--plpython-cap-large', type=int, default=1, metavar='K',
                   help='iterations of PL/Python at N >= 1e6 (1)')
    p.add_argument('--repeats', type=int, default=1,
                   help='time each measurement at least this many times, keep the fastest (1)')
    p.add_argument('--repeat-budget', type=float, default=1.0, metavar='S',
                   help='and repeat it, up to 5 times, while its runs so far took less than S seconds (1.0)')
    p.add_argument('--no-calibrate', action='store_true',
                   help='never rerun pgad with 10*K iterations when K iterations are too quick to time')
    p.add_argument('--cold-repeats', type=int, default=3, help='new connections for the cold-start measurement (3)')
    p.add_argument('--dsn', default=os.environ.get('PGAD_DSN'),
                   help='use this server (libpq string; default $PGAD_DSN) instead of a throwaway cluster')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'), help='results folder (bench/results)')
    args = p.parse_args(argv)
    if args.features is None:
        args.features = [2, 8] if args.quick else [2, 8, 32]
    if args.rows is None:
        args.rows = [100_000] if args.quick else [100_000, 1_000_000] + ([10_000_000] if args.big else [])
    for name in args.losses:
        if name not in ('linear', 'logistic'):
            p.error(f'unknown loss {name!r}')
    for name in args.skip:
        if name not in CONTENDER_GROUPS:
            p.error(f'unknown contender {name!r}: one of {", ".join(CONTENDER_GROUPS)}')
    if args.iterations < 1:
        p.error('--iterations must be at least 1')
    return args


def _ints(text):
    return [int(float(v)) for v in text.split(',') if v]


def _names(text):
    return [v.strip() for v in text.split(',') if v.strip()]


CONTENDER_GROUPS = ['pgad', 'sql', 'plpython', 'numpy', 'torch', 'jax', 'scan', 'cold']
PGAD_VARIANTS = [('python', 'reverse'), ('python', 'forward'), ('llvm', 'forward'), ('llvm', 'reverse')]


# --- data sets ------------------------------------------------------------------------------------------------------
class Dataset:
    """One table: x1..xP uniform in [-1, 1], y from a fixed linear model (plus noise, or through a sigmoid)."""

    def __init__(self, kind, p, n):
        self.kind, self.p, self.n = kind, p, n
        self.table = f'{"lin" if kind == "linear" else "log"}_p{p}_n{n}'
        self.xs = [f'x{j}' for j in range(1, p + 1)]
        self.names = [f'w{j}' for j in range(1, p + 1)] + ['b']
        self.start = json.dumps({name: 0 for name in self.names})
        z = ' + '.join(f'w.w{j}*d.x{j}' for j in range(1, p + 1)) + ' + w.b'
        self.lam = (f'λ(d, w) ({z} - d.y)^2' if kind == 'linear' else f'λ(d, w) softplus({z}) - d.y*({z})')

    def create_sql(self):
        beta = [(-1) ** j * (1 + (j - 1) % 3) / 2 for j in range(1, self.p + 1)]  # -0.5, 1, -1.5, 0.5, ...
        model = ' + '.join(f'{b:g}*x{j}' for j, b in enumerate(beta, 1)) + ' + 0.5'
        y = (f'{model} + 0.1*(2*random() - 1)' if self.kind == 'linear' else
             f'(random() < 1/(1 + exp(-({model}))))::int::float8')
        draws = ', '.join(f'2*random() - 1 AS {x}' for x in self.xs)
        return (f'CREATE TABLE {self.table} AS SELECT {", ".join(self.xs)}, {y} AS y '
                f'FROM (SELECT {draws} FROM generate_series(1, {self.n})) AS draws')

    def sql_z(self, weights):
        """The linear form in SQL over the columns, with weights as SQL expressions (literals or variables)."""
        return ' + '.join(f'{w}*{x}' for w, x in zip(weights, self.xs)) + f' + {weights[-1]}'

    def sql_loss(self, weights):
        z = self.sql_z(weights)
        return f'({z} - y)^2' if self.kind == 'linear' else f'ln(1 + exp({z})) - y*({z})'


# --- timing and checking -------------------------------------------------------------------------------------------
def timed(fn, repeats=1, budget=0.0, most=5):
    """(seconds of the fastest call, that call's result): fn is called `repeats` times, and again (up to `most`
    calls in all) while the calls so far took less than `budget` seconds, so quick measurements are best-of-5."""
    best = result = None
    spent, calls = 0.0, 0
    while calls < max(1, repeats) or (calls < most and spent < budget):
        started = time.perf_counter()
        out = fn()
        took = time.perf_counter() - started
        spent, calls = spent + took, calls + 1
        if best is None or took < best:
            best, result = took, out
    return best, result


def relative_difference(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(float(np.max(np.abs(b))), 1e-300)
    return float(np.max(np.abs(a - b))) / scale


class Bench:
    def __init__(self, args, dsn):
        import psycopg
        self.args, self.dsn = args, dsn
        self.connect_kwargs = {'autocommit': True, 'options': f'-c search_path={SCHEMA},public'}
        self.db = psycopg.connect(dsn, **self.connect_kwargs)
        self.rows = []          # every measurement, as dicts
        self.datasets = []      # what each table took to make, and its size
        self.cold = []          # cold-start measurements
        self.warnings = []
        self.backends = {}      # backend → 'available' or why not
        self.K, self.lr = args.iterations, args.learning_rate
        self.repeat = (args.repeats, args.repeat_budget)  # timed()'s repeats and budget
        self.started = time.perf_counter()

    def log(self, text):
        print(text, flush=True)

    def warn(self, text):
        self.warnings.append(text)
        print(f'WARNING: {text}', flush=True)

    def skip(self, group):
        return group in self.args.skip

    # --- setup ---
    def setup(self):
        db = self.db
        db.execute('CREATE EXTENSION IF NOT EXISTS pgad CASCADE')
        if db.execute('SELECT FROM pg_catalog.pg_namespace WHERE nspname = %s', (SCHEMA,)).fetchone():
            raise SystemExit(f'bench: schema {SCHEMA} exists already; the bench makes and drops a schema of its '
                             'own, and drops nothing it did not make: drop or rename it first')
        db.execute(f'CREATE SCHEMA {SCHEMA}')
        self.made_schema = True
        self.server_version = db.execute('SHOW server_version').fetchone()[0]
        self.pgad_version = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgad'").fetchone()[0]
        self.settings = dict(db.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', "
            "'max_parallel_workers_per_gather', 'jit')").fetchall())
        db.execute(PLPYTHON_SQL)
        self.log(f'PostgreSQL {self.server_version}, pgad {self.pgad_version}, '
                 f'{os.cpu_count()} CPUs, K = {self.K} iterations, learning rate {self.lr:g}')
        self.detect_backends()

    def detect_backends(self):
        import psycopg
        for backend in dict.fromkeys(b for b, _ in PGAD_VARIANTS):
            try:
                self.db.execute("SELECT pgad.gradient('λ(d, w) (w.a*d.x - d.y)^2', "
                                "'SELECT 1.0::float8 AS x, 2.0::float8 AS y', '{\"a\": 0}', 'reverse', %s)",
                                (backend,))
                self.backends[backend] = 'available'
            except psycopg.Error as e:
                unknown = e.sqlstate == '22023' and 'unknown backend' in str(e)
                self.backends[backend] = 'not in this pgad' if unknown else f'failed: {_first_line(e)}'
        self.log('pgad backends: ' + ', '.join(f'{b} ({s})' for b, s in self.backends.items()))

    # --- cold start ---
    def cold_start(self):
        import psycopg
        ds = Dataset('linear', 8, 10_000)
        self.db.execute(f'DROP TABLE IF EXISTS {ds.table}')
        self.db.execute('SELECT setseed(0.5)')
        self.db.execute(ds.create_sql())
        self.db.execute(f'VACUUM ANALYZE {ds.table}')
        sql = 'SELECT pgad.gradient(%s, %s, %s, %s, %s)'
        for backend, state in self.backends.items():
            if state != 'available':
                continue
            for rep in range(1, self.args.cold_repeats + 1):
                try:
                    connect_s, conn = timed(lambda: psycopg.connect(self.dsn, **self.connect_kwargs))
                    with conn:
                        params = (ds.lam, ds.table, ds.start, 'reverse', backend)
                        first_s, _ = timed(lambda: conn.execute(sql, params).fetchone())
                        second_s, _ = timed(lambda: conn.execute(sql, params).fetchone())
                except psycopg.Error as e:
                    self.warn(f'cold start, backend {backend}: {_first_line(e)}')
                    break
                self.cold.append({'backend': backend, 'mode': 'reverse', 'connection': rep, 'table': ds.table,
                                  'rows': ds.n, 'features': ds.p, 'connect_s': connect_s,
                                  'first_call_s': first_s, 'second_call_s': second_s})
                self.log(f'cold start {backend:6} connection {rep}: connect {connect_s * 1e3:.0f} ms, '
                         f'first pgad.gradient {first_s * 1e3:.0f} ms, second {second_s * 1e3:.0f} ms')
        self.db.execute(f'DROP TABLE {ds.table}')

    # --- one data set ---
    def run_dataset(self, ds):
        db = self.db
        self.log(f'\n== {ds.table}: {ds.kind} regression, P = {ds.p}, N = {ds.n:,}   '
                 f'[{time.perf_counter() - self.started:.0f} s into the run]')
        db.execute(f'DROP TABLE IF EXISTS {ds.table}')
        db.execute('SELECT setseed(0.25)')
        made_s, _ = timed(lambda: db.execute(ds.create_sql()))
        vacuum_s, _ = timed(lambda: db.execute(f'VACUUM ANALYZE {ds.table}'))
        size = db.execute('SELECT pg_total_relation_size(%s)', (ds.table,)).fetchone()[0]
        self.datasets.append({'table': ds.table, 'loss': ds.kind, 'features': ds.p, 'rows': ds.n,
                              'create_s': made_s, 'vacuum_s': vacuum_s, 'bytes': size})
        self.log(f'   made in {made_s:.1f} s (+ VACUUM ANALYZE {vacuum_s:.1f} s), {size / 2**20:.0f} MB')
        self.reference_cache = {}
        self.scan_s = None
        try:
            if not self.skip('scan'):
                self.scan(ds)
            if not self.skip('pgad'):
                self.pgad(ds)
            if not self.skip('sql'):
                self.plain_sql(ds)
            if not self.skip('plpython'):
                self.plpython(ds)
            if not all(self.skip(g) for g in ('numpy', 'torch', 'jax')):
                self.exported(ds)
        finally:
            db.execute(f'DROP TABLE {ds.table} CASCADE')
            db.execute(f'DROP FUNCTION IF EXISTS bench_sql_gd_{ds.table}')
        for row in self.rows:
            if row['table'] == ds.table and self.scan_s and row.get('end_to_end_s') is not None:
                row['ratio_to_scan'] = row['end_to_end_s'] / self.scan_s

    def record(self, ds, contender, **values):
        row = {'table': ds.table, 'loss': ds.kind, 'features': ds.p, 'rows': ds.n, 'contender': contender,
               'iterations_asked': self.K, 'learning_rate': self.lr}
        row.update(values)
        self.rows.append(row)
        if row.get('error'):
            self.log(f'   {contender:28} ERROR {row["error"]}')
        elif row.get('skipped'):
            self.log(f'   {contender:28} skipped: {row["skipped"]}')
        else:
            parts = [f'{k} {_fmt(row[k])}' for k in ('load_s', 'compute_s', 'end_to_end_s') if row.get(k) is not None]
            if row.get('ns_per_row_iteration') is not None:
                parts.append(f'{row["ns_per_row_iteration"]:.3g} ns/row/it')
            if row.get('iterations') not in (None, self.K):
                parts.append(f'{row["iterations"]} iterations run')
            self.log(f'   {contender:28} ' + ', '.join(parts))
        return row

    def check(self, ds, contender, weights, iterations):
        """Compare fitted weights with pgad's python backend after the same iterations; a warning if off."""
        reference = self.reference(ds, iterations)
        if reference is None:
            return {'check': 'no reference'}
        diff = relative_difference(weights, reference)
        if not diff <= 1e-6:
            self.warn(f'{contender} on {ds.table}: weights after {iterations} iterations differ from pgad '
                      f'python-backend\'s by {diff:.2e} relative (more than 1e-6)')
        return {'max_relative_difference': diff, 'agrees': bool(diff <= 1e-6)}

    def reference(self, ds, iterations):
        """pgad python backend's (reverse mode) weights after iterations, computed once per count (untimed)."""
        import psycopg
        if iterations not in self.reference_cache:
            try:
                weights, _ = self.pgad_call(ds, iterations, 'reverse', 'python')
            except psycopg.Error as e:
                self.warn(f'no reference weights for {ds.table} after {iterations} iterations: {_first_line(e)}')
                weights = None
            self.reference_cache[iterations] = weights
        return self.reference_cache[iterations]

    # --- one scan ---
    def scan(self, ds):
        weights = [f'{0.1:g}'] * (ds.p + 1)
        sql = f'SELECT sum({ds.sql_loss(weights)}) FROM {ds.table}'
        self.db.execute(sql).fetchone()  # the first scan after CREATE TABLE warms the caches
        took, _ = timed(lambda: self.db.execute(sql).fetchone(), *self.repeat)
        self.scan_s = took
        self.record(ds, 'one scan (SELECT sum(loss))', end_to_end_s=took, ratio_to_scan=1.0, sql=sql)

    # --- pgad ---
    def pgad_call(self, ds, iterations, mode, backend, data=None):
        weights, loss = self.db.execute(
            'SELECT weights, loss FROM pgad.gradient_descent(%s, %s, %s, learning_rate => %s, iterations => %s, '
            'mode => %s, backend => %s)', (ds.lam, data or ds.table, ds.start, self.lr, iterations, mode,
                                          backend)).fetchone()
        return [weights[name] for name in ds.names], loss

    def pgad(self, ds):
        import psycopg
        db, K, N = self.db, self.K, ds.n
        sample = f'SELECT * FROM {ds.table} LIMIT 1000'
        # load: pgad.loss is one load and one evaluation of the loss; a first call on a sample compiles its kernel
        load_s = None
        try:
            loss_sql = 'SELECT pgad.loss(%s, %s, %s)'
            db.execute(loss_sql, (ds.lam, sample, ds.start)).fetchone()
            load_s, _ = timed(lambda: db.execute(loss_sql, (ds.lam, ds.table, ds.start)).fetchone(), *self.repeat)
            self.log(f'   pgad load (pgad.loss)        {load_s:.3g} s')
        except psycopg.Error as e:
            self.warn(f'pgad.loss on {ds.table}: {_first_line(e)}')
        for backend, mode in PGAD_VARIANTS:
            name = f'pgad {backend} {mode}'
            if self.backends.get(backend) != 'available':
                self.record(ds, name, skipped=f'backend {backend}: {self.backends.get(backend)}')
                continue
            try:
                warmup_s, _ = timed(lambda: self.pgad_call(ds, 1, mode, backend, sample))
                zero_s, _ = timed(lambda: self.pgad_call(ds, 0, mode, backend), *self.repeat)
                full_s, (weights, loss) = timed(lambda: self.pgad_call(ds, K, mode, backend), *self.repeat)
                # When K iterations are lost in the noise of the load, time more (2 to 10 times as many each
                # step, at most 1000·K) until the iterations take at least half a second and half the load.
                k, k_s, target = K, full_s, max(0.5, 0.5 * zero_s)
                while not self.args.no_calibrate and k_s - zero_s < target and k < 1000 * K:
                    grow = 1.5 * target / (k_s - zero_s) if k_s - zero_s > 0.05 * target else 10
                    k = min(1000 * K, int(k * min(10, max(2, grow))))
                    k_s, _ = timed(lambda: self.pgad_call(ds, k, mode, backend), *self.repeat)
                per_iteration = (k_s - zero_s) / k
            except psycopg.Error as e:
                self.record(ds, name, error=_first_line(e))
                continue
            if backend == 'python' and mode == 'reverse':
                self.reference_cache[K] = weights
            self.record(ds, name, backend=backend, mode=mode, iterations=K, load_s=load_s,
                        compute_s=per_iteration * K, ns_per_row_iteration=per_iteration / N * 1e9,
                        end_to_end_s=full_s, time_0_iterations_s=zero_s, time_K_iterations_s=full_s,
                        per_iteration_from_iterations=k, time_per_iteration_run_s=k_s,
                        warmup_on_sample_s=warmup_s, final_loss=loss, weights=weights,
                        **self.check(ds, name, weights, K))

    # --- plain SQL: a PL/pgSQL loop over SELECT avg(gradient) ---
    def plain_sql(self, ds):
        import psycopg
        K = self.K
        iterations = min(K, self.args.sql_cap) if ds.n >= BIG_N else K
        function = f'bench_sql_gd_{ds.table}'
        try:
            self.db.execute(plain_sql_function(ds, function))
            took, weights = timed(lambda: self.db.execute(f'SELECT {function}(%s, %s)',
                                                          (iterations, self.lr)).fetchone()[0], *self.repeat)
        except psycopg.Error as e:
            self.record(ds, 'plain SQL (PL/pgSQL loop)', error=_first_line(e))
            return
        self.record_capped(ds, 'plain SQL (PL/pgSQL loop)', 'plain SQL', iterations, took, weights)

    def record_capped(self, ds, name, label, iterations, took, weights):
        """Record a slow contender that ran `iterations` (at most K): its time per iteration × K."""
        per_iteration = took / iterations
        self.record(ds, name, iterations=iterations, load_s=None, compute_s=per_iteration * self.K,
                    ns_per_row_iteration=per_iteration / ds.n * 1e9, end_to_end_s=per_iteration * self.K,
                    extrapolated=iterations != self.K, measured_s=took, weights=weights,
                    **self.check(ds, label, weights, iterations))

    # --- PL/Python per-row aggregate ---
    def plpython(self, ds):
        import psycopg
        K = self.K
        iterations = min(K, self.args.plpython_cap_large if ds.n >= BIG_N else self.args.plpython_cap)
        aggregate = 'bench_plpy_linear_grad' if ds.kind == 'linear' else 'bench_plpy_logistic_grad'
        sql = f'SELECT {aggregate}(ARRAY[{", ".join(ds.xs)}], y, %s::float8[]) FROM {ds.table}'

        def train():
            w = [0.0] * (ds.p + 1)
            for _ in range(iterations):
                gradient = self.db.execute(sql, (w,)).fetchone()[0]
                w = [wi - self.lr * gi for wi, gi in zip(w, gradient)]
            return w
        try:
            took, weights = timed(train, *self.repeat)
        except psycopg.Error as e:
            self.record(ds, 'PL/Python aggregate', error=_first_line(e))
            return
        self.record_capped(ds, 'PL/Python aggregate', 'PL/Python aggregate', iterations, took, weights)

    # --- export, then NumPy / PyTorch / JAX ---
    def exported(self, ds):
        import psycopg
        try:
            export_s, (X, y) = timed(lambda: export(self.db, ds), *self.repeat)
        except (psycopg.Error, ValueError) as e:
            for group, name in TRAINERS:
                if not self.skip(group):
                    self.record(ds, name, error=f'export: {_first_line(e)}')
            return
        self.log(f'   export (COPY BINARY → numpy) {export_s:.3g} s')
        for group, name in TRAINERS:
            if self.skip(group):
                continue
            try:
                trainer = TRAINER_FUNCTIONS[group]
                # prepare: the library's setup (JAX: the compile) and two iterations, so that first-use costs
                # (thread pools, allocations) stay out of the training time, as pgad's warm-up does
                prepare_s, step = timed(lambda: warmed(trainer(X, y, ds.kind, self.lr)))
                train_s, weights = timed(lambda: step(self.K), *self.repeat)
            except Exception as e:  # a library's own error: record it, go on
                self.record(ds, name, error=f'{type(e).__name__}: {_first_line(e)}')
                continue
            self.record(ds, name, iterations=self.K, load_s=export_s, compute_s=train_s,
                        ns_per_row_iteration=train_s / (self.K * ds.n) * 1e9, end_to_end_s=export_s + train_s,
                        prepare_s=prepare_s, weights=weights, **self.check(ds, name, weights, self.K))


# --- the plain SQL and PL/Python contenders' server-side code -------------------------------------------------------
def plain_sql_function(ds, function):
    """A PL/pgSQL function(iterations, learning_rate) → weights: per iteration, one SELECT of the mean gradient,
    written out by hand; the residual is computed once per row (OFFSET 0 keeps the planner from inlining it into
    every avg)."""
    ws = [f'w{j}' for j in range(1, ds.p + 1)] + ['b']
    gs = [f'g_{w}' for w in ws]
    z = ds.sql_z(ws)
    if ds.kind == 'linear':  # d/dw (z - y)^2 = 2 (z - y) x
        residual, factor = f'{z} - y', '2*'
    else:                    # d/dw softplus(z) - y z = (sigmoid(z) - y) x
        residual, factor = f'1/(1 + exp(-({z}))) - y', ''
    means = ', '.join([f'avg({factor}r*{x})' for x in ds.xs] + [f'avg({factor}r)'])
    declare = ' '.join(f'{w} float8 := 0; {g} float8;' for w, g in zip(ws, gs))
    update = ' '.join(f'{w} := {w} - learning_rate*{g};' for w, g in zip(ws, gs))
    return f"""CREATE OR REPLACE FUNCTION {function}(iterations int, learning_rate float8) RETURNS float8[]
LANGUAGE plpgsql AS $$
DECLARE {declare}
BEGIN
  FOR i IN 1..iterations LOOP
    SELECT {means} INTO {', '.join(gs)}
      FROM (SELECT {', '.join(ds.xs)}, {residual} AS r FROM {ds.table} OFFSET 0) AS rows;
    {update}
  END LOOP;
  RETURN ARRAY[{', '.join(ws)}];
END $$"""


# The state is [gradient sums by w1..wP, by b, rows]; the final function divides by the rows.
PLPYTHON_SQL = f"""
CREATE FUNCTION {SCHEMA}.bench_plpy_linear_step(state float8[], x float8[], y float8, w float8[])
RETURNS float8[] LANGUAGE plpython3u AS $$
s = state if state is not None else [0.0] * (len(w) + 1)
p = len(x)
r = w[p] - y
for j in range(p):
    r += w[j] * x[j]
r += r
for j in range(p):
    s[j] += r * x[j]
s[p] += r
s[p + 1] += 1
return s
$$;
CREATE FUNCTION {SCHEMA}.bench_plpy_logistic_step(state float8[], x float8[], y float8, w float8[])
RETURNS float8[] LANGUAGE plpython3u AS $$
import math
s = state if state is not None else [0.0] * (len(w) + 1)
p = len(x)
z = w[p]
for j in range(p):
    z += w[j] * x[j]
if z >= 0:
    r = 1 / (1 + math.exp(-z)) - y
else:
    e = math.exp(z)
    r = e / (1 + e) - y
for j in range(p):
    s[j] += r * x[j]
s[p] += r
s[p + 1] += 1
return s
$$;
CREATE FUNCTION {SCHEMA}.bench_plpy_mean(state float8[]) RETURNS float8[] LANGUAGE plpython3u AS $$
return [v / state[-1] for v in state[:-1]]
$$;
CREATE AGGREGATE {SCHEMA}.bench_plpy_linear_grad(float8[], float8, float8[])
    (SFUNC = {SCHEMA}.bench_plpy_linear_step, STYPE = float8[], FINALFUNC = {SCHEMA}.bench_plpy_mean);
CREATE AGGREGATE {SCHEMA}.bench_plpy_logistic_grad(float8[], float8, float8[])
    (SFUNC = {SCHEMA}.bench_plpy_logistic_step, STYPE = float8[], FINALFUNC = {SCHEMA}.bench_plpy_mean);
"""


# --- export and the client-side trainers -----------------------------------------------------------------------------
COPY_SIGNATURE = b'PGCOPY\n\xff\r\n\x00'


def export(db, ds):
    """The table as (X: N×P float64, y: N float64), through COPY ... TO STDOUT (FORMAT BINARY)."""
    columns = ds.xs + ['y']
    data = bytearray()
    with db.cursor() as cursor:
        with cursor.copy(f'COPY (SELECT {", ".join(c + "::float8" for c in columns)} FROM {ds.table}) '
                         'TO STDOUT (FORMAT BINARY)') as copy:
            for chunk in copy:
                data += chunk
    matrix = parse_binary_copy(data, len(columns))
    X = np.ascontiguousarray(matrix[:, :-1])
    y = np.ascontiguousarray(matrix[:, -1])
    return X, y


def parse_binary_copy(data, fields):
    """COPY's binary format, every row `fields` non-NULL float8s → an N×fields float64 array, without a Python loop:
    a row is int16 field count, then per field int32 length 8 and 8 bytes of big-endian float8."""
    if bytes(data[:11]) != COPY_SIGNATURE:
        raise ValueError('not COPY binary data')
    start = 19 + int.from_bytes(data[15:19], 'big')  # signature, flags, header extension
    if bytes(data[-2:]) != b'\xff\xff':
        raise ValueError('COPY binary data without its trailer')
    row_bytes = 2 + 12 * fields
    body = len(data) - 2 - start
    if body % row_bytes:
        raise ValueError('COPY binary rows are not all float8 (a NULL or another type)')
    rows = body // row_bytes
    counts = np.ndarray((rows,), '>i2', data, start, (row_bytes,))
    lengths = np.ndarray((rows, fields), '>i4', data, start + 2, (row_bytes, 12))
    if rows and (np.any(counts != fields) or np.any(lengths != 8)):
        raise ValueError('COPY binary rows are not all float8 (a NULL or another type)')
    return np.ndarray((rows, fields), '>f8', data, start + 6, (row_bytes, 12)).astype(np.float64)


def numpy_trainer(X, y, kind, lr):
    """The hand-written gradient: linear 2·Xᵀ(Xw + b − y)/N, logistic Xᵀ(sigmoid(Xw + b) − y)/N."""
    n, p = X.shape

    def train(iterations):
        w, b = np.zeros(p), 0.0
        for _ in range(iterations):
            z = X @ w + b
            r = 2 * (z - y) if kind == 'linear' else np.exp(-np.logaddexp(0.0, -z)) - y
            w, b = w - lr * (X.T @ r) / n, b - lr * r.mean()
        return [*w.tolist(), float(b)]
    return train


def torch_trainer(X, y, kind, lr):
    """PyTorch autograd, float64 on the CPU: the loss as a torch user writes it, torch.autograd.grad, an update."""
    import torch
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)

    def train(iterations):
        w = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
        b = torch.zeros((), dtype=torch.float64, requires_grad=True)
        for _ in range(iterations):
            z = Xt @ w + b
            loss = ((z - yt) ** 2).mean() if kind == 'linear' else (torch.nn.functional.softplus(z) - yt * z).mean()
            gw, gb = torch.autograd.grad(loss, (w, b))
            with torch.no_grad():
                w -= lr * gw
                b -= lr * gb
        return [*w.detach().tolist(), b.detach().item()]
    return train


def jax_trainer(X, y, kind, lr):
    """JAX, float64: jax.grad of the loss inside one jitted update step, compiled ahead (the compile is the
    prepare time, kept out of the training time as pgad's kernel compile is)."""
    import jax
    import jax.numpy as jnp
    jax.config.update('jax_enable_x64', True)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def loss(params, X, y):
        w, b = params
        z = X @ w + b
        return jnp.mean((z - y) ** 2) if kind == 'linear' else jnp.mean(jax.nn.softplus(z) - y * z)

    def step(params, X, y):
        grads = jax.grad(loss)(params, X, y)
        return tuple(p - lr * g for p, g in zip(params, grads))

    start = (jnp.zeros(X.shape[1], dtype=jnp.float64), jnp.zeros((), dtype=jnp.float64))
    compiled = jax.jit(step).lower(start, Xj, yj).compile()
    jax.block_until_ready((Xj, yj))

    def train(iterations):
        params = start
        for _ in range(iterations):
            params = compiled(params, Xj, yj)
        w, b = jax.block_until_ready(params)
        return [*np.asarray(w).tolist(), float(b)]
    return train


def warmed(train):
    train(2)
    return train


TRAINERS = [('numpy', 'export + NumPy'), ('torch', 'export + PyTorch'), ('jax', 'export + JAX')]
TRAINER_FUNCTIONS = {'numpy': numpy_trainer, 'torch': torch_trainer, 'jax': jax_trainer}
np = None  # numpy, imported in main() once ensure_packages() has run


# --- output ---------------------------------------------------------------------------------------------------------
def _fmt(value, digits=3):
    if value is None:
        return '—'
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value):
            return f'{value:g}'
        if abs(value) >= 10 ** digits:
            return f'{value:,.0f}'
        return f'{value:.{digits}g}'
    return str(value)


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def markdown(bench, meta):
    K = bench.K
    lines = [f'pgad benchmarks, {meta["started"]}: PostgreSQL {meta["postgresql"]}, pgad {meta["pgad"]}, '
             f'{meta["cpus"]} CPUs ({meta["cpu"]}); K = {K} iterations of batch gradient descent, '
             f'learning rate {bench.lr:g}, float64 everywhere.', '',
             '| data set | P | N | contender | load s | compute s | ns/row/iteration | end-to-end s '
             '| ratio to one scan |',
             '|---|--:|--:|---|--:|--:|--:|--:|--:|']
    marked = False
    for row in bench.rows:
        if row.get('skipped'):
            cells = ['skipped: ' + row['skipped'], '', '', '', '']
        elif row.get('error'):
            cells = ['error: ' + row['error'].replace('|', '\\|')[:80], '', '', '', '']
        else:
            e2e = _fmt(row.get('end_to_end_s'))
            if row.get('extrapolated'):
                e2e += f' †{row["iterations"]}'
                marked = True
            flag = '' if row.get('agrees', True) else ' ⚠'
            ratio = row.get('ratio_to_scan')
            cells = [_fmt(row.get('load_s')), _fmt(row.get('compute_s')), _fmt(row.get('ns_per_row_iteration')),
                     e2e + flag, '—' if ratio is None else f'{ratio:,.1f}']
        lines.append(f'| {row["loss"]} | {row["features"]} | {row["rows"]:,} | {row["contender"]} | '
                     + ' | '.join(cells) + ' |')
    lines.append('')
    lines.append('load s: for pgad one pgad.loss call (one load of the columns, one evaluation); for export + X the '
                 'COPY (FORMAT BINARY) into numpy arrays. compute s: the K iterations without the load (pgad: '
                 'time(K) − time(0), or from a run of more iterations, up to 1000·K, where K iterations were too '
                 'quick to tell from the noise of the load). end-to-end s: one whole call (pgad) or export + training. '
                 'ratio: end-to-end over one `SELECT sum(loss) FROM table`.')
    if marked:
        lines.append('')
        lines.append('† N: the slow contender ran N iterations; its compute and end-to-end are its measured time per '
                     'iteration × K.')
    if any(not row.get('agrees', True) for row in bench.rows):
        lines.append('')
        lines.append('⚠ fitted weights differ from pgad python-backend\'s by more than 1e-6 relative.')
    if bench.cold:
        lines += ['', '| cold start: backend | connection | connect ms | first pgad.gradient ms | second ms |',
                  '|---|--:|--:|--:|--:|']
        for c in bench.cold:
            lines.append(f'| {c["backend"]} | {c["connection"]} | {c["connect_s"] * 1e3:.0f} | '
                         f'{c["first_call_s"] * 1e3:.0f} | {c["second_call_s"] * 1e3:.0f} |')
        lines.append('')
        lines.append(f'pgad.gradient (reverse mode) on {bench.cold[0]["rows"]:,} rows, P = '
                     f'{bench.cold[0]["features"]}, on brand-new connections'
                     + ('; connection 1 also found no compiled kernel on disk (a fresh kernel cache per run).'
                        if meta['throwaway_cluster'] else '.'))
    return '\n'.join(lines) + '\n'


def plot(bench, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    losses = [loss for loss in ('linear', 'logistic') if any(r['loss'] == loss for r in bench.rows)]
    if not losses:
        return False
    p = max(r['features'] for r in bench.rows)
    contenders = list(dict.fromkeys(r['contender'] for r in bench.rows))
    colours = {c: plt.cm.tab10(k % 10) for k, c in enumerate(contenders)}
    fig, axes = plt.subplots(1, len(losses), figsize=(6.5 * len(losses), 5.6), squeeze=False)
    for ax, loss in zip(axes[0], losses):
        for contender in contenders:
            rows = sorted((r for r in bench.rows if r['loss'] == loss and r['features'] == p
                           and r['contender'] == contender and r.get('end_to_end_s')), key=lambda r: r['rows'])
            if rows:
                label = contender + (' (per iteration × K)' if any(r.get('extrapolated') for r in rows) else '')
                ax.plot([r['rows'] for r in rows], [r['end_to_end_s'] for r in rows],
                        '--' if contender.startswith('one scan') else '-', marker='o', color=colours[contender],
                        label=label)
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('rows N')
        ax.set_ylabel(f'end-to-end seconds, {bench.K} iterations')
        ax.set_title(f'{loss} regression, P = {p}')
        ax.grid(True, which='both', alpha=0.3)
    handles = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(handles.values(), handles.keys(), loc='lower center', ncol=4, fontsize=8, frameon=False)
    fig.suptitle('pgad and the alternatives: batch gradient descent, time against rows')
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --- the server -----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def server(args):
    """The libpq string of args.dsn, else of a throwaway cluster (started here, stopped and removed at the end)."""
    if args.dsn:
        yield args.dsn
        return
    from pgad.throwaway import Cluster
    # The cluster keeps compiled kernels in a fresh, empty directory of its own (pgad.cache_directory), so that
    # every run measures the same thing; it goes with the cluster.
    print('starting a throwaway PostgreSQL cluster …', flush=True)
    with Cluster() as pg:
        yield pg.conninfo()


def machine():
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    return cpu


def main(argv=None):
    global np
    args = parse_args(argv)
    ensure_packages()
    import numpy
    np = numpy
    import jax
    import torch
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    started = time.perf_counter()
    losses, features, rows = args.losses, args.features, args.rows
    with server(args) as dsn:
        bench = Bench(args, dsn)
        try:
            bench.setup()
            if not bench.skip('cold'):
                bench.cold_start()
            for loss in losses:
                for p in features:
                    for n in rows:
                        bench.run_dataset(Dataset(loss, p, n))
        finally:
            if getattr(bench, 'made_schema', False):  # only the schema it made, with what it made there
                with contextlib.suppress(Exception):
                    bench.db.execute(f'DROP SCHEMA {SCHEMA} CASCADE')
            bench.db.close()
    total_s = time.perf_counter() - started
    meta = {'started': started_at, 'total_s': total_s, 'postgresql': bench.server_version, 'pgad': bench.pgad_version,
            'cpus': os.cpu_count(), 'cpu': machine(), 'python': platform.python_version(),
            'numpy': np.__version__, 'torch': torch.__version__, 'torch_threads': torch.get_num_threads(),
            'jax': jax.__version__, 'settings': bench.settings, 'backends': bench.backends,
            'arguments': {k: v for k, v in vars(args).items() if k != 'dsn'}, 'throwaway_cluster': not args.dsn}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'results.json'), 'w') as f:
        json.dump({'meta': meta, 'datasets': bench.datasets, 'measurements': bench.rows, 'cold_start': bench.cold,
                   'warnings': bench.warnings}, f, indent=1)
    table = markdown(bench, meta)
    with open(os.path.join(args.out, 'results.md'), 'w') as f:
        f.write(table)
    plotted = plot(bench, os.path.join(args.out, 'time_vs_n.png'))
    print('\n' + table)
    print(f'{len(bench.warnings)} warning(s); the whole run took {total_s:.0f} s; results in {args.out}/ '
          f'(results.json, results.md{", time_vs_n.png" if plotted else ""})')


if __name__ == '__main__':
    main()
