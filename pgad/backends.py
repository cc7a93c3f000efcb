"""The backends, by name: each compiles a Program into a kernel(columns, rows, weights) → sums.

'python' is numpy over whole columns (python_backend.py), the reference. 'auto' picks the fastest backend
installed. Kernels are cached per backend process, keyed by the program.
"""
import functools

from . import python_backend

BACKENDS = {'python': python_backend.compile}
AUTO = 'python'


@functools.lru_cache(maxsize=256)
def compile(program, backend):
    return BACKENDS[AUTO if backend == 'auto' else backend](program)
