"""Sequence models (issue 37): the time of a gradient through the recurrence, by the llvm backend (pgad/jit/scan.py)
against the python reference (pgad/sequences.py), in this process (no server).

    .venv/bin/python bench/sequences.py --gradient [--repeats 3]

  Holt-Winters (additive, weekly season: 9 state fields, 12 weights), one series of 730 rows (reverse and forward
  mode), and 10,000 of them (each its own weights) in one call, on 1 and 2 threads; AR(7) (7 lags as state fields,
  8 weights) on one series of 1,000,000 rows, against one numpy pass over the column (its sum). Best of --repeats; the python reference once
  where it takes seconds. Timings are reported, never asserted.

The functions (holt_winters, autoregression, series, seconds) are for other benchmarks to call.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad import limits, sequences  # noqa: E402
from pgad.jit import threads  # noqa: E402
from pgad.models import sequence  # noqa: E402

LEVEL = 'w.alpha*(d.y - s.s1) + (1 - w.alpha)*(s.level + s.trend)'
HOLT_WINTERS = {'level': {'start': 'w.l0', 'next': LEVEL},
                'trend': {'start': 'w.b0', 'next': f'w.beta*({LEVEL} - s.level) + (1 - w.beta)*s.trend'},
                **{f's{k}': {'start': f'w.i{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)},
                's7': {'start': 'w.i7', 'next': 'w.gamma*(d.y - s.level - s.trend) + (1 - w.gamma)*s.s1'}}


def step(model, state, weights):
    """(the Step, the weight vector) of a model, its state and its weights (dicts), under the squared loss of y."""
    found, _, _, given, _, _ = sequence.step_of(model, 'squared', 'y', json.dumps(state), json.dumps(weights),
                                                limits.DEFAULT, 1 << 34)
    return found, np.array([float(given[n]) for n in found.weights])


def holt_winters():
    """Additive Holt-Winters with a weekly season (s1 the season of the row), as pgad.train takes it."""
    return step('λ(d, w, s) s.level + s.trend + s.s1', HOLT_WINTERS,
                {'alpha': 0.3, 'beta': 0.05, 'gamma': 0.1, 'l0': 100.0, 'b0': 0.1,
                 **{f'i{k}': float(k - 4) for k in range(1, 8)}})


def autoregression(p=7):
    """AR(p): the last p values as state fields."""
    state = {'y1': {'start': '0', 'next': 'd.y'},
             **{f'y{k}': {'start': '0', 'next': f's.y{k - 1}'} for k in range(2, p + 1)}}
    model = 'λ(d, w, s) w.c + ' + ' + '.join(f'w.a{k}*s.y{k}' for k in range(1, p + 1))
    return step(model, state, {'c': 0.0, **{f'a{k}': 0.1 / k for k in range(1, p + 1)}})


def series(count, rows, seed=0):
    """Sequences of count daily series of rows rows each: a level, a trend, a weekly season and noise."""
    rng = np.random.default_rng(seed)
    t = np.tile(np.arange(rows), count)
    y = 100 + 0.05 * t + 5 * np.sin(2 * np.pi * t / 7) + rng.normal(0, 2, count * rows)
    return sequences.Sequences({'y': y}, np.arange(count, dtype=np.int64) * rows, np.full(count, rows, np.int64))


def seconds(fn, repeats):
    """The least wall-clock seconds of repeats calls of fn()."""
    best = float('inf')
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def on_threads(n, fn):
    replaced = threads.on_count(lambda: n)
    try:
        return fn()
    finally:
        threads.on_count(*replaced)


def gradient(repeats):
    lines = ['| gradient | python reference | llvm, 1 thread | llvm, 2 threads |', '|---|---:|---:|---:|']
    hw, w = holt_winters()
    one = series(1, 730)
    sequences.gradient(hw, one, w, backend='llvm')  # compiled once
    py = seconds(lambda: sequences.gradient(hw, one, w), repeats)
    ll = seconds(lambda: sequences.gradient(hw, one, w, backend='llvm'), repeats * 10)
    lines.append(f'| Holt-Winters, 1 series × 730 rows | {py * 1e3:.1f} ms | {ll * 1e3:.3f} ms | (one series: '
                 f'1 thread) |')
    sequences.gradient(hw, one, w, mode='forward', backend='llvm')
    py = seconds(lambda: sequences.gradient(hw, one, w, mode='forward'), repeats)
    ll = seconds(lambda: sequences.gradient(hw, one, w, mode='forward', backend='llvm'), repeats * 10)
    lines.append(f'| the same in forward mode | {py * 1e3:.1f} ms | {ll * 1e3:.3f} ms | (one series: 1 thread) |')
    many = series(10_000, 730, seed=1)
    each = w[:, None] * (1 + 1e-5 * np.arange(10_000))[None, :]
    py = seconds(lambda: sequences.gradient(hw, many, each), 1)
    ll = [on_threads(n, lambda: seconds(lambda: sequences.gradient(hw, many, each, backend='llvm'), repeats))
          for n in (1, 2)]
    lines.append(f'| Holt-Winters, 10,000 series × 730 rows (each its weights) | {py:.2f} s | {ll[0]:.3f} s | '
                 f'{ll[1]:.3f} s |')
    ar, w = autoregression(7)
    long = series(1, 1_000_000, seed=2)
    sequences.gradient(ar, series(1, 10), w, backend='llvm')
    ll = seconds(lambda: sequences.gradient(ar, long, w, backend='llvm'), repeats)
    column = long.columns['y']
    scan = seconds(lambda: column.sum(), repeats * 10)
    lines.append(f'| AR(7), 1 series × 1,000,000 rows | not run (minutes) | {ll * 1e3:.1f} ms | (one series) |')
    lines.append(f'| one numpy pass over the column (its sum), 1,000,000 rows | | {scan * 1e3:.2f} ms | |')
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--gradient', action='store_true', help='the time of a gradient, llvm against python')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args(argv)
    if args.gradient:
        print(gradient(args.repeats))


if __name__ == '__main__':
    main()
