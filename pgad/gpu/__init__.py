"""The cuda backend (`backend => 'cuda'`): each program compiled to one CUDA kernel with numba-cuda.

codegen.py turns a Program into the Python source of a kernel; compiler.py compiles it with numba-cuda for this GPU
(or runs it on numba's CUDA simulator), keeps the columns on the device and launches it. numba.cuda is imported when
a kernel is first compiled, not with this package.
"""


def compile(program, precision='float64'):
    """kernel(columns, rows, weights) → sums, as every backend gives; kernel.place(columns) copies them to the GPU
    once for every later call."""
    from .compiler import compile as compile_program
    return compile_program(program, precision).kernel


def fits(program):
    """Does the cuda backend compile program within its bound on the time of an uninterruptible compile, for 'auto'
    to pick it?"""
    from .compiler import AUTO_OUTPUTS, too_large
    return too_large(program) is None and len(program.outputs) <= AUTO_OUTPUTS


def present():
    """Is there a GPU (not numba's simulator) for 'auto' to run on? Imports nothing where there is no driver."""
    from .compiler import present as gpu_present
    return gpu_present()
