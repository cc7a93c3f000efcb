"""How long each stage from lambda to machine code takes as the lambda grows, and why the llvm backend compiles in
tiers (pgad/jit/compiler.py): LLVM's passes cannot be interrupted, so each tier must compile its largest kernel in
well under a second on this machine (docs/security.md, docs/performance.md).

    .venv/bin/python bench/compile.py                 # every stage, at the tier pgad picks
    .venv/bin/python bench/compile.py --all-tiers     # LLVM's optimisation and emission at every tier
    .venv/bin/python bench/compile.py --run           # what each tier's kernel costs per row, at P = 8 and 32
    .venv/bin/python bench/compile.py --worker --sizes 2 8 32   # in the backend, against the compiler process
    .venv/bin/python bench/compile.py --loops         # loop kernels (chains of matrix products) in the compiler process
    .venv/bin/python bench/compile.py --ptx --sizes 2 8 32      # cuda kernels to PTX in the compiler process

Each lambda is compiled in a process of its own (killed after --timeout seconds, reported as '>'); the times are
one measurement each, in milliseconds. Timings are printed, never asserted.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {  # a family of lambdas by its number of terms k
    'linear': lambda k: '(' + ' + '.join(f'w.a{i}*d.x{i % 8}' for i in range(k)) + ' - d.y)^2',
    'logistic': lambda k: (lambda z: f'softplus({z}) - d.y*({z})')(' + '.join(f'w.a{i}*d.x{i % 8}' for i in range(k))),
    'expsum': lambda k: ' + '.join(f'exp(w.a{i}*d.x{i % 4} - d.y)' for i in range(k)),
    'poly': lambda k: ' + '.join(f'w.a{i}*d.x^{i % 9 + 1}' for i in range(k)),
    'sin, one weight': lambda k: ' + '.join(f'sin(w.a*d.x + {i})' for i in range(k)),
}
SIZES = [8, 32, 128, 512, 1024, 2048]

ONE = r'''
import json, sys, time
sys.path.insert(0, {root!r})
from pgad import lang, program
from pgad.jit import codegen, compiler
text, tiers = {text!r}, {tiers!r}
times = {{}}
started = time.perf_counter()
lam = lang.parse(text)
times['parse'] = time.perf_counter() - started
started = time.perf_counter()
grad = lang.gradient(lam, tuple(lam.weights), 'reverse')
times['differentiate'] = time.perf_counter() - started
prog = program.Program(lam, (lam.root, *grad.values()), tuple(lam.weights))
chosen = compiler.tier_of(prog)
started = time.perf_counter()
ir = codegen.kernel_ir(prog)
times['IR'] = time.perf_counter() - started
result = dict(nodes=len(prog.graph.ancestors(prog.outputs)), outputs=len(prog.outputs),
              tier=chosen.name if chosen else 'python', times=times, tiers={{}})
# every tier asked for, cheapest first; else the chosen one
for tier in [t for t in reversed(compiler.TIERS) if t.name in tiers] if tiers else [chosen] if chosen else []:
    started = time.perf_counter()
    module = compiler.optimise(ir, tier)
    optimised = time.perf_counter() - started
    started = time.perf_counter()
    compiler.target_machine(tier.codegen_level).emit_object(module)
    result['tiers'][tier.name] = (optimised, time.perf_counter() - started)
    print(json.dumps(result), flush=True)
print(json.dumps(result), flush=True)
'''


def measure(text, tiers, timeout):
    """The last complete line the measuring process printed, and whether it was stopped."""
    try:
        out = subprocess.run([sys.executable, '-c', ONE.format(root=ROOT, text=text, tiers=tiers)],
                             capture_output=True, text=True, timeout=timeout).stdout
        stopped = False
    except subprocess.TimeoutExpired as e:
        out, stopped = (e.stdout or b'').decode(), True
    lines = [line for line in out.splitlines() if line.startswith('{')]
    return (json.loads(lines[-1]) if lines else None), stopped


def run_times(rows=1_000_000, repeat=7):
    """ns per row of the linear and logistic kernels at P = 8 and 32, compiled at each tier."""
    import numpy as np
    from kernels import _timed
    from pgad import program
    from pgad.jit import codegen, compiler
    rng = np.random.default_rng(0)
    print(f'ns per row, {rows:,} rows, best of {repeat}; reverse mode')
    for p in (8, 32):
        columns = [rng.standard_normal(rows) for _ in range(p)] + [rng.random(rows)]
        z = ' + '.join(f'w.w{i}*d.x{i}' for i in range(1, p + 1)) + ' + w.b'
        for loss, text in (('linear', f'λ(d, w) ({z} - d.y)^2'), ('logistic', f'λ(d, w) softplus({z}) - d.y*({z})')):
            prog = program.build(text, tuple(f'w{i}' for i in range(1, p + 1)) + ('b',), 'reverse')
            timed = []
            for k, tier in enumerate(compiler.TIERS):
                name = f'pgad_bench_{loss}_{p}_{k}'  # a kernel of its own per tier
                module = compiler.optimise(codegen.kernel_ir(prog, name), tier)
                kernel = compiler._load(compiler.target_machine(tier.codegen_level).emit_object(module), name,
                                        len(prog.columns), len(prog.outputs))
                weights = np.full(p + 1, 0.01)
                best = min(_timed(lambda: kernel(columns, rows, weights)) for _ in range(repeat))
                timed.append(f'{tier.name} {best / rows * 1e9:.1f}')
            print(f'{loss:>8} P = {p:>2} ({compiler.tier_of(prog).name} chosen): ' + ', '.join(timed), flush=True)


def worker_times(sizes):
    """Each family's unrolled kernel compiled in this process and in the compiler process (jit/worker.py), and
    whether compiler.in_process keeps it here: what the compiler process costs, and where its bound lies."""
    from pgad import program
    from pgad.jit import codegen, compiler, worker
    print('ms of LLVM at the chosen tier: in this process, and the wall time of the compiler process')
    for shape, make in SHAPES.items():
        for k in sizes:
            prog = program.build('λ(d, w) ' + make(k), tuple(program.parsed('λ(d, w) ' + make(k)).weights))
            tier, ir = compiler.tier_of(prog), codegen.kernel_ir(prog, f'pgad_bench_{k}')
            if tier is None:
                continue
            started = time.perf_counter()
            compiler.target_machine(tier.codegen_level).emit_object(compiler.optimise(ir, tier))
            here = time.perf_counter() - started
            started = time.perf_counter()
            worker.run(compiler.request(ir, tier), 'compiling the kernel')
            there = time.perf_counter() - started
            nodes, outputs = len(prog.graph.ancestors(prog.outputs)), len(prog.outputs)
            print(f'{shape:>16} {k:>5} {nodes:>6} nodes {outputs:>5} outputs  {tier.name:>15}  '
                  f'here {1e3 * here:>6.0f}  compiler process {1e3 * there:>6.0f}  '
                  f'{"in process" if compiler.in_process(prog) else ""}', flush=True)


LOOPS = [(layers, n, 'tanh') for layers in (4, 8, 12, 24) for n in (2, 4, 5, 8, 16)]


def loop_times(timeout):
    """Chains of `layers` n × n matrix products, tanh between, as loop kernels ('store') in the compiler process."""
    from pgad import program
    from pgad.jit import compiler, loops, worker
    from pgad.lang import vectors
    print('s of LLVM (optimisation + machine code) in the compiler process, O3 vectorised')
    for layers, n, function in LOOPS:
        text = ('λ(d, w) sum(' + ''.join(f'{function}(w.l{k} @ ' for k in range(layers)) + '['
                + ', '.join(['d.u', 'd.v'][k % 2] for k in range(n)) + ']' + ')' * layers + ')')
        prog = program.build(text, tuple(f'l{k}' for k in range(layers)), tape='store',
                             shapes=vectors.Shapes(tuple((f'l{k}', (n, n)) for k in range(layers))))
        ir = loops.kernel_ir(prog, 'pgad_bench', 'store')
        try:
            _, seconds = worker.run(compiler.request(ir, compiler.tier_of(prog)), 'compiling', wall=timeout)
            took = f'{sum(seconds.values()):6.1f}'
        except Exception:  # noqa: BLE001 — past the timeout
            took = f'> {timeout:.0f}'
        print(f'{layers:>3} layers of {n:>2} x {n:<2} {len(prog.tensor.graph):>5} nodes  {took} s', flush=True)


def ptx_times(sizes):
    """Each family's cuda kernel compiled to PTX (sm_80) in the compiler process: numba's typing and NVVM."""
    from pgad import program
    from pgad.gpu import compiler
    print("s of numba's typing and NVVM, to PTX for sm_80, in the compiler process")
    for shape, make in SHAPES.items():
        for k in sizes:
            prog = program.build('λ(d, w) ' + make(k), tuple(program.parsed('λ(d, w) ' + make(k)).weights))
            if compiler.too_large(prog):
                continue
            _, seconds = compiler._in_worker(prog, (8, 0), 'float64', 'atomic')
            print(f'{shape:>16} {k:>5} {len(prog.graph.ancestors(prog.outputs)):>6} nodes {len(prog.outputs):>5} '
                  f'outputs  {seconds["PTX"]:5.2f} s', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--all-tiers', action='store_true', help='optimise and emit at every tier, not the chosen')
    parser.add_argument('--run', action='store_true', help="time each tier's kernel instead")
    parser.add_argument('--sizes', type=int, nargs='+', default=SIZES, help='terms per lambda')
    parser.add_argument('--worker', action='store_true', help='in this process against the compiler process')
    parser.add_argument('--loops', action='store_true', help='loop kernels in the compiler process')
    parser.add_argument('--ptx', action='store_true', help='cuda kernels to PTX in the compiler process')
    parser.add_argument('--timeout', type=float, default=60)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    if args.run:
        return run_times()
    if args.worker or args.loops or args.ptx:
        return (worker_times(args.sizes) if args.worker else loop_times(args.timeout) if args.loops else
                ptx_times(args.sizes))
    from pgad.jit.compiler import TIERS
    tiers = [t.name for t in TIERS] if args.all_tiers else []
    print('ms; LLVM = optimise + emit, the part that cannot be interrupted')
    print(f"{'lambda':>16} {'k':>5} {'nodes':>6} {'outs':>5} {'chosen':>15} {'parse':>7} {'diff.':>7} {'IR':>7}  "
          + ('  '.join(f'{name:>15}' for name in tiers) if tiers else f"{'LLVM':>15}"))
    for shape, make in SHAPES.items():
        for k in args.sizes:
            result, stopped = measure('λ(d, w) ' + make(k), tiers, args.timeout)
            if result is None:
                print(f'{shape:>16} {k:>5}  > {args.timeout:.0f} s before any tier', flush=True)
                continue
            t = result['times']
            llvm = [f"{1e3 * sum(result['tiers'][name]):>15.0f}" if name in result['tiers'] else f"{'>':>15}"
                    for name in (tiers or [result['tier']])]
            if not tiers and result['tier'] == 'python':
                llvm = [f"{'-':>15}"]
            print(f"{shape:>16} {k:>5} {result['nodes']:>6} {result['outputs']:>5} {result['tier']:>15} "
                  f"{1e3 * t['parse']:>7.0f} {1e3 * t['differentiate']:>7.0f} {1e3 * t['IR']:>7.0f}  "
                  + '  '.join(llvm), flush=True)


if __name__ == '__main__':
    main()
