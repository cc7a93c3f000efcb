"""The kernels' exp and log1p: inline polynomials (jit/codegen.py's _Emitter.exp_polynomial, .log1p_polynomial)
against libm's, which the loop vectoriser calls as glibc's libmvec variants — on logistic regression (softplus and
sigmoid: exp and log1p) and Poisson regression (the exp primitive alone); in process, one thread, reverse mode (or
forward), the variants interleaved and each the best of several runs, as ns per row and as ratios to libm's.

    PYTHONPATH=.:bench .venv/bin/python bench/logistic_math.py [--rows 1000000] [--features 2 8] [--repeat 15]
        [--mode reverse]

Nothing here is asserted; docs/design.md ("exp and log1p in the kernels") records a run.
"""
import argparse
import time

import numpy as np

import pgad  # noqa: F401
from pgad import program
from pgad.jit import codegen, compiler

from kernels import losses

# what each variant computes inline (codegen.POLYNOMIAL is the last), by loss
VARIANTS = {'logistic': {'libm': frozenset(), 'exp inline': frozenset({'exp'}),
                         'exp, log1p inline': frozenset({'exp', 'log1p'})},
            'poisson': {'libm': frozenset(), 'exp inline': frozenset({'exp'})}}


def loss(kind, p):
    z = ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' + w.b'
    return losses(p)['logistic'] if kind == 'logistic' else f'λ(d, w) exp({z}) - d.y*({z})'


def kernel(prog, name, polynomial):
    """prog's kernel, computing inline what polynomial names of exp and log1p; and its optimised IR."""
    module = compiler.optimise(codegen.kernel_ir(prog, name, polynomial))
    data = compiler.target_machine().emit_object(module)
    return compiler._load(data, name, len(prog.columns), len(prog.outputs)), str(module)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8])
    parser.add_argument('--repeat', type=int, default=15)
    parser.add_argument('--mode', choices=('forward', 'reverse'), default='reverse')
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for p in args.features:
        x = [rng.standard_normal(args.rows) for _ in range(p)]
        weights = tuple(f'w{i}' for i in range(1, p + 1)) + ('b',)
        w = rng.normal(0, 0.5 / np.sqrt(p), len(weights))
        names = ' + '.join(f'd.x{i}' for i in range(1, p + 1)) + ' + d.y'
        reader = program.build(f'λ(d, w) {names}', (), gradient=False)
        for kind, variants in VARIANTS.items():
            columns = x + [(rng.random(args.rows) < 0.5) * 1.0 if kind == 'logistic' else
                           rng.poisson(1.0, args.rows) * 1.0]
            prog = program.build(loss(kind, p), weights, args.mode)
            kernels = {'read only': kernel(reader, f'bench_read_{kind}_{p}', frozenset())[0]}
            for label, polynomial in variants.items():
                kernels[label], optimised = kernel(
                    prog, f'bench_{kind}_{p}_{"_".join(sorted(polynomial)) or "libm"}', polynomial)
                calls = [line.split('@')[1].split('(')[0] for line in optimised.splitlines() if 'call' in line and
                         ('_exp' in line or '_log1p' in line) and 'declare' not in line]
                print(f'{kind} P={p} {label}: calls in the optimised IR: {", ".join(calls) or "none"}')
            sums = {label: k(columns, args.rows, w) for label, k in kernels.items()}
            for label in variants:
                assert np.allclose(sums[label], sums['libm'], rtol=1e-12), (label, sums[label] - sums['libm'])
            best = dict.fromkeys(kernels, float('inf'))
            for _ in range(args.repeat):
                for label, k in kernels.items():
                    started = time.perf_counter()
                    k(columns, args.rows, w)
                    best[label] = min(best[label], time.perf_counter() - started)
            for label, seconds in best.items():
                print(f'{kind:8} P={p} {label:18} {seconds / args.rows * 1e9:6.2f} ns/row  '
                      f'{best["libm"] / seconds:5.2f}× libm')


if __name__ == '__main__':
    main()
