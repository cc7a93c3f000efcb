"""The cuda backend's benchmark: pgad's GPU kernel against the llvm backend and PyTorch and JAX on the same GPU.

One gradient pass of pgad's cuda kernel against the llvm backend on the CPU and against PyTorch (eager and
torch.compile) and JAX on the same GPU, in this process (no server).

    python3 bench/gpu.py [--quick] [--max-rows 1e8] [--repeats 5] [--iterations 20] [--out DIR]

For linear and logistic regression with P = 2, 8, 32 features (x1..xP, a bias b and a label y: P + 1 columns and
P + 1 weights, as bench/run.py and bench/kernels.py count them) on N = 1e4 … 1e8 rows made on the GPU, it times one
gradient pass (Σ loss and Σ ∂loss/∂w over the rows, at fixed weights) by

  pgad f64             compiler.compile(program, 'float64', 'atomic'): kernel(placed, rows, w); every call copies
                       the weights in and the sums out, the cost of one iteration of a fit
  pgad f64 partials    the same kernel with combine='partials' (a second one-block kernel adds the blocks' sums)
  pgad f32             float32 columns (the sums still float64)
  llvm (CPU)           backends.compile(program, 'llvm'), single-threaded, up to --cpu-max-rows (1e7) rows
  torch eager          X @ w + b, the loss, loss.sum().backward(), float64, on the GPU
  torch.compile        the same loss function through torch.compile(dynamic=True), backward() as above
  JAX                  jax.jit(jax.value_and_grad(loss)), jax_enable_x64
  torch eager f32      torch eager on the float32 columns
  read once            torch's sum of the same columns: a single read of the bytes a pass must read, the floor

All of them read the same bytes: one (P + 1) × N tensor, a column per row, that pgad reads in place (its rows through
__cuda_array_interface__), torch as X = C[:P].T (an N × P column-major view, which cuBLAS takes as it is) and y = C[P],
and JAX through DLPack. A timing is the best of --repeats loops of --iterations calls (fewer for a contender whose
call takes long: at most about a second a loop), the contenders interleaved in each repeat, after warm-up calls that
compile; torch.cuda.synchronize() or block_until_ready() before the clock stops. pgad's sums are checked against
torch's loss and gradient (relative 1e-9 in float64). Also measured: the grid (compiler.BLOCKS_PER_SM) at the largest
N, and the rows from which a pgad GPU call (its fixed cost included) beats the llvm kernel on the CPU (the 'auto'
backend's GPU_ROWS), and, where a PostgreSQL with pgad is installed, pgad.gradient_descent with backend => 'cuda'
against 'llvm'. Writes results.json and results.md (tables for docs/performance.md) to --out, after every data set,
so a run cut short still leaves what it measured. A missing contender (no torch, no JAX, no GPU) is skipped with a
note. --quick is a smoke test (a few hundred rows), also on numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) with
--device cpu, where torch and JAX run on the CPU: none of its figures mean anything.
"""
import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings

# JAX takes 75 % of the GPU's memory at its first array unless told not to: torch and pgad share the GPU here.
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # pgad from this checkout, installed or not

import numpy as np  # noqa: E402

ROWS = [10_000, 100_000, 1_000_000, 10_000_000, 100_000_000]
FEATURES = [2, 8, 32]
CROSSOVER_ROWS = [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000]
BLOCKS = [2, 4, 8, 16, 32]
QUICK = dict(rows=[200, 500], features=[2, 8], crossover=[100, 300], blocks=[2, 8], repeats=2, iterations=3)

PGAD64, PARTIALS, PGAD32 = 'pgad f64', 'pgad f64 partials', 'pgad f32'
LLVM = 'llvm (CPU)'
EAGER, COMPILED, JAX, EAGER32, FLOOR = 'torch eager', 'torch.compile', 'JAX', 'torch eager f32', 'read once'
CONTENDERS = [PGAD64, PARTIALS, PGAD32, LLVM, EAGER, COMPILED, JAX, EAGER32, FLOOR]
SKIPS = {'partials': PARTIALS, 'f32': PGAD32, 'llvm': LLVM, 'eager': EAGER, 'compile': COMPILED, 'jax': JAX,
         'eager32': EAGER32, 'floor': FLOOR}
PHASES = ['blocks', 'crossover', 'sql']
TOLERANCE = {'float64': 1e-9, 'float32': 1e-4}  # relative to torch's float64 loss and gradient


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='Run on a GPU machine from the repository root: python3 bench/gpu.py --out DIR')
    p.add_argument('--quick', action='store_true',
                   help='a smoke test: a few hundred rows, P = 2, 8, 2 repeats of 3 iterations (on the simulator too)')
    p.add_argument('--max-rows', type=_number, default=None, metavar='N', help='the largest N (1e8)')
    p.add_argument('--rows', type=_numbers, metavar='N,...', help='the row counts (1e4,1e5,1e6,1e7,1e8)')
    p.add_argument('--features', type=_numbers, metavar='P,...', help='the feature counts (2,8,32)')
    p.add_argument('--losses', type=_names, default=['linear', 'logistic'], metavar='L,...', help='linear,logistic')
    p.add_argument('--repeats', type=int, default=None, help='loops per contender, the best one kept (5)')
    p.add_argument('--iterations', type=int, default=None, help='gradient passes per loop (20)')
    p.add_argument('--loop-seconds', type=float, default=1.0, metavar='S',
                   help='fewer calls in a loop where --iterations of them would take longer than this (1.0)')
    p.add_argument('--cpu-max-rows', type=_number, default=10_000_000, metavar='N',
                   help='the llvm backend (one CPU core) up to this many rows (1e7)')
    p.add_argument('--blocks-per-sm', type=_numbers, default=None, metavar='B,...',
                   help='compiler.BLOCKS_PER_SM values tried at the largest N (2,4,8,16,32)')
    p.add_argument('--crossover-rows', type=_numbers, default=None, metavar='N,...',
                   help='the rows where pgad on the GPU and llvm on the CPU are compared call for call (1e3 … 1e6)')
    p.add_argument('--sql-rows', type=_number, default=None, metavar='N', help='rows of the SQL comparison (1e6)')
    p.add_argument('--skip', type=_names, default=[], metavar='C,...',
                   help='leave out: ' + ', '.join([*SKIPS, *PHASES]))
    p.add_argument('--device', choices=['cuda', 'cpu'], default='cuda',
                   help="where torch and JAX run (cuda); 'cpu' only to smoke-test their code without a GPU")
    p.add_argument('--budget', type=float, default=420.0, metavar='S',
                   help='seconds after which the data sets not yet started are skipped (420: the default run is '
                        'planned for 3 to 5 minutes on an H100, and a run there is cut off at 10)')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results', 'gpu'),
                   help='where results.json and results.md go (bench/results/gpu)')
    args = p.parse_args(argv)
    quick = QUICK if args.quick else {}
    args.rows = args.rows or quick.get('rows', ROWS)
    if args.max_rows:
        args.rows = [n for n in args.rows if n <= args.max_rows] or [int(args.max_rows)]
    args.features = args.features or quick.get('features', FEATURES)
    args.repeats = args.repeats or quick.get('repeats', 5)
    args.iterations = args.iterations or quick.get('iterations', 20)
    args.blocks_per_sm = args.blocks_per_sm or quick.get('blocks', BLOCKS)
    args.crossover_rows = args.crossover_rows or quick.get('crossover', CROSSOVER_ROWS)
    if args.max_rows:
        args.crossover_rows = [n for n in args.crossover_rows if n <= args.max_rows] or args.crossover_rows[:1]
    args.sql_rows = args.sql_rows or (1_000 if args.quick else 1_000_000)
    for name in args.losses:
        if name not in ('linear', 'logistic'):
            p.error(f'unknown loss {name!r}')
    for name in args.skip:
        if name not in SKIPS and name not in PHASES:
            p.error(f'unknown contender or phase {name!r}: one of {", ".join([*SKIPS, *PHASES])}')
    if args.repeats < 1 or args.iterations < 1:
        p.error('--repeats and --iterations must be at least 1')
    return args


def _number(text):
    return int(float(text))


def _numbers(text):
    return [int(float(v)) for v in text.split(',') if v.strip()]


def _names(text):
    return [v.strip() for v in text.split(',') if v.strip()]


def first_line(error):
    text = str(error).strip()
    return f'{type(error).__name__}: {text.splitlines()[0]}' if text else type(error).__name__


# --- the losses and the data ----------------------------------------------------------------------------------------
def lambda_text(kind, p):
    """pgad's lambda for P features: the weights w1..wP and b, the columns x1..xP and y."""
    z = ' + '.join(f'w.w{j}*d.x{j}' for j in range(1, p + 1)) + ' + w.b'
    return f'λ(d, w) ({z} - d.y)^2' if kind == 'linear' else f'λ(d, w) softplus({z}) - d.y*({z})'


def weight_names(p):
    return tuple(f'w{j}' for j in range(1, p + 1)) + ('b',)


def column_index(name, p):
    """Where column `name` is in the (P + 1) × N array: x1..xP are rows 0..P-1, y is row P."""
    return p if name == 'y' else int(name[1:]) - 1


def truth(p):
    """The model the labels come from: bench/run.py's pattern, scaled so that z = β·x has standard deviation 2."""
    beta = np.array([(-1) ** j * (1 + (j - 1) % 3) / 2 for j in range(1, p + 1)])
    return beta * 2 / np.sqrt(np.sum(beta ** 2))


def weights_at(p):
    """The fixed weights every pass is evaluated at (not the optimum: the gradient is far from 0)."""
    return np.array([0.1 * (-1) ** j * (1 + j % 4) / np.sqrt(p) for j in range(p)] + [0.25])


class Data:
    """One data set: C, a (P + 1) × N array of float64, one column a row (x1..xP ~ N(0, 1), then y), made on the
    GPU by torch where there is one, else by numpy; a float32 copy and a host copy on demand."""

    def __init__(self, kind, p, n, torch=None, device=None, seed=0):
        self.kind, self.p, self.n, self.torch = kind, p, n, torch
        self._f32 = self._host = None
        self.placed = {}  # (precision, column order) → pgad's columns on the GPU
        if torch is not None:
            g = torch.Generator(device=device).manual_seed(seed + 1000 * p + (kind == 'logistic'))
            c = torch.empty((p + 1, n), dtype=torch.float64, device=device)
            c[:p].normal_(generator=g)
            z = torch.as_tensor(truth(p), device=device) @ c[:p] + 0.5
            if kind == 'linear':
                c[p].normal_(generator=g).mul_(0.1).add_(z)
            else:
                c[p].uniform_(generator=g)
                c[p] = (c[p] < torch.sigmoid(z)).to(torch.float64)
            del z
            self.c = c
        else:
            rng = np.random.default_rng(seed + 1000 * p + (kind == 'logistic'))
            c = np.empty((p + 1, n))
            c[:p] = rng.standard_normal((p, n))
            z = truth(p) @ c[:p] + 0.5
            c[p] = z + 0.1 * rng.standard_normal(n) if kind == 'linear' else rng.random(n) < 1 / (1 + np.exp(-z))
            self.c = self._host = c

    def array(self, precision='float64'):
        """The whole array, as torch keeps it (or numpy's, without torch), of the precision."""
        if precision == 'float64':
            return self.c
        if self._f32 is None:
            self._f32 = self.c.to(self.torch.float32) if self.torch is not None else self.c.astype(np.float32)
        return self._f32

    def host(self, precision='float64'):
        """The array in host memory, as numpy."""
        if precision == 'float32':
            a = self.array('float32')
            return a.cpu().numpy() if self.torch is not None else a
        if self._host is None:
            self._host = self.c.cpu().numpy()
        return self._host

    def on_gpu(self):
        return self.torch is not None and self.c.is_cuda

    def free(self):
        self.c = self._f32 = self._host = None
        self.placed = {}


# --- contenders and timing ------------------------------------------------------------------------------------------
class Contender:
    """One way to compute a gradient pass. step() starts one (it may return before the device is done), sync() waits
    for the device, sums() gives [Σ loss, Σ ∂loss/∂w1 … ∂loss/∂b] of the last one as float64 (None: no gradient)."""

    def __init__(self, name, step, sync=None, sums=None, precision='float64', where='gpu', bytes_read=None):
        self.name, self.step, self.precision, self.where, self.bytes_read = name, step, precision, where, bytes_read
        self.sync = sync or (lambda: None)
        self.sums = sums or (lambda: None)
        self.calls = None


def relative_difference(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-300)


def _fmt(value, digits=3):
    if value is None:
        return '—'
    if isinstance(value, str):
        return value
    if value == 0 or not math.isfinite(value):
        return f'{value:g}'
    if abs(value) >= 10 ** digits:
        return f'{value:,.0f}'
    return f'{value:.{digits}g}'


def _rows(n):
    """1e4 … 1e8 as 10⁴ … in text: 10,000 reads badly in a narrow column past a million."""
    exponent = round(math.log10(n)) if n > 0 else 0
    return f'1e{exponent}' if n == 10 ** exponent and n >= 10_000 else f'{n:,}'


class Bench:
    def __init__(self, args):
        self.args = args
        self.started = time.perf_counter()
        self.started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
        self.measurements, self.blocks, self.crossover, self.sql, self.notes, self.warnings = [], [], [], [], [], []
        self.checks = {}            # contender → worst relative difference from the reference
        self.kernels = {}           # (kind, p, precision, combine, blocks per SM) → Compiled
        self.compiled_torch = {}    # (kind, dtype) → torch.compile'd loss
        self.jax_fns = {}
        self.compile_broken = None  # why torch.compile fails here, once it has
        self.meta = {}
        self.torch = self.jax = self.cuda = self.compiler = self.backends = None
        self.sim = False
        self.device = args.device  # where torch and JAX run
        self.why = {'cuda': 'no cuda backend here', 'llvm': 'no llvm backend here', 'torch': 'no PyTorch here',
                    'jax': 'no JAX here'}  # why a contender is missing, as setup found it

    # -- output --
    def log(self, text):
        print(f'[{time.perf_counter() - self.started:5.0f} s] {text}', flush=True)

    def note(self, text):
        self.notes.append(text)
        self.log(f'note: {text}')

    def warn(self, text):
        self.warnings.append(text)
        self.log(f'WARNING: {text}')

    def elapsed(self):
        return time.perf_counter() - self.started

    def over_budget(self):
        return self.elapsed() > self.args.budget

    def skipped(self, name):
        return any(SKIPS.get(s) == name for s in self.args.skip)

    # -- setup --
    def setup(self):
        args = self.args
        self.meta.update(started=self.started_at, python=platform.python_version(), numpy=np.__version__,
                         cpu=cpu_name(), cpus=os.cpu_count(), arguments=vars(args).copy())
        with contextlib.suppress(Exception):
            import pgad
            self.meta['pgad'] = pgad.__version__
        self.setup_pgad()
        self.setup_torch()
        self.setup_jax()
        self.setup_device()

    def setup_pgad(self):
        try:
            from pgad.gpu import compiler
            self.compiler = compiler
            self.cuda = compiler.device()
            self.sim = compiler.simulated()
            self.meta['numba'] = version('numba')
            self.meta['numba-cuda'] = version('numba-cuda')
            self.meta['threads per block'] = compiler.THREADS
            self.meta['blocks per SM'] = compiler.BLOCKS_PER_SM
            # numba-cuda's warning for a grid of under 128 blocks (small N, and partials' one-block combine)
            warnings.filterwarnings('ignore', message='Grid size .* under-utilization')
            if self.sim:
                self.note("numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): pgad's kernels run in Python threads on "
                          'the CPU; a smoke test, no figure of it means anything')
        except Exception as e:  # noqa: BLE001 — no numba-cuda, no GPU, no driver: pgad's cuda backend is skipped
            self.cuda = None
            self.why['cuda'] = first_line(e)
            self.note(f"pgad's cuda backend skipped: {first_line(e)}")
        try:
            from pgad import backends
            self.backends = backends
            self.meta['GPU_ROWS'] = getattr(backends, 'GPU_ROWS', None)
        except Exception as e:  # noqa: BLE001
            self.why['llvm'] = first_line(e)
            self.note(f'the llvm backend skipped: {first_line(e)}')

    def setup_torch(self):
        try:
            import torch
        except ImportError as e:
            self.why['torch'] = first_line(e)
            self.note(f'PyTorch skipped: {first_line(e)}')
            return
        self.meta['torch'] = torch.__version__
        if self.args.device == 'cuda' and not torch.cuda.is_available():
            self.why['torch'] = 'torch sees no CUDA GPU'
            self.note(f'PyTorch skipped: torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is '
                      'False); --device cpu runs it on the CPU, as a smoke test only')
            return
        self.torch = torch
        if self.device == 'cpu':
            self.note('torch (and JAX) on the CPU (--device cpu): a smoke test of their code, no GPU figure')
        else:
            self.meta['torch CUDA'] = torch.version.cuda
            torch.backends.cuda.matmul.allow_tf32 = False  # float32 as float32, as pgad's f32 kernel computes

    def setup_jax(self):
        if self.skipped(JAX):
            return
        try:
            import jax
            jax.config.update('jax_enable_x64', True)
            import jax.numpy as jnp
            backend = jax.default_backend()
        except Exception as e:  # noqa: BLE001 — ImportError, or a jaxlib that cannot start
            self.why['jax'] = first_line(e)
            self.note(f'JAX skipped: {first_line(e)}')
            return
        self.meta['jax'] = jax.__version__
        self.meta['jax backend'] = backend
        if self.args.device == 'cuda' and backend != 'gpu':
            self.why['jax'] = f'JAX\'s backend is {backend!r}, not a GPU'
            self.note(f'JAX skipped: its backend is {backend!r}, not a GPU (jax[cuda12] brings the GPU one)')
            return
        self.jax, self.jnp = jax, jnp

    def setup_device(self):
        torch, meta = self.torch, self.meta
        if torch is not None and self.device == 'cuda':
            props = torch.cuda.get_device_properties(0)
            meta['device'] = torch.cuda.get_device_name(0)
            meta['SMs'] = props.multi_processor_count
            meta['GPU memory GB'] = props.total_memory / 1e9
        elif self.cuda is not None and not self.sim:
            dev = self.cuda.get_current_device()
            meta['device'] = self.compiler.device_name(self.cuda)
            meta['SMs'] = dev.MULTIPROCESSOR_COUNT
        else:
            meta['device'] = "numba's CUDA simulator" if self.sim else 'no GPU'
        meta['theoretical GB/s'] = theoretical_bandwidth(self.cuda) if self.cuda is not None and not self.sim else None
        try:
            meta['peak GB/s'], meta['peak how'] = self.copy_bandwidth()
        except Exception as e:  # noqa: BLE001
            meta['peak GB/s'], meta['peak how'] = None, f'the copy failed: {first_line(e)}'
        self.log(f"device: {meta['device']}" + (f", {meta['SMs']} SMs" if meta.get('SMs') else '') +
                 f"; peak {_fmt(meta['peak GB/s'])} GB/s ({meta['peak how']})" +
                 (f"; {meta['theoretical GB/s']:,.0f} GB/s in theory (memory clock × bus width)"
                  if meta['theoretical GB/s'] else '') + f"; CPU: {meta['cpu']}")

    def copy_bandwidth(self):
        """(GB/s, how): a device-to-device copy, the bytes read plus the bytes written over the best time."""
        torch = self.torch
        if torch is not None:
            sync = torch.cuda.synchronize if self.device == 'cuda' else (lambda: None)
            if self.device == 'cuda':
                free, _ = torch.cuda.mem_get_info()
                nbytes = int(min(4 << 30, free / 4))
            else:
                nbytes = 64 << 20
            a = torch.ones(nbytes // 8, dtype=torch.float64, device=self.device)
            b = torch.empty_like(a)
            b.copy_(a)
            sync()
            best = math.inf
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(10):
                    b.copy_(a)
                sync()
                best = min(best, (time.perf_counter() - started) / 10)
            del a, b
            if self.device == 'cuda':
                torch.cuda.empty_cache()
                return 2 * nbytes / best / 1e9, f'torch device-to-device copy of {nbytes >> 20} MiB, read + written'
            return 2 * nbytes / best / 1e9, 'torch copy in host memory (--device cpu: not a GPU figure)'
        if self.cuda is not None and not self.sim:
            nbytes = 1 << 30
            a = self.cuda.to_device(np.ones(nbytes // 8))
            b = self.cuda.device_array_like(a)
            b.copy_to_device(a)
            self.cuda.synchronize()
            best = math.inf
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(10):
                    b.copy_to_device(a)
                self.cuda.synchronize()
                best = min(best, (time.perf_counter() - started) / 10)
            return 2 * nbytes / best / 1e9, f'numba device-to-device copy of {nbytes >> 20} MiB, read + written'
        return None, 'no GPU to measure'

    # -- kernels --
    def pgad_kernel(self, kind, p, precision='float64', combine='atomic', blocks_per_sm=None):
        """pgad's Compiled kernel, compiled once per run: BLOCKS_PER_SM is read when a kernel is compiled."""
        from pgad import program
        key = (kind, p, precision, combine, blocks_per_sm)
        if key not in self.kernels:
            prog = program.build(lambda_text(kind, p), weight_names(p), 'reverse')
            saved = self.compiler.BLOCKS_PER_SM
            if blocks_per_sm:
                self.compiler.BLOCKS_PER_SM = blocks_per_sm
            try:
                compiled = self.compiler.compile(prog, precision=precision, combine=combine)
            finally:
                self.compiler.BLOCKS_PER_SM = saved
            compiled.program = prog
            self.kernels[key] = compiled
            self.log(f'  compiled pgad {kind} P={p} {precision} {combine}'
                     + (f' {blocks_per_sm} blocks/SM' if blocks_per_sm else '') + ': '
                     + ', '.join(f'{stage} {ms:.0f} ms' for stage, ms in compiled.ms.items()))
        return self.kernels[key]

    def pgad_contender(self, name, data, precision='float64', combine='atomic', blocks_per_sm=None, columns=None):
        compiled = self.pgad_kernel(data.kind, data.p, precision, combine, blocks_per_sm)
        kernel, n, w = compiled.kernel, data.n, weights_at(data.p)
        order = [column_index(c, data.p) for c in compiled.program.columns]
        if columns is None:  # every pgad kernel of the data set reads the same placed columns
            key = (precision, tuple(order))
            if key not in data.placed:
                data.placed[key] = self.place(kernel, data, precision, order)
            columns = data.placed[key]
        placed = columns
        box = {}

        def step():
            box['sums'] = kernel(placed, n, w)
        itemsize = 8 if precision == 'float64' else 4
        c = Contender(name, step, sums=lambda: box['sums'], precision=precision,
                      bytes_read=len(order) * n * itemsize)
        c.placed = placed
        return c

    def place(self, kernel, data, precision, order):
        """The columns on the GPU for pgad's kernel: torch's own memory where the data is on the GPU (zero-copy through
        __cuda_array_interface__), else kernel.place, pgad's copy of numpy columns."""
        if data.on_gpu() and not self.sim:
            try:
                a = data.array(precision)
                return self.compiler.OnDevice(self.cuda.as_cuda_array(a[k]) for k in order)
            except Exception as e:  # noqa: BLE001
                self.note(f'pgad reads a copy of the columns (as_cuda_array failed: {first_line(e)})')
        host = data.host(precision)
        return kernel.place([host[k] for k in order])

    def llvm_contender(self, data):
        from pgad import program
        prog = program.build(lambda_text(data.kind, data.p), weight_names(data.p), 'reverse')
        kernel = self.backends.compile(prog, 'llvm')
        host = data.host()
        columns = [np.ascontiguousarray(host[column_index(c, data.p)]) for c in prog.columns]
        n, w, box = data.n, weights_at(data.p), {}

        def step():
            box['sums'] = kernel(columns, n, w)
        return Contender(LLVM, step, sums=lambda: box['sums'], where='cpu', bytes_read=len(columns) * n * 8)

    # -- torch and JAX --
    def torch_sync(self):
        if self.device == 'cuda':
            self.torch.cuda.synchronize()

    def torch_loss(self, kind):
        torch = self.torch

        def loss(w, X, y):
            z = X @ w[:-1] + w[-1]
            if kind == 'linear':
                return ((z - y) ** 2).sum()
            return (torch.nn.functional.softplus(z) - y * z).sum()
        return loss

    def torch_contender(self, name, data, precision='float64', compiled=False):
        torch = self.torch
        c = data.array(precision)
        X, y = c[:data.p].T, c[data.p]  # N × P, column-major: the bytes pgad reads, no copy
        fn = self.torch_loss(data.kind)
        if compiled:
            if self.compile_broken:
                raise RuntimeError(f'torch.compile failed before: {self.compile_broken}')
            key = (data.kind, precision)
            if key not in self.compiled_torch:
                config = torch._dynamo.config  # one graph for every N and P (dynamic shapes), and no fallback to
                for limit in ('recompile_limit', 'cache_size_limit'):  # eager past the recompile limit, unnoticed
                    if isinstance(getattr(config, limit, None), int):
                        setattr(config, limit, max(getattr(config, limit), 64))
                self.compiled_torch[key] = torch.compile(fn, dynamic=True)
                self.log(f'  torch.compile of the {data.kind} loss: it compiles at its first call (tens of seconds)')
            fn = self.compiled_torch[key]
        w = torch.tensor(weights_at(data.p), dtype=c.dtype, device=c.device, requires_grad=True)
        box = {}

        def step():
            w.grad = None
            loss = fn(w, X, y)
            loss.backward()
            box['loss'] = loss

        def sums():
            return np.array([box['loss'].item(), *w.grad.double().tolist()])
        return Contender(name, step, self.torch_sync, sums, precision=precision)

    def floor_contender(self, data):
        c, box = data.array(), {}

        def step():
            box['sum'] = c.sum()
        return Contender(FLOOR, step, self.torch_sync, bytes_read=c.numel() * 8)

    def to_jax(self, a):
        """A torch tensor (or numpy array) as a JAX array: DLPack shares torch's memory on the GPU."""
        if self.torch is not None and isinstance(a, self.torch.Tensor):
            try:
                return self.jax.dlpack.from_dlpack(a)
            except Exception as e:  # noqa: BLE001
                if a.numel() * a.element_size() > 4 << 30:
                    raise RuntimeError(f'DLPack failed ({first_line(e)}) and a copy would take too much memory')
                self.note(f'JAX gets a copy of the data (DLPack failed: {first_line(e)})')
                return self.jnp.asarray(a.cpu().numpy())
        return self.jnp.asarray(a)

    def jax_fn(self, kind):
        if kind not in self.jax_fns:
            jax, jnp = self.jax, self.jnp

            def loss(w, Xt, y):
                z = w[:-1] @ Xt + w[-1]
                if kind == 'linear':
                    return jnp.sum((z - y) ** 2)
                return jnp.sum(jax.nn.softplus(z) - y * z)
            self.jax_fns[kind] = jax.jit(jax.value_and_grad(loss))
        return self.jax_fns[kind]

    def jax_contender(self, data):
        c = data.array()
        Xt, y = self.to_jax(c[:data.p]), self.to_jax(c[data.p])  # P × N: x1..xP, contiguous rows as pgad reads
        w, f, box = self.jnp.asarray(weights_at(data.p)), self.jax_fn(data.kind), {}

        def step():
            box['out'] = f(w, Xt, y)

        def sums():
            value, grad = box['out']
            return np.array([float(value), *np.asarray(grad, dtype=np.float64).tolist()])
        contender = Contender(JAX, step, lambda: self.jax.block_until_ready(box['out']), sums)
        contender.keep = (Xt, y)  # freed with the contender
        return contender

    # -- timing --
    def measure(self, contenders, loop_seconds):
        """{name: best seconds per call}: warm-up calls (compiles) first, then --repeats loops of each contender's
        calls, interleaved (a contender first in one repeat is last in the next)."""
        alive = []
        for c in contenders:
            try:
                started = time.perf_counter()
                c.step()
                c.sync()
                c.first_s = time.perf_counter() - started
                started = time.perf_counter()
                c.step()
                c.sync()
                one = time.perf_counter() - started
                c.calls = max(1, min(self.args.iterations, int(loop_seconds / max(one, 1e-9))))
                alive.append(c)
            except Exception as e:  # noqa: BLE001 — a contender that fails here is skipped, the rest go on
                c.error = first_line(e)
                if c.name == COMPILED and not self.compile_broken:
                    self.compile_broken = c.error
                self.note(f'{c.name} skipped: {c.error}')
        best = {c.name: math.inf for c in alive}
        for r in range(self.args.repeats):
            shift = r % max(1, len(alive))
            for c in alive[shift:] + alive[:shift]:
                started = time.perf_counter()
                for _ in range(c.calls):
                    c.step()
                c.sync()
                best[c.name] = min(best[c.name], (time.perf_counter() - started) / c.calls)
        return alive, best

    def check(self, alive, data, where):
        """Each contender's sums against the reference (torch eager float64, else llvm, else pgad partials)."""
        by_name = {c.name: c for c in alive}
        reference = next((by_name[n] for n in (EAGER, LLVM, PARTIALS, PGAD64) if n in by_name), None)
        if reference is None:
            return {}
        ref = reference.sums()
        out = {}
        for c in alive:
            sums = c.sums()
            if sums is None or c is reference:
                continue
            diff = relative_difference(sums, ref)
            out[c.name] = diff
            key = 'pgad f64, other grids' if c.name.startswith(PGAD64 + ',') else c.name
            self.checks[key] = max(self.checks.get(key, 0.0), diff)
            if diff > TOLERANCE[c.precision] and (c.precision == 'float64' or reference.precision == 'float64'):
                self.warn(f'{where}: {c.name} differs from {reference.name} by {diff:.2e} relative')
        out['reference'] = reference.name
        return out

    # -- the data sets --
    def run_dataset(self, kind, p, n, largest):
        args, torch = self.args, self.torch
        where = f'{kind} P={p} N={n:,}'
        if torch is not None and self.device == 'cuda':
            free, _ = torch.cuda.mem_get_info()
            need = (p + 1) * n * 8 + 16 * n * 8  # the columns and the contenders' scratch vectors
            if need > 0.9 * free:
                self.skip_dataset(kind, p, n, f'needs about {need / 1e9:.1f} GB of the {free / 1e9:.1f} GB free')
                return
            with_f32 = (p + 1) * n * 12 + 16 * n * 8 <= 0.9 * free
        else:
            with_f32 = True
        started = time.perf_counter()
        data = Data(kind, p, n, torch, self.device if torch is not None else None)
        if torch is not None:
            self.torch_sync()
        self.log(f'{where}: data made in {time.perf_counter() - started:.2f} s '
                 f'({(p + 1) * n * 8 / 1e9:.2f} GB in float64)')
        contenders = []

        def add(name, make, why_not=None):
            if self.skipped(name):
                return
            if why_not:
                self.record(kind, p, n, name, skipped=why_not)
                return
            try:
                contenders.append(make())
            except Exception as e:  # noqa: BLE001
                self.record(kind, p, n, name, skipped=first_line(e))
                self.note(f'{where}: {name} skipped: {first_line(e)}')

        no_gpu = None if self.cuda is not None else self.why['cuda']
        no_torch = None if torch is not None else self.why['torch']
        add(PGAD64, lambda: self.pgad_contender(PGAD64, data), no_gpu)
        add(PARTIALS, lambda: self.pgad_contender(PARTIALS, data, combine='partials'), no_gpu)
        add(PGAD32, lambda: self.pgad_contender(PGAD32, data, 'float32'),
            no_gpu or (None if with_f32 else 'not enough GPU memory for the float32 copy'))
        add(LLVM, lambda: self.llvm_contender(data),
            self.why['llvm'] if self.backends is None else
            (None if n <= args.cpu_max_rows else f'over --cpu-max-rows ({args.cpu_max_rows:,}): one CPU core'))
        add(EAGER, lambda: self.torch_contender(EAGER, data), no_torch)
        add(COMPILED, lambda: self.torch_contender(COMPILED, data, compiled=True),
            no_torch or (f'torch.compile failed: {self.compile_broken}' if self.compile_broken else None))
        add(JAX, lambda: self.jax_contender(data), None if self.jax is not None else self.why['jax'])
        add(EAGER32, lambda: self.torch_contender(EAGER32, data, 'float32'),
            no_torch or (None if with_f32 else 'not enough GPU memory for the float32 copy'))
        add(FLOOR, lambda: self.floor_contender(data), no_torch)
        sweep = []
        if n == largest and self.cuda is not None and 'blocks' not in args.skip and not self.skipped(PGAD64):
            for b in args.blocks_per_sm:
                if b != self.compiler.BLOCKS_PER_SM:
                    name = f'{PGAD64}, {b} blocks/SM'
                    add(name, lambda b=b, name=name: self.pgad_contender(name, data, blocks_per_sm=b))
                    sweep.append((b, name))
        alive, best = self.measure(contenders, args.loop_seconds)
        for c in contenders:
            if c not in alive:
                self.record(kind, p, n, c.name, skipped=getattr(c, 'error', 'failed'))
        diffs = self.check(alive, data, where)
        peak = self.meta.get('peak GB/s')
        line = []
        for c in alive:
            s = best[c.name]
            values = dict(seconds_per_call=s, ns_per_row_iteration=s / n * 1e9, calls=c.calls, where=c.where,
                          precision=c.precision, warmup_s=c.first_s, relative_difference=diffs.get(c.name),
                          reference=diffs.get('reference'))
            if c.bytes_read and c.where == 'gpu':
                gbs = c.bytes_read / s / 1e9
                values.update(bytes_read=c.bytes_read, GB_per_s=gbs,
                              pct_of_peak=100 * gbs / peak if peak else None,
                              x_read_time=peak * 1e9 * s / c.bytes_read if peak else None)
            if c.name in (PGAD64, PGAD32, PARTIALS) and EAGER in best:
                values['ratio_to_torch_eager'] = s / best[EAGER]
            if c.name.startswith(PGAD64 + ','):
                self.blocks.append(dict(loss=kind, P=p, rows=n, blocks_per_sm=int(c.name.split(', ')[1].split()[0]),
                                        **values))
                continue
            self.record(kind, p, n, c.name, **values)
            line.append(f'{c.name} {values["ns_per_row_iteration"]:.3g}')
        if sweep and PGAD64 in best:
            self.blocks.append(dict(loss=kind, P=p, rows=n, blocks_per_sm=self.compiler.BLOCKS_PER_SM,
                                    seconds_per_call=best[PGAD64], ns_per_row_iteration=best[PGAD64] / n * 1e9,
                                    default=True))
        self.log(f'{where}: ns/row/iteration: ' + ', '.join(line))
        if len(diffs) > 1:
            self.log(f'{where}: sums against {diffs["reference"]}\'s, relative: '
                     + ', '.join(f'{name} {d:.1e}' for name, d in diffs.items() if name != 'reference'))
        r = self.find(kind, p, n, PGAD64)
        if r and r.get('GB_per_s') and peak:
            self.log(f'{where}: pgad f64 {r["GB_per_s"]:,.0f} GB/s = {_fmt(r.get("pct_of_peak"))} % of peak, '
                     f'{_fmt(r.get("x_read_time"))}× the time to read the columns once'
                     + (f'; pgad / torch eager = {r["ratio_to_torch_eager"]:.3f}' if r.get('ratio_to_torch_eager')
                        else ''))
        if sweep:
            got = sorted((b['blocks_per_sm'], b['ns_per_row_iteration']) for b in self.blocks
                         if (b['loss'], b['P'], b['rows']) == (kind, p, n))
            self.log(f'{where}: blocks/SM → ns/row/iteration: ' + ', '.join(f'{b}: {v:.3g}' for b, v in got))
        for c in contenders:
            c.step = c.sums = c.sync = None
            c.__dict__.pop('keep', None)
            c.__dict__.pop('placed', None)
        contenders.clear()
        alive.clear()
        data.free()
        self.release()

    def release(self):
        gc.collect()
        if self.torch is not None and self.device == 'cuda':
            self.torch.cuda.empty_cache()
        if self.cuda is not None and not self.sim:
            with contextlib.suppress(Exception):
                self.cuda.current_context().deallocations.clear()

    def record(self, kind, p, n, contender, **values):
        self.measurements.append(dict(loss=kind, P=p, rows=n, contender=contender, **values))

    def find(self, kind, p, n, contender):
        return next((r for r in self.measurements if (r['loss'], r['P'], r['rows'], r['contender']) ==
                     (kind, p, n, contender) and 'skipped' not in r), None)

    def skip_dataset(self, kind, p, n, why):
        self.note(f'{kind} P={p} N={n:,} skipped: {why}')
        for name in CONTENDERS:
            self.record(kind, p, n, name, skipped=why)

    # -- the rows from which the GPU wins --
    def run_crossover(self):
        """pgad on the GPU (a call: the weights in, the kernel, the sums out) against llvm on one CPU core, call for
        call, on the rows 'auto' decides between; the columns placed once by kernel.place, as a fit does (its time is
        measured too: a fit pays it once)."""
        args = self.args
        for kind in args.losses:
            for p in args.features:
                if self.over_budget():
                    self.note(f'crossover {kind} P={p} skipped: the time budget (--budget {args.budget:g} s) is spent')
                    continue
                points = []
                for n in args.crossover_rows:
                    data = Data(kind, p, n, seed=7)  # numpy, in host memory, as the server loads it
                    compiled = self.pgad_kernel(kind, p)
                    order = [column_index(c, p) for c in compiled.program.columns]
                    host = [np.ascontiguousarray(data.host()[k]) for k in order]
                    gpu = self.pgad_contender(PGAD64, data, columns=compiled.kernel.place(host))
                    cpu = self.llvm_contender(data)
                    place = Contender('place', lambda: compiled.kernel.place(host))
                    alive, best = self.measure([gpu, cpu, place], min(args.loop_seconds, 0.25))
                    if PGAD64 not in best or LLVM not in best:
                        break
                    diff = relative_difference(gpu.sums(), cpu.sums())
                    if diff > TOLERANCE['float64']:
                        self.warn(f'crossover {kind} P={p} N={n:,}: pgad cuda differs from llvm by {diff:.2e}')
                    points.append(dict(rows=n, gpu_s=best[PGAD64], cpu_s=best[LLVM], place_s=best.get('place'),
                                       relative_difference=diff))
                    data.free()
                if not points:
                    continue
                per_call = crossing([(q['rows'], q['gpu_s'], q['cpu_s']) for q in points])
                k = args.iterations
                per_fit = crossing([(q['rows'], q['gpu_s'] * k + (q['place_s'] or 0), q['cpu_s'] * k)
                                    for q in points])
                self.crossover.append(dict(loss=kind, P=p, points=points, crossover_rows=per_call,
                                           crossover_rows_fit=per_fit, fit_iterations=k))
                self.log(f'crossover {kind} P={p}: GPU/CPU time per call ' +
                         ', '.join(f'{_rows(q["rows"])}: {q["gpu_s"] / q["cpu_s"]:.2g}' for q in points) +
                         f'; the GPU wins from {describe_crossing(per_call)} rows a call '
                         f'({describe_crossing(per_fit)} for a {k}-iteration fit, the columns\' copy included); '
                         f'a GPU call on {points[0]["rows"]:,} rows takes {points[0]["gpu_s"] * 1e6:.0f} µs')
                self.release()

    # -- through SQL --
    def run_sql(self):
        """pgad.gradient_descent with backend => 'cuda' against 'llvm' in a throwaway cluster, where this machine has
        a PostgreSQL with pgad installed."""
        args = self.args
        if not shutil.which('pg_config'):
            return self.sql_skipped('pg_config is not on PATH')
        share = subprocess.run(['pg_config', '--sharedir'], capture_output=True, text=True).stdout.strip()
        if not os.path.exists(os.path.join(share, 'extension', 'pgad.control')):
            return self.sql_skipped(f'pgad is not installed in the PostgreSQL of {shutil.which("pg_config")} '
                                    '(make install CUDA=1)')
        try:
            import psycopg
            from pgad.throwaway import Cluster
        except ImportError as e:
            return self.sql_skipped(first_line(e))
        n, p, k = args.sql_rows, 8, args.iterations
        lam = lambda_text('linear', p)
        start = json.dumps({name: 0 for name in weight_names(p)})
        beta = truth(p)
        model = ' + '.join(f'{float(b)!r}*x{j}' for j, b in enumerate(beta, 1)) + ' + 0.5'
        draws = ', '.join(f'2*random() - 1 AS x{j}' for j in range(1, p + 1))
        self.log(f'SQL: a throwaway cluster, {n:,} rows, linear P={p}, {k} iterations, backend cuda against llvm')
        try:
            with Cluster() as pg, psycopg.connect(pg.conninfo(), autocommit=True) as db:
                db.execute('CREATE EXTENSION pgad CASCADE')
                db.execute('SELECT setseed(0.5)')
                db.execute(f'CREATE TABLE gpu_bench AS SELECT {", ".join(f"x{j}" for j in range(1, p + 1))}, '
                           f'{model} + 0.1*(2*random() - 1) AS y FROM (SELECT {draws} '
                           f'FROM generate_series(1, {n})) AS draws')
                db.execute('VACUUM ANALYZE gpu_bench')

                def call(backend, iterations, table='gpu_bench'):
                    return db.execute('SELECT weights, loss FROM pgad.gradient_descent(%s, %s, %s, '
                                      'learning_rate => 0.01, iterations => %s, backend => %s)',
                                      (lam, table, start, iterations, backend)).fetchone()
                backends, best = [], {}
                for backend in ('llvm', 'cuda'):
                    try:
                        call(backend, 1, 'SELECT * FROM gpu_bench LIMIT 1000')  # compiles the kernel
                        backends.append(backend)
                    except psycopg.Error as e:
                        self.sql.append(dict(backend=backend, rows=n, P=p, error=first_line(e)))
                        self.note(f'SQL: backend {backend}: {first_line(e)}')
                fitted = {}
                for _ in range(min(args.repeats, 3)):
                    for backend in backends:
                        for iterations in (0, k):
                            started = time.perf_counter()
                            fitted[backend] = call(backend, iterations)
                            took = time.perf_counter() - started
                            best[backend, iterations] = min(best.get((backend, iterations), math.inf), took)
                for backend in backends:
                    load_s, total_s = best[backend, 0], best[backend, k]
                    self.sql.append(dict(backend=backend, rows=n, P=p, iterations=k, zero_iterations_s=load_s,
                                         total_s=total_s,
                                         ns_per_row_iteration=max(total_s - load_s, 0) / (k * n) * 1e9))
                if 'llvm' in fitted and 'cuda' in fitted:
                    w1, w2 = fitted['llvm'][0], fitted['cuda'][0]
                    diff = max(abs(w1[name] - w2[name]) for name in w1) / max(max(abs(v) for v in w1.values()), 1e-300)
                    self.sql.append(dict(backend='cuda vs llvm', relative_difference_of_weights=diff))
                for r in self.sql:
                    if 'total_s' in r:
                        self.log(f"SQL {r['backend']}: {r['total_s']:.3f} s for {k} iterations "
                                 f"({r['zero_iterations_s']:.3f} s with 0: the load), "
                                 f"{r['ns_per_row_iteration']:.3g} ns/row/iteration")
        except Exception as e:  # noqa: BLE001 — the cluster would not start, the extension would not load, …
            self.sql.append(dict(error=first_line(e)))
            self.note(f'SQL comparison failed: {first_line(e)}')

    def sql_skipped(self, why):
        self.sql.append(dict(skipped=why))
        self.note(f'SQL comparison skipped: {why}')

    # -- results --
    def write(self, final=False):
        args = self.args
        os.makedirs(args.out, exist_ok=True)
        self.meta['total_s'] = self.elapsed()
        self.meta['finished'] = final
        self.meta['arguments']['skip'] = args.skip
        with open(os.path.join(args.out, 'results.json'), 'w') as f:
            json.dump({'meta': self.meta, 'measurements': self.measurements, 'blocks_per_sm': self.blocks,
                       'crossover': self.crossover, 'sql': self.sql, 'checks': self.checks, 'notes': self.notes,
                       'warnings': self.warnings}, f, indent=1, default=str)
        table = markdown(self)
        with open(os.path.join(args.out, 'results.md'), 'w') as f:
            f.write(table)
        return table


def crossing(points):
    """The rows from which the first time is at most the second: (rows, how) with how 'interpolated' (log-log,
    between the two grid points around it), 'below' (the GPU already wins at the first point) or 'above' (never in
    the grid: rows is the last point)."""
    for i, (n, a, b) in enumerate(points):
        if a <= b:
            if i == 0:
                return dict(rows=n, how='below')
            n0, a0, b0 = points[i - 1]
            l0, l1 = math.log(a0 / b0), math.log(a / b)
            x = math.log(n0) + (math.log(n) - math.log(n0)) * l0 / (l0 - l1) if l0 != l1 else math.log(n)
            return dict(rows=int(round(math.exp(x))), how='interpolated', grid=n)
    return dict(rows=points[-1][0], how='above')


def describe_crossing(c):
    if c['how'] == 'below':
        return f'≤ {c["rows"]:,}'
    if c['how'] == 'above':
        return f'> {c["rows"]:,} (not in the grid)'
    return f'≈ {c["rows"]:,}'


def markdown(bench):
    meta, args = bench.meta, bench.args
    peak = meta.get('peak GB/s')
    present = [c for c in CONTENDERS if any(r['contender'] == c and 'skipped' not in r for r in bench.measurements)]
    lines = [f'### The cuda backend: {meta.get("device")}', '',
             f'bench/gpu.py, {meta["started"]}, pgad {meta.get("pgad", "?")}: {meta.get("device")}'
             + (f' ({meta["SMs"]} SMs)' if meta.get('SMs') else '')
             + (f', peak {peak:,.0f} GB/s ({meta.get("peak how")})' if peak else ', no bandwidth measured')
             + (f', {meta["theoretical GB/s"]:,.0f} GB/s in theory' if meta.get('theoretical GB/s') else '')
             + f'; the llvm backend on one core of {meta.get("cpu")}'
             + ''.join(f', {k} {meta[k]}' for k in ('numba-cuda', 'torch', 'jax') if meta.get(k)) + '. '
             f'ns per row per iteration (one gradient pass: the loss and its gradient summed over N rows), the best '
             f'of {args.repeats} loops of {args.iterations} calls (fewer where a call takes long), the contenders '
             'interleaved. pgad\'s calls include copying the weights in and the sums out; torch\'s and JAX\'s leave '
             'their results on the GPU.', '']
    if meta.get('device') in ("numba's CUDA simulator", 'no GPU') or args.device == 'cpu':
        lines += ['**A smoke test, not a measurement**: '
                  + ('numba\'s CUDA simulator' if bench.sim else 'no GPU')
                  + (', torch and JAX on the CPU' if args.device == 'cpu' else '') + '.', '']
    header = ['loss', 'P', 'N', *present, 'pgad GB/s', '% of peak', 'pass / read', 'pgad / torch eager']
    lines += ['| ' + ' | '.join(header) + ' |', '|---|--:|--:|' + '--:|' * (len(header) - 3)]
    sets = sorted(dict.fromkeys((r['loss'], r['P'], r['rows']) for r in bench.measurements),
                  key=lambda s: (args.losses.index(s[0]) if s[0] in args.losses else 9, s[1], s[2]))
    for kind, p, n in sets:
        cells = []
        for c in present:
            r = bench.find(kind, p, n, c)
            cells.append(_fmt(r['ns_per_row_iteration']) if r else '—')
        r = bench.find(kind, p, n, PGAD64) or {}
        cells += [_fmt(r.get('GB_per_s'), 4), _fmt(r.get('pct_of_peak'), 2), _fmt(r.get('x_read_time')),
                  _fmt(r.get('ratio_to_torch_eager'))]
        lines.append(f'| {kind} | {p} | {_rows(n)} | ' + ' | '.join(cells) + ' |')
    lines += ['', f'{PGAD64}: combine=\'atomic\' (one float64 atomic add per block and output); {PARTIALS}: the '
              f'blocks\' sums added by a second kernel; {PGAD32}: float32 columns, float64 sums. {LLVM}: one core. '
              f'{FLOOR}: torch\'s sum of the same columns, one read of them. GB/s: the columns\' bytes (N × (P + 1) '
              '× 8) over the time of a pass; pass / read: that time over the time to read them once at the peak '
              '(the target: ≤ 2); pgad / torch eager: below 1, pgad is faster. The data: one (P + 1) × N float64 '
              'tensor that every contender reads in place (torch as X = C[:P].T, N × P column-major).']
    targets = summary(bench)
    if targets:
        lines += [''] + targets
    if bench.blocks:
        values = sorted({b['blocks_per_sm'] for b in bench.blocks})
        lines += ['', f'Blocks per SM (compiler.BLOCKS_PER_SM, now {meta.get("blocks per SM")}; '
                  f'{meta.get("threads per block")} threads a block), {PGAD64} at the largest N, ns/row/iteration:',
                  '', '| loss | P | N | ' + ' | '.join(str(v) for v in values) + ' | best |',
                  '|---|--:|--:|' + '--:|' * (len(values) + 1)]
        for kind, p, n in dict.fromkeys((b['loss'], b['P'], b['rows']) for b in bench.blocks):
            got = {b['blocks_per_sm']: b['ns_per_row_iteration'] for b in bench.blocks
                   if (b['loss'], b['P'], b['rows']) == (kind, p, n)}
            top = min(got, key=got.get)
            lines.append(f'| {kind} | {p} | {_rows(n)} | '
                         + ' | '.join(_fmt(got.get(v)) for v in values) + f' | {top} |')
    if bench.crossover:
        grid = sorted({q['rows'] for c in bench.crossover for q in c['points']})
        lines += ['', f'GPU against CPU: the time of one pgad call on the GPU ({PGAD64}, its fixed cost included) over '
                  'one llvm call on one core, on the same rows (below 1: the GPU is faster); the rows from which the '
                  f'GPU wins, a call at a time and over a {args.iterations}-iteration fit that also copies the '
                  f'columns to the GPU once (pgad/backends.py\'s GPU_ROWS is {_fmt(meta.get("GPU_ROWS"))}):', '',
                  '| loss | P | ' + ' | '.join(_rows(n) for n in grid)
                  + ' | GPU wins from, per call | per fit | GPU µs/call at the fewest rows |',
                  '|---|--:|' + '--:|' * (len(grid) + 3)]
        for c in bench.crossover:
            ratio = {q['rows']: q['gpu_s'] / q['cpu_s'] for q in c['points']}
            lines.append(f'| {c["loss"]} | {c["P"]} | ' + ' | '.join(_fmt(ratio.get(n), 2) for n in grid)
                         + f' | {describe_crossing(c["crossover_rows"])} | {describe_crossing(c["crossover_rows_fit"])}'
                         f' | {c["points"][0]["gpu_s"] * 1e6:.0f} |')
    if bench.checks:
        lines += ['', 'Checks, the worst relative difference of the sums (loss and gradient) from torch eager\'s '
                  'float64 (from llvm\'s where torch is missing): '
                  + '; '.join(f'{name} {diff:.1e}' for name, diff in bench.checks.items()) + '.']
    if bench.sql:
        lines += ['', 'Through SQL: ' + sql_text(bench)]
    skipped = sorted({f'{r["contender"]}: {r["skipped"]}' for r in bench.measurements if 'skipped' in r})
    if skipped or bench.notes:
        lines += ['', 'Notes: ' + '; '.join(dict.fromkeys(bench.notes + skipped)) + '.']
    if bench.warnings:
        lines += ['', 'Warnings: ' + '; '.join(bench.warnings) + '.']
    return '\n'.join(lines) + '\n'


def summary(bench):
    """The issue's targets, met or missed, over the data sets measured."""
    out = []
    rows = [r for r in bench.measurements if r['contender'] == PGAD64 and 'skipped' not in r]
    big = [r for r in rows if r['rows'] >= 1_000_000]
    read = [r for r in rows if r.get('x_read_time') is not None]
    if read:
        met = [r for r in read if r['x_read_time'] <= 2]
        met_big = [r for r in read if r['x_read_time'] <= 2 and r['rows'] >= 1_000_000]
        out.append(f'Target: a pass within 2× of reading the columns once at the peak: met at {len(met)} of '
                   f'{len(read)} data sets ({len(met_big)} of {len([r for r in read if r in big])} with N ≥ 1e6); '
                   f'best {min(r["x_read_time"] for r in read):.2f}×, at N ≥ 1e6 worst '
                   + (f'{max(r["x_read_time"] for r in big if r in read):.2f}×' if big else '—') + '.')
    vs = [r for r in rows if r.get('ratio_to_torch_eager') is not None]
    if vs:
        met = [r for r in vs if r['ratio_to_torch_eager'] < 1]
        out.append(f'Target: faster than PyTorch CUDA eager: met at {len(met)} of {len(vs)} data sets; pgad / torch '
                   f'eager from {min(r["ratio_to_torch_eager"] for r in vs):.3f} to '
                   f'{max(r["ratio_to_torch_eager"] for r in vs):.3f}.')
    for name, label in ((PARTIALS, "combine='partials' over 'atomic'"), (PGAD32, 'float32 over float64')):
        ratios = sorted(r['seconds_per_call'] / bench.find(r['loss'], r['P'], r['rows'], PGAD64)['seconds_per_call']
                        for r in bench.measurements if r['contender'] == name and 'skipped' not in r
                        and r['rows'] >= 1_000_000 and bench.find(r['loss'], r['P'], r['rows'], PGAD64))
        if ratios:
            out.append(f'{label}, time of a pass at N ≥ 1e6: {ratios[0]:.2f} to {ratios[-1]:.2f}, median '
                       f'{ratios[len(ratios) // 2]:.2f}.')
    if bench.crossover:
        out.append('Crossover: the GPU beats one CPU core from ' + '; '.join(
            f'{describe_crossing(c["crossover_rows"])} rows a call ({c["loss"]} P = {c["P"]})' for c in bench.crossover)
            + f' (pgad/backends.py\'s GPU_ROWS is {_fmt(bench.meta.get("GPU_ROWS"))}).')
    return out


def sql_text(bench):
    parts = []
    for r in bench.sql:
        if 'skipped' in r:
            parts.append(f'skipped ({r["skipped"]})')
        elif 'error' in r:
            parts.append(f'{r.get("backend", "")} failed: {r["error"]}'.strip())
        elif 'total_s' in r:
            parts.append(f'backend {r["backend"]}: {r["total_s"]:.3g} s for {r["iterations"]} iterations on '
                         f'{r["rows"]:,} rows (P = {r["P"]}), {r["zero_iterations_s"]:.3g} s with none (the load), '
                         f'{r["ns_per_row_iteration"]:.3g} ns/row/iteration')
        elif 'relative_difference_of_weights' in r:
            parts.append(f'fitted weights cuda vs llvm differ by {r["relative_difference_of_weights"]:.1e} relative')
    return '; '.join(parts) + '.'


def theoretical_bandwidth(cuda):
    """GB/s from the memory clock (kHz; DDR: two transfers a clock) and the bus width (bits), where CUDA says."""
    try:
        dev = cuda.get_current_device()
        return 2 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8 / 1e9
    except Exception:  # noqa: BLE001
        return None


def cpu_name():
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    return platform.processor() or platform.machine()


def version(package):
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None):
    args = parse_args(argv)
    bench = Bench(args)
    bench.log(f'bench/gpu.py: losses {", ".join(args.losses)}; P {args.features}; N {[_rows(n) for n in args.rows]}; '
              f'best of {args.repeats} loops of {args.iterations} calls; results in {args.out}/')
    bench.setup()
    bench.write()
    if 'crossover' not in args.skip and bench.cuda is not None and bench.backends is not None:
        bench.run_crossover()
        bench.write()
    largest = max(args.rows)
    for n in sorted(args.rows):
        for kind in args.losses:
            for p in args.features:
                if bench.over_budget():
                    bench.skip_dataset(kind, p, n, f'the time budget (--budget {args.budget:g} s) was spent')
                    continue
                try:
                    bench.run_dataset(kind, p, n, largest)
                except Exception as e:  # noqa: BLE001 — out of memory, a driver error: the next data set goes on
                    bench.warn(f'{kind} P={p} N={n:,} failed: {first_line(e)}')
                    bench.release()
                bench.write()
    if 'sql' not in args.skip:
        if bench.over_budget():
            bench.sql_skipped(f'the time budget (--budget {args.budget:g} s) was spent')
        else:
            bench.run_sql()
    table = bench.write(final=True)
    print('\n' + table, flush=True)
    bench.log(f'{len(bench.warnings)} warning(s); the run took {bench.elapsed():.0f} s; '
              f'results in {args.out}/ (results.json, results.md)')


if __name__ == '__main__':
    main()
