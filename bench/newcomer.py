"""The newcomer's path (issue 47): a model by its family's name against scikit-learn, and pgad.predict against the
scoring functions.

    .venv/bin/python bench/newcomer.py [--repeats 5] [--rows 200000]

On one throwaway cluster, in one connection, max_parallel_workers_per_gather = 0, best of the repeats, interleaved:

Fits, scikit-learn's wine (13 features, 3 classes) and digits (64 features, 10 classes), 75 % trained on, 25 % held
out (the same split for both): pgad.train(name, 'softmax', table, label => …, l2 => 1/(2·C·n)) against scikit-learn's
pipeline StandardScaler() then LogisticRegression(C=1) on the rows exported by COPY (its time includes the export),
each one's held-out accuracy, and the accuracy of that pipeline at its optimum (newton-cholesky, tol 1e-12): the
objective pgad minimises, where scikit-learn's default lbfgs stops at its tolerance. pgad's first training of each compiles its kernels (unless an earlier run left them
in the disk cache), the repeats find them cached.

Predictions over --rows rows of wine's 13 columns (its rows repeated): SELECT count(class) FROM pgad.predict(…)
against SELECT count(pgad_models.<m>_class(<13 columns>)) FROM the table, and the probabilities keyed by class
against the scoring function's float8[]. Timings are printed, never asserted.
"""
import argparse
import os
import sys
import time

import numpy as np
import psycopg
from sklearn.datasets import load_digits, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

C = 1.0


def table(db, name, x, y, columns):
    db.execute(f'CREATE TABLE {name} (id int, {", ".join(c + " float8" for c in columns)}, label text)')
    with db.cursor().copy(f'COPY {name} FROM STDIN') as copy:
        for i, (row, label) in enumerate(zip(x, y)):
            copy.write_row((i, *map(float, row), str(label)))


def exported(db, name, columns):
    """The table's rows as numpy, through COPY: what a user's export costs."""
    with db.cursor().copy(f'COPY (SELECT {", ".join(columns)}, label FROM {name}) TO STDOUT') as copy:
        rows = list(copy.rows())
    return np.array([[float(v) for v in r[:-1]] for r in rows]), np.array([r[-1] for r in rows])


def timed(run, repeats):
    best, value = float('inf'), None
    for _ in range(repeats):
        started = time.perf_counter()
        value = run()
        best = min(best, time.perf_counter() - started)
    return best, value


def fits(db, repeats):
    print(f'{"data":8} {"contender":34} {"first s":>8} {"best s":>8} {"accuracy":>9}')
    for name, data in (('wine', load_wine()), ('digits', load_digits())):
        columns = [f'f{k}' for k in range(data.data.shape[1])]
        rng = np.random.default_rng(47)
        order = rng.permutation(len(data.target))
        test = order[:len(order) // 4]
        train = order[len(order) // 4:]
        table(db, f'{name}_train', data.data[train], data.target_names[data.target[train]] if name == 'wine'
              else data.target[train], columns)
        table(db, f'{name}_test', data.data[test], data.target_names[data.target[test]] if name == 'wine'
              else data.target[test], columns)
        n = len(train)
        pgad_sql = (f"SELECT 1 FROM pgad.train('{name}', 'softmax', 'SELECT {', '.join(columns)}, label FROM "
                    f"{name}_train', label => 'label', l2 => {1 / (2 * C * n)!r})")
        started = time.perf_counter()
        db.execute(pgad_sql).fetchall()
        first = time.perf_counter() - started
        best, _ = timed(lambda: db.execute(pgad_sql).fetchall(), repeats)
        accuracy = float(db.execute(f"SELECT avg((class = key->>'label')::int) FROM pgad.predict('{name}', "
                                    f"'{name}_test')").fetchone()[0])
        shown = "pgad.train(name, 'softmax', …)"
        print(f'{name:8} {shown:34} {first:8.3f} {best:8.3f} {accuracy:9.4f}')

        def sklearn():
            x, y = exported(db, f'{name}_train', columns)
            return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000)).fit(x, y)
        started = time.perf_counter()
        model = sklearn()
        first = time.perf_counter() - started
        best, model = timed(sklearn, repeats)
        xt, yt = exported(db, f'{name}_test', columns)
        accuracy = float(np.mean(model.predict(xt) == yt))
        print(f'{name:8} {"export + StandardScaler, LogReg":34} {first:8.3f} {best:8.3f} {accuracy:9.4f}')
        x, y = exported(db, f'{name}_train', columns)  # the same objective at its optimum: the oracle
        exact = make_pipeline(StandardScaler(), LogisticRegression(C=C, solver='newton-cholesky', tol=1e-12,
                                                                   max_iter=1000)).fit(x, y)
        print(f'{name:8} {"  the same, at its optimum (tol 1e-12)":34} {"":8} {"":8} '
              f'{float(np.mean(exact.predict(xt) == yt)):9.4f}')


def predictions(db, rows, repeats):
    columns = [f'f{k}' for k in range(13)]
    db.execute(f'CREATE TABLE wine_many AS SELECT g AS id, {", ".join(columns)}, label FROM wine_train, '
               f'generate_series(1, {rows} / (SELECT count(*) FROM wine_train) + 1) AS g LIMIT {rows}')
    db.execute('ANALYZE wine_many')
    args = ', '.join(columns)
    cases = {
        'pgad_models.wine_class(13 columns)': f'SELECT count(pgad_models.wine_class({args})) FROM wine_many',
        'pgad.predict: class': "SELECT count(class) FROM pgad.predict('wine', 'wine_many')",
        'pgad_models.wine_probability(…)': f'SELECT count(pgad_models.wine_probability({args})) FROM wine_many',
        'pgad.predict: probabilities': "SELECT count(probabilities) FROM pgad.predict('wine', 'wine_many')",
    }
    found = {k: float('inf') for k in cases}
    for _ in range(repeats):
        for k, sql in cases.items():
            started = time.perf_counter()
            db.execute(sql).fetchall()
            found[k] = min(found[k], time.perf_counter() - started)
    print(f'\n{rows:,} rows of 13 columns, best of {repeats}:')
    for k, s in found.items():
        print(f'  {k:40} {s * 1000:8.1f} ms')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--rows', type=int, default=200_000)
    a = parser.parse_args()
    with Cluster(server_settings={'max_parallel_workers_per_gather': '0'}) as pg, \
            psycopg.connect(pg.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute("SET pgad.publish_data_values = 'on'")
        fits(db, a.repeats)
        predictions(db, a.rows, a.repeats)


if __name__ == '__main__':
    main()
