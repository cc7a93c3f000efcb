"""The compiler process's PTX job: a CUDA kernel's generated source → its PTX, with numba-cuda (no GPU needed).

`python -P -s -B -m pgad.gpu.ptx PARENT_PID MEMORY_BYTES`, started and served by jit/worker.py (run(), main()) as
its 'llvm' job is: compiler._in_worker sends it a compiler.ptx_request, plain data. A module of its own, so that
the worker, below the gpu backend, imports nothing of it.
"""
import sys

from ..jit import worker
from . import compiler


def ptx_job(request):
    """A CUDA kernel's generated source → its PTX for compute capability cc, with numba-cuda (no GPU needed)."""
    compiler.cuda().compile_ptx(_first, '(float64[::1],)', cc=tuple(request['cc']))  # numba's set-up, untimed
    text, seconds = compiler.ptx_here(request)
    return [('ptx', text.encode())], {'PTX': seconds}


def _first(io):
    io[0] = 1.0


if __name__ == '__main__':
    sys.exit(worker.main(sys.argv, {'ptx': ptx_job}))
