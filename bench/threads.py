"""Kernel calls on 1 and 2 threads (pgad/jit/threads.py), in process, no SQL: 100 iterations of gradient descent at
P = 8 over 1M rows, linear and logistic, and a read of the same 9 columns (the memory floor: one multiply-add a
row); then small calls, to place threads.SHARE_ROWS and LOOP_SHARE_ROWS. Contenders interleaved, best of --repeats.

    .venv/bin/python bench/threads.py [--repeats 5] [--threads 2]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pgad import program  # noqa: E402
from pgad.jit import compiler, threads  # noqa: E402
from pgad.lang import vectors  # noqa: E402
from pgad.models import descent  # noqa: E402

P = 8
ROWS = 1_000_000
TERMS = ' + '.join(f'w.a{k}*d.x{k}' for k in range(1, P)) + ' + w.b'
LOSSES = {'linear P=8': f'λ(d, w) ({TERMS} - d.y)^2',
          'logistic P=8': f'λ(d, w) softplus({TERMS}) - d.y*({TERMS})',
          'read 9 columns': 'λ(d, w) w.b*(' + ' + '.join(f'd.x{k}' for k in range(1, P)) + ' + d.y)'}


class Table:
    def __init__(self, columns, rows):
        self.columns, self.rows = columns, rows


def on(n, kernel, columns, rows, w):
    """The kernel's sums on n threads, whatever the rows."""
    threads.count, real = (lambda rows, share_rows=0: n), threads.count
    try:
        return kernel(columns, rows, w)
    finally:
        threads.count = real


def descend(kernel, table, w, n, iterations=100):
    threads.count, real = (lambda rows, share_rows=0: n), threads.count
    try:
        for _ in range(iterations):
            sums = descent.evaluate(kernel, table, w, lambda: None)
            w = w - 0.01 * sums[1:] / table.rows
        return w
    finally:
        threads.count = real


def best_of(repeats, contenders):
    """{name: best seconds}, the contenders interleaved in each repeat."""
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    return {name: min(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--only', choices=('linear', 'logistic', 'read'), help='one of the descents, and no small calls')
    args = parser.parse_args()
    n = args.threads
    rng = np.random.default_rng(0)
    print(f'load average before: {os.getloadavg()[0]:.2f}; cores: {len(os.sched_getaffinity(0))}')
    names = tuple([f'a{k}' for k in range(1, P)] + ['b'])
    for label, text in LOSSES.items():
        if args.only and not label.startswith(args.only):
            continue
        prog = program.build(text, names if 'read' not in label else ('b',))
        kernel = compiler.compile(prog).kernel
        table = Table([(rng.random(ROWS) < 0.5).astype(float) if c == 'y' else rng.normal(size=ROWS)
                       for c in prog.columns], ROWS)
        w = rng.normal(size=len(prog.weights)) * 0.1
        best = best_of(args.repeats, {1: lambda: descend(kernel, table, w, 1), n: lambda: descend(kernel, table, w, n)})
        print(f'{label}, 1M rows, 100 iterations: 1 thread {best[1]:.3f} s, {n} threads {best[n]:.3f} s: '
              f'{best[1] / best[n]:.2f}×', flush=True)
    if args.only:
        return
    prog = program.build(LOSSES['linear P=8'], names)
    kernel = compiler.compile(prog).kernel
    for rows in (65_536, 131_072, 262_144):
        columns = [rng.normal(size=rows) for _ in prog.columns]
        w = rng.normal(size=len(names))
        best = best_of(args.repeats, {1: lambda: [on(1, kernel, columns, rows, w) for _ in range(100)],
                                      n: lambda: [on(n, kernel, columns, rows, w) for _ in range(100)]})
        print(f'linear P=8, one call over {rows} rows: 1 thread {best[1] * 1e4:.0f} µs, {n} threads '
              f'{best[n] * 1e4:.0f} µs', flush=True)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
    from mlp import network
    shapes = vectors.Shapes((('w1', (20, 4)), ('b1', (20,)), ('w2', (3, 20)), ('b2', (3,))))
    prog = program.build(network('[d.x1, d.x2, d.x3, d.x4]'), ('w1', 'b1', 'w2', 'b2'), 'reverse', True,
                         shapes=shapes, tape='store')
    kernel = compiler.compile(prog).kernel
    w = rng.normal(size=len(prog.weights)) * 0.3
    for rows in (2_048, 4_096, 8_192):
        columns = [rng.normal(size=rows) for _ in range(4)] + [rng.integers(0, 3, rows).astype(float)]
        best = best_of(args.repeats, {1: lambda: [on(1, kernel, columns, rows, w) for _ in range(20)],
                                      n: lambda: [on(n, kernel, columns, rows, w) for _ in range(20)]})
        print(f'4-20-3 loop kernel (store), one call over {rows} rows: 1 thread {best[1] * 5e4:.0f} µs, {n} threads '
              f'{best[n] * 5e4:.0f} µs', flush=True)
    print(f'load average after: {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
    main()
