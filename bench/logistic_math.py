"""The logistic kernel's exp and log1p: inline polynomials (jit/codegen.py's _Emitter.exp, .log1p_unit) against
libm's, which the loop vectoriser calls as glibc's libmvec variants — in process, one thread, reverse mode, the
variants interleaved and each the best of several runs, as ns per row and as ratios to libm's.

    .venv/bin/python bench/logistic_math.py [--rows 1000000] [--features 2 8] [--repeat 15]

Nothing here is asserted; docs/design.md ("exp and log1p in the kernels") records a run.
"""
import argparse
import time

import numpy as np

import pgad  # noqa: F401
from pgad import program
from pgad.jit import codegen, compiler

from kernels import losses

VARIANTS = {'libm': frozenset(), 'exp inline': frozenset({'exp'}), 'exp, log1p inline': frozenset({'exp', 'log1p'})}


def kernel(prog, name, polynomial):
    """prog's kernel with sigmoid's and softplus's exp and log1p inline as polynomial names them."""
    module = compiler.optimise(codegen.kernel_ir(prog, name, polynomial))
    data = compiler.target_machine().emit_object(module)
    return compiler._load(data, name, len(prog.columns), len(prog.outputs)), str(module)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8])
    parser.add_argument('--repeat', type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for p in args.features:
        columns = [rng.standard_normal(args.rows) for _ in range(p)] + [(rng.random(args.rows) < 0.5) * 1.0]
        weights = tuple(f'w{i}' for i in range(1, p + 1)) + ('b',)
        w = rng.normal(0, 0.5, len(weights))
        prog = program.build(losses(p)['logistic'], weights, 'reverse')
        names = ' + '.join(f'd.x{i}' for i in range(1, p + 1)) + ' + d.y'
        reader = program.build(f'λ(d, w) {names}', (), gradient=False)
        kernels = {'read only': kernel(reader, f'bench_read_{p}', frozenset())[0]}
        for label, polynomial in VARIANTS.items():
            kernels[label], optimised = kernel(prog, f'bench_{p}_{"_".join(sorted(polynomial)) or "libm"}', polynomial)
            calls = [line.split('@')[1].split('(')[0] for line in optimised.splitlines() if 'call' in line and
                     ('_exp' in line or '_log1p' in line) and 'declare' not in line]
            print(f'P={p} {label}: calls in the optimised IR: {", ".join(calls) or "none"}')
        sums = {label: k(columns, args.rows, w) for label, k in kernels.items()}
        for label in VARIANTS:
            assert np.allclose(sums[label], sums['libm'], rtol=1e-12), (label, sums[label] - sums['libm'])
        best = dict.fromkeys(kernels, float('inf'))
        for _ in range(args.repeat):
            for label, k in kernels.items():
                started = time.perf_counter()
                k(columns, args.rows, w)
                best[label] = min(best[label], time.perf_counter() - started)
        for label, seconds in best.items():
            print(f'P={p} {label:18} {seconds / args.rows * 1e9:6.2f} ns/row  {best["libm"] / seconds:5.2f}× libm')


if __name__ == '__main__':
    main()
