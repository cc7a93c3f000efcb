"""make bench, many classes (issue 36): pgad.train under loss 'softmax' with only its required arguments, against
export + scikit-learn's multinomial LogisticRegression and export + statsmodels' MNLogit on the same rows.

    .venv/bin/python bench/multiclass.py [--rows 100000] [--repeats 3] [--out DIR]

Two tables, made in NumPy with a fixed seed and copied in with COPY (FORMAT BINARY) (bench/optimum.py's copy_in),
each with a text label drawn from a multinomial logistic model of its features (so the classes overlap: an optimum
exists):
  small   3 classes, 4 features of mixed scale (15 weights: pgad's default is newton)
  wide    10 classes, 20 features (210 weights: pgad's default is scaled L-BFGS)
The contenders, each timed end to end from this process, in one connection, interleaved, best of --repeats:
  pgad          pgad.train(name, 'λ(d, w) w.W @ [d.x1, …] + w.b', 'softmax', table, '{"W": {}, "b": {}}',
                label => 'class'): training and storing the model with its scoring functions
  scikit-learn  export (COPY … TO STDOUT (FORMAT BINARY), parsed into numpy: bench/run.py) + LogisticRegression(
                C=inf, max_iter=10000, tol=1e-10): lbfgs, its default solver, and newton-cholesky
  statsmodels   export + MNLogit(y, X).fit(method='newton', maxiter=100) (small only: its Hessian is dense)
For each: the mean cross-entropy at its weights, computed here in float64 on the exported rows, relative to the
least of them (excess = f/f* - 1), and whether it says it converged. Writes bench/results/multiclass.md and .json.
Timings are reported, never asserted.
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import optimum  # noqa: E402  (its copy_in, and through it bench/run.py)
from optimum import Cluster  # noqa: E402
import run  # noqa: E402

TABLES = {'small': (3, 4), 'wide': (10, 20)}  # name → (classes, features)


def make(n, classes, features, rng):
    """{column: values} of a table whose label 'class' (a code 0…K-1 here, text in the table) follows a softmax of
    its features, which are of mixed scale (x_j in units of 10^(j mod 3))."""
    scale = 10.0 ** (np.arange(features) % 3)
    X = rng.normal(size=(n, features)) * scale
    W = rng.normal(size=(classes, features)) / scale / np.sqrt(features)
    logits = X @ W.T + rng.normal(size=classes)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    return X, y


def load(db, name, X, y):
    """The table: the features, the label 'class' as text ('c00', 'c01', …) for pgad, and its code y as float8 for
    the exports (run.export reads a column y)."""
    features = [f'x{j + 1}' for j in range(X.shape[1])]
    optimum.copy_in(db, name, {**dict(zip(features, X.T)), 'y': y.astype(np.float64)})
    db.execute(f"ALTER TABLE {name} ADD COLUMN class text")
    db.execute(f"UPDATE {name} SET class = 'c' || pg_catalog.lpad(y::int::text, 2, '0')")
    db.execute(f'VACUUM ANALYZE {name}')
    return features


def cross_entropy(X1, y, W):
    """The mean cross-entropy of weights W (K × (P + 1), the intercept last) on rows X1 (a column of ones last)."""
    z = X1 @ W.T
    m = z.max(axis=1, keepdims=True)
    return float(np.mean(m[:, 0] + np.log(np.exp(z - m).sum(axis=1)) - z[np.arange(len(y)), y]))


def pgad_fit(db, name, features):
    model = 'λ(d, w) w.W @ [' + ', '.join(f'd.{f}' for f in features) + '] + w.b'
    row = db.execute("SELECT weights, converged, iterations, options->>'optimizer' FROM pgad.train(%s, %s, 'softmax', "
                     "%s, '{\"W\": {}, \"b\": {}}', label => 'class')", (f'bench_{name}', model, name)).fetchone()
    W = np.column_stack([np.array(row[0]['w']), np.array(row[0]['b'])])
    return W, {'converged': row[1], 'iterations': row[2], 'optimizer': row[3]}


def export(db, name, features):
    X, y = run.export(db, argparse.Namespace(xs=features, table=name))
    return np.column_stack([X, np.ones(len(y))]), y.astype(np.int64)


def sklearn_fit(X1, y, solver):
    from sklearn.linear_model import LogisticRegression
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = LogisticRegression(C=np.inf, solver=solver, max_iter=10_000, tol=1e-10, fit_intercept=False).fit(X1, y)
    return fit.coef_, {'converged': bool(np.max(fit.n_iter_) < 10_000), 'iterations': int(np.max(fit.n_iter_))}


def statsmodels_fit(X1, y):
    import statsmodels.api as sm
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = sm.MNLogit(y, X1).fit(method='newton', maxiter=100, disp=0)
    W = np.vstack([np.zeros(X1.shape[1]), np.asarray(fit.params).T])  # class 0 the reference
    return W, {'converged': bool(fit.mle_retvals['converged']), 'iterations': int(fit.mle_retvals['iterations'])}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rows', type=int, default=100_000)
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--seed', type=int, default=36)
    p.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results'))
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    report, lines = {}, []
    with Cluster() as cluster, psycopg.connect(cluster.conninfo(), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        for name, (classes, features) in TABLES.items():
            X, y = make(args.rows, classes, features, rng)
            columns = load(db, name, X, y)
            pgad_fit(db, name, columns[:1])  # untimed: imports and a first compile
            contenders = {
                'pgad (defaults)': lambda: pgad_fit(db, name, columns),
                'export + sklearn lbfgs': lambda: sklearn_fit(*export(db, name, columns), 'lbfgs'),
                'export + sklearn newton-cholesky': lambda: sklearn_fit(*export(db, name, columns), 'newton-cholesky'),
            }
            if name == 'small':
                contenders['export + statsmodels MNLogit'] = lambda: statsmodels_fit(*export(db, name, columns))
            times, found = {c: [] for c in contenders}, {}
            for _ in range(args.repeats):
                for c, fit in contenders.items():
                    began = time.perf_counter()
                    found[c] = fit()
                    times[c].append(time.perf_counter() - began)
            X1, y1 = export(db, name, columns)
            f = {c: cross_entropy(X1, y1, W) for c, (W, _) in found.items()}
            best = min(f.values())
            pgad_s = min(times['pgad (defaults)'])
            lines += [f'#### {name}: {args.rows:,} rows, {classes} classes, {features} features '
                      f'({classes * (features + 1)} weights)', '',
                      '| contender | s, best / median | × pgad | cross-entropy excess | converged | iterations |',
                      '|---|--:|--:|--:|---|--:|']
            for c in contenders:
                info = found[c][1]
                lines.append(f'| {c}{" (" + info["optimizer"] + ")" if "optimizer" in info else ""} | '
                             f'{min(times[c]):.2f} / {np.median(times[c]):.2f} | {min(times[c]) / pgad_s:.2f}× | '
                             f'{f[c] / best - 1:.1e} | {info["converged"]} | {info["iterations"]} |')
            lines.append('')
            report[name] = {c: {'s': times[c], 'cross_entropy': f[c], **found[c][1]} for c in contenders}
            print('\n'.join(lines[-len(contenders) - 5:]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'multiclass.md'), 'w') as out:
        out.write('\n'.join(lines) + '\n')
    with open(os.path.join(args.out, 'multiclass.json'), 'w') as out:
        json.dump(report, out, indent=1, default=str)


if __name__ == '__main__':
    main()
