"""Small neural networks: an MLP trained in one SQL call against hand-written NumPy and PyTorch on the same data.

    .venv/bin/python bench/mlp.py [--repeats 3] [--only iris|digits]

Two networks, full-batch gradient descent on the mean cross-entropy, from the same starting weights
(pgad.init_weights, glorot, seed 0) at the same learning rate:
  iris    Iris × 8 (1,200 rows), standardised, 4-20-3, relu, rate 0.5, 1,000 iterations
  digits  scikit-learn's digits (1,797 rows of 64 pixels / 16, a float8[] column), 64-32-10, relu, rate 0.5,
          200 iterations
Contenders, interleaved, best of --repeats, in one connection (connection start and first-call imports do not
count):
  pgad <tape>      SELECT pgad.gradient_descent(<cross-entropy lambda>, <table>, <weights>, rate, iterations,
                   tape => …) on the llvm backend: the load, the compile (cached after the first call) and the
                   iterations; auto (unrolled for iris, a loop kernel storing its tape for digits), store, recompute
                   ('reversible' is refused for these networks, and the step it names is printed)
  numpy            hand-written forward and backward passes over the rows already in memory
  torch            PyTorch autograd, float64, one thread, the rows already in memory
Each reports its time and its final training accuracy (argmax of the fitted network's logits), and each loop
kernel the bytes of its buffers (jit/loops.buffer_bytes). The Iris network is then trained by pgad.train and its
scoring function (float8[] logits) run over 1M rows, against a scan. Then the tapes on scalar lambdas, 200,000 rows, 100
iterations: the linear and the logistic regression of bench/run.py and exp(w.a*d.x + w.b), which every step of
can be run backwards. Timings are printed and written to bench/results/mlp.json, never asserted.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results', 'mlp.json')


def network(x):
    """The cross-entropy of the MLP over the vector expression x, the logits written twice (the DAG shares them)."""
    logits = f'(w.w2 @ relu(w.w1 @ {x} + w.b1) + w.b2)'
    return f'λ(d, w) logsumexp({logits}) - {logits}[d.label + 1]'


def datasets():
    """{name: (X, labels, sizes, learning rate, iterations, the lambda)}."""
    from sklearn.datasets import load_digits, load_iris
    iris = load_iris()
    X = np.tile(iris.data, (8, 1))
    X = (X - X.mean(0)) / X.std(0)
    digits = load_digits()
    return {
        'iris': (X, np.tile(iris.target, 8), (4, 20, 3), 0.5, 1000, network('[d.x1, d.x2, d.x3, d.x4]')),
        'digits': (digits.data / 16.0, digits.target, (64, 32, 10), 0.5, 200, network('d.pixels')),
    }


def numpy_descent(X, y, w, rate, iterations):
    """Full-batch gradient descent on the mean cross-entropy, forward and backward written by hand."""
    w = {k: np.array(v, dtype=np.float64) for k, v in w.items()}
    n, Y = len(y), np.eye(w['b2'].size)[y]
    for _ in range(iterations):
        a = X @ w['w1'].T + w['b1']
        h = np.maximum(a, 0)
        z = h @ w['w2'].T + w['b2']
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        dz = (p - Y) / n
        dh = (dz @ w['w2']) * (a > 0)
        w['w2'] -= rate * dz.T @ h
        w['b2'] -= rate * dz.sum(0)
        w['w1'] -= rate * dh.T @ X
        w['b1'] -= rate * dh.sum(0)
    return w


def torch_descent(X, y, w, rate, iterations):
    import torch
    torch.set_num_threads(1)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    w = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}
    params = [w['w1'], w['b1'], w['w2'], w['b2']]
    for _ in range(iterations):
        z = torch.relu(Xt @ w['w1'].T + w['b1']) @ w['w2'].T + w['b2']
        grads = torch.autograd.grad(torch.nn.functional.cross_entropy(z, yt), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= rate * g
    return {k: v.detach().numpy() for k, v in w.items()}


def kernel_bytes(loss, shapes, columns, tape):
    """The bytes of the loop kernel's buffers for tape (None for the unrolled kernel)."""
    from pgad import program
    from pgad.jit import loops
    from pgad.lang import vectors
    prog = program.build(loss, tuple(shapes), 'reverse', True, shapes=vectors.Shapes(
        tuple((n, tuple(s)) for n, s in shapes.items() if s), columns), tape=tape)
    from pgad.jit import compiler
    kind = compiler.form(prog)
    return None if kind == 'unrolled' else loops.buffer_bytes(prog, kind)


SCALAR = {'linear': ('λ(d, w) (w.a*d.x + w.b - d.y)^2', 0.1),
          'logistic': ('λ(d, w) softplus(w.a*d.x + w.b) - d.t*(w.a*d.x + w.b)', 0.5),
          'exp': ('λ(d, w) exp(w.a*d.x + w.b)', 0.01)}


def scalar_tapes(db, repeats, results):
    """Each tape on the scalar lambdas, through SQL: 100 iterations of gradient descent over 200,000 rows."""
    db.execute('CREATE TABLE points AS SELECT random() AS x, random() AS y, (random() < 0.5)::int AS t '
               'FROM generate_series(1, 200000)')
    tapes = ['auto', 'store', 'recompute', 'reversible']
    print('scalar lambdas: 200000 rows, 100 iterations, the llvm backend')
    for name, (loss, rate) in SCALAR.items():
        times = {t: [] for t in tapes}
        refused = {}
        for _ in range(repeats + 1):
            for tape in tapes:
                if tape in refused:
                    continue
                began = time.perf_counter()
                try:
                    db.execute("SELECT pgad.gradient_descent(%s, 'points', '{\"a\": 0, \"b\": 0}', %s, 100, "
                               "backend => 'llvm', tape => %s)", (loss, rate, tape))
                except psycopg.Error as e:
                    refused[tape] = e.diag.message_primary
                    continue
                times[tape].append(time.perf_counter() - began)
        results[f'scalar {name}'] = {}
        for tape in tapes:
            if tape in refused:
                print(f'  {name:9} {tape:11} refused: {refused[tape]}')
                results[f'scalar {name}'][tape] = {'refused': refused[tape]}
                continue
            best = min(times[tape][1:])
            size = kernel_bytes(loss, {'a': (), 'b': ()}, (), tape)
            print(f'  {name:9} {tape:11} {best:7.3f} s  auto/this {min(times["auto"][1:]) / best:.2f}x'
                  + (f'  buffers {size} bytes' if size else '  (unrolled)'))
            results[f'scalar {name}'][tape] = {'seconds': best, 'buffer_bytes': size}


def scoring(db, loss, start, rate, iterations, repeats, results):
    """The Iris network through pgad.train, and its scoring function over 1M rows: SELECT sum of the first logit,
    against a scan of the same table (the yardstick)."""
    model = 'λ(d, w) w.w2 @ relu(w.w1 @ [d.x1, d.x2, d.x3, d.x4] + w.b1) + w.b2'
    db.execute("SELECT pgad.train('iris_mlp', %s, 'λ(p, d) logsumexp(p) - p[d.label + 1]', 'iris', %s, %s, %s)",
               (model, json.dumps(start), rate, iterations))
    db.execute('CREATE TABLE iris_1m AS SELECT random() AS x1, random() AS x2, random() AS x3, random() AS x4 '
               'FROM generate_series(1, 1000000)')
    db.execute('ANALYZE iris_1m')
    queries = {'scan': 'SELECT sum(x1) FROM iris_1m',
               'pgad_models.iris_mlp': 'SELECT sum((pgad_models.iris_mlp(x1, x2, x3, x4))[1]) FROM iris_1m'}
    times = {q: [] for q in queries}
    for _ in range(repeats + 1):
        for q, sql in queries.items():
            began = time.perf_counter()
            db.execute(sql).fetchall()
            times[q].append(time.perf_counter() - began)
    best = {q: min(t[1:]) for q, t in times.items()}
    print(f'  scoring 1M rows: scan {best["scan"]:.3f} s, pgad_models.iris_mlp {best["pgad_models.iris_mlp"]:.3f} s '
          f'({best["pgad_models.iris_mlp"] / best["scan"]:.1f} scans)')
    results['iris scoring 1M rows'] = best


def kernel_forms(sizes=((2, 4, 2), (3, 6, 2), (4, 8, 3), (4, 20, 3), (8, 24, 4), (8, 32, 4), (16, 32, 4), (16, 48, 6)),
                 rows=2000):
    """In process, no SQL: ns a row for the loss and gradient of a cross-entropy network at each size, by the
    unrolled kernel (whatever tier it gets) and by the loop kernel storing its tape: where auto's choice flips."""
    from pgad import program
    from pgad.jit import compiler
    from pgad.lang import vectors
    rng = np.random.default_rng(0)
    print(f'kernel forms: {rows} rows, ns a row for loss and gradient, best of 5')
    found = {}
    for n_in, hidden, classes in sizes:
        loss = network('[' + ', '.join(f'd.x{k}' for k in range(1, n_in + 1)) + ']')
        shapes = vectors.Shapes((('w1', (hidden, n_in)), ('b1', (hidden,)), ('w2', (classes, hidden)),
                                 ('b2', (classes,))))
        line = []
        for tape in ('unrolled', 'store'):
            prog = program.build(loss, ('w1', 'b1', 'w2', 'b2'), 'reverse', True, shapes=shapes,
                                 tape='store' if tape == 'store' else 'auto')
            if tape == 'unrolled':  # the unrolled kernel, whichever auto would pick
                prog = program.Program(prog.lam, prog.outputs, prog.weights, prog.shapes)
            tier = compiler.tier_of(prog)
            if tier is None:
                line.append(f'{tape}: {len(prog.graph)} nodes, too large')
                continue
            columns = [rng.normal(size=rows) for _ in range(n_in)] + [rng.integers(0, classes, rows).astype(float)]
            w = rng.normal(size=len(prog.weights)) * 0.3
            kernel = compiler.compile(prog).kernel
            best = 9.0
            for _ in range(5):
                began = time.perf_counter()
                for _ in range(10):
                    kernel(columns, rows, w)
                best = min(best, (time.perf_counter() - began) / 10)
            found[f'{n_in}-{hidden}-{classes} {tape}'] = {'nodes': len(prog.graph), 'tier': tier.name,
                                                           'ns_per_row': best * 1e9 / rows}
            line.append(f'{tape}: {len(prog.graph)} nodes, {tier.name}, {best * 1e9 / rows:.0f} ns/row')
        print(f'  {n_in}-{hidden}-{classes}: ' + ' | '.join(line))
    return found


def accuracy(X, y, w):
    w = {k: np.array(v) for k, v in w.items()}
    z = np.maximum(X @ w['w1'].T + w['b1'], 0) @ w['w2'].T + w['b2']
    return float(np.mean(z.argmax(1) == y))


def load(db, name, X, y):
    if name == 'iris':
        db.execute('CREATE TABLE iris (x1 float8, x2 float8, x3 float8, x4 float8, label int)')
        with db.cursor().copy('COPY iris FROM STDIN') as copy:
            for row, label in zip(X, y):
                copy.write_row((*map(float, row), int(label)))
    else:
        db.execute('CREATE TABLE digits (pixels float8[], label int)')
        with db.cursor().copy('COPY digits FROM STDIN') as copy:
            for row, label in zip(X, y):
                copy.write_row(([float(v) for v in row], int(label)))
    db.execute(f'ANALYZE {name}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--only', choices=['iris', 'digits'])
    parser.add_argument('--tapes', default='auto,store,recompute')
    parser.add_argument('--forms', action='store_true', help='only the kernel forms by network size, in process')
    args = parser.parse_args()
    results = {}
    if args.forms:
        kernel_forms()
        return
    with Cluster() as pg, psycopg.connect(pg.conninfo('postgres'), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('SET max_parallel_workers_per_gather = 0')
        for name, (X, y, sizes, rate, iterations, loss) in datasets().items():
            if args.only and name != args.only:
                continue
            load(db, name, X, y)
            n_in, hidden, classes = sizes
            shapes = json.dumps({'w1': [hidden, n_in], 'b1': [hidden], 'w2': [classes, hidden], 'b2': [classes]})
            start = db.execute('SELECT pgad.init_weights(%s)', (shapes,)).fetchone()[0]
            contenders = {f'pgad {t}': t for t in args.tapes.split(',')}
            contenders.update(numpy='numpy', torch='torch')
            times, acc = {c: [] for c in contenders}, {}
            for _ in range(args.repeats + 1):  # the first round warms caches and compiles: not counted
                for contender, how in contenders.items():
                    began = time.perf_counter()
                    if how == 'numpy':
                        fitted = numpy_descent(X, y, start, rate, iterations)
                    elif how == 'torch':
                        fitted = torch_descent(X, y, start, rate, iterations)
                    else:
                        fitted = db.execute("SELECT (pgad.gradient_descent(%s, %s, %s, %s, %s, backend => 'llvm', "
                                            "tape => %s)).weights",
                                            (loss, name, json.dumps(start), rate, iterations, how)).fetchone()[0]
                    times[contender].append(time.perf_counter() - began)
                    acc[contender] = accuracy(X, y, fitted)
            best = {c: min(t[1:]) for c, t in times.items()}
            columns = (('pixels', 64),) if name == 'digits' else ()
            weight_shapes = {'w1': (hidden, n_in), 'b1': (hidden,), 'w2': (classes, hidden), 'b2': (classes,)}
            size = {c: kernel_bytes(loss, weight_shapes, columns, how) for c, how in contenders.items()
                    if c.startswith('pgad')}
            results[name] = {c: {'seconds': best[c], 'accuracy': acc[c], 'first_call_seconds': times[c][0],
                                 'buffer_bytes': size.get(c)} for c in contenders}
            try:
                db.execute("SELECT pgad.gradient(%s, %s, %s, tape => 'reversible')", (loss, name, json.dumps(start)))
            except psycopg.Error as e:
                results[name]['pgad reversible'] = {'refused': e.diag.message_primary}
            print(f'{name}: {len(y)} rows, {"-".join(map(str, sizes))}, {iterations} iterations, rate {rate}')
            for c in contenders:
                print(f'  {c:15} {best[c]:8.3f} s  accuracy {acc[c]:.4f}  (first call {times[c][0]:.3f} s)'
                      f'  numpy/this {best["numpy"] / best[c]:.2f}x' +
                      (f'  buffers {size[c]} bytes' if size.get(c) else ''))
            print(f'  pgad reversible refused: {results[name]["pgad reversible"]["refused"]}')
            if name == 'iris':
                scoring(db, loss, start, rate, iterations, args.repeats, results)
        if not args.only:
            scalar_tapes(db, args.repeats, results)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, 'w') as f:
        json.dump({'machine': os.uname().nodename, 'cpus': os.cpu_count(), 'results': results}, f, indent=1)


if __name__ == '__main__':
    main()
