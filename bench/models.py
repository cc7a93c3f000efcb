"""pgad.train's models: what scoring with a generated function costs, and how the optimizers compare.

    .venv/bin/python bench/models.py [--rows 1000000] [--features 8] [--repeats 5] [--newton] [--categorical]

On one throwaway cluster, in one connection (so connection start and first-call imports do not count), with
max_parallel_workers_per_gather = 0, best of the repeats, the contenders interleaved:

Scoring, SELECT sum(<prediction>) FROM a table of --rows rows:
  scan             SELECT sum(x1): the yardstick
  hand linear      the linear model written by hand in SQL with the fitted weights as constants
  pgad linear      pgad_models.<linear model>(x1, …, xP), the generated function
  hand sigmoid     1/(1 + exp(-(<linear>))), the usual hand-written logistic prediction
  pgad sigmoid     pgad_models.<model λ(d, w) sigmoid(…)>: its body is the stable two-branch form
  hand 10 groups   CASE g WHEN 0 THEN <linear with group 0's weights> … END, written by hand
  pgad 10 groups   pgad_models.<grouped model>(g, x1, …, xP)

Optimizers, logistic regression on the same rows (labels drawn through a sigmoid): each pgad optimizer's time to
train and its final loss against the optimum, which IRLS (Newton's method, MADlib's default for logregr_train) finds
in NumPy on the exported rows (its time includes the COPY export).

The peers' shape, 1M rows of 2 features and an intercept (shared/peers.md measured MADlib's linregr_train and
logregr_train and psql-autodiff's gradient_descent_l4 on it): pgad.train by lbfgs to convergence for the linear and
the logistic model (and the logistic one by newton, beside MADlib's IRLS figure, quoted), and 100 iterations of
batch gd at rate 0.5 (psql-autodiff's run). --newton runs only the logistic model by lbfgs and by newton on that
shape (docs/performance.md). --categorical runs only a model with a categorical weight (a text column of 50
values, `w.c[d.c] + w.a*d.x`) against the same model one-hot encoded by hand (50 float8 columns and weights): one
pgad.gradient call, and pgad.train to the optimum. Timings are printed, never asserted.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402
import run  # noqa: E402  (bench/run.py, beside this file: its parser of COPY's binary format)

run.np = np  # run.py imports numpy in its main(), after installing its own contenders' packages


def best(db, sql, repeats):
    """The best wall time of sql over the repeats, in ms (the first run warms the caches and is not counted)."""
    db.execute(sql)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        db.execute(sql).fetchall()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def linear(weights, p):
    return ' + '.join(f'{weights[f"w{i}"]!r}*x{i}' for i in range(1, p + 1)) + f' + {weights["b"]!r}'


def train(db, name, model, loss, data, p, **options):
    weights = '{' + ', '.join(f'"w{i}": 0' for i in range(1, p + 1)) + ', "b": 0}'
    args = ''.join(f', {k} => %({k})s' for k in options)
    start = time.perf_counter()
    rows = db.execute(f'SELECT weights, final_loss, iterations FROM pgad.train(%(name)s, %(model)s, %(loss)s, '
                      f'%(data)s, %(weights)s{args})',
                      dict(name=name, model=model, loss=loss, data=data, weights=weights, **options)).fetchall()
    return rows, time.perf_counter() - start


def irls(X, y, iterations=50):
    """Newton's method for the mean logistic loss (IRLS): the optimum, to machine precision."""
    w = np.zeros(X.shape[1])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(X @ w)))
        step = np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]), X.T @ (p - y))
        w -= step
        if np.max(np.abs(step)) < 1e-12:
            break
    z = X @ w
    return w, float(np.mean(np.logaddexp(0, z) - y * z))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, default=8)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--newton', action='store_true',
                        help="only newton against lbfgs on the peers' logistic shape (docs/performance.md)")
    parser.add_argument('--categorical', action='store_true',
                        help='only a categorical weight against its one-hot encoding (docs/performance.md)')
    args = parser.parse_args()
    p, n = args.features, args.rows
    if args.categorical:
        with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            db.execute('SET max_parallel_workers_per_gather = 0')
            categorical(db, n, args.repeats)
        return
    if args.newton:
        with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            db.execute('SET max_parallel_workers_per_gather = 0')
            peers(db, n, args.repeats, only_logistic=True)
        return
    xs = [f'x{i}' for i in range(1, p + 1)]
    z = ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' + w.b'
    with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('SET max_parallel_workers_per_gather = 0')
        db.execute('SELECT setseed(0.5)')
        db.execute(f'CREATE TABLE rows AS SELECT g % 10 AS g, {", ".join(f"random()*2 - 1 AS {x}" for x in xs)} '
                   f'FROM generate_series(1, {n}) AS g')
        truth = ' + '.join(f'{(-1) ** i * i / p:.3f}*{x}' for i, x in enumerate(xs, 1))
        db.execute(f'ALTER TABLE rows ADD COLUMN y float8, ADD COLUMN label float8')
        db.execute(f'UPDATE rows SET y = {truth} + 0.5 + 0.1*(random() - 0.5), '
                   f'label = (random() < 1/(1 + exp(-({truth} + 0.5))))::int')
        db.execute('VACUUM ANALYZE rows')
        print(f'{n:,} rows, P = {p}; ms, best of {args.repeats}, interleaved, one connection, serial plans')

        [(lin, _, _)], _ = train(db, 'bench_linear', f'λ(d, w) {z}', 'squared', 'rows', p, optimizer='lbfgs',
                                 iterations=50)
        [(sig, _, _)], _ = train(db, 'bench_sigmoid', f'λ(d, w) sigmoid({z})', 'λ(p, d) (p - d.label)^2', 'rows', p,
                                 optimizer='lbfgs', iterations=20)
        grouped, _ = train(db, 'bench_groups', f'λ(d, w) {z}', 'squared', 'rows', p, optimizer='lbfgs',
                           iterations=50, group_by='g')
        by_group = db.execute("SELECT (group_key->>'g')::int, weights FROM pgad.models WHERE name = 'bench_groups' "
                              "ORDER BY 1").fetchall()
        cases = ' '.join(f'WHEN {k} THEN {linear(w, p)}' for k, w in by_group)
        columns = ', '.join(xs)
        queries = {
            'scan': 'SELECT sum(x1) FROM rows',
            'hand linear': f'SELECT sum({linear(lin, p)}) FROM rows',
            'pgad linear': f'SELECT sum(pgad_models.bench_linear({columns})) FROM rows',
            'hand sigmoid': f'SELECT sum(1/(1 + exp(-({linear(sig, p)})))) FROM rows',
            'pgad sigmoid': f'SELECT sum(pgad_models.bench_sigmoid({columns})) FROM rows',
            'hand 10 groups': f'SELECT sum(CASE g {cases} END) FROM rows',
            'pgad 10 groups': f'SELECT sum(pgad_models.bench_groups(g, {columns})) FROM rows',
        }
        ms = {name: math.inf for name in queries}
        for _ in range(args.repeats):
            for name, sql in queries.items():
                ms[name] = min(ms[name], best(db, sql, 1))
        print('\nscoring: ms (ratio to the scan)')
        for name in queries:
            print(f'  {name:<16} {ms[name]:8.0f} ({ms[name] / ms["scan"]:.2f})')
        for a, b in (('pgad linear', 'hand linear'), ('pgad sigmoid', 'hand sigmoid'),
                     ('pgad 10 groups', 'hand 10 groups')):
            print(f'  {a} / {b}: {ms[a] / ms[b]:.2f}')

        start = time.perf_counter()
        data = bytearray()
        with db.cursor().copy(f'COPY (SELECT {columns}, label FROM rows) TO STDOUT (FORMAT BINARY)') as copy:
            for block in copy:
                data += block
        data = run.parse_binary_copy(data, p + 1)
        X = np.column_stack([data[:, :p], np.ones(n)])
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        w_star, optimum = irls(X, data[:, p])
        irls_s = time.perf_counter() - start
        print(f'\nlogistic regression: seconds, and the final loss over the optimum (IRLS: {optimum:.9f})')
        print(f'  {"export (COPY BINARY → NumPy)":<34} {export_s:7.2f}')
        print(f'  {"IRLS in NumPy, after the export":<34} {irls_s:7.2f}  0')
        for name, options in (('lbfgs', dict(optimizer='lbfgs', iterations=100, tolerance=1e-12)),
                              ('newton', dict(optimizer='newton', iterations=100)),
                              ('gd, 200 iterations, rate 2', dict(optimizer='gd', iterations=200, learning_rate=2)),
                              ('adam, 20 epochs of 4096 rows', dict(optimizer='adam', iterations=20,
                                                                    batch_size=4096, learning_rate=0.01, seed=1)),
                              ('sgd, 5 epochs of 256 rows', dict(optimizer='sgd', iterations=5, batch_size=256,
                                                                 learning_rate=0.5, seed=1))):
            seconds = math.inf
            for _ in range(min(args.repeats, 2)):
                [(_, loss, ran)], took = train(db, 'bench_logistic', f'λ(d, w) {z}', 'logistic', 'rows', p,
                                               label='label', **options)
                seconds = min(seconds, took)
            print(f'  {name:<34} {seconds:7.2f}  {loss - optimum:.2e} ({ran} iterations)')
        peers(db, n, args.repeats)


def categorical(db, n, repeats, k=50):
    """A weight per category of a text column against the same model over k one-hot float8 columns, on n rows: the
    gradient call and the training to the optimum (lbfgs), interleaved, best of the repeats."""
    db.execute(f"CREATE TABLE cat AS SELECT 'r' || (g % {k}) AS c, (g % 13)::float8 AS x, "
               f"(g % {k}) + 0.5 * (g % 13) + random() AS y FROM generate_series(1, {n}) AS g")
    db.execute('CREATE TABLE hot AS SELECT ' + ', '.join(f"(c = 'r{j}')::int::float8 AS h{j}" for j in range(k)) +
               ', x, y FROM cat')
    cases = {'categorical': ('λ(d, w) w.c[d.c] + w.a*d.x', 'cat', '{"c": {}, "a": 0}'),
             'one-hot': ('λ(d, w) ' + ' + '.join(f'w.c{j}*d.h{j}' for j in range(k)) + ' + w.a*d.x', 'hot',
                         '{' + ', '.join(f'"c{j}": 0' for j in range(k)) + ', "a": 0}')}
    times = {name: {'gradient': [], 'train': []} for name in cases}
    for _ in range(repeats):
        for name, (model, data, w) in cases.items():
            loss = 'λ(d, w) (' + model[len('λ(d, w) '):] + ' - d.y)^2'
            for what, sql, args in (('gradient', 'SELECT pgad.gradient(%s, %s, %s)', (loss, data, w)),
                                    ('train', "SELECT final_loss FROM pgad.train('bench_' || %s, %s, 'squared', %s, "
                                              "%s, optimizer => 'lbfgs', iterations => 200)",
                                     (name.replace('-', '_'), model, data, w))):
                db.execute(sql, args)  # warm: the kernel compiled and cached
                start = time.perf_counter()
                db.execute(sql, args).fetchall()
                times[name][what].append(time.perf_counter() - start)
    for name in cases:
        print(f'{name:12s} gradient {min(times[name]["gradient"]):.3f} s   train (lbfgs) '
              f'{min(times[name]["train"]):.3f} s   ({n:,} rows, {k} categories)')
    print(f'one-hot / categorical: gradient '
          f'{min(times["one-hot"]["gradient"]) / min(times["categorical"]["gradient"]):.1f}x, train '
          f'{min(times["one-hot"]["train"]) / min(times["categorical"]["train"]):.1f}x')


def peers(db, n, repeats, only_logistic=False):
    """pgad.train on the shape of shared/peers.md's runs: n rows, x1 and x2, a linear and a logistic label; the
    logistic model by lbfgs and by newton (MADlib's logregr_train runs IRLS, Newton's method: 10 iterations on 1M
    rows took 7.1 s there; MADlib is not installed here, so that figure is quoted, not measured)."""
    db.execute('SELECT setseed(0.25)')
    db.execute(f'CREATE TABLE two AS SELECT random()*2 - 1 AS x1, random()*2 - 1 AS x2 FROM generate_series(1, {n})')
    db.execute('ALTER TABLE two ADD COLUMN y float8, ADD COLUMN label float8')
    db.execute('UPDATE two SET y = 3*x1 - 2*x2 + 0.5 + 0.1*(random() - 0.5), '
               'label = (random() < 1/(1 + exp(-(1.5*x1 - 2*x2 + 0.3))))::int')
    db.execute('VACUUM ANALYZE two')
    model = 'λ(d, w) w.w1*d.x1 + w.w2*d.x2 + w.b'
    runs = {'linear, lbfgs to convergence': ('squared', dict(optimizer='lbfgs', iterations=100)),
            'linear, gd 100 iterations, rate 0.5': ('squared', dict(optimizer='gd', iterations=100, learning_rate=0.5)),
            'logistic, lbfgs to convergence': ('logistic', dict(optimizer='lbfgs', iterations=100, label='label')),
            'logistic, newton to convergence': ('logistic', dict(optimizer='newton', iterations=100, label='label'))}
    if only_logistic:
        runs = {name: run for name, run in runs.items() if name.startswith('logistic')}
    seconds = {name: math.inf for name in runs}
    ran, final = {}, {}
    for _ in range(repeats):  # interleaved
        for name, (loss, options) in runs.items():
            [(_, final[name], ran[name])], took = train(db, 'bench_peer', model, loss, 'two', 2, **options)
            seconds[name] = min(seconds[name], took)
    print(f'\nthe peers\' shape, {n:,} rows, 2 features + intercept: seconds, best of {repeats}, final loss')
    for name in runs:
        print(f'  {name:<38} {seconds[name]:6.2f}  ({ran[name]} iterations)  {final[name]:.15g}')
    print(f'  {"MADlib logregr_train, IRLS (quoted)":<38} {7.1:6.2f}  (10 iterations; shared/peers.md, not run here)')


if __name__ == '__main__':
    main()
