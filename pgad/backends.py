"""The backends, by name: each compiles a Program into a kernel(columns, rows, weights) → sums.

'python' is numpy over whole columns (python_backend.py), the reference; 'llvm' is one fused loss-and-gradient
kernel in machine code (jit/). 'auto' picks llvm. Kernels are cached per backend process, keyed by the program;
jit/ also keeps compiled object code on disk for the next connection.
"""
import functools

from . import python_backend


def _llvm(program):
    from . import jit  # imported when first used: a python-backend call never loads llvmlite
    return jit.compile(program)


BACKENDS = {'python': python_backend.compile, 'llvm': _llvm}
AUTO = 'llvm'


@functools.lru_cache(maxsize=256)
def compile(program, backend):
    return BACKENDS[AUTO if backend == 'auto' else backend](program)
