"""The backends, by name: each compiles a Program into a kernel(columns, rows, weights) → sums.

'python' is numpy over whole columns (python_backend.py), the reference; 'llvm' is one fused loss-and-gradient
kernel in machine code (jit/); 'cuda' is the same kernel on an NVIDIA GPU, generated for numba-cuda (gpu/).
'auto' picks cuda where a GPU is present and the data has at least GPU_ROWS rows (with a kernel the cuda backend
compiles), else llvm, except for a lambda too large for the llvm backend to compile within its bound
(jit/compiler.py), and a single evaluation of a small table (ONCE_COST), which run on python. Kernels are cached per backend process, keyed by the program (its DAG and
mode), the precision and llvm's target (and bounded as the programs are); jit/ also keeps compiled object code on
disk for the next connection. The python and llvm backends compute in float64; cuda in float64 or float32.
"""
from . import gpu, jit, python_backend
from .jit.cache import NONE
from .memo import bounded_cache
from .program import CACHED_NODES

BACKENDS = {'python': lambda program, cache, precision: python_backend.compile(program),
            'llvm': lambda program, cache, precision: jit.compile(program, cache),
            'cuda': lambda program, cache, precision: gpu.compile(program, precision)}
# The rows from which 'auto' runs on a GPU that is there: below, a step's fixed cost on the GPU (a launch and two
# copies of the weights and sums, about 30 µs) outweighs its speed (bench/gpu.py, docs/performance.md).
GPU_ROWS = 100_000
# A single evaluation (pgad.loss, pgad.gradient: once) of at most this many rows × DAG nodes runs on python under
# 'auto': numpy over the columns, a few milliseconds at most, where the llvm kernel would cost a session's first call
# llvmlite's import (about 30 ms) and a new lambda its compile (80 ms and more) (issue 47, docs/performance.md).
ONCE_COST = 1_000_000


def choose(program, backend, rows=None, once=False):
    """The backend that runs program when `backend` is asked for, over `rows` rows a step (None: not known yet);
    once: the kernel runs once (a single evaluation), where a small one runs on python."""
    if backend != 'auto':
        return backend
    if once and rows is not None and rows * len(program.graph) <= ONCE_COST:
        return 'python'
    if rows is not None and rows >= GPU_ROWS and gpu.fits(program) and gpu.present():
        return 'cuda'
    return 'llvm' if jit.fits(program) else 'python'


def compile(program, backend, cache=NONE, precision='float64'):
    """The kernel of program on backend ('auto': as choose gives it with the rows unknown), cached per process and,
    for llvm, per target (jit/targets.py)."""
    chosen = choose(program, backend)
    return _compiled(program, chosen, cache, precision, jit.target() if chosen == 'llvm' else None)


@bounded_cache(CACHED_NODES, weight=lambda kernel, args: len(args[0].graph))
def _compiled(program, backend, cache, precision, target):
    return BACKENDS[backend](program, cache, precision)


compile.cache_clear = _compiled.cache_clear
