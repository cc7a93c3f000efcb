"""Which kernel runs a program on the llvm backend, and the tier that compiles it: the tiers' bounds on the time of an
uninterruptible compile (compiler.py compiles at the tier; codegen.py's inline math depends on it).

form() picks the unrolled kernel (codegen.py) or a loop kernel's tape (loops/); tier_of() the optimisation tier
whose bounds the kernel fits, None past the last: 'auto' then runs the python backend, and required_tier() says
54001 for `backend => 'llvm'`.
"""
from dataclasses import dataclass

from ..errors import PgadError


@dataclass(frozen=True)
class Tier:
    name: str
    speed_level: int        # the optimisation pipeline's: 3 is O3, 0 is O0
    vectorise: bool         # loop and SLP vectorisation
    codegen_level: int      # the target machine's code generation level
    max_nodes: int          # the largest kernel it compiles: nodes of the DAG under the outputs,
    max_outputs: int        # outputs (accumulators),
    max_product: int        # and the two multiplied (what loop vectorisation's time grows with)


# Measured by bench/compile.py (docs/security.md): the largest kernels of each tier took 0.3 to 0.6 s of LLVM
TIERS = (Tier('O3, vectorised', 3, True, 3, 400, 40, 8_000),
         Tier('O3', 3, False, 3, 2500, 300, 750_000),
         Tier('O0', 0, False, 0, 8000, 8000, 64_000_000))


# The largest loop kernel (jit/loops/): nodes of the parsed lambda, O3 vectorised. Its compile time depends on the
# shapes more than on the nodes (docs/performance.md), so it always compiles in the compiler process, which stops it
# after worker.WALL_SECONDS
LOOP_NODES = 2000


def form(program):
    """Which kernel runs program: 'unrolled' (codegen.py), or a loop kernel's tape (loops/). A tape asked for is
    the loop kernel's; 'auto' unrolls a lambda of numbers, and one with vectors where the unrolled kernel compiles
    vectorised (measured faster there: docs/design.md), else stores the loop kernel's tape."""
    if program.tensor is None:
        return 'unrolled'
    if program.tape != 'auto':
        return program.tape
    tier = unrolled_tier(program)
    return 'unrolled' if tier is not None and tier.vectorise else 'store'


def tier_of(program):
    """The tier that compiles program within the time an uninterruptible compile may take, or None."""
    if form(program) != 'unrolled':
        return TIERS[0] if len(program.tensor.graph) <= LOOP_NODES else None
    return unrolled_tier(program)


def unrolled_tier(program):
    nodes, outputs = len(program.graph.ancestors(program.outputs)), len(program.outputs)
    return next((t for t in TIERS if nodes <= t.max_nodes and outputs <= t.max_outputs
                 and nodes * outputs <= t.max_product), None)


def required_tier(program):
    """tier_of(program), or SQLSTATE 54001 where there is none."""
    tier = tier_of(program)
    if tier is None:
        raise _too_large(program)
    return tier


def _too_large(program):
    nodes = len(program.graph.ancestors(program.outputs))
    return PgadError('54001', f'lambda is too large for the llvm backend: {nodes} nodes with its derivatives',
                     detail=f'The llvm backend compiles at most {TIERS[-1].max_nodes}: LLVM\'s time and memory grow '
                            'faster than the kernel, past what one call may take.',
                     hint="Use backend => 'python', or 'auto', which picks it for lambdas this large.")
