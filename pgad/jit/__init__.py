"""The LLVM backend (`backend => 'llvm'`): each program compiled to one fused loss-and-gradient kernel.

codegen.py turns a Program into LLVM IR; compiler.py optimises it for this CPU, emits machine code, caches the
object code on disk, and wraps the function for Python. llvmlite only: no numba on the CPU path.
"""
from .compiler import compile as compile_program


def compile(program):
    """kernel(columns, rows, weights) → sums, as every backend gives."""
    return compile_program(program).kernel
