"""The LLVM backend (`backend => 'llvm'`): each program compiled to one fused loss-and-gradient kernel.

tiers.py says which kernel runs a Program and the tier that compiles it; codegen.py turns a Program into LLVM IR
(loops/ a loop kernel's); compiler.py optimises it for the target CPU (targets.py), emits machine code and wraps the
function for Python, compiling in the compiler process (worker.py) all but the smallest; cache.py keeps the object
code on disk, verified.
llvmlite only: no numba on the CPU path, and llvmlite is imported when a kernel is first compiled, not with this
package.
"""


def compile(program, cache):
    """kernel(columns, rows, weights) → sums, as every backend gives; cache is a cache.DiskCache."""
    from .compiler import compile as compile_program
    return compile_program(program, cache).kernel


def fits(program):
    """Does the llvm backend compile program (within its bound on the time of an uninterruptible compile)?"""
    from .tiers import tier_of
    return tier_of(program) is not None


def target():
    """The target the llvm backend compiles for now (targets.py): 22023 where this CPU cannot run it."""
    from .targets import current
    return current()
