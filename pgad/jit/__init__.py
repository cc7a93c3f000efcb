"""The LLVM backend (`backend => 'llvm'`): each program compiled to one fused loss-and-gradient kernel.

codegen.py turns a Program into LLVM IR; compiler.py optimises it for this CPU, emits machine code and wraps the
function for Python; cache.py keeps the object code on disk, verified. llvmlite only: no numba on the CPU path, and
llvmlite is imported when a kernel is first compiled, not with this package.
"""


def compile(program, cache):
    """kernel(columns, rows, weights) → sums, as every backend gives; cache is a cache.DiskCache."""
    from .compiler import compile as compile_program
    return compile_program(program, cache).kernel


def fits(program):
    """Does the llvm backend compile program (within its bound on the time of an uninterruptible compile)?"""
    from .compiler import tier_of
    return tier_of(program) is not None
