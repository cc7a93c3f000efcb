"""The cost model of kernel pieces (pgad/jit/cost.py) against the clock: for kernels from the cheapest unrolled to
dear loop kernels, the nanoseconds a row measured on one thread (best of --repeats) beside cost.per_row's estimate.
The estimate should never fall far below the measurement (a piece would then run longer than threads.PIECE_NS).

    .venv/bin/python bench/cost.py [--repeats 3]
"""
import argparse
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

from pgad import program  # noqa: E402
from pgad.jit import compiler, cost, threads  # noqa: E402
from pgad.lang import vectors  # noqa: E402

TERMS = ' + '.join(f'w.a{k}*d.x{k}' for k in range(1, 8)) + ' + w.b'
UNROLLED = {'linear, 3 columns': 'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c - d.y)^2',
            'logistic, 8 columns': f'λ(d, w) softplus({TERMS}) - d.y*({TERMS})',
            '24 exp terms': 'λ(d, w) (' + ' + '.join(f'w.a{k}*exp(w.b{k}*d.x)' for k in range(24)) + ' - d.y)^2'}
LOOP = {'sum(a @ (b @ x)), 20 × 20': ('λ(d, w) sum(w.a @ (w.b @ d.x))', 20),
        'sum(a @ (b @ x)), 40 × 40': ('λ(d, w) sum(w.a @ (w.b @ d.x))', 40),
        'sum(a @ outer(b @ x, x)), 16 × 16': ('λ(d, w) sum(w.a @ outer(w.b @ d.x, d.x))', 16),
        'sum(a @ outer(b @ x, x)), 32 × 32': ('λ(d, w) sum(w.a @ outer(w.b @ d.x, d.x))', 32)}
NETWORK = ('λ(d, w) logsumexp(w.w2 @ tanh(w.w1 @ d.pix + w.b1)) - sum(w.w2 @ tanh(w.w1 @ d.pix + w.b1))*d.y',
           (('w1', (32, 64)), ('b1', (32,)), ('w2', (10, 32))), 64)


def measure(prog, rows, repeats, rng):
    kernel = compiler.compile(prog).kernel
    columns = [rng.normal(size=rows) for _ in prog.columns]
    w = rng.normal(size=len(prog.weights)) * 0.1
    threads.on_count(None)  # one thread
    best = float('inf')
    for _ in range(repeats):
        started = time.perf_counter()
        kernel(columns, rows, w)
        best = min(best, time.perf_counter() - started)
    return best / rows * 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f'{"kernel":40} {"form":10} {"measured ns":>12} {"estimated ns":>13}')
    cases = [(name, program.build(text, tuple(sorted(set(re.findall(r'w\.(\w+)', text)))), 'reverse'), 1_000_000)
             for name, text in UNROLLED.items()]
    for name, (text, n) in LOOP.items():
        shapes = vectors.Shapes((('a', (n, n)), ('b', (n, n))), (('x', n),))
        cases.append((name, program.build(text, ('a', 'b'), 'reverse', True, shapes=shapes), 4_000_000 // (n * n)))
    text, weights, pixels = NETWORK
    shapes = vectors.Shapes(weights, (('pix', pixels),))
    cases.append(('a 64-32-10 tanh network', program.build(text, tuple(n for n, _ in weights), 'reverse', True,
                                                           shapes=shapes), 20_000))
    for name, prog, rows in cases:
        form = compiler.form(prog)
        print(f'{name:40} {form:10} {measure(prog, rows, args.repeats, rng):12,.1f} '
              f'{cost.per_row(prog, form, compiler.tier_of(prog)):13,.1f}', flush=True)


if __name__ == '__main__':
    main()
