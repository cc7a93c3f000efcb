"""The CPU the llvm backend compiles for: pgad.llvm_target in the server, PGAD_LLVM_TARGET outside it (the in-process
tests), 'host' by default — this CPU, its name and every feature it has — or a level of the x86-64 psABI, whose
features are the level's alone, whatever this CPU has besides.

The vector width follows the target (codegen.vector_widths: 2 doubles for x86-64, 4 for x86-64-v3's AVX2, 8 for
x86-64-v4's AVX-512), so do the rows a vectorised sum adds together, the libmvec variants a kernel calls and the
sequences a lane kernel runs side by side (lanes.width): results differ between targets by rounding, never within
one (docs/design.md, "Targets"). Every compiled kernel is keyed by its target, in memory and on disk.

A target that needs a feature this CPU lacks is refused (22023, naming the features) before anything is compiled:
its machine code would stop the backend at its first such instruction (SIGILL), and the postmaster would restart
every session with it.
"""
import functools
import os
from dataclasses import dataclass

from ..errors import PgadError

HOST = 'host'
VARIABLE = 'PGAD_LLVM_TARGET'   # the target where no server says (the tests, a script); the server reads the setting
# The x86-64 psABI's levels, each with the features (LLVM's names) it adds to the one before; a level's are its own
# and those of the levels before it
LEVELS = {'x86-64': ('64bit', 'cmov', 'cx8', 'fxsr', 'mmx', 'sse', 'sse2'),
          'x86-64-v2': ('cx16', 'popcnt', 'sahf', 'sse3', 'sse4.1', 'sse4.2', 'ssse3'),
          'x86-64-v3': ('avx', 'avx2', 'bmi', 'bmi2', 'f16c', 'fma', 'lzcnt', 'movbe', 'xsave'),
          'x86-64-v4': ('avx512bw', 'avx512cd', 'avx512dq', 'avx512f', 'avx512vl')}
NAMES = (HOST, *LEVELS)
# What a level's code generation is told besides its CPU name: x86-64-v4's tuning prefers 256-bit vectors (as LLVM's
# Intel server CPUs do), which would make its kernels x86-64-v3's at AVX-512's encoding; without it they add 8 doubles
# a vector, as the host's do on AMD's Zen 4, so the targets cover 2, 4 and 8
TUNING = {'x86-64-v4': '-prefer-256-bit'}


@dataclass(frozen=True)
class Target:
    name: str           # 'host' or a level of LEVELS
    cpu: str            # LLVM's name of the CPU: the host's (znver4, skylake-avx512, …) or the level's
    features: str       # LLVM's feature string: the host's every feature; a level's TUNING (its CPU implies the rest)
    has: frozenset      # the features its code may use

    def key(self):
        """What of the target decides the machine code (compiler._toolchain)."""
        return '\n'.join([self.name, self.cpu, self.features, ','.join(sorted(self.has))])


_ask = None     # a function giving the target's name (server.llvm_target in the server); None: VARIABLE's
_asked = []     # the Target it named, asked at a call's first compile and kept until on_name


def on_name(ask):
    """Have the calls that follow compile for the target ask() names (asked once, when a call first needs it); None:
    VARIABLE's, else the host. Returns what it replaces, for a caller to put back."""
    global _ask
    replaced, _ask = _ask, ask
    _asked.clear()
    return replaced


def current():
    """The Target kernels compile for now: as the call's ask() names it, else VARIABLE, else the host; 22023 where
    this CPU cannot run it."""
    if _ask is None:
        return named(os.environ.get(VARIABLE) or HOST)
    if not _asked:
        _asked.append(named(_ask()))
    return _asked[0]


@functools.lru_cache(maxsize=None)
def named(name):
    """The Target called name, checked against this CPU (22023)."""
    import llvmlite.binding as llvm
    host = host_features()
    if name == HOST:
        return Target(HOST, llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), host)
    if name not in LEVELS:
        raise PgadError('22023', f'unknown llvm target "{name}"', hint=f'The targets are {", ".join(NAMES)}.')
    if not llvm.get_process_triple().startswith('x86_64'):
        raise PgadError('22023', f'llvm target "{name}" is a level of x86-64, and this CPU is not one',
                        detail=f'This process runs {llvm.get_process_triple()}.', hint="Use the target 'host'.")
    needed = level_features(name)
    missing = sorted(needed - host)
    if missing:
        raise PgadError('22023', f'llvm target "{name}" needs CPU features this CPU lacks: {", ".join(missing)}',
                        detail='Its machine code would stop the server process at the first such instruction.',
                        hint=f'This CPU runs the targets {", ".join(runnable())}.')
    return Target(name, name, TUNING.get(name, ''), frozenset(needed))


def level_features(name):
    """The features of the level `name`: its own and those of the levels before it."""
    names = list(LEVELS)
    return frozenset(f for level in names[:names.index(name) + 1] for f in LEVELS[level])


def host_features():
    """The features this CPU has, by LLVM's names."""
    import llvmlite.binding as llvm
    return frozenset(f for f, on in llvm.get_host_cpu_features().items() if on)


def runnable():
    """The targets this CPU runs: 'host' and the levels whose features it has."""
    import llvmlite.binding as llvm
    x86 = llvm.get_process_triple().startswith('x86_64')
    return [HOST] + [n for n in LEVELS if x86 and level_features(n) <= host_features()]
