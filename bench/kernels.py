"""Kernel-level measurements of the llvm backend, in process (no server): for linear and logistic regression with
P features, in forward and in reverse mode — compile time, disk-cache hit time (in a fresh process, as a new
connection sees it), optimised code size, and compute time per row per iteration on N rows.

    .venv/bin/python bench/kernels.py [--rows 1000000] [--features 2 8 32]

Writes bench/results/kernels.json and kernels.md. Timings are the best of several runs; nothing here is asserted.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

import pgad  # noqa: F401
from pgad import program
from pgad.explain import ir_instructions, machine_instructions
from pgad.jit import compiler
from pgad.jit.cache import DiskCache

RESULTS = pathlib.Path(__file__).parent / 'results'


def losses(p):
    z = ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' + w.b'
    return {'linear': f'λ(d, w) ({z} - d.y)^2', 'logistic': f'λ(d, w) softplus({z}) - d.y*({z})'}


def cache_hit_ms(text, weights, mode, cache):
    """A fresh process loads the same program's kernel from the warm disk cache: what a new connection pays per
    kernel, once LLVM is started in it (cold_start in run.py measures the whole first call)."""
    code = ('import time, pgad; from pgad import program; from pgad.jit import compiler, cache;'
            f'p = program.build({text!r}, {weights!r}, {mode!r}); compiler.engine(); compiler._toolchain();'
            f'store = cache.DiskCache({cache.directory!r}, {cache.capacity});'
            't = time.perf_counter(); c = compiler.compile(p, store);'
            'print((time.perf_counter() - t) * 1e3, c.cached)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == 'True', 'the disk cache missed'
    return float(out[0])


def _timed(work):
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rows', type=int, default=1_000_000)
    parser.add_argument('--features', type=int, nargs='+', default=[2, 8, 32])
    parser.add_argument('--repeat', type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        cache = DiskCache(directory, 1 << 30)
        compiler.compile(program.build('λ(d, w) w.a*d.x', ('a',), 'reverse'))  # LLVM's one-time start, not counted
        for p in args.features:
            columns = [rng.standard_normal(args.rows) for _ in range(p)] + [rng.random(args.rows)]
            weights = tuple(f'w{i}' for i in range(1, p + 1)) + ('b',)
            # the floor: a kernel that only adds up the same columns (memory bandwidth, not arithmetic)
            names = ' + '.join(f'd.x{i}' for i in range(1, p + 1)) + ' + d.y'
            reader = compiler.compile(program.build(f'λ(d, w) {names}', (), gradient=False)).kernel
            stream = min(_timed(lambda: reader(columns, args.rows, np.empty(0))) for _ in range(args.repeat))
            stream = stream / args.rows * 1e9
            w = np.full(len(weights), 0.01)
            for kind, text in losses(p).items():
                for mode in ('forward', 'reverse'):
                    prog = program.build(text, weights, mode)
                    compiled = compiler.compile(prog, cache)
                    kernel = compiled.kernel
                    kernel(columns, args.rows, w)
                    best = float('inf')
                    for _ in range(args.repeat):
                        started = time.perf_counter()
                        kernel(columns, args.rows, w)
                        best = min(best, time.perf_counter() - started)
                    rows.append({
                        'loss': kind, 'P': p, 'mode': mode, 'rows': args.rows,
                        'compile_ms': sum(compiled.ms.values()),
                        'stages_ms': compiled.ms,
                        'cache_hit_ms': cache_hit_ms(text, weights, mode, cache),
                        'ir_instructions': ir_instructions(compiled.optimized_ir),
                        'machine_instructions': machine_instructions(
                            compiler.target_machine().emit_assembly(compiler.optimise(compiled.ir))),
                        'ns_per_row_iteration': best / args.rows * 1e9,
                        'ns_per_row_reading_columns': stream,
                        'cpu': compiler.llvm.get_host_cpu_name(),
                    })
                    r = rows[-1]
                    print(f"{kind:8} P={p:2} {mode:7} compile {r['compile_ms']:6.1f} ms  cache hit "
                          f"{r['cache_hit_ms']:4.1f} ms  {r['ir_instructions']:5} IR / {r['machine_instructions']:5} "
                          f"machine instructions  {r['ns_per_row_iteration']:6.2f} ns/row/iteration "
                          f"(only reading the columns: {stream:.2f})", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'kernels.json').write_text(json.dumps(rows, indent=2))
    lines = ['| loss | P | mode | compile ms | cache hit ms | optimised IR instr. | machine instr. | ns/row/iteration '
             '| ns/row only reading the columns |', '|---|---|---|---|---|---|---|---|---|']
    lines += [f"| {r['loss']} | {r['P']} | {r['mode']} | {r['compile_ms']:.1f} | {r['cache_hit_ms']:.1f} | "
              f"{r['ir_instructions']} | {r['machine_instructions']} | {r['ns_per_row_iteration']:.2f} | "
              f"{r['ns_per_row_reading_columns']:.2f} |" for r in rows]
    (RESULTS / 'kernels.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
