"""The backends, by name: each compiles a Program into a kernel(columns, rows, weights) → sums.

'python' is numpy over whole columns (python_backend.py), the reference; 'llvm' is one fused loss-and-gradient
kernel in machine code (jit/). 'auto' picks llvm, except for a lambda too large for the llvm backend to compile
within its bound (jit/compiler.py), which runs on python. Kernels are cached per backend process, keyed by the
program (and bounded as the programs are); jit/ also keeps compiled object code on disk for the next connection.
"""
from . import jit, python_backend
from .jit.cache import NONE
from .memo import bounded_cache
from .program import CACHED_NODES

BACKENDS = {'python': lambda program, cache: python_backend.compile(program), 'llvm': jit.compile}


def choose(program, backend):
    """The backend that runs program when `backend` is asked for."""
    if backend != 'auto':
        return backend
    return 'llvm' if jit.fits(program) else 'python'


@bounded_cache(CACHED_NODES, weight=lambda kernel, args: len(args[0].graph))
def compile(program, backend, cache=NONE):
    return BACKENDS[choose(program, backend)](program, cache)
